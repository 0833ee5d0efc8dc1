"""FFT convolution (kernels/nn_conv_fft.py): Conv2D and both gradients against the direct
kernels and finite differences, the algorithm choice, NaN and inf, and splits over threads.

The kernels are called directly with a real CPU device (``KernelContext`` of
test_conv_kernels.py); ``nn_conv_fft.FORCE`` picks the algorithm where the test compares them.
"""
import threading

import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.kernels import dft_gemm, nn_conv, nn_conv_fft

from test_conv_kernels import KernelContext, conv_attrs, small_chunks  # same folder

assert small_chunks  # a fixture, used by name below


def results(attrs, x, f, grad, threads=1):
    ctx = KernelContext(attrs, threads)
    return (nn_conv._conv2d(ctx, x, f)[0],
            nn_conv._conv2d_backprop_input(ctx, np.array(x.shape), f, grad)[0],
            nn_conv._conv2d_backprop_filter(ctx, x, np.array(f.shape), grad)[0])


def inputs(n, h, w, c, o, kh, kw, padding, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    attrs = conv_attrs(1, 1, 1, 1, padding)
    x = rng.standard_normal((n, h, w, c)).astype(dtype)
    f = rng.standard_normal((kh, kw, c, o)).astype(dtype)
    rows, cols = nn_conv._spatial(KernelContext(attrs, 1), x.shape, (kh, kw))
    grad = rng.standard_normal((n, rows[0], cols[0], o)).astype(dtype)
    return attrs, x, f, grad


def with_algorithm(monkeypatch, algorithm, attrs, x, f, grad, threads=1):
    monkeypatch.setattr(nn_conv_fft, "FORCE", algorithm)
    return results(attrs, x, f, grad, threads)


@pytest.fixture(params=["gemm", "pocketfft"])
def transforms(request, monkeypatch):
    """Both forms of the transforms: by GEMM (kernels/dft_gemm.py, the default for these
    periods) and pocketfft's (``dft_gemm.MAX_PERIOD`` 0)."""
    if request.param == "pocketfft":
        monkeypatch.setattr(dft_gemm, "MAX_PERIOD", 0)
    return request.param


def assert_scaled_close(actual, expected, tolerance, what):
    """Close relative to the output's scale (an FFT's rounding is spread over the plane)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    scale = float(np.abs(expected).max())
    error = float(np.abs(actual.astype(np.float64) - expected).max())
    assert error <= tolerance * scale, f"{what}: error {error:.3g} of scale {scale:.3g}"


# (n, h, w, c, o, kh, kw, padding): odd sizes, rectangular and even kernels, a kernel as
# large as the input, VALID and SAME, and the convnet's second layer at a smaller batch.
FFT_CASES = [
    (3, 7, 9, 2, 3, 3, 4, "SAME"),
    (3, 7, 9, 2, 3, 3, 4, "VALID"),
    (2, 5, 6, 3, 2, 5, 2, "SAME"),
    (2, 11, 13, 4, 5, 6, 3, "SAME"),
    (4, 5, 5, 3, 4, 5, 5, "VALID"),
    (1, 9, 4, 5, 2, 2, 7, "SAME"),   # kernel wider than the input
    (5, 14, 14, 32, 64, 5, 5, "SAME"),
]


@pytest.mark.parametrize("case", FFT_CASES)
@pytest.mark.usefixtures("transforms")
def test_fft_matches_the_direct_kernels(case, monkeypatch):
    attrs, x, f, grad = inputs(*case)
    direct = with_algorithm(monkeypatch, "direct", attrs, x, f, grad)
    fft = with_algorithm(monkeypatch, "fft", attrs, x, f, grad)
    for name, a, b in zip(("Conv2D", "BackpropInput", "BackpropFilter"), fft, direct):
        # Measured: at most ~7e-7 of the output's scale in float32 on these cases.
        assert_scaled_close(a, b, 5e-6, f"{name} {case}")


@pytest.mark.parametrize("case", FFT_CASES[::3])
@pytest.mark.usefixtures("transforms")
def test_fft_matches_the_direct_kernels_in_float64(case, monkeypatch):
    attrs, x, f, grad = inputs(*case, seed=1, dtype=np.float64)
    direct = with_algorithm(monkeypatch, "direct", attrs, x, f, grad)
    fft = with_algorithm(monkeypatch, "fft", attrs, x, f, grad)
    for a, b in zip(fft, direct):
        assert_scaled_close(a, b, 1e-13, str(case))


@pytest.mark.parametrize("padding, shape, kernel", [("SAME", (2, 6, 7, 3), (3, 4, 3, 2)),
                                                    ("VALID", (2, 7, 5, 2), (4, 2, 2, 3))])
@pytest.mark.usefixtures("transforms")
async def test_fft_gradients_match_finite_differences(padding, shape, kernel, monkeypatch):
    """The gradient graph's three kernels all by FFT (float64) against central differences."""
    from gradcheck import check_gradients
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    rng = np.random.default_rng(5)
    x, f = rng.standard_normal(shape), rng.standard_normal(kernel)
    await check_gradients(lambda a, b: af.nn.conv2d(a, b, 1, padding), [x, f])


def plan_for(x_shape, f_shape, strides=1, dilations=1, padding="SAME", dtype=np.float32):
    ctx = KernelContext(conv_attrs(strides, strides, dilations, dilations, padding), 1)
    arrays = (np.zeros(x_shape, dtype), np.zeros(f_shape, dtype))
    rows, cols = nn_conv._spatial(ctx, x_shape, f_shape[:2])
    return nn_conv_fft.choose(ctx, arrays, x_shape, f_shape, rows, cols, dtype)


def test_the_cost_model_picks_fft_for_the_convnets_second_layer_only():
    conv2 = plan_for((128, 14, 14, 32), (5, 5, 32, 64))
    assert conv2 is not None and (conv2.p_h, conv2.p_w) == (16, 16)  # 14 + 2 rows of padding
    assert conv2.fft_s < conv2.direct_s / 1.5
    # The first layer (one channel: the transforms outweigh 80 M multiply-adds), 3x3 kernels
    # on small images, 1x1, strides, dilations, half floats: direct.
    assert plan_for((128, 28, 28, 1), (5, 5, 1, 32)) is None
    assert plan_for((128, 7, 7, 64), (3, 3, 64, 128)) is None
    assert plan_for((32, 28, 28, 32), (3, 3, 32, 32)) is None
    assert plan_for((128, 14, 14, 32), (1, 1, 32, 64)) is None
    assert plan_for((128, 14, 14, 32), (5, 5, 32, 64), strides=2) is None
    assert plan_for((128, 14, 14, 32), (5, 5, 32, 64), dilations=2) is None
    assert plan_for((128, 14, 14, 32), (5, 5, 32, 64), dtype=np.float16) is None


def test_forcing_the_algorithm(monkeypatch):
    monkeypatch.setattr(nn_conv_fft, "FORCE", "direct")
    assert plan_for((128, 14, 14, 32), (5, 5, 32, 64)) is None
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    assert plan_for((1, 4, 4, 1), (3, 3, 1, 1)) is not None
    assert plan_for((1, 4, 4, 1), (3, 3, 1, 1), strides=2) is None  # does not apply


def test_periods_leave_no_wrapped_term():
    """P >= max(H + top, OH + K - 1 - top): the smallest such 5-smooth size."""
    assert nn_conv_fft._period(14, 5, 14, 2) == 16
    assert nn_conv_fft._period(14, 5, 10, 0) == 15   # VALID: 14 suffice, 15 is 5-smooth
    assert nn_conv_fft._period(4, 7, 4, 3) == 8      # window wider than the input: 4+3 -> 8
    assert nn_conv_fft._period(28, 5, 28, 2) == 30
    assert nn_conv_fft._period(3, 2, 3, 0) == 4


# inf - inf in the direct kernels' GEMMs
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_and_inf_stay_where_the_direct_kernels_put_them(monkeypatch):
    """A shape where the model picks FFT: an input holding NaN or inf (or a value near
    overflow) takes the direct kernel, so NaN and inf reach only the windows that read them."""
    attrs, x, f, grad = inputs(128, 14, 14, 32, 64, 5, 5, "SAME", seed=3)
    assert plan_for(x.shape, f.shape) is not None
    for poison in (np.nan, np.inf, -np.inf, 1e30):
        bad_x, bad_g = x.copy(), grad.copy()
        bad_x[3, 4, 5, 6] = poison
        bad_g[7, 1, 2, 3] = poison
        chosen = with_algorithm(monkeypatch, None, attrs, bad_x, f, bad_g)
        direct = with_algorithm(monkeypatch, "direct", attrs, bad_x, f, bad_g)
        for name, a, b in zip(("Conv2D", "BackpropInput", "BackpropFilter"), chosen, direct):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} {poison}")
        assert np.isfinite(chosen[0][0]).all()  # an image without the poisoned cell


@pytest.mark.usefixtures("transforms")
def test_chosen_without_forcing_on_the_convnet_shape(monkeypatch):
    """The default choice runs the FFT kernels (not the direct bits) and stays close."""
    attrs, x, f, grad = inputs(128, 14, 14, 32, 64, 5, 5, "SAME", seed=4)
    chosen = with_algorithm(monkeypatch, None, attrs, x, f, grad)
    fft = with_algorithm(monkeypatch, "fft", attrs, x, f, grad)
    direct = with_algorithm(monkeypatch, "direct", attrs, x, f, grad)
    for a, b, c in zip(chosen, fft, direct):
        assert np.array_equal(a, b) and not np.array_equal(a, c)
        assert_scaled_close(a, c, 5e-6, "chosen against direct")


@pytest.mark.usefixtures("transforms")
def test_split_over_threads_gives_the_same_bits_with_fixed_chunks(monkeypatch):
    """Chunks fixed by size (more than the threads): every thread count runs the same chunks,
    the same transforms and GEMMs, so even the filter gradient's sum is the same bits."""
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 512)  # one image a chunk
    attrs, x, f, grad = inputs(9, 6, 7, 4, 5, 3, 3, "SAME", seed=2)
    one = with_algorithm(monkeypatch, "fft", attrs, x, f, grad, threads=1)
    for threads in (2, 3):
        for a, b in zip(one, with_algorithm(monkeypatch, "fft", attrs, x, f, grad, threads)):
            assert np.array_equal(a, b)


@pytest.mark.usefixtures("transforms")
def test_split_by_thread_count_gives_the_same_bits_on_the_convnets_shape(monkeypatch):
    """Default chunks on the convnet's shape: two or three threads cut the batch differently
    from one, yet every output is the same bits here: each image's transforms are its own,
    the chunks' GEMMs are all large ones, and the filter gradient is one GEMM over the whole
    batch per frequency, split by output channels (the batch's chunks once summed partial
    products: close, not the same). On other shapes only the filter gradient's bits are
    independent of the thread count (the next test)."""
    attrs, x, f, grad = inputs(128, 14, 14, 32, 64, 5, 5, "SAME", seed=6)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    fused = {}
    for threads in (1, 2, 3):
        ctx = KernelContext(attrs, threads)
        fused[threads] = nn_conv._fused_conv2d_backprop(ctx, np.array(x.shape), f, grad, x,
                                                        np.array(f.shape))
    one = results(attrs, x, f, grad, threads=1)
    for threads in (2, 3):
        for a, b in zip(one, results(attrs, x, f, grad, threads)):
            assert np.array_equal(a, b)
        for a, b in zip(fused[1], fused[threads]):
            assert np.array_equal(a, b)
    for a, b in zip(fused[1], one[1:]):
        assert_scaled_close(a, b, 1e-6, "fused against the two kernels")


@pytest.mark.parametrize("case", [(3, 7, 9, 2, 3, 3, 4, "SAME"), (5, 14, 14, 32, 64, 5, 5, "SAME"),
                                  (7, 9, 9, 3, 7, 3, 3, "VALID"), (33, 9, 9, 8, 65, 5, 5, "SAME")])
@pytest.mark.usefixtures("transforms")
def test_the_filter_gradient_has_the_same_bits_on_any_thread_count(case, monkeypatch):
    """Odd batches, channels and kernels, fused (both gradients on one output gradient) and
    alone: the filter gradient's bits do not depend on how the threads cut the batch (review:
    only the convnet's shape was checked). The forward's and the input gradient's may (a
    one-image chunk's product is a gemv): close, as a split MatMul's."""
    attrs, x, f, grad = inputs(*case, seed=2)
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)  # (small cases split too)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    got = {}
    for threads in (1, 2, 3):
        ctx = KernelContext(attrs, threads)
        fused = nn_conv._fused_conv2d_backprop(ctx, np.array(x.shape), f, grad, x,
                                               np.array(f.shape))
        got[threads] = fused + results(attrs, x, f, grad, threads)
    for threads in (2, 3):
        assert np.array_equal(got[threads][1], got[1][1])  # fused
        assert np.array_equal(got[threads][4], got[1][4])  # Conv2DBackpropFilter
        for index in (0, 2, 3):
            assert_scaled_close(got[threads][index], got[1][index], 1e-6, f"{threads} threads")
    assert_scaled_close(got[1][1], got[1][4], 1e-6, "fused against alone")


@pytest.mark.usefixtures("transforms")
async def test_a_session_step_by_fft_matches_the_direct_step(monkeypatch):
    """Through the graph: conv, bias, ReLU (fused by the optimizer), pool, loss and the
    filter's gradient, the convolutions by FFT against the direct kernels."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 10, 10, 6)).astype(np.float32)
    filters = (0.2 * rng.standard_normal((5, 5, 6, 8))).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    second = (0.2 * rng.standard_normal((3, 3, 8, 4))).astype(np.float32)
    values = {}
    for algorithm in ("direct", "fft"):
        monkeypatch.setattr(nn_conv_fft, "FORCE", algorithm)
        with af.Graph().as_default():
            kernel = af.Variable(filters)
            images = af.Variable(x)
            hidden = af.nn.relu(af.nn.bias_add(af.nn.conv2d(images, kernel, 1, "SAME"), bias))
            pooled = af.nn.max_pool(hidden, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
            kernel2 = af.Variable(second)
            loss = af.reduce_sum(af.nn.conv2d(pooled, kernel2, 1, "VALID") ** 2)
            grads = af.gradients(loss, [kernel, images, kernel2])
            async with af.Session() as session:
                await session.run(af.global_variables_initializer())
                values[algorithm] = await session.run([loss] + grads)
    for a, b in zip(values["fft"], values["direct"]):
        assert_scaled_close(np.asarray(a), np.asarray(b), 2e-5, "step")


@pytest.mark.parametrize("case", [FFT_CASES[0], FFT_CASES[4], FFT_CASES[6]])
@pytest.mark.usefixtures("transforms")
def test_fused_backprop_by_fft_matches_the_two_kernels(case, monkeypatch):
    """``_FusedConv2DBackprop`` transforms the gradient once for both outputs."""
    attrs, x, f, grad = inputs(*case, seed=8)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    ctx = KernelContext(attrs, 2)
    dx, dw = nn_conv._fused_conv2d_backprop(ctx, np.array(x.shape), f, grad, x,
                                            np.array(f.shape))
    monkeypatch.setattr(nn_conv_fft, "FORCE", "direct")
    _, direct_dx, direct_dw = results(attrs, x, f, grad, threads=2)
    assert_scaled_close(dx, direct_dx, 5e-6, "input gradient")
    assert_scaled_close(dw, direct_dw, 5e-6, "filter gradient")
    fused_direct = nn_conv._fused_conv2d_backprop(ctx, np.array(x.shape), f, grad, x,
                                                  np.array(f.shape))
    assert np.array_equal(fused_direct[0], direct_dx) and np.array_equal(fused_direct[1],
                                                                         direct_dw)


async def test_the_convnets_second_layer_and_its_gradients_match_tf1(tmp_path):
    """Differential: the model's own choice (FFT at this shape) through a session (forward
    fused with bias and ReLU, both gradients fused) against TF1's oneDNN kernels."""
    from tests.tf1_reference import tf1_run
    rng = np.random.default_rng(10)
    x = rng.standard_normal((32, 14, 14, 32)).astype(np.float32)
    f = (0.1 * rng.standard_normal((5, 5, 32, 64))).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    r = rng.standard_normal((32, 14, 14, 64)).astype(np.float32)
    assert plan_for(x.shape, f.shape) is not None
    with af.Graph().as_default():
        images, kernel = af.constant(x), af.constant(f)
        out = af.nn.relu(af.nn.bias_add(af.nn.conv2d(images, kernel, 1, "SAME"), b))
        grads = af.gradients(af.reduce_sum(out * r), [images, kernel])
        async with af.Session() as session:
            ours = await session.run([out] + grads)
    theirs = tf1_run("""
images, kernel = tf.constant(inputs["x"]), tf.constant(inputs["f"])
out = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(images, kernel, [1, 1, 1, 1], "SAME"),
                                inputs["b"]))
grads = tf.gradients(tf.reduce_sum(out * inputs["r"]), [images, kernel])
with tf.Session() as sess:
    outputs["all"] = sess.run([out] + grads)
""", tmp_path, x=x, f=f, b=b, r=r)["all"]
    for name, mine, reference in zip(("output", "input gradient", "filter gradient"), ours,
                                     theirs):
        assert_scaled_close(np.asarray(mine), reference, 5e-6, name)


# Review (rrevhyg) of the preload (kernels/nn_conv.py ``_fft_preload``): before scipy.fft is
# loaded, a convolution's prepare hook judges its static shapes. An input with an unknown
# channel count made the cost model multiply by None: the plan refused the valid graph
# ("invalid attrs for its kernel: TypeError"). And a dimension unknown at plan time was
# taken at one size (an unknown batch as 1, unknown spatial sizes as "no preload"), where the
# model picks the FFT path for larger batches or for some tiny spatial sizes, which run inline.
async def test_an_input_of_unknown_channels_runs_while_scipy_fft_is_not_loaded(cpu_only,
                                                                              monkeypatch):
    monkeypatch.setattr(nn_conv_fft, "_fft", None)  # (as in a process that never loaded it)
    rng = np.random.default_rng(3)
    value = rng.standard_normal((1, 12, 12, 1)).astype(np.float32)
    filters = rng.standard_normal((11, 11, 1, 1)).astype(np.float32)
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [1, 12, 12, None])
        y = af.nn.conv2d(x, af.constant(filters), 1, "SAME")
        async with af.Session() as session:
            got = await session.run(y, {x: value})
    monkeypatch.setattr(nn_conv_fft, "FORCE", "direct")
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [1, 12, 12, 1])
        y = af.nn.conv2d(x, af.constant(filters), 1, "SAME")
        async with af.Session() as session:
            want = await session.run(y, {x: value})
    assert_scaled_close(got, want, 2e-5, "unknown channels")


@pytest.mark.parametrize("x_shape, f_shape, picked", [
    ([None, None, None, 1], [11, 11, 1, 1], (1, 11, 11, 1)),  # unknown spatial sizes
    ([None, 12, 12, 1], [9, 9, 1, 1], (2, 12, 12, 1)),        # unknown batch: FFT from 2
    ([1, 12, 12, None], [11, 11, None, 1], (1, 12, 12, 1)),   # unknown channels
], ids=["spatial", "batch", "channels"])
async def test_a_dimension_unknown_at_plan_time_is_preloaded_for_every_size_it_may_take(
        x_shape, f_shape, picked, cpu_only, monkeypatch):
    """The cost model sends ``picked`` (a shape each case's placeholders admit, small enough to
    run inline) to the FFT path; the plan's conv node must carry a Preload."""
    monkeypatch.setattr(nn_conv_fft, "_fft", None)  # (as in a process that never loaded it)
    ctx = KernelContext(conv_attrs(1, 1, 1, 1, "SAME"), 1)
    full_filter = tuple(f_shape[:2]) + (picked[3], f_shape[3])
    rows, cols = nn_conv._spatial(ctx, picked, full_filter[:2])
    assert nn_conv_fft._static_plan(ctx, picked, full_filter, rows, cols, np.float32) is not None
    with af.Graph().as_default():
        x = af.placeholder(af.float32, x_shape)
        f = af.placeholder(af.float32, f_shape)
        y = af.nn.conv2d(x, f, 1, "SAME")
        async with af.Session() as session:
            request = session.prepare(y, {x: np.zeros(picked, np.float32),
                                          f: np.zeros(full_filter, np.float32)})
            preloads = [node.op.type for plan in request.compiled.plans
                        for node in plan.preloads]
    assert preloads == ["Conv2D"]


@pytest.mark.parametrize("traced", [False, True], ids=["inline", "traced"])
async def test_a_compiled_runs_pending_preloads_are_one_flag_its_first_step_clears(
        traced, cpu_only, monkeypatch):
    """``CompiledRun.preloading``: set where a plan has Preloads, cleared once they ran; the
    one check of a step on either path (``run_inline``, and ``run`` for a traced step), which
    runs them before the first step only."""
    from asyncflow.exec import local_target
    monkeypatch.setattr(nn_conv_fft, "_fft", None)  # (as in a process that never loaded it)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    preloaded = []
    real = local_target.preload

    async def counted(compiled, *args):
        preloaded.append(compiled)
        return await real(compiled, *args)

    monkeypatch.setattr(local_target, "preload", counted)
    rng = np.random.default_rng(0)
    value = rng.standard_normal([1, 6, 6, 1]).astype(np.float32)
    options = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE) if traced else None
    with af.Graph().as_default(), af.device("/cpu:0"):
        x = af.placeholder(af.float32, [None, 6, 6, 1])
        w = af.constant(rng.standard_normal([3, 3, 1, 1]).astype(np.float32))
        y = af.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")
        async with af.Session() as session:
            request = session.prepare(y, {x: value}, options=options)
            assert request.compiled.preloading and request.inline is not traced
            first = await session.run(y, {x: value}, options=options)
            assert not request.compiled.preloading
            assert not any(plan.preloads for plan in request.compiled.plans)
            for _ in range(2):
                np.testing.assert_array_equal(await session.run(y, {x: value}, options=options),
                                              first)
            assert preloaded == [request.compiled]
            assert not session.prepare(x * 2.0, {x: value}).compiled.preloading


@pytest.mark.parametrize("traced", [False, True], ids=["inline", "traced"])
async def test_a_preload_that_fails_fails_the_step_as_its_node_would_and_runs_again(
        traced, cpu_only, monkeypatch):
    """A load's exception (a broken install, not a missing scipy) fails the step with an OpError
    naming the node, as the node's kernel would (not the bare exception); the Preloads and the
    flag stay pending, so the next step tries again, and one that works clears them."""
    monkeypatch.setattr(nn_conv_fft, "_fft", None)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    tries = []
    real = nn_conv_fft._load_fft

    def broken_twice(ctx):  # (the kernel calls it too, once loaded: then it answers)
        tries.append(threading.current_thread() is threading.main_thread())
        if len(tries) <= 2:
            raise OSError("libopenblas.so: cannot open shared object file")
        return real(ctx)

    monkeypatch.setattr(nn_conv_fft, "_load_fft", broken_twice)  # (the prepare hook's)
    rng = np.random.default_rng(0)
    size = 8 if traced else 7  # (a graph of its own: plans are shared by equal graphs)
    value = rng.standard_normal([1, size, size, 1]).astype(np.float32)
    options = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE) if traced else None
    with af.Graph().as_default(), af.device("/cpu:0"):
        x = af.placeholder(af.float32, [None, size, size, 1])
        w = af.constant(rng.standard_normal([3, 3, 1, 1]).astype(np.float32))
        y = af.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME", name="convolved")
        async with af.Session() as session:
            request = session.prepare(y, {x: value}, options=options)
            assert request.compiled.preloading
            for attempt in (1, 2):
                with pytest.raises(af.errors.UnknownError, match="cannot open shared") as info:
                    await session.run(y, {x: value}, options=options)
                assert info.value.op is y.op and "convolved" in info.value.message
                assert "Conv2D" in info.value.message and "CPU:0" in info.value.message
                assert isinstance(info.value.__cause__, OSError)
                assert len(tries) == attempt and request.compiled.preloading
            first = await session.run(y, {x: value}, options=options)
            assert not request.compiled.preloading and nn_conv_fft._fft
            assert tries[:3] == [False] * 3  # each try on a worker thread, then the kernel's
            np.testing.assert_array_equal(await session.run(y, {x: value}, options=options),
                                          first)


async def test_a_preload_that_fails_on_a_worker_fails_its_registration_naming_the_node(
        monkeypatch):
    """On a worker the Preloads run at RegisterGraph: a load's exception fails the
    registration with the node's OpError (as a graph that does not build), and the next run
    registers again and tries again."""
    import trio
    monkeypatch.setattr(nn_conv_fft, "_fft", None)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    tries = []

    def broken(ctx):
        tries.append(ctx)
        raise OSError("libopenblas.so: cannot open shared object file")

    monkeypatch.setattr(nn_conv_fft, "_load_fft", broken)
    spec = af.ClusterSpec({"worker": ["inprocess:7391"]})
    graph = af.Graph()
    with graph.as_default(), af.device("/job:worker/task:0/cpu:0"):
        x = af.placeholder(af.float32, [None, 9, 9, 1])
        w = af.constant(np.ones([3, 3, 1, 1], np.float32))
        y = af.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME", name="convolved")
    async with trio.open_nursery() as nursery:
        await nursery.start(af.Server(spec, "worker", 0).serve)
        async with af.Session(graph=graph, cluster=spec) as sess:
            for attempt in (1, 2):
                with pytest.raises(af.errors.UnknownError, match="cannot open shared") as info:
                    await sess.run(y, {x: np.ones([1, 9, 9, 1], np.float32)})
                assert "RegisterGraph" in info.value.message, info.value.message
                assert "Conv2D 'convolved'" in info.value.message, info.value.message
                assert len(tries) == attempt
        nursery.cancel_scope.cancel()



async def test_concurrent_first_steps_each_load_and_a_cancelled_one_finishes_its_load(
        cpu_only, monkeypatch):
    """A first step cancelled while its load runs on the worker thread: the load finishes
    (trio's worker threads are not abandoned) and counts, the flag is cleared, and no later
    step loads again (never retried, never half done). Two first steps of another compiled
    run at once: each runs the (idempotent) load on a worker thread before its kernels; both
    compute, the flag ends cleared."""
    import trio
    monkeypatch.setattr(nn_conv_fft, "_fft", None)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    loads, real, scope = [], nn_conv_fft._load_fft, trio.CancelScope()

    def load(ctx):  # (the kernels call it too, on the loop's thread: not counted)
        if threading.current_thread() is not threading.main_thread():
            loads.append(ctx)
            if len(loads) == 1:
                trio.from_thread.run_sync(scope.cancel)  # the step's caller gives up now
        return real(ctx)

    monkeypatch.setattr(nn_conv_fft, "_load_fft", load)
    rng = np.random.default_rng(0)
    with af.Graph().as_default(), af.device("/cpu:0"):
        x = af.placeholder(af.float32, [None, None, None, 1])
        w = af.constant(rng.standard_normal([3, 3, 1, 1]).astype(np.float32))
        y = af.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")
        value = rng.standard_normal([1, 11, 11, 1]).astype(np.float32)  # (a graph of its own)
        async with af.Session() as session:
            request = session.prepare(y, {x: value})
            assert request.compiled.preloading
            with scope:  # (it may still end: an inline run reaches no checkpoint after it)
                await session.run(y, {x: value})
            assert scope.cancel_called and len(loads) == 1
            assert not request.compiled.preloading
            first = await session.run(y, {x: value})
            assert len(loads) == 1
            monkeypatch.setattr(nn_conv_fft, "_fft", None)  # (for the second compiled run)
            z = y * 2.0
            other = session.prepare(z, {x: value})
            assert other.compiled.preloading
            results = []

            async def step():
                results.append(await session.run(z, {x: value}))

            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(step)
            assert len(loads) == 3 and not other.compiled.preloading
            np.testing.assert_array_equal(results[0], first * 2.0)
            np.testing.assert_array_equal(results[1], first * 2.0)


@pytest.mark.parametrize("period", [5, 8, 16])
def test_read_out_by_runs_matches_the_index_read_out(period):
    """``Plan.read_out`` copies the cells at (i + shift) mod P by at most two slices per
    dimension: the bits of the ``np.ix_`` read-out it replaced, for every shift (negative,
    wrapping, past one period) and count up to the period, into a transposed view as the
    forward's and the input gradient's chunks pass it."""
    rng = np.random.default_rng(period)
    plan = nn_conv_fft.Plan((1, period, period, 1), (2, 2, 1, 1),
                            (period - 1, 0, 0), (period - 1, 0, 0))
    assert (plan.p_h, plan.p_w) == (period, period)
    planes = rng.standard_normal((period, period, 3, 2)).astype(np.float32)
    for count_h, count_w in ((period, period), (period - 1, 1), (1, period), (3, 2)):
        for shift_h in range(-period - 1, period + 2):
            shift_w = 2 - shift_h
            index = np.ix_((np.arange(count_h) + shift_h) % period,
                           (np.arange(count_w) + shift_w) % period)
            out = np.full((3, count_h, count_w, 2), np.nan, dtype=np.float32)
            plan.read_out(planes, shift_h, shift_w, out.transpose(1, 2, 0, 3))
            assert out.tobytes() == planes[index].transpose(2, 0, 1, 3).tobytes()


def given_spectra_against_own(ctx, x, f, grad, bias, monkeypatch, transform_at, unused):
    """The fused forward keeping its spectra (its output ``_FusedConv2D``'s bits), then the
    fused backprop given them, ``transform_at`` (module, name: the form's transform) spied so
    that only ``grad`` is transformed again and ``unused`` (the filter's transform) removed:
    the bits of the backprop that computes both itself. Returns the plan and the spectra."""
    out, spectra = nn_conv._fused_conv2d_with_spectra(ctx, x, f, bias)
    rows, cols = nn_conv._spatial(ctx, x.shape, f.shape[:2])
    plan = nn_conv_fft.choose(ctx, (x, f), x.shape, f.shape, rows, cols, x.dtype)
    assert spectra.shape == (sum(nn_conv_fft.spectra_sizes(plan, *x.shape[::3], f.shape[3])),)
    assert np.array_equal(out, nn_conv._fused_conv2d(ctx, x, f, bias)[0])
    sizes, f_sizes = np.array(x.shape), np.array(f.shape)
    module, name = transform_at
    transformed, transform = [], getattr(module, name)

    def spy(array, plan, *args, **kwargs):
        transformed.append(array.base is grad)
        return transform(array, plan, *args, **kwargs)
    with monkeypatch.context() as patch:  # given: neither x nor the filter transformed again
        patch.setattr(module, name, spy)
        patch.setattr(*unused, None)
        given = nn_conv._fused_conv2d_backprop_with_spectra(ctx, sizes, f, grad, x, f_sizes,
                                                            spectra)
    assert transformed and all(transformed)
    own = nn_conv._fused_conv2d_backprop(ctx, sizes, f, grad, x, f_sizes)
    for a, b in zip(given, own):
        assert a.tobytes() == b.tobytes()
    return plan, spectra


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("case", FFT_CASES)
def test_the_backprop_given_the_forwards_spectra_has_the_bits_of_its_own(case, threads,
                                                                         monkeypatch):
    """``_FusedConv2DWithSpectra`` keeps the input's spectra and the filter's matrix;
    ``_FusedConv2DBackpropWithSpectra`` given them (the filter's matrix transposed, the
    transforms not run again) returns the bits of the backprop that computes both itself,
    and the forward's output is ``_FusedConv2D``'s."""
    attrs, x, f, grad = inputs(*case, seed=11)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    monkeypatch.setattr(dft_gemm, "MAX_PERIOD", 0)  # (pocketfft's; GEMM's: test_dft_gemm.py)
    bias = np.random.default_rng(12).standard_normal(f.shape[3]).astype(np.float32)
    ctx = KernelContext({**attrs, "fused_ops": ("BiasAdd", "Relu")}, threads)
    plan, spectra = given_spectra_against_own(ctx, x, f, grad, bias, monkeypatch,
                                              (nn_conv_fft, "_forward"),
                                              (nn_conv_fft, "_filter_spectrum"))
    transposed = nn_conv_fft._transposed(
        ctx, spectra[nn_conv_fft.spectra_sizes(plan, *x.shape[::3], f.shape[3])[0]:]
        .reshape(plan.freqs, 2 * f.shape[2], 2 * f.shape[3]))
    assert np.array_equal(transposed, nn_conv_fft._filter_spectrum(ctx, f, plan, False, True))


@pytest.mark.parametrize("p_h, p_w, kernel, top, left", [
    (16, 16, (5, 5), 2, 2), (15, 9, (6, 3), 2, 1), (8, 7, (3, 4), 0, 0), (5, 6, (5, 2), 4, 1)])
def test_the_taps_matrix_is_the_inverse_transform_read_at_the_filters_cells(p_h, p_w, kernel,
                                                                           top, left):
    """``_taps_matrix`` on a half spectrum (real parts, then imaginary ones) gives what the
    whole inverse transform (irfft2) gives at the cells (i - top, j - left) mod P, odd and
    even periods (an even P_w's last column counted once, its imaginary part not at all)."""
    rng = np.random.default_rng(13)
    half = p_w // 2 + 1
    spectrum = rng.standard_normal((p_h, half, 3)) + 1j * rng.standard_normal((p_h, half, 3))
    planes = np.fft.irfft2(spectrum, s=(p_h, p_w), axes=(0, 1))
    rows = (np.arange(kernel[0]) - top) % p_h
    cols = (np.arange(kernel[1]) - left) % p_w
    expected = planes[rows][:, cols]
    matrix = dft_gemm.taps_matrix(p_h, p_w, *kernel, top, left, np.dtype(np.float64))
    parts = np.stack([spectrum.real, spectrum.imag]).reshape(2 * p_h * half, 3)
    got = (matrix @ parts).reshape(*kernel, 3)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13)
    assert not matrix.flags.writeable


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", [FFT_CASES[0], FFT_CASES[3], FFT_CASES[5], FFT_CASES[6]])
def test_the_filter_spectrum_by_one_gemm_matches_the_transform(case, dtype):
    """``_filter_spectrum`` (a DFT matrix by the filter, then the four parts copied) against
    numpy's rfft2 of the zero-padded filter, assembled as the complex GEMMs take it (row 2c:
    w, row 2c+1: i*w; conjugated or transposed as asked), odd and even periods, both
    dtypes: close (another summation order than a transform's), float32 within 1e-6 of
    the spectrum's scale."""
    attrs, x, f, _ = inputs(*case, seed=14, dtype=dtype)
    ctx = KernelContext(attrs, 2)
    rows, cols = nn_conv._spatial(ctx, x.shape, f.shape[:2])
    plan = nn_conv_fft.Plan(x.shape, f.shape, rows, cols)
    spectrum = np.fft.rfft2(f.astype(np.float64), s=(plan.p_h, plan.p_w), axes=(0, 1))
    spectrum = spectrum.reshape(plan.freqs, f.shape[2], f.shape[3])
    for conjugate, transpose in ((True, False), (False, True)):
        w = np.conjugate(spectrum) if conjugate else spectrum
        w = w.transpose(0, 2, 1) if transpose else w
        expected = np.empty(w.shape[:2] + (2,) + w.shape[2:], np.complex128)
        expected[:, :, 0], expected[:, :, 1] = w, 1j * w
        expected = expected.view(np.float64).reshape(plan.freqs, 2 * w.shape[1], 2 * w.shape[2])
        got = nn_conv_fft._filter_spectrum(ctx, f, plan, conjugate, transpose)
        assert got.dtype == dtype
        assert_scaled_close(got, expected.astype(dtype), 1e-6 if dtype == np.float32 else 1e-13,
                            f"conjugate {conjugate}, transpose {transpose}")
