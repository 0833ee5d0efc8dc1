"""kernels/nn_conv_fft.py: the fused Conv2D's read-out, bias and Relu as one compiled pass
(``_read_out_bias``) against the numpy form (``read_out`` then ``math.fused_epilogue``,
``jit.ENABLED`` off): the same bits, signed zeros and NaN included, on odd sizes, both
paddings, float32 and float64, split over threads; and the loop warmed by the convolution's
prepare hook, never on the event loop's thread."""
import threading

import numpy as np
import pytest

from asyncflow.kernels import dft_gemm, intra_op, jit, nn_conv, nn_conv_fft

from test_conv_kernels import KernelContext  # same folder

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (or ASYNCFLOW_JIT=0)")

# (n, h, w, c, o, kh, kw, padding): the convnet's second layer (batch cut), odd sizes and
# windows that wrap the period on either side.
CASES = [
    (3, 14, 14, 32, 64, 5, 5, "SAME"),
    (2, 7, 9, 3, 5, 3, 4, "SAME"),
    (3, 11, 6, 2, 7, 4, 2, "VALID"),
    (1, 5, 5, 4, 3, 5, 5, "SAME"),
    (4, 9, 8, 1, 2, 2, 3, "VALID"),
]
FUSED = [("BiasAdd",), ("BiasAdd", "Relu")]


@pytest.fixture(autouse=True)
def pocketfft_transforms(monkeypatch):
    """These read-outs are pocketfft's form's (by GEMM: tests/ops/test_dft_gemm.py)."""
    monkeypatch.setattr(dft_gemm, "MAX_PERIOD", 0)


def attrs(padding, fused):
    return {"strides": (1, 1, 1, 1), "dilations": (1, 1, 1, 1), "padding": padding,
            "data_format": "NHWC", "fused_ops": fused}


def inputs(case, dtype, seed=0):
    n, h, w, c, o, kh, kw, _ = case
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, h, w, c)).astype(dtype),
            rng.standard_normal((kh, kw, c, o)).astype(dtype),
            rng.standard_normal(o).astype(dtype))


def both_forms(monkeypatch, ctx, x, f, bias):
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    looped = nn_conv._fused_conv2d(ctx, x, f, bias)[0]
    with monkeypatch.context() as patch:
        patch.setattr(jit, "ENABLED", False)
        reference = nn_conv._fused_conv2d(ctx, x, f, bias)[0]
    return looped, reference


def assert_same_bits(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    unsigned = {4: np.uint32, 8: np.uint64}[actual.itemsize]
    assert np.array_equal(actual.view(unsigned), expected.view(unsigned))


@pytest.fixture
def counted(monkeypatch):
    """The loop's calls, counted (the tests compare the loop, not the numpy form twice)."""
    calls = []
    loop = nn_conv_fft._read_out_bias

    def counting(*args):
        calls.append(args[-1].shape)
        return loop(*args)
    monkeypatch.setattr(nn_conv_fft, "_read_out_bias", counting)
    return calls


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("case", CASES)
def test_the_loop_gives_the_numpy_forms_bits(monkeypatch, counted, case, fused, threads):
    monkeypatch.setattr(intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(intra_op, "CHUNK_BYTES", 512)
    x, f, bias = inputs(case, np.float32)
    looped, reference = both_forms(monkeypatch, KernelContext(attrs(case[-1], fused), threads),
                                   x, f, bias)
    assert_same_bits(looped, reference)
    assert counted and sum(shape[0] for shape in counted) == x.shape[0]
    if fused[-1] == "Relu":
        assert (looped >= 0).all() and not np.signbit(looped).any()


@pytest.mark.parametrize("case", CASES[:3])
def test_the_loop_gives_the_numpy_forms_bits_in_float64(monkeypatch, counted, case):
    x, f, bias = inputs(case, np.float64, seed=1)
    looped, reference = both_forms(monkeypatch, KernelContext(attrs(case[-1], FUSED[1]), 2),
                                   x, f, bias)
    assert_same_bits(looped, reference)
    assert counted


@pytest.mark.parametrize("fused", FUSED)
def test_nan_inf_and_signed_zeros_in_the_bias(monkeypatch, counted, fused):
    """The bias is not checked by ``_tame`` (only the transformed arrays are): NaN (with a
    payload), inf and -0 in it give what the numpy form gives, the Relu's zeros +0."""
    x, f, bias = inputs(CASES[1], np.float32, seed=2)
    bias[0] = np.float32(np.nan)
    bias[1] = np.inf
    bias[2] = -np.inf
    bias[3] = -0.0
    bias.view(np.uint32)[4] = 0x7FC01234  # a quiet NaN with a payload
    looped, reference = both_forms(monkeypatch, KernelContext(attrs("SAME", fused), 1),
                                   x, f, bias)
    assert_same_bits(looped, reference)
    assert np.isnan(looped[..., 0]).all() and counted


def test_other_epilogues_keep_the_numpy_form(monkeypatch, counted):
    """A Sigmoid, a bias of another dtype than the output, jit off: the loop steps aside."""
    x, f, bias = inputs(CASES[1], np.float32)
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    nn_conv._fused_conv2d(KernelContext(attrs("SAME", ("BiasAdd", "Sigmoid")), 1), x, f, bias)
    plain = KernelContext(attrs("SAME", ("BiasAdd",)), 1)
    assert nn_conv_fft._looped_epilogue(plain, (("BiasAdd",), bias.astype(np.float64)),
                                        np.empty((1, 1, 1, 1), np.float32)) is None
    monkeypatch.setattr(jit, "ENABLED", False)
    nn_conv._fused_conv2d(plain, x, f, bias)
    assert not counted


def test_the_prepare_hook_warms_the_loop_off_the_event_loop(monkeypatch):
    """``nn_conv_fft.preload`` asks for the loop's warm-up where scipy.fft is loaded but the
    loop is not warm, and its load runs it on the calling (worker) thread."""
    ctx = KernelContext(attrs("SAME", FUSED[1]), 1)
    ctx.xp = np
    nn_conv_fft._load_fft(ctx)
    monkeypatch.setattr(jit, "_warmed", set())
    assert nn_conv_fft.may_preload(ctx)
    geometry = ((128, 14, 14, 32), (5, 5, 32, 64), (14, 2, 2), (14, 2, 2))
    preload = nn_conv_fft.preload(ctx, [geometry], np.float32)
    assert preload is not None
    threads = []
    monkeypatch.setattr(nn_conv_fft, "_warm_read_out",
                        lambda: threads.append(threading.current_thread()))
    preload = nn_conv_fft.preload(ctx, [geometry], np.float32)
    worker = threading.Thread(target=preload.load, args=(ctx,))
    worker.start()
    worker.join()
    assert threads == [worker]
    assert not nn_conv_fft.may_preload(ctx)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_warm_up_compiles_what_the_kernel_calls(monkeypatch, dtype):
    """``_warm_read_out`` (the prepare hook's) compiles the signature the kernel calls, a
    variable's read-only bias included (before, a read-only bias was another signature,
    compiled at the step's first call)."""
    nn_conv_fft._warm_read_out()
    compiled = set(nn_conv_fft._read_out_bias._compiled.signatures)
    for writeable in (False, True):
        for fused in FUSED:
            x, f, bias = inputs(CASES[0], dtype)
            bias.flags.writeable = f.flags.writeable = writeable
            both_forms(monkeypatch, KernelContext(attrs("SAME", fused), 2), x, f, bias)
    assert set(nn_conv_fft._read_out_bias._compiled.signatures) == compiled
