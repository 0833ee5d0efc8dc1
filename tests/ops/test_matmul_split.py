"""MatMul split over intra-op threads (issue 37): by rows of ``a``, or by columns of ``b``
when ``a`` has few rows; the same values as numpy's ``a @ b`` (close: a GEMM's rounding may
depend on the block it is given), with transposes, odd sizes and integer fallbacks. These
products are tiny, so ``BLAS_SMALL_MACS`` (no chunk below OpenBLAS's small-matrix size, where
it rounds differently) is lifted to split them at all; ``test_matmul_lead_split.py`` checks
the bits of real sizes."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.exec import intra_op

# The CPU executor's splits: under make test-gpu a GPU would take these MatMuls.
pytestmark = pytest.mark.usefixtures("cpu_only")


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("m, k, n", [(131, 17, 9), (3, 40, 257), (1, 5, 1), (70, 1, 33)])
@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False),
                                                      (False, True), (True, True)])
async def test_split_matmul_matches_numpy(m, k, n, transpose_a, transpose_b, threads,
                                          monkeypatch):
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "BLAS_SMALL_MACS", 0)  # (tiny chunks, to split them)
    rng = np.random.default_rng(m * k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a_in = np.ascontiguousarray(a.T) if transpose_a else a
    b_in = np.ascontiguousarray(b.T) if transpose_b else b
    splits = intra_op.shared_pool(threads).splits
    with af.Graph().as_default():
        product = af.matmul(af.constant(a_in), af.constant(b_in), transpose_a=transpose_a,
                            transpose_b=transpose_b)
        config = af.ConfigProto(intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            value = await session.run(product)
    assert value.shape == (m, n) and value.dtype == np.float32
    np.testing.assert_allclose(value, a @ b, rtol=1e-5, atol=1e-5)
    assert intra_op.shared_pool(threads).splits > splits


async def test_integer_matmul_is_not_split(monkeypatch):
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "BLAS_SMALL_MACS", 0)  # (tiny chunks, to split them)
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = np.arange(8, dtype=np.int32).reshape(4, 2)
    with af.Graph().as_default():
        async with af.Session() as session:
            value = await session.run(af.matmul(af.constant(a), af.constant(b)))
    np.testing.assert_array_equal(value, a @ b)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("activation", ["relu", "sigmoid"])
async def test_a_wide_product_splits_by_columns_fused_or_not_with_the_same_bits(
        activation, threads, monkeypatch):
    """``b`` over ``COLUMNS_FROM`` times wider than ``a`` is tall (the convnet's dense layer,
    its input gradient): split by columns, the fused bias and activation applied to each
    block of columns with its share of the bias: the unfused graph's bits, close to numpy."""
    from asyncflow.kernels import math as math_kernels
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "BLAS_SMALL_MACS", 0)  # (tiny chunks, to split them)
    m, k, n = 6, 20, 6 * math_kernels.COLUMNS_FROM + 7
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    values = {}
    for optimize_graph in (True, False):
        with af.Graph().as_default():
            feeds = [af.placeholder(af.float32, [None, k]), af.placeholder(af.float32, [k, n]),
                     af.placeholder(af.float32, [n])]
            product = getattr(af.nn, activation)(af.matmul(feeds[0], feeds[1]) + feeds[2])
            config = af.ConfigProto(intra_op_parallelism_threads=threads,
                                    optimize_graph=optimize_graph)
            async with af.Session(config=config) as session:
                metadata = af.RunMetadata()
                values[optimize_graph] = await session.run(
                    product, dict(zip(feeds, (a, b, bias))), options=af.RunOptions(
                        trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
            types = {s.op_type for s in metadata.step_stats}
            assert ("_FusedMatMul" in types) == optimize_graph
    np.testing.assert_array_equal(values[True], values[False])
    want = a @ b + bias
    want = np.maximum(want, 0) if activation == "relu" else 1 / (1 + np.exp(-want))
    np.testing.assert_allclose(values[True], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("wide", [True, False])
async def test_a_fused_sigmoid_with_overflowing_values_in_one_block_has_the_unfused_bits(
        wide, threads, monkeypatch):
    """A product split by columns (``wide``) or by rows whose fused sigmoid meets values below
    exp's overflow bound (-88.7 in float32) in one block only: the sigmoid takes its masked
    form for those values, and every other value has the unfused kernel's bits (review: the
    form was chosen per block, so the other blocks took the fast form where the unfused
    kernel, seeing the whole output, took the masked one: up to 2 ulps apart)."""
    from asyncflow.kernels import math as math_kernels
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "BLAS_SMALL_MACS", 0)  # (tiny chunks, to split them)
    m, k = (6, 20) if wide else (96, 20)
    n = 6 * math_kernels.COLUMNS_FROM + 7 if wide else 40
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = (rng.standard_normal(n) * 3).astype(np.float32)
    if wide:
        bias[0] = -200.0  # the first column (the first block) overflows exp
    else:
        a[0] *= 1000  # the first row (the first block) spans far beyond +-88.7
    values = {}
    for optimize_graph in (True, False):
        with af.Graph().as_default():
            feeds = [af.placeholder(af.float32, [None, k]), af.placeholder(af.float32, [k, n]),
                     af.placeholder(af.float32, [n])]
            pre = af.matmul(feeds[0], feeds[1]) + feeds[2]
            product = af.nn.sigmoid(pre)
            config = af.ConfigProto(intra_op_parallelism_threads=threads,
                                    optimize_graph=optimize_graph)
            async with af.Session(config=config) as session:
                values[optimize_graph] = await session.run(
                    product, dict(zip(feeds, (a, b, bias))))
    np.testing.assert_array_equal(values[True], values[False])


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("fused", [False, True])
async def test_a_plain_row_split_takes_one_chunk_a_thread_a_fused_one_cache_sized_chunks(
        fused, threads, monkeypatch):
    """A tall product split by rows (the convnet's dense weight gradient, ``a`` a transposed
    view): unfused, one chunk a thread whatever ``CHUNK_BYTES`` says (nothing reads the rows
    back, and each chunk packs ``b`` again); fused, cache-sized chunks for its epilogue. The
    values close to numpy's whichever chunks (the bits of a row may depend on its block)."""
    from asyncflow.kernels import math as math_kernels
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "BLAS_SMALL_MACS", 0)  # (tiny chunks, to split them)
    m, k, n = 301, 40, 64
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", n * 4 * 2 * 50)  # 50 rows a chunk
    seen = []
    for_gemm = kernel_intra_op.for_gemm

    def spy(*args, **kwargs):
        seen.append(for_gemm(*args, **kwargs))
        return seen[-1]
    monkeypatch.setattr(kernel_intra_op, "for_gemm", spy)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((k, m)).astype(np.float32)
    dy = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    values = {}
    for epilogue_only in (True, False):
        monkeypatch.setattr(math_kernels, "ROW_CHUNKS_FOR_EPILOGUE_ONLY", epilogue_only)
        with af.Graph().as_default():
            feeds = [af.placeholder(af.float32, [k, None]), af.placeholder(af.float32, [k, n]),
                     af.placeholder(af.float32, [n])]
            product = af.matmul(feeds[0], feeds[1], transpose_a=True)
            if fused:
                product = af.nn.relu(product + feeds[2])
            config = af.ConfigProto(intra_op_parallelism_threads=threads)
            async with af.Session(config=config) as session:
                seen.clear()
                metadata = af.RunMetadata()
                values[epilogue_only] = await session.run(
                    product, dict(zip(feeds, (x, dy, bias))), options=af.RunOptions(
                        trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
            types = {s.op_type for s in metadata.step_stats}
            assert ("_FusedMatMul" in types) == fused
        cache_sized = -(-m // 50)  # chunks of at most 50 rows, a multiple of the threads
        cache_sized = -(-cache_sized // threads) * threads
        want = cache_sized if fused or not epilogue_only else threads
        assert [len(bounds) for bounds in seen] == [want]
        assert seen[0][0][0] == 0 and seen[0][-1][1] == m
    expected = x.T.astype(np.float64) @ dy
    if fused:
        expected = np.maximum(expected + bias, 0)
    for value in values.values():
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5)
