"""GEMMs split with a lead (issue 37, ``kernels/intra_op.py``'s ``for_gemm``): one chunk per
thread, the calling thread's first chunk ``GEMM_LEAD_MACS`` longer, every chunk above
OpenBLAS's small-matrix size; row and column splits, transposed operands and odd sizes give
the bits of the whole product on one thread where BLAS rounds a row alike in any block
(``split_keeps_bits``: float32 on OpenBLAS's SkylakeX kernels), results close to it
elsewhere (``test_gemm_split_bits.py``), fused bias and activation included."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import blas, intra_op as kernel_intra_op
from asyncflow.exec import intra_op


@pytest.fixture(autouse=True)
def _numpy_s_gemms(monkeypatch):
    """These bits are OpenBLAS's (numpy's matmul): MKL's GEMMs (kernels/blas.py, where the
    [mkl] extra is installed) round a row by its block; tests/ops/test_blas.py has theirs."""
    monkeypatch.setattr(blas, "CHOICE", "numpy")


@pytest.mark.parametrize("count, parts, lead", [(128, 2, 8), (131, 2, 27), (7, 3, 1),
                                                (10, 2, 0), (4, 2, 0)])
def test_lead_bounds_cover_the_range_in_order_with_the_first_longer(count, parts, lead):
    bounds = kernel_intra_op.lead_bounds(count, parts, lead)
    assert len(bounds) == parts and bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(stop == start for (_, stop), (start, _) in zip(bounds, bounds[1:]))
    sizes = [stop - start for start, stop in bounds]
    assert min(sizes[1:]) >= 1 and max(sizes[1:]) - min(sizes[1:]) <= 1
    assert sizes[0] - max(sizes[1:]) in (lead, lead - 1) or sizes[0] - min(sizes[1:]) == lead


@pytest.mark.parametrize("count, parts, lead", [(4, 2, 5), (4, 2, 3), (4, 0, 0), (4, 2, -1)])
def test_lead_bounds_refuse_a_lead_that_leaves_a_range_empty(count, parts, lead):
    """(Before: ``(4, 2, 5)`` gave ``[(0, 5), (5, 4)]``, a range past the end.)"""
    with pytest.raises(ValueError, match="lead_bounds"):
        kernel_intra_op.lead_bounds(count, parts, lead)


async def _run(threads, a, b, bias=None, transpose_a=False, transpose_b=False,
               activation=None):
    """The product (``activation(a @ b + bias)`` when a bias is given: fused by the graph
    optimizer into ``_FusedMatMul``) in a session on ``threads`` intra-op threads."""
    with af.Graph().as_default():
        feeds = [af.placeholder(af.float32, a.shape), af.placeholder(af.float32, b.shape)]
        out = af.matmul(feeds[0], feeds[1], transpose_a=transpose_a, transpose_b=transpose_b)
        values = [a, b]
        if bias is not None:
            feeds.append(af.placeholder(af.float32, bias.shape))
            values.append(bias)
            out = getattr(af.nn, activation)(out + feeds[2])
        config = af.ConfigProto(intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            return await session.run(out, dict(zip(feeds, values)))


def _same_bits_where_kept(split, one):
    """The bits of one thread where this BLAS keeps them in a split (float32 here), else
    close (a GEMM's rounding)."""
    if kernel_intra_op.split_keeps_bits(split.dtype):
        np.testing.assert_array_equal(split, one)
    else:
        np.testing.assert_allclose(split, one, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("m, k, n, transpose_a, transpose_b", [
    (128, 784, 256, False, False),   # the MLP's first layer (rows)
    (128, 256, 256, False, True),    # its input gradient (rows, ``b`` transposed)
    (256, 131, 128, True, False),    # a weight gradient's form (``a`` transposed), odd inner
    (131, 300, 197, False, False),   # odd rows and columns
    (6, 300, 4001, True, True),      # few rows, wide ``b``: by columns, odd
])
async def test_a_split_gemm_has_the_bits_of_one_thread(m, k, n, transpose_a, transpose_b,
                                                       threads, cpu_only, monkeypatch):
    monkeypatch.setattr(kernel_intra_op, "MACS_PER_WORK", 2)  # (the odd ones split too)
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    seen = []
    lead_bounds = kernel_intra_op.lead_bounds
    monkeypatch.setattr(kernel_intra_op, "lead_bounds",
                        lambda *args: seen.append(lead_bounds(*args)) or seen[-1])
    one = await _run(1, a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    assert [len(bounds) for bounds in seen] == [1]  # one thread: the whole product
    seen.clear()
    splits = intra_op.shared_pool(threads).splits
    split = await _run(threads, a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    assert intra_op.shared_pool(threads).splits > splits
    (bounds,) = seen
    sizes = [stop - start for start, stop in bounds]
    assert len(bounds) >= 2 and sizes[0] > max(sizes[1:])  # the caller's chunk leads
    _same_bits_where_kept(split, one)
    want = (a.T if transpose_a else a) @ (b.T if transpose_b else b)
    np.testing.assert_allclose(split, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("activation", ["relu", "sigmoid"])
@pytest.mark.parametrize("m, k, n", [(128, 256, 256), (6, 300, 4001)])
async def test_a_fused_product_split_with_a_lead_has_the_bits_of_one_thread(
        m, k, n, activation, cpu_only, monkeypatch):
    monkeypatch.setattr(kernel_intra_op, "MACS_PER_WORK", 2)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    one = await _run(1, a, b, bias, activation=activation)
    split = await _run(2, a, b, bias, activation=activation)
    _same_bits_where_kept(split, one)


async def test_a_gemm_below_the_small_kernels_size_per_chunk_is_not_cut_that_small(
        cpu_only, monkeypatch):
    """Chunks below ``BLAS_SMALL_MACS`` would take OpenBLAS's small-matrix kernels (other
    bits): a product of 1.5 of that splits in one chunk, 2.5 of it in two."""
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    seen = []
    lead_bounds = kernel_intra_op.lead_bounds
    monkeypatch.setattr(kernel_intra_op, "lead_bounds",
                        lambda *args: seen.append(lead_bounds(*args)) or seen[-1])
    small = kernel_intra_op.BLAS_SMALL_MACS
    for factor, parts in ((1.5, 1), (2.5, 2)):
        m = int(factor * small) // (100 * 100) + 1
        a = np.ones((m, 100), np.float32)
        b = np.ones((100, 100), np.float32)
        seen.clear()
        value = await _run(3, a, b)
        np.testing.assert_array_equal(value, np.full((m, 100), 100, np.float32))
        (bounds,) = seen
        assert len(bounds) == parts
        assert all((stop - start) * 100 * 100 > small for start, stop in bounds)


def test_a_gemm_inside_a_kernel_run_alone_is_computed_whole_where_that_keeps_its_bits():
    """A pair's GEMM (``run_alone``: each whole kernel on its thread) is one chunk where a
    split keeps the whole product's bits (float32 here): split, its chunks would run one
    after the other on that thread, packing ``b`` once each. Elsewhere (float64) it keeps
    the split's chunks, so a GEMM's bits do not depend on whether it ran in a pair."""
    from types import SimpleNamespace
    pool = intra_op.IntraOpPool(2)
    ctx = SimpleNamespace(device=SimpleNamespace(intra_op=pool))
    count, per_item = 128, 784 * 256
    seen = {}
    dtypes = {0: np.dtype(np.float32), 1: np.dtype(np.float64)}

    def kernel(start, stop):
        seen[start] = kernel_intra_op.for_gemm(ctx, count, per_item, lambda a, b: None,
                                               dtype=dtypes[start])
    try:
        split = kernel_intra_op.for_gemm(ctx, count, per_item, lambda a, b: None)
        assert len(split) == 2
        pool.run_alone(kernel, [(0, 1), (1, 2)])
    finally:
        pool.close(timeout=5)
    assert seen[1] == split
    assert seen[0] == ([(0, count)] if kernel_intra_op.split_keeps_bits(dtypes[0]) else split)
