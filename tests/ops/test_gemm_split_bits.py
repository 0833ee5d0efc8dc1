"""What a GEMM split over intra-op threads (``kernels/intra_op.py``'s ``for_gemm``) keeps of
the whole product's bits, over random shapes, dtypes and operand layouts (issue 37).

A split GEMM computes each row (or column) block with its own BLAS call. Whether a row's
rounding depends on the block it falls in is BLAS's business: with OpenBLAS's SkylakeX
kernels a float32 GEMM keeps the whole product's bits once every chunk is above its
small-matrix size (``split_keeps_bits``); float64 and complex there, and every dtype with the
Haswell, Zen or generic kernels (``OPENBLAS_CORETYPE``), give results close to the whole
product, not equal. Everywhere the result depends on the shape and the thread count only: a
GEMM run whole on its thread inside a pair (``run_alone``) has the bits of the same GEMM
split outside one, since which kernels pair is decided at run time.
"""
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from asyncflow.exec import intra_op
from asyncflow.kernels import blas, intra_op as kernel_intra_op, math as math_kernels

SPLIT_FROM = kernel_intra_op.MIN_SPLIT_WORK * kernel_intra_op.MACS_PER_WORK
LAYOUTS = ("C", "F", "transposed", "reversed rows", "reversed columns", "strided", "sliced")


@pytest.fixture(autouse=True)
def _numpy_s_gemms(monkeypatch):
    """These bits are OpenBLAS's (numpy's matmul): MKL's GEMMs (kernels/blas.py, where the
    [mkl] extra is installed) round a row by its block; tests/ops/test_blas.py has theirs."""
    monkeypatch.setattr(blas, "CHOICE", "numpy")


@pytest.fixture(autouse=True, scope="module")
def _blas_one_thread():
    intra_op.claim_blas()  # (as a CPU device does: the whole product on one BLAS thread)


def _ctx(threads):
    return SimpleNamespace(device=SimpleNamespace(intra_op=intra_op.shared_pool(threads)),
                           xp=np, name="MatMul", attrs={"transpose_a": False,
                                                        "transpose_b": False})


def laid_out(x, layout):
    """``x``'s values in another memory layout (a view where the layout is one)."""
    if layout == "F":
        return np.asfortranarray(x)
    if layout == "transposed":
        return np.ascontiguousarray(x.T).T
    if layout == "reversed rows":
        return np.ascontiguousarray(x[::-1])[::-1]
    if layout == "reversed columns":
        return np.ascontiguousarray(x[:, ::-1])[:, ::-1]
    if layout == "strided":
        wide = np.zeros((x.shape[0], 2 * x.shape[1]), x.dtype)
        wide[:, ::2] = x
        return wide[:, ::2]
    if layout == "sliced":
        big = np.zeros((x.shape[0] + 3, x.shape[1] + 5), x.dtype)
        big[1:-2, 2:-3] = x
        return big[1:-2, 2:-3]
    if layout == "broadcast rows":  # (one row repeated: a zero stride)
        return np.broadcast_to(x[:1], x.shape)
    return x


def operands(seed, dtype, m, k, n, layouts=("C", "C")):
    rng = np.random.default_rng(seed)
    values = []
    for shape, layout in zip(((m, k), (k, n)), layouts):
        x = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        values.append(laid_out(x.astype(dtype), layout))
    return values


def _close_to_the_whole(split, whole, a, b):
    """Within a GEMM's rounding bound: ``2 k eps (|a| @ |b|)`` an element."""
    bound = 2 * a.shape[1] * np.finfo(split.dtype).eps * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(split - whole) <= bound)


@settings(max_examples=40, derandomize=True)
@given(dtype=st.sampled_from(["float32", "float32", "float64", "complex64", "complex128"]),
       k=st.one_of(st.integers(3, 40), st.integers(3, 2500)),
       m=st.integers(2, 700),
       macs=st.one_of(st.integers(SPLIT_FROM, SPLIT_FROM + 300_000),
                      st.integers(SPLIT_FROM, 20_000_000)),
       wide=st.booleans(), threads=st.sampled_from([2, 3, 4, 6]),
       layouts=st.tuples(st.sampled_from(LAYOUTS), st.sampled_from(LAYOUTS)),
       seed=st.integers(0, 2 ** 16))
def test_a_split_gemm_against_the_whole_product(dtype, k, m, macs, wide, threads, layouts,
                                                seed):
    n = -(-macs // (m * k))
    if wide:  # (many columns instead of many rows)
        m, n = n, m
    if m * n > 3_000_000 or k * (m + n) > 4_000_000:
        return  # (memory: skipped, not failed)
    a, b = operands(seed, dtype, m, k, n, layouts)
    ctx = _ctx(threads)
    whole = a @ b
    splits = intra_op.shared_pool(threads).splits
    split = math_kernels._matmul(ctx, a, b)[0]
    assert intra_op.shared_pool(threads).splits > splits  # (it did split)
    if kernel_intra_op.split_keeps_bits(np.dtype(dtype)):
        np.testing.assert_array_equal(split, whole)
    else:
        _close_to_the_whole(split, whole, a, b)
    in_pair = []
    intra_op.shared_pool(threads).run_alone(
        lambda start, stop: in_pair.append(math_kernels._matmul(ctx, a, b)[0]), [(0, 1)])
    np.testing.assert_array_equal(in_pair[0], split)


@pytest.mark.parametrize("dtype, m, k, n", [("float64", 300, 300, 300),
                                            ("float64", 131, 300, 197),
                                            ("float32", 128, 784, 256)])
def test_a_gemm_in_a_pair_has_the_bits_of_the_same_gemm_split(dtype, m, k, n):
    """A pair (``run_alone``) is decided at run time (a worker free or not): its GEMM must
    not round otherwise than the same GEMM split outside it. float64 on OpenBLAS's SkylakeX
    kernels rounds a row by its block: the pair runs the split's chunks one after the
    other (computed whole, ``[300, 300] @ [300, 300]`` differed in the last bits)."""
    a, b = operands(m + k + n, dtype, m, k, n, ("C", "C"))
    ctx = _ctx(2)
    split = math_kernels._matmul(ctx, a, b)[0]
    in_pair = []
    intra_op.shared_pool(2).run_alone(
        lambda start, stop: in_pair.append(math_kernels._matmul(ctx, a, b)[0]), [(0, 1)])
    np.testing.assert_array_equal(in_pair[0], split)


@pytest.mark.parametrize("threads, count, macs_per_item, bytes_per_item", [
    (6, 630, 100 * 100, 0),      # [630, 100] @ [100, 100]: 100-row chunks were exactly 100^3
    (2, 300_000, 3 * 8, 8 * 8 * 2),  # float64 [300000, 3] @ [3, 8]: cache-sized chunks
    (3, 2_000_000, 1 * 4, 4 * 4 * 2),
])
def test_no_chunk_is_at_or_below_the_small_matrix_size(threads, count, macs_per_item,
                                                      bytes_per_item, monkeypatch):
    """OpenBLAS takes its small-matrix kernels up to 100^3 multiply-adds, that size included
    (``MNK > 100^3`` is its test for the large path): chunks of exactly ``BLAS_SMALL_MACS``
    rounded otherwise; the cache-sized chunks of a tall product ignored the floor. (The split
    threshold lowered so that the 6.3 M product splits at all.)"""
    monkeypatch.setattr(kernel_intra_op, "MACS_PER_WORK", 2)
    bounds = kernel_intra_op.for_gemm(_ctx(threads), count, macs_per_item,
                                      lambda start, stop: None, bytes_per_item)
    assert len(bounds) >= 2 and bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(stop - start >= 2 and (stop - start) * macs_per_item
               > kernel_intra_op.BLAS_SMALL_MACS for start, stop in bounds)


def test_a_product_with_exact_small_matrix_chunks_has_the_bits_where_splits_keep_them(
        monkeypatch):
    monkeypatch.setattr(kernel_intra_op, "MACS_PER_WORK", 2)  # (6.3 M: it splits)
    a, b = operands(1, "float32", 630, 100, 100, ("C", "C"))
    split = math_kernels._matmul(_ctx(6), a, b)[0]
    if kernel_intra_op.split_keeps_bits(np.dtype(np.float32)):
        np.testing.assert_array_equal(split, a @ b)
    else:
        _close_to_the_whole(split, a @ b, a, b)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_gram_product_is_not_split(dtype, fused):
    """``x @ x.T`` is one SYRK in numpy (half the work, a triangle mirrored): GEMMs of its
    row blocks rounded otherwise (``[256, 784]`` float32: other bits on SkylakeX)."""
    (x,) = operands(7, dtype, 256, 784, 1, ("C",))[:1]
    ctx = _ctx(2)
    splits = intra_op.shared_pool(2).splits
    if fused:
        bias = np.linspace(-1, 1, 256).astype(dtype)
        ctx.attrs = dict(ctx.attrs, fused_ops=["BiasAdd", "Relu"])
        value = math_kernels._fused_matmul(ctx, x, x.T, bias)[0]
        np.testing.assert_array_equal(value, np.maximum(x @ x.T + bias, 0))
    else:
        np.testing.assert_array_equal(math_kernels._matmul(ctx, x, x.T)[0], x @ x.T)
    assert intra_op.shared_pool(2).splits == splits
    b = x.T.copy()  # (the same values in another buffer: a GEMM, split)
    math_kernels._matmul(ctx, x, b)
    assert intra_op.shared_pool(2).splits == splits + 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_gemm_split_while_every_worker_is_busy(dtype, monkeypatch):
    """With the pool's only worker busy (another kernel's chunk) a split runs on its caller
    alone, chunk after chunk: ``[128, 256] @ [256, 256]`` 16% slower than whole here. Whole
    then, where a split keeps the bits (float32 on SkylakeX); elsewhere the split's chunks,
    the same bits as with the worker free. (The split threshold lowered: 8.4 M splits.)"""
    monkeypatch.setattr(kernel_intra_op, "MACS_PER_WORK", 2)
    pool = intra_op.IntraOpPool(2)
    ctx = SimpleNamespace(device=SimpleNamespace(intra_op=pool), xp=np, name="MatMul",
                          attrs={"transpose_a": False, "transpose_b": False})
    a, b = operands(3, dtype, 128, 256, 256, ("C", "C"))
    seen = []

    def record(start, stop):
        seen.append((start, stop))
        np.matmul(a[start:stop], b, out=out[start:stop])
    out = np.empty((128, 256), dtype)
    try:
        free = kernel_intra_op.for_gemm(ctx, 128, 256 * 256, record, dtype=np.dtype(dtype))
        assert len(free) == 2 and not pool.all_busy()
        free_value = out.copy()
        started, gate = intra_op.threading.Event(), intra_op.threading.Event()
        pool._workers().submit(lambda: started.set() or gate.wait(10))
        assert started.wait(10)
        assert pool.all_busy()
        seen.clear()
        busy = kernel_intra_op.for_gemm(ctx, 128, 256 * 256, record, dtype=np.dtype(dtype))
        gate.set()
    finally:
        pool.close(timeout=5)
    kept = kernel_intra_op.split_keeps_bits(np.dtype(dtype))
    assert busy == ([(0, 128)] if kept else free) and seen == busy
    np.testing.assert_array_equal(out, free_value)


def test_a_gemm_split_inside_a_chunk_and_a_failing_one_inside_a_pair():
    """A GEMM kernel inside another split's chunk splits again (or runs whole) and ends; one
    that fails inside a pair raises from the pair's call, and the thread's flag is back."""
    ctx = _ctx(2)
    pool = intra_op.shared_pool(2)
    a, b = operands(5, "float32", 128, 784, 256, ("C", "C"))
    want = math_kernels._matmul(ctx, a, b)[0]
    got = {}

    def outer(start, stop):
        got[start] = math_kernels._matmul(ctx, a, b)[0]
    pool.run(outer, [(0, 1), (1, 2), (2, 3)])
    assert sorted(got) == [0, 1, 2]
    for value in got.values():
        _close_to_the_whole(value, want, a, b)

    def failing(start, stop):
        math_kernels._matmul(ctx, a, b[:100])  # (inner sizes disagree)
    with pytest.raises(Exception, match="Matrix size-incompatible"):
        pool.run_alone(failing, [(0, 1)])
    assert not intra_op.IntraOpPool.alone()
