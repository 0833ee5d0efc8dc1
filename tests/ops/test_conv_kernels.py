"""The rebuilt Conv2D and pooling kernels (issue 37) against the kernels they replaced, and
split over intra-op threads against one thread.

The naive-loop and finite-difference checks of the same kernels are in tests/ops/test_nn.py
(``test_conv2d_matches_naive_loops``, ``test_pooling_matches_naive_loops``,
``test_conv2d_gradient``, ``test_pool_gradients``); here the kernels are called directly, with
a real CPU device whose intra-op pool has 1, 2 or 3 threads, on sizes where the chunking is
forced on by lowering the split thresholds.
"""
import threading

import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.kernels import nn_conv as rebuilt
from asyncflow.exec import intra_op
from asyncflow.exec.devices import Device

import conv_kernels_before as before  # same folder


class KernelContext:
    """What a conv/pool kernel reads from its context: attrs, name, xp and the device."""

    def __init__(self, attrs, threads):
        self.attrs = attrs
        self.name = "test_op"
        self.xp = np
        self.device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, threads,
                             intra_op_threads=threads)


@pytest.fixture
def small_chunks(monkeypatch):
    """Split even the small test arrays: any work splits, chunks of a few hundred bytes."""
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 512)


def conv_attrs(sh, sw, dh, dw, padding):
    return {"strides": (1, sh, sw, 1), "dilations": (1, dh, dw, 1), "padding": padding}


def pool_attrs(kh, kw, sh, sw, padding):
    return {"ksize": (1, kh, kw, 1), "strides": (1, sh, sw, 1), "padding": padding}


# (n, h, w, c, o, kh, kw, sh, sw, dh, dw, padding): odd sizes, channels below and above 8,
# strides, dilations, both paddings, a window as large as the input.
CONV_CASES = [
    (5, 7, 9, 3, 4, 3, 3, 1, 1, 1, 1, "SAME"),
    (4, 11, 6, 8, 5, 5, 5, 1, 1, 1, 1, "SAME"),
    (3, 9, 8, 16, 7, 3, 2, 2, 3, 1, 1, "VALID"),
    (6, 10, 10, 9, 3, 3, 3, 1, 1, 2, 2, "SAME"),
    (2, 13, 7, 1, 32, 5, 5, 2, 1, 1, 1, "SAME"),
    (3, 5, 5, 12, 2, 5, 5, 1, 1, 1, 1, "VALID"),
    (7, 8, 9, 10, 6, 2, 3, 2, 2, 2, 1, "VALID"),
    (3, 12, 10, 1, 6, 3, 3, 1, 1, 2, 2, "VALID"),   # one channel (tap-major patches), dilated
    (4, 9, 11, 1, 5, 4, 2, 3, 2, 1, 1, "SAME"),     # one channel, even window, strides
]


def conv_inputs(case, seed=0, dtype=np.float32):
    n, h, w, c, o, kh, kw, sh, sw, dh, dw, padding = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(dtype)
    f = rng.standard_normal((kh, kw, c, o)).astype(dtype)
    attrs = conv_attrs(sh, sw, dh, dw, padding)
    y = before._conv2d(KernelContext(attrs, 1), x, f)[0]
    grad = rng.standard_normal(y.shape).astype(dtype)
    return attrs, x, f, grad


def conv_results(module, attrs, x, f, grad, threads):
    ctx = KernelContext(attrs, threads)
    return (module._conv2d(ctx, x, f)[0],
            module._conv2d_backprop_input(ctx, np.array(x.shape), f, grad)[0],
            module._conv2d_backprop_filter(ctx, x, np.array(f.shape), grad)[0])


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_kernels_match_the_kernels_they_replaced(case, threads, small_chunks):
    attrs, x, f, grad = conv_inputs(case)
    names = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
    for name, new, old in zip(names, conv_results(rebuilt, attrs, x, f, grad, threads),
                              conv_results(before, attrs, x, f, grad, 1)):
        assert new.shape == old.shape and new.dtype == old.dtype, name
        np.testing.assert_allclose(new, old, rtol=2e-5, atol=2e-5, err_msg=f"{name} {case}")


# inf - inf in the GEMMs, both kernels alike (on the pool's threads too: no errstate there)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_one_channel_conv_carries_nan_and_inf_like_before(small_chunks):
    """The one-channel (tap-major) patches carry an input's NaN and inf into the products
    and the filter gradient exactly where the old patches did."""
    for case in [c for c in CONV_CASES if c[3] == 1]:
        attrs, x, f, grad = conv_inputs(case, seed=4)
        x = x.copy()
        flat = x.reshape(-1)
        flat[::11], flat[3::17], flat[5::23] = np.nan, np.inf, -np.inf
        for name, new, old in zip(("Conv2D", "BackpropInput", "BackpropFilter"),
                                  conv_results(rebuilt, attrs, x, f, grad, 2),
                                  conv_results(before, attrs, x, f, grad, 1)):
            np.testing.assert_array_equal(np.isnan(new), np.isnan(old), err_msg=name)
            np.testing.assert_allclose(new, old, rtol=2e-5, atol=2e-5, equal_nan=True,
                                       err_msg=f"{name} {case}")


@pytest.mark.parametrize("padding, strides, dilations", [("SAME", 1, 1), ("VALID", 2, 1),
                                                         ("SAME", 1, 2), ("VALID", [2, 1], 1)])
async def test_one_channel_conv_gradients_match_finite_differences(padding, strides, dilations):
    from gradcheck import check_gradients
    rng = np.random.default_rng(5)
    x, f = rng.standard_normal((2, 7, 6, 1)), rng.standard_normal((3, 2, 1, 4))
    await check_gradients(lambda a, b: af.nn.conv2d(a, b, strides, padding,
                                                    dilations=dilations), [x, f])


@pytest.mark.parametrize("case", CONV_CASES[:4])
def test_conv_kernels_match_in_float64(case, small_chunks):
    attrs, x, f, grad = conv_inputs(case, seed=1, dtype=np.float64)
    for new, old in zip(conv_results(rebuilt, attrs, x, f, grad, 2),
                        conv_results(before, attrs, x, f, grad, 1)):
        np.testing.assert_allclose(new, old, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_split_over_threads_gives_the_same_bits(case, small_chunks):
    """Chunks larger than the thread count: every thread count runs the same chunks (the
    same GEMMs, BLAS at one thread), so even the filter gradient's sum is the same bits."""
    attrs, x, f, grad = conv_inputs(case, seed=2)
    one = conv_results(rebuilt, attrs, x, f, grad, 1)
    for threads in (2, 3):
        for a, b in zip(one, conv_results(rebuilt, attrs, x, f, grad, threads)):
            assert np.array_equal(a, b)


def test_conv_split_by_thread_count_is_close_when_the_batch_fits_one_chunk():
    """With the default chunk size a small batch is cut once per thread: the filter
    gradient then sums a different number of partials (close, not the same bits)."""
    attrs, x, f, grad = conv_inputs((4, 9, 9, 8, 8, 3, 3, 1, 1, 1, 1, "SAME"), seed=3)
    kernel_intra_op_min = kernel_intra_op.MIN_SPLIT_WORK
    try:
        kernel_intra_op.MIN_SPLIT_WORK = 0
        one = conv_results(rebuilt, attrs, x, f, grad, 1)
        two = conv_results(rebuilt, attrs, x, f, grad, 2)
    finally:
        kernel_intra_op.MIN_SPLIT_WORK = kernel_intra_op_min
    for a, b in zip(one, two):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# -- pooling --------------------------------------------------------------------------------
POOL_CASES = [
    (3, 8, 8, 4, 2, 2, 2, 2, "SAME"),
    (2, 7, 9, 3, 3, 3, 2, 2, "SAME"),
    (4, 9, 7, 8, 3, 2, 1, 1, "VALID"),
    (2, 5, 5, 2, 5, 5, 1, 1, "SAME"),
    (5, 6, 11, 9, 2, 3, 3, 2, "VALID"),
    (3, 7, 7, 5, 2, 2, 2, 2, "SAME"),     # windows tile the padded input
    (2, 9, 6, 3, 3, 3, 3, 3, "VALID"),    # windows tile the input exactly
    # Windows that tile the input without padding take the row-then-column routing:
    (3, 8, 12, 32, 2, 2, 2, 2, "SAME"),   # the convnet's pools (channels in runs of 32)
    (2, 6, 9, 1, 2, 3, 2, 3, "VALID"),    # one channel, a 2x3 window
    (3, 9, 4, 5, 3, 1, 3, 1, "VALID"),    # a column of taps (KW = 1)
    (2, 4, 10, 3, 1, 5, 1, 5, "SAME"),    # a row of taps (KH = 1)
]


def pool_results(module, attrs, x, grad, threads):
    ctx = KernelContext(attrs, threads)
    pooled = module._max_pool(ctx, x)[0]
    return pooled, module._max_pool_grad(ctx, x, pooled, grad)[0]


def tied_input(rng, shape, dtype=np.float32):
    """Few distinct values: most windows hold ties."""
    return rng.integers(0, 3, size=shape).astype(dtype)


def pool_cases_with(special):
    rng = np.random.default_rng(4)
    for case in POOL_CASES:
        n, h, w, c, kh, kw, sh, sw, padding = case
        attrs = pool_attrs(kh, kw, sh, sw, padding)
        x = tied_input(rng, (n, h, w, c))
        special(rng, x)
        pooled = before._max_pool(KernelContext(attrs, 1), x)[0]
        yield case, attrs, x, rng.standard_normal(pooled.shape).astype(np.float32)


def no_special(rng, x):
    pass


def with_nan_and_inf(rng, x):
    flat = x.reshape(-1)
    cells = rng.choice(flat.size, size=max(3, flat.size // 7), replace=False)
    flat[cells[0::3]] = np.nan
    flat[cells[1::3]] = np.inf
    flat[cells[2::3]] = -np.inf


def all_minus_inf(rng, x):
    x[...] = -np.inf


def tf_cpu_max_pool(attrs, x, grad):
    """TF's CPU MaxPool and MaxPoolGrad, window by window as its loops go: the maximum starts
    at the dtype's lowest finite value and takes a cell only when strictly greater (so NaN
    never wins), and the gradient's winner starts at the window's first real cell and moves
    only to a strictly greater one (ties stay first; a NaN first cell keeps it)."""
    (_, kh, kw, _), (_, sh, sw, _) = attrs["ksize"], attrs["strides"]
    geometry = []
    for size, k, s in ((x.shape[1], kh, sh), (x.shape[2], kw, sw)):
        out = -(-size // s) if attrs["padding"] == "SAME" else (size - k) // s + 1
        geometry.append((out, max((out - 1) * s + k - size, 0) // 2 * (attrs["padding"] == "SAME")))
    (oh, top), (ow, left) = geometry
    lowest = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    pooled = np.full((x.shape[0], oh, ow, x.shape[3]), lowest, dtype=x.dtype)
    routed = np.zeros(x.shape, dtype=grad.dtype)
    for oy in range(oh):
        for ox in range(ow):
            cells = [(r, c) for r in range(oy * sh - top, oy * sh - top + kh)
                     for c in range(ox * sw - left, ox * sw - left + kw)
                     if 0 <= r < x.shape[1] and 0 <= c < x.shape[2]]
            winner = np.full(x.shape[0::3], cells[0][0] * x.shape[2] + cells[0][1])
            held = x[:, cells[0][0], cells[0][1]].copy()
            for r, c in cells:
                value = x[:, r, c]
                pooled[:, oy, ox] = np.where(value > pooled[:, oy, ox], value, pooled[:, oy, ox])
                greater = held < value
                held = np.where(greater, value, held)
                winner = np.where(greater, r * x.shape[2] + c, winner)
            n, d = np.indices(winner.shape)
            np.add.at(routed, (n, winner // x.shape[2], winner % x.shape[2], d), grad[:, oy, ox])
    return pooled, routed


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("special", [no_special, with_nan_and_inf, all_minus_inf])
def test_max_pool_kernels_match_bit_for_bit(special, threads, small_chunks):
    """Ties go to the first cell in row-major order, as the argmax-based kernel did, and with
    NaN and infinities as TF's CPU kernels (``tf_cpu_max_pool``; the argmax-based kernel let
    a NaN win and gave -inf windows -inf); the same bits on any thread count."""
    for case, attrs, x, grad in pool_cases_with(special):
        new = pool_results(rebuilt, attrs, x, grad, threads)
        if special is no_special:
            for mine, old in zip(new, pool_results(before, attrs, x, grad, 1)):
                assert mine.dtype == old.dtype
                np.testing.assert_array_equal(mine, old, err_msg=f"{case}")
        else:
            assert_like_tf_cpu(new, tf_cpu_max_pool(attrs, x, grad), case)


def assert_like_tf_cpu(new, reference, case):
    """The pooled values bit for bit; the gradient up to the order its windows' shares add
    up in (the reference adds window by window, the kernels tap by tap)."""
    assert [a.dtype for a in new] == [b.dtype for b in reference]
    np.testing.assert_array_equal(new[0], reference[0], err_msg=f"{case}")
    np.testing.assert_allclose(new[1], reference[1], rtol=1e-6, atol=1e-6, err_msg=f"{case}")


def test_tf_cpu_max_pool_reference_agrees_with_the_argmax_kernel_without_nan():
    for case, attrs, x, grad in pool_cases_with(no_special):
        assert_like_tf_cpu(pool_results(before, attrs, x, grad, 1),
                           tf_cpu_max_pool(attrs, x, grad), case)


@pytest.mark.parametrize("threads", [1, 2])
def test_max_pool_grad_routes_inf_and_nan_gradients_like_before(threads, small_chunks):
    """An inf or NaN in the incoming gradient goes only to its window's winner (the masks
    switch from multiplication to ``where``, since ``0 * inf`` is NaN)."""
    for case, attrs, x, grad in pool_cases_with(no_special):
        grad = grad.copy()
        grad.reshape(-1)[::5] = np.inf
        grad.reshape(-1)[1::7] = np.nan
        new = pool_results(rebuilt, attrs, x, grad, threads)[1]
        old = pool_results(before, attrs, x, grad, 1)[1]
        np.testing.assert_array_equal(new, old, err_msg=f"{case}")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_avg_pool_kernels_match_bit_for_bit(threads, small_chunks):
    rng = np.random.default_rng(9)
    for case in POOL_CASES:
        n, h, w, c, kh, kw, sh, sw, padding = case
        attrs = pool_attrs(kh, kw, sh, sw, padding)
        x = rng.standard_normal((n, h, w, c)).astype(np.float32)
        old_ctx, new_ctx = KernelContext(attrs, 1), KernelContext(attrs, threads)
        pooled = before._avg_pool(old_ctx, x)[0]
        np.testing.assert_array_equal(rebuilt._avg_pool(new_ctx, x)[0], pooled)
        grad = rng.standard_normal(pooled.shape).astype(np.float32)
        np.testing.assert_array_equal(
            rebuilt._avg_pool_grad(new_ctx, np.array(x.shape), grad)[0],
            before._avg_pool_grad(old_ctx, np.array(x.shape), grad)[0], err_msg=f"{case}")


def test_max_pool_of_integers_matches():
    rng = np.random.default_rng(5)
    attrs = pool_attrs(3, 3, 2, 2, "SAME")
    x = rng.integers(-5, 5, size=(2, 7, 7, 3)).astype(np.int32)
    grad = rng.standard_normal((2, 4, 4, 3)).astype(np.float32)
    for new, old in zip(pool_results(rebuilt, attrs, x, grad, 2),
                        pool_results(before, attrs, x, grad, 1)):
        np.testing.assert_array_equal(new, old)


# -- the pool itself -------------------------------------------------------------------------
def test_chunk_bounds_cover_the_range_in_order():
    assert kernel_intra_op.chunk_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert kernel_intra_op.chunk_bounds(2, 2) == [(0, 1), (1, 2)]


def test_pool_runs_every_chunk_once_and_raises_the_first_error():
    pool = intra_op.IntraOpPool(3)
    seen, lock = [], threading.Lock()

    def work(start, stop):
        with lock:
            seen.append((start, stop))
    bounds = [(i, i + 1) for i in range(7)]
    pool.run(work, bounds)
    assert sorted(seen) == bounds

    def failing(start, stop):
        if start == 2:
            raise ValueError("chunk 2 failed")
    with pytest.raises(ValueError, match="chunk 2 failed"):
        pool.run(failing, bounds)
    pool.close()


def test_the_caller_does_the_chunks_when_no_worker_gets_to_them():
    """A worker that cannot start (here: busy with something else) is not waited for: the
    calling thread drains the queue and withdraws the hand-off."""
    pool = intra_op.IntraOpPool(2)
    release = threading.Event()
    blocker = pool._workers().submit(release.wait)  # the pool's only worker, kept busy
    try:
        threads = []
        pool.run(lambda start, stop: threads.append(threading.current_thread().name),
                 [(i, i + 1) for i in range(5)])
        assert threads == [threading.current_thread().name] * 5
    finally:
        release.set()
        blocker.result()
        pool.close()


def _blas_info():
    """``[{'internal_api', 'version', 'num_threads', ...}]`` of the BLAS libraries numpy
    loaded (threadpoolctl's view; empty without threadpoolctl)."""
    try:
        import threadpoolctl
    except ImportError:
        return []
    return [info for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"]


def test_blas_is_held_at_one_thread_during_a_split_and_restored_after():
    blas = _blas_info()
    if not blas:
        pytest.skip("no BLAS library seen by threadpoolctl")
    before_threads = [info["num_threads"] for info in blas]
    during = []
    pool = intra_op.IntraOpPool(2)
    pool.run(lambda start, stop: during.append(
        [info["num_threads"] for info in _blas_info()]), [(0, 1), (1, 2)])
    assert during and all(threads == [1] * len(blas) for threads in during)
    assert [info["num_threads"] for info in _blas_info()] == before_threads
    pool.close()


def test_a_cpu_device_holds_blas_at_one_thread():
    if not _blas_info():
        pytest.skip("no BLAS library seen by threadpoolctl")
    af.Session(config=af.ConfigProto(intra_op_parallelism_threads=2))
    assert [info["num_threads"] for info in _blas_info()] == [1] * len(
        _blas_info())


def test_intra_op_threads_must_be_positive():
    with pytest.raises(ValueError, match="intra_op_parallelism_threads"):
        intra_op.IntraOpPool(0)
    with pytest.raises(ValueError, match="intra_op_parallelism_threads"):
        af.Session(config=af.ConfigProto(intra_op_parallelism_threads=-1))


# -- end to end: a session's convnet step with 1 and 2 intra-op threads ------------------------
async def convnet_gradients(threads, x, filters, labels):
    with af.Graph().as_default():
        images = af.constant(x)
        kernel = af.Variable(filters)
        hidden = af.nn.relu(af.nn.conv2d(images, kernel, [1, 1, 1, 1], "SAME"))
        pooled = af.nn.max_pool(hidden, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        logits = af.reduce_sum(pooled, axis=[1, 2])
        loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
            labels=af.constant(labels), logits=logits))
        (grad,) = af.gradients(loss, [kernel])
        config = af.ConfigProto(intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            return await session.run([loss, grad])


async def test_session_step_is_the_same_with_one_and_two_intra_op_threads(monkeypatch):
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 4096)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((16, 12, 12, 3)).astype(np.float32)
    filters = (0.1 * rng.standard_normal((3, 3, 3, 10))).astype(np.float32)
    labels = rng.integers(0, 10, size=16).astype(np.int64)
    one = await convnet_gradients(1, x, filters, labels)
    two = await convnet_gradients(2, x, filters, labels)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    assert intra_op.shared_pool(2).splits > 0


@pytest.mark.parametrize("loops", [False, True])
def test_a_tiled_max_pool_grad_has_tf1s_zero_signs(loops, monkeypatch):
    """TF1's MaxPoolGrad adds the gradient into a zeroed output: a tiled window's other cells
    are +0 whatever the gradient's sign (``g * False`` gave -0), a -0 gradient gives +0
    (``0 + -0``); the Relu fold then keeps ReluGrad's ``g * 0`` (-0 for a negative g). The
    expected values are TF 2.21's (``tf.compat.v1``, CPU kernels) for these arrays."""
    from asyncflow.kernels import jit, nn_pool_taps
    if loops and not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")
    monkeypatch.setattr(jit, "ENABLED", loops)
    x = np.array([[1, 2, 0, 0], [0.5, 0, 0, 0], [5, 1, 1, 1], [1, 1, 1, 7]],
                 np.float32).reshape(1, 4, 4, 1)
    grad = np.array([-1, -5, -2, -0.0], np.float32).reshape(1, 2, 2, 1)
    want = np.zeros(16, np.float32)
    want[[1, 2, 8]] = -1, -5, -2
    want_relu = want * (x.reshape(-1) > 0)  # -0 where the winner is 0
    ctx = KernelContext(pool_attrs(2, 2, 2, 2, "VALID"), 1)
    pooled = rebuilt._max_pool(ctx, x)[0]
    got = rebuilt._max_pool_grad(ctx, x, pooled, grad)[0]
    _, taps = nn_pool_taps._max_pool_with_taps(ctx, x)
    by_taps = nn_pool_taps._max_pool_grad_by_taps(ctx, x, taps, grad)[0]
    relu = nn_pool_taps._max_pool_relu_grad_by_taps(ctx, x, taps, grad, pooled)[0]
    for value, expected in ((got, want), (by_taps, want), (relu, want_relu)):
        assert value.reshape(-1).tobytes() == expected.tobytes(), (
            value.reshape(-1).tolist(), np.signbit(value).reshape(-1).astype(int).tolist())
