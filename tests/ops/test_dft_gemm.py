"""kernels/dft_gemm.py: the FFT convolution's transforms by GEMM (planar, batch-last) against
numpy's rfft2/irfft2, the read-out loop against its numpy form, the forward's kept spectra
handed to the backprop, and the period that sends a shape to pocketfft instead. The three
kernels against the direct ones and pocketfft's form: tests/ops/test_conv_fft.py (its
``transforms`` fixture runs both forms)."""
import threading

import numpy as np
import pytest
from bounded_threads import bounded

from asyncflow.kernels import dft_gemm, jit, nn_conv, nn_conv_fft
from asyncflow.kernels import intra_op as intra_op_module

from test_conv_fft import assert_scaled_close, given_spectra_against_own, inputs  # same folder
from test_conv_kernels import KernelContext, small_chunks  # same folder

assert small_chunks  # a fixture, used by name below

# (x_shape, f_shape, padding): even and odd periods, rectangular windows, VALID and SAME.
GEOMETRIES = [((3, 7, 9, 2), (3, 4, 2, 3), "SAME"), ((2, 11, 13, 4), (6, 3, 4, 5), "SAME"),
              ((4, 5, 5, 3), (5, 5, 3, 4), "VALID"), ((1, 9, 4, 5), (2, 7, 5, 2), "SAME"),
              ((2, 14, 14, 32), (5, 5, 32, 64), "SAME")]


def plan_of(x_shape, f_shape, padding):
    ctx = KernelContext({"strides": (1, 1, 1, 1), "dilations": (1, 1, 1, 1),
                         "padding": padding}, 1)
    rows, cols = nn_conv._spatial(ctx, x_shape, f_shape[:2])
    return nn_conv_fft.Plan(x_shape, f_shape, rows, cols)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, f_shape, padding", GEOMETRIES)
def test_the_transform_is_rfft2_of_the_zero_padded_period(x_shape, f_shape, padding, dtype):
    """``transform``'s ``[half, P_h, 2C, n]`` holds numpy's rfft2 of each image's channels
    (zero-padded to the periods), each frequency's real parts' rows, then the imaginary
    parts'; float32 within 1e-6 of the spectrum's scale (another summation order)."""
    plan = plan_of(x_shape, f_shape, padding)
    x = np.random.default_rng(1).standard_normal(x_shape).astype(dtype)
    got = dft_gemm.transform(x, plan)
    assert got.dtype == dtype and got.shape == (plan.p_w // 2 + 1, plan.p_h, 2 * x_shape[3],
                                                x_shape[0])
    spectrum = np.fft.rfft2(x.astype(np.float64), s=(plan.p_h, plan.p_w), axes=(1, 2))
    expected = spectrum.transpose(2, 1, 3, 0)  # [half, P_h, C, n]
    expected = np.concatenate([expected.real, expected.imag], axis=2)
    assert_scaled_close(got, expected.astype(dtype), 1e-6 if dtype == np.float32 else 1e-13,
                        "transform")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shift_h, shift_w, count_h, count_w", [(0, 0, 5, 7), (-2, 3, 9, 4),
                                                                (7, -5, 11, 8)])
def test_the_inverse_is_irfft2_read_at_the_shifted_cells(shift_h, shift_w, count_h, count_w,
                                                         dtype):
    """``inverse`` of a half spectrum of real planes gives irfft2's cells ((y + shift_h) mod
    P_h, (x + shift_w) mod P_w), odd and even periods (P_w 12: its last column once)."""
    for p_h, p_w in ((11, 12), (12, 9)):
        plan = plan_of((1, p_h - 2, p_w - 2, 1), (3, 3, 1, 1), "VALID")
        plan.p_h, plan.p_w = p_h, p_w
        rng = np.random.default_rng(2)
        planes = rng.standard_normal((4, p_h, p_w, 3))  # [n, P_h, P_w, K]
        spectrum = np.fft.rfft2(planes, axes=(1, 2)).transpose(2, 1, 3, 0)
        planar = np.concatenate([spectrum.real, spectrum.imag], axis=2).astype(dtype)
        got = dft_gemm.inverse(planar, plan, count_h, count_w, shift_h, shift_w)
        rows = (np.arange(count_h) + shift_h) % p_h
        cols = (np.arange(count_w) + shift_w) % p_w
        expected = planes[:, rows][:, :, cols].transpose(2, 1, 3, 0)  # [count_w, count_h, K, n]
        assert got.dtype == dtype
        assert_scaled_close(got, expected.astype(dtype), 1e-6 if dtype == np.float32 else 1e-13,
                            "inverse")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_rows_loop_has_the_bits_of_numpys_copy_and_epilogue(dtype, monkeypatch):
    """``write_rows`` by the compiled loop against numpy's transposed copy then bias and
    Relu, NaN, inf and -0 among the values: the same bits."""
    rng = np.random.default_rng(3)
    planes = rng.standard_normal((5, 3, 4, 6)).astype(dtype)  # [count_w, count_h, K, n]
    planes[0, 0, 0, :3] = (np.nan, np.inf, -0.0)
    bias = rng.standard_normal(4).astype(dtype)
    bias[1] = -np.inf
    ctx = KernelContext({}, 1)
    expected = np.ascontiguousarray(planes.transpose(3, 1, 0, 2))
    for looped in (None, (jit.readonly(bias), dtype(0)), (jit.readonly(bias), dtype(np.nan))):
        got = np.empty((6, 3, 5, 4), dtype)
        dft_gemm.write_rows(ctx, planes, got, looped)
        want = expected if looped is None else expected + bias
        if looped is not None and looped[1] == 0:
            want = np.maximum(want, 0)
        assert got.tobytes() == want.astype(dtype).tobytes(), looped
    monkeypatch.setattr(jit, "ENABLED", False)
    plain = np.empty((6, 3, 5, 4), dtype)
    dft_gemm.write_rows(ctx, planes, plain, None)
    assert plain.tobytes() == expected.tobytes()


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("case", [(3, 7, 9, 2, 3, 3, 4, "SAME"), (4, 5, 5, 3, 4, 5, 5, "VALID"),
                                  (5, 14, 14, 32, 64, 5, 5, "SAME")])
def test_the_backprop_given_the_forwards_spectra_has_the_bits_of_its_own(case, threads,
                                                                         monkeypatch):
    """By GEMM: ``_FusedConv2DWithSpectra`` keeps the input's spectra and the filter's block
    matrices; the backprop given them (neither x nor the filter transformed again, the
    matrices used as kept: no transposition) returns the bits of the one computing both."""
    attrs, x, f, grad = inputs(*case, seed=11)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    bias = np.random.default_rng(12).standard_normal(f.shape[3]).astype(np.float32)
    ctx = KernelContext({**attrs, "fused_ops": ("BiasAdd", "Relu")}, threads)
    plan, _ = given_spectra_against_own(ctx, x, f, grad, bias, monkeypatch,
                                        (dft_gemm, "transform"), (dft_gemm, "filter_matrix"))
    assert dft_gemm.applies(plan)


def test_large_periods_take_pocketfft(monkeypatch):
    """Periods over ``MAX_PERIOD`` (measured slower by GEMM: bench/RESULTS.md) run pocketfft's
    form; both close to the direct kernels."""
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    plan = plan_of((1, 70, 70, 1), (5, 5, 1, 2), "SAME")
    assert plan.p_h > dft_gemm.MAX_PERIOD and not dft_gemm.applies(plan)
    assert dft_gemm.applies(plan_of((1, 60, 60, 1), (5, 5, 1, 2), "SAME"))
    used = []
    transform = dft_gemm.transform
    monkeypatch.setattr(dft_gemm, "transform", lambda *a: used.append(1) or transform(*a))
    from test_conv_fft import results
    attrs, x, f, grad = inputs(2, 70, 70, 2, 3, 5, 5, "SAME", seed=4)
    fft = results(attrs, x, f, grad)
    assert not used
    monkeypatch.setattr(nn_conv_fft, "FORCE", "direct")
    for a, b in zip(fft, results(attrs, x, f, grad)):
        assert_scaled_close(a, b, 5e-6, "pocketfft at a large period")


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("fused", [("BiasAdd",), ("BiasAdd", "Relu")])
def test_the_fused_forward_by_the_loop_has_the_numpy_forms_bits(fused, threads, monkeypatch):
    """By GEMM, ``_FusedConv2D``'s read-out with its bias [+ Relu] in ``_rows`` against numpy's
    copy then ``epilogue.fused_epilogue`` (``jit.ENABLED`` off): the same bits."""
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    attrs, x, f, _ = inputs(3, 11, 6, 2, 7, 4, 2, "VALID", seed=5)
    bias = np.random.default_rng(6).standard_normal(7).astype(np.float32)
    ctx = KernelContext({**attrs, "fused_ops": fused}, threads)
    looped = nn_conv._fused_conv2d(ctx, x, f, bias)[0]
    monkeypatch.setattr(jit, "ENABLED", False)
    assert looped.tobytes() == nn_conv._fused_conv2d(ctx, x, f, bias)[0].tobytes()


@pytest.mark.parametrize("case, dtype", [((7, 9, 9, 3, 7, 3, 3, "VALID"), np.float64),
                                         ((33, 9, 9, 8, 65, 5, 5, "SAME"), np.float64),
                                         ((4, 30, 30, 8, 8, 3, 3, "SAME"), np.float32),
                                         ((9, 40, 40, 16, 8, 5, 5, "SAME"), np.float32)])
def test_the_filter_gradient_by_gemm_has_the_same_bits_on_any_thread_count(case, dtype,
                                                                           monkeypatch):
    """The transforms' GEMMs round each image by the shape of its chunk's GEMM (OpenBLAS's
    small-matrix and edge kernels), so the spectra the filter gradient sums over the batch
    (the backprop's own, and the forward's kept ones) are transformed in blocks fixed by
    bytes, not by the thread count: the filter gradient's bits on 1, 2 and 3 threads alike,
    alone, fused and given the forward's spectra (review: by thread chunks they differed
    here, float32 and float64)."""
    from asyncflow.kernels import intra_op
    monkeypatch.setattr(intra_op, "MIN_SPLIT_WORK", 0)  # (small cases split too)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    attrs, x, f, grad = inputs(*case, seed=2, dtype=dtype)
    sizes, f_sizes = np.array(x.shape), np.array(f.shape)
    bias = np.zeros(f.shape[3], dtype)
    got = {}
    for threads in (1, 2, 3):
        ctx = KernelContext(attrs, threads)
        rows, cols = nn_conv._spatial(ctx, x.shape, f.shape[:2])
        assert dft_gemm.applies(nn_conv_fft.choose(ctx, (x, f), x.shape, f.shape, rows, cols,
                                                   x.dtype))
        alone = nn_conv._conv2d_backprop_filter(ctx, x, f_sizes, grad)[0]
        fused = nn_conv._fused_conv2d_backprop(ctx, sizes, f, grad, x, f_sizes)[1]
        spectra = nn_conv._fused_conv2d_with_spectra(
            KernelContext({**attrs, "fused_ops": ("BiasAdd",)}, threads), x, f, bias)[1]
        given = nn_conv._fused_conv2d_backprop_with_spectra(ctx, sizes, f, grad, x, f_sizes,
                                                            spectra)[1]
        got[threads] = (alone, fused, given)
    for threads in (2, 3):
        for name, a, b in zip(("alone", "fused", "given"), got[threads], got[1]):
            assert a.tobytes() == b.tobytes(), f"{name}, {threads} threads"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", [(7, 9, 9, 3, 7, 3, 3, "VALID"), (33, 9, 9, 8, 65, 5, 5, "SAME"),
                                  (9, 14, 14, 32, 64, 5, 5, "SAME")])
def test_spectra_written_block_by_block_give_the_whole_batch_forms_bits(case, dtype,
                                                                        monkeypatch):
    """Each block's transform writes its own slab of the spectra (``transform``'s ``out``)
    and the filter gradient packs each group of frequencies' rows of the blocks: the same
    bits as the form they replace (each block's spectrum copied into a batch-last whole, one
    GEMM per frequency on it), with several blocks and groups of a few frequencies, 1, 2 and 3
    threads; the filter gradient alone, fused, and given the forward's kept spectra."""
    from asyncflow.kernels import intra_op
    monkeypatch.setattr(intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(dft_gemm, "PACK_BYTES", 1 << 12)
    attrs, x, f, grad = inputs(*case, seed=4, dtype=dtype)
    ctx = KernelContext(attrs, 1)
    rows, cols = nn_conv._spatial(ctx, x.shape, f.shape[:2])
    plan = nn_conv_fft.Plan(x.shape, f.shape, rows, cols)
    n, c, o = x.shape[0], x.shape[3], f.shape[3]
    item_bytes = dft_gemm._split(plan, c, o, x.itemsize)[1]
    monkeypatch.setattr(intra_op, "CHUNK_BYTES", 2 * item_bytes)  # (blocks of 2 images)
    blocks = dft_gemm._blocks(n, item_bytes)
    assert len(blocks) >= 3
    whole = [np.concatenate([dft_gemm.transform(a[first:last], plan) for first, last in blocks],
                            axis=3) for a in (x, grad)]
    expected = dft_gemm.filter_gradient(ctx, whole[:1], whole[1:], plan, f.shape, dtype)
    for threads in (1, 2, 3):
        ctx = KernelContext(attrs, threads)
        alone = dft_gemm.backprop_filter(ctx, plan, x, grad, f.shape, dtype)
        fused = dft_gemm.backprop_both(ctx, plan, x, f, grad, np.empty_like(x))[1]
        out, kept = np.empty(grad.shape, dtype), []
        dft_gemm.conv2d(ctx, plan, x, f, out, None, kept, None)
        given = dft_gemm.backprop_both(ctx, plan, x, f, grad, np.empty_like(x), kept[0])[1]
        for name, got in (("alone", alone), ("fused", fused), ("given", given)):
            assert got.tobytes() == expected.tobytes(), f"{name}, {threads} threads"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_empty_batch_gives_a_zero_filter_gradient(dtype):
    """An empty batch (one empty block, ``_blocks``): the filter gradient is zeros, as TF1's
    (the packed group's size once divided by the batch's zero bytes), alone, fused, and given
    the forward's kept spectra; the fused input gradient empty."""
    attrs, x, f, grad = inputs(0, 9, 9, 3, 7, 3, 3, "SAME", seed=2, dtype=dtype)
    ctx = KernelContext(attrs, 2)
    rows, cols = nn_conv._spatial(ctx, x.shape, f.shape[:2])
    plan = nn_conv_fft.Plan(x.shape, f.shape, rows, cols)
    out, kept = np.empty(grad.shape, dtype), []
    dft_gemm.conv2d(ctx, plan, x, f, out, None, kept, None)
    alone = dft_gemm.backprop_filter(ctx, plan, x, grad, f.shape, dtype)
    dx, fused = dft_gemm.backprop_both(ctx, plan, x, f, grad, np.empty_like(x))
    given = dft_gemm.backprop_both(ctx, plan, x, f, grad, np.empty_like(x), kept[0])[1]
    assert dx.shape == x.shape
    for got in (alone, fused, given):
        assert got.shape == f.shape and got.dtype == dtype and not got.any()


def chunk_started(monkeypatch, ctx, blocks):
    """An event set when a thread starts a filter-gradient chunk of ``_blocks_then``'s queue
    (a task past the blocks), before it waits for the blocks' spectra: a block can hold its
    spectra until a chunk is taken, so that the chunk surely waits (no timing involved)."""
    started = threading.Event()
    pool = ctx.device.intra_op
    run = pool.run

    def watched(fn, bounds, caller_limit=None, waits=False):
        def task(start, stop):
            if start >= len(blocks):
                started.set()
            return fn(start, stop)
        return run(task, bounds, caller_limit, waits)
    monkeypatch.setattr(pool, "run", watched)
    return started


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_backprops_queue_runs_the_filter_gradient_after_every_blocks_spectra(
        threads, small_chunks, monkeypatch):
    """``_blocks_then`` (the fused backprop's one queue): every block's part before its
    ``yield`` is done before any chunk of the filter gradient starts, every block's rest and
    every chunk run once, whatever thread takes them. On 2-3 threads the last block holds its
    spectra until a thread has taken a chunk, which then must wait for them."""
    ctx = KernelContext({}, threads)
    blocks = [(0, 3), (3, 6), (6, 9)]
    started = chunk_started(monkeypatch, ctx, blocks)
    spectra, rest, chunks = set(), [], []

    def block(first, last):
        if first == 6 and threads > 1:
            assert started.wait(60), "no thread took a chunk while a block computed"
        spectra.add(first)
        yield
        rest.append(first)

    def then(start, stop):
        assert spectra == {0, 3, 6}, spectra  # every block's spectra before any chunk
        chunks.append((start, stop))
    dft_gemm._blocks_then(ctx, blocks, block, 1 << 22, then, 10, 1 << 20, 1024)
    assert sorted(rest) == [0, 3, 6]
    assert sorted(chunks) == [(start, start + 1) for start in range(10)]


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("where", ["spectra", "rest"])
def test_a_block_that_fails_fails_the_backprop_without_a_hang(threads, where, small_chunks,
                                                              monkeypatch):
    """A block raising before its ``yield`` (the spectra the chunks wait for) or after it:
    the error reaches the caller; the waiting chunks neither hang nor run on missing
    spectra. On 3 threads the failing block raises once a thread has taken a chunk (which
    then waits for its spectra)."""
    ctx = KernelContext({}, threads)
    blocks = [(0, 3), (3, 6)]
    started = chunk_started(monkeypatch, ctx, blocks)
    ran = []

    def block(first, last):
        if first == 3 and threads > 1:
            assert started.wait(60), "no thread took a chunk while a block computed"
        if where == "spectra" and first == 3:
            raise ValueError("broken block")
        yield
        if where == "rest" and first == 3:
            raise ValueError("broken block")

    def then(start, stop):
        ran.append(start)
    with pytest.raises(ValueError, match="broken block"):
        dft_gemm._blocks_then(ctx, blocks, block, 1 << 22, then, 4, 1 << 20, 1024)
    assert where == "rest" or not ran


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_one_queue_gives_the_bits_of_the_blocks_then_the_chunks(threads, dtype,
                                                                     monkeypatch):
    """The fused backprop's one queue (``ONE_QUEUE``) against the form before (the blocks,
    then the filter gradient's chunks, each split alone): the same GEMMs, so the same bits,
    dx and dw, the convnet's conv2 (batch cut to two blocks) and an odd VALID shape."""
    monkeypatch.setattr(dft_gemm, "MAX_PERIOD", 64)
    for case, chunk_bytes in (((70, 14, 14, 32, 64, 5, 5, "SAME"), 1 << 20),
                              ((7, 9, 11, 3, 5, 4, 3, "VALID"), 4096)):
        monkeypatch.setattr(intra_op_module, "CHUNK_BYTES", chunk_bytes)
        monkeypatch.setattr(intra_op_module, "MIN_SPLIT_WORK", 0)
        attrs, x, f, grad = inputs(*case, seed=13, dtype=dtype)
        ctx = KernelContext(attrs, threads)
        rows, cols = nn_conv._spatial(ctx, x.shape, f.shape[:2])
        plan = nn_conv_fft.Plan(x.shape, f.shape, rows, cols)
        item_bytes = dft_gemm._split(plan, x.shape[3], f.shape[3], x.itemsize)[1]
        assert len(dft_gemm._blocks(x.shape[0], item_bytes)) > 1
        got = {}
        for one_queue in (True, False):
            monkeypatch.setattr(dft_gemm, "ONE_QUEUE", one_queue)
            got[one_queue] = dft_gemm.backprop_both(ctx, plan, x, f, grad, np.empty_like(x))
        for a, b in zip(got[True], got[False]):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("where", ["call", "spectra", "taken"])
def test_a_block_interrupted_while_a_chunk_waits_for_it_ends_the_split(threads, where,
                                                                      small_chunks,
                                                                      monkeypatch):
    """KeyboardInterrupt (Ctrl-C) in the second block's task while a chunk of the filter
    gradient waits for that block's spectra: as the block is called (before the task's
    ``try`` it had: the chunk, and the pool's caller with it, waited forever), in its
    spectra, and on the pool's caller right after it took the block from the queue (it never
    runs it). The interrupt reaches the caller, no chunk of the filter gradient runs, and
    every worker is free again (none waits for the spectra: the block the caller took and
    dropped used to keep a worker's chunk waiting forever)."""
    from asyncflow.exec import intra_op as pool_module
    ctx = KernelContext({}, threads)
    pool = pool_module.IntraOpPool(threads)
    monkeypatch.setattr(ctx.device, "intra_op", pool)
    blocks = [(0, 3), (3, 6)]
    started = chunk_started(monkeypatch, ctx, blocks)
    ran, caller = [], []

    def spectra(first):
        if where == "spectra" and first == 3:
            raise KeyboardInterrupt
        yield

    def block(first, last):
        if first == 3 and where != "taken":
            assert started.wait(60), "no thread took a chunk while a block computed"
            if where == "call":
                raise KeyboardInterrupt
        return spectra(first)
    if where == "taken":  # (the caller's first take: a block, the queue's first tasks)
        take = pool_module._ChunkQueue._take

        def taken(queue):
            chunk = take(queue)
            if threading.get_ident() == caller[0] and len(caller) == 1:
                caller.append(chunk)
                raise KeyboardInterrupt
            return chunk
        monkeypatch.setattr(pool_module._ChunkQueue, "_take", taken)

    def backprop():
        caller.append(threading.get_ident())
        dft_gemm._blocks_then(ctx, blocks, block, 1 << 22,
                              lambda start, stop: ran.append(start), 4, 1 << 20, 1024)
    try:
        assert isinstance(bounded(backprop), KeyboardInterrupt)
    finally:
        workers = list(pool._executor._threads)
        pool.close(10)
    assert not ran
    assert not any(worker.is_alive() for worker in workers), "a worker still waits"
