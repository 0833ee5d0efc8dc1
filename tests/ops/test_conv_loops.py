"""kernels/nn_conv_loops.py: the compiled one-input-channel convolution loops against the
numpy form they stand in for (``jit.ENABLED`` off), against finite differences, split over
threads, with NaN and inf.

Tolerances: the forward sums the taps in the GEMM's order (sequential fused multiply-adds),
so it differs from the numpy form by at most a few float32 roundings of the sum of |x w|
(checked: 1e-5 of that scale); the filter gradient sums each image's pixels, then the
images, where the GEMM sums over the chunk's pixels in BLAS's blocks: 1e-5 of sum |x g|.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import asyncflow as af
from asyncflow.kernels import jit, nn_conv, nn_conv_loops

from test_conv_kernels import KernelContext, small_chunks

assert small_chunks  # a fixture, used by name below

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (or ASYNCFLOW_JIT=0)")


def attrs_of(sh, sw, dh, dw, padding, fused=None):
    attrs = {"strides": (1, sh, sw, 1), "dilations": (1, dh, dw, 1), "padding": padding}
    if fused:
        attrs["fused_ops"] = fused
    return attrs


# (n, h, w, o, kh, kw, sh, sw, dh, dw, padding): odd sizes, both paddings, strides,
# dilations, a window as large as the input, 32 and 64 output channels.
CASES = [
    (5, 28, 28, 32, 5, 5, 1, 1, 1, 1, "SAME"),   # the convnet's first layer
    (3, 9, 7, 32, 3, 3, 1, 1, 1, 1, "VALID"),
    (4, 11, 13, 64, 5, 3, 2, 3, 1, 1, "SAME"),
    (2, 12, 10, 32, 3, 3, 1, 1, 2, 2, "VALID"),
    (3, 5, 5, 32, 5, 5, 1, 1, 1, 1, "VALID"),
    (2, 7, 8, 32, 4, 2, 3, 2, 2, 1, "SAME"),
    (1, 1, 1, 32, 1, 1, 1, 1, 1, 1, "SAME"),
]
FUSED = [None, ("BiasAdd",), ("BiasAdd", "Relu")]


def inputs(case, seed=0, dtype=np.float32):
    n, h, w, o, kh, kw = case[:6]
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, h, w, 1)).astype(dtype),
            rng.standard_normal((kh, kw, 1, o)).astype(dtype),
            rng.standard_normal(o).astype(dtype))


def forward(ctx, x, f, bias):
    if "fused_ops" in ctx.attrs:
        return nn_conv._fused_conv2d(ctx, x, f, bias)[0]
    return nn_conv._conv2d(ctx, x, f)[0]


def filter_grad(ctx, x, f, grad):
    return nn_conv._conv2d_backprop_filter(ctx, x, np.array(f.shape), grad)[0]


def numpy_form(monkeypatch, fn, *args):
    with monkeypatch.context() as patch:
        patch.setattr(jit, "ENABLED", False)
        return fn(*args)


def scales(ctx, x, f, grad):
    """Elementwise sums of |terms|: the forward's |x| * |f| and the filter gradient's |x| |g|,
    by the numpy form on absolute values (the tolerances' scales)."""
    with_abs = KernelContext({k: v for k, v in ctx.attrs.items() if k != "fused_ops"}, 1)
    jit_was, jit.ENABLED = jit.ENABLED, False
    try:
        return (nn_conv._conv2d(with_abs, np.abs(x), np.abs(f))[0],
                filter_grad(with_abs, np.abs(x), f, np.abs(grad)))
    finally:
        jit.ENABLED = jit_was


def check(monkeypatch, case, fused, dtype, threads, seed=0):
    x, f, bias = inputs(case, seed, dtype)
    ctx = KernelContext(attrs_of(*case[6:], fused), threads)
    out = forward(ctx, x, f, bias)
    reference = numpy_form(monkeypatch, forward, ctx, x, f, bias)
    grad = np.random.default_rng(seed + 1).standard_normal(out.shape).astype(dtype)
    dw = filter_grad(ctx, x, f, grad)
    dw_reference = numpy_form(monkeypatch, filter_grad, ctx, x, f, grad)
    eps = np.finfo(dtype).eps
    out_scale, dw_scale = scales(ctx, x, f, grad)
    assert out.dtype == reference.dtype == dtype and dw.dtype == dtype
    assert np.all(np.abs(out - reference) <= 100 * eps * (out_scale + np.abs(bias)))
    assert np.all(np.abs(dw - dw_reference) <= 100 * eps * dw_scale)
    return out, dw


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("case", CASES)
def test_loops_match_the_numpy_form(monkeypatch, small_chunks, case, fused, threads):
    check(monkeypatch, case, fused, np.float32, threads)


@pytest.mark.parametrize("case", CASES[:4])
def test_loops_match_the_numpy_form_in_float64(monkeypatch, small_chunks, case):
    check(monkeypatch, case, ("BiasAdd", "Relu"), np.float64, 2)


@settings(max_examples=25, deadline=None)
@given(st.tuples(st.integers(1, 4), st.integers(1, 12), st.integers(1, 12),
                 st.sampled_from([32, 64]), st.integers(1, 5), st.integers(1, 5),
                 st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2),
                 st.sampled_from(["SAME", "VALID"])),
       st.sampled_from(FUSED), st.integers(0, 2 ** 16))
def test_loops_match_the_numpy_form_on_random_geometries(case, fused, seed):
    n, h, w, o, kh, kw, sh, sw, dh, dw, padding = case
    if padding == "VALID" and ((kh - 1) * dh >= h or (kw - 1) * dw >= w):
        return  # (an empty output: the kernels return before any loop)
    with pytest.MonkeyPatch.context() as patch:
        check(patch, case, fused, np.float32, 2, seed)


def test_the_loops_run_for_the_cases_above():
    """``forward`` and ``filter_grad`` apply (the tests above compare the loops, not the
    numpy form with itself), and step aside where they must."""
    x, f, bias = inputs(CASES[0])
    ctx = KernelContext(attrs_of(1, 1, 1, 1, "SAME"), 1)
    geometry = nn_conv._spatial(ctx, x.shape, f.shape[:2])
    out = np.empty((5, 28, 28, 32), np.float32)
    assert nn_conv_loops.forward(ctx, x, f, *geometry, out, (("BiasAdd", "Relu"), bias))
    assert nn_conv_loops.filter_grad(ctx, x, out, f.shape, *geometry) is not None
    assert not nn_conv_loops.forward(ctx, x, f, *geometry, out, (("BiasAdd", "Tanh"), bias))
    assert not nn_conv_loops.forward(ctx, x, f[..., :16], *geometry, out[..., :16])
    assert not nn_conv_loops.forward(ctx, x.astype(np.float16), f.astype(np.float16),
                                     *geometry, out.astype(np.float16))
    three = np.repeat(x, 3, axis=3)
    assert not nn_conv_loops.forward(ctx, three, np.repeat(f, 3, axis=2), *geometry, out)
    assert nn_conv_loops.filter_grad(ctx, three, out, (5, 5, 3, 32), *geometry) is None


@pytest.mark.parametrize("case", CASES[:3])
def test_split_over_threads_gives_the_same_bits(small_chunks, case):
    x, f, bias = inputs(case, seed=3)
    results = []
    for threads in (1, 2, 3):
        ctx = KernelContext(attrs_of(*case[6:], ("BiasAdd", "Relu")), threads)
        out = forward(ctx, x, f, bias)
        results.append((out, filter_grad(ctx, x, f, out - 0.5)))
    for out, dw in results[1:]:
        assert np.array_equal(out, results[0][0]) and np.array_equal(dw, results[0][1])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("fused", FUSED)
def test_nan_and_inf_stay_in_their_windows(monkeypatch, small_chunks, fused):
    """A NaN or inf input reaches exactly the outputs (and filter taps) the numpy form's
    patches carry it to; an inf filter tap times a padded zero is NaN in both."""
    for case in CASES[:4]:
        x, f, bias = inputs(case, seed=4)
        flat = x.reshape(-1)
        flat[::37], flat[5::53], flat[7::61] = np.nan, np.inf, -np.inf
        ctx = KernelContext(attrs_of(*case[6:], fused), 2)
        out = forward(ctx, x, f, bias)
        reference = numpy_form(monkeypatch, forward, ctx, x, f, bias)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(reference))
        np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-4)
        grad = np.ones_like(out)
        np.testing.assert_array_equal(
            np.isnan(filter_grad(ctx, x, f, grad)),
            np.isnan(numpy_form(monkeypatch, filter_grad, ctx, x, f, grad)))
    x, f, bias = inputs(CASES[0], seed=5)
    f[0, 0, 0, 3] = np.inf
    ctx = KernelContext(attrs_of(1, 1, 1, 1, "SAME"), 1)
    np.testing.assert_array_equal(
        np.isnan(forward(ctx, x, f, bias)),
        np.isnan(numpy_form(monkeypatch, forward, ctx, x, f, bias)))


def test_relu_gives_positive_zero_and_keeps_nan(monkeypatch):
    """numpy's maximum(x, 0) gives +0 for -0 and x for NaN: the loop's Relu does too."""
    x, f, bias = inputs(CASES[1], seed=6)
    x[:] = 0.0
    bias[:4] = -0.0
    bias[4:8] = np.nan
    ctx = KernelContext(attrs_of(1, 1, 1, 1, "VALID", ("BiasAdd", "Relu")), 1)
    out = forward(ctx, x, -np.abs(f), bias)
    reference = numpy_form(monkeypatch, forward, ctx, x, -np.abs(f), bias)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(reference))
    np.testing.assert_array_equal(out, reference)
    assert np.isnan(out[..., 4:8]).all() and not np.signbit(out[..., :4]).any()


@pytest.mark.parametrize("padding, strides, dilations", [("SAME", 1, 1), ("VALID", [2, 1], 2)])
async def test_gradients_match_finite_differences(padding, strides, dilations):
    """float64, one input channel, 32 outputs: the graph's Conv2D and its filter gradient
    take the loops."""
    from gradcheck import check_gradients
    rng = np.random.default_rng(7)
    x, f = rng.standard_normal((2, 6, 5, 1)), rng.standard_normal((3, 2, 1, 32))
    await check_gradients(lambda a, b: af.nn.relu(af.nn.conv2d(
        a, b, strides, padding, dilations=dilations) + 0.25), [x, f])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_warm_up_compiles_what_the_kernels_call(small_chunks, dtype):
    """The prepare hook's warm-up (``nn_conv_loops.preload``) compiles the signatures the
    kernels then call, whatever the arrays' flags: a variable's filter and bias are read-only
    (before, a 32-channel filter went in as a read-only view, another signature, compiled at
    the step's first call: 15 s on the event loop's thread for a small convolution)."""
    nn_conv_loops._WARM[np.dtype(dtype)]()
    loops = (nn_conv_loops._forward, nn_conv_loops._filter_grad)
    compiled = [set(loop._compiled.signatures) for loop in loops]
    for case in (CASES[0], CASES[2]):
        for writeable in (False, True):
            x, f, bias = inputs(case, dtype=dtype)
            for fused in FUSED:
                ctx = KernelContext(attrs_of(*case[6:], fused), 2)
                for array in (x, f, bias):
                    array.flags.writeable = writeable
                grad = forward(ctx, x, f, bias)
                grad.flags.writeable = writeable
                filter_grad(ctx, x, f, grad)
    assert [set(loop._compiled.signatures) for loop in loops] == compiled
