"""kernels/nn_conv_fft.py: the fused Conv2D's read-out, bias and Relu as one compiled pass
(``_read_out_bias``) against the numpy form (``read_out`` then ``epilogue.fused_epilogue``,
``jit.ENABLED`` off): the same bits, signed zeros and NaN included, on odd sizes, both
paddings, float32 and float64, split over threads; and the loop warmed by the convolution's
prepare hook, never on the event loop's thread. Also the inputs' check (``_tame``) as one
compiled counting pass against numpy's max and min: the same answer on every poison and
boundary value, split over 1-3 threads."""
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


def tame_inputs(dtype, size):
    """``(array, expected)`` pairs: clean values, each poison at the ends and in the middle,
    and the values either side of the limit (the float64 comparison numpy's form makes)."""
    limit = 1e15 if dtype == np.float32 else 1e150
    below = np.nextafter(dtype(limit), dtype(0))  # (float32: 1e15 itself rounds below it)
    above = np.nextafter(dtype(limit) if dtype(limit) >= limit else below, dtype(np.inf))
    while float(above) < limit:
        above = np.nextafter(above, dtype(np.inf))
    payload = np.array([np.nan], dtype)
    payload.view({4: np.uint32, 8: np.uint64}[payload.itemsize])[0] |= 0x1234
    clean = np.random.default_rng(5).standard_normal(size).astype(dtype)
    yield clean, True
    for value, expected in ((np.nan, False), (payload[0], False), (np.inf, False),
                            (-np.inf, False), (below, True), (-below, True),
                            (above, False), (-above, False), (-0.0, True)):
        for at in (0, size // 2, size - 1):
            poisoned = clean.copy()
            poisoned[at] = value
            yield poisoned, expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_tame_check_loop_answers_as_numpys_max_and_min(monkeypatch, dtype, threads):
    """``_tame`` by ``_count_tame`` (split over the threads: ``MIN_SPLIT_WORK`` 0) against
    the numpy form (``jit.ENABLED`` off) and the expected answer, on a 4-d array as the
    convolutions pass, odd sizes; a non-contiguous view takes numpy's form."""
    monkeypatch.setattr(intra_op, "MIN_SPLIT_WORK", 0)
    ctx = KernelContext(attrs("SAME", FUSED[0]), threads)
    ctx.xp = np
    calls = []
    counting = nn_conv_fft._count_tame

    def count(values, limit):
        calls.append(values.shape[0])
        return counting(values, limit)
    monkeypatch.setattr(nn_conv_fft, "_count_tame", count)
    for size in (1, 7, 3 * 5 * 7 * 2):
        for flat, expected in tame_inputs(dtype, size):
            array = flat.reshape((1, 1, 1, size) if size < 8 else (3, 5, 7, 2))
            calls.clear()
            looped = nn_conv_fft._tame(ctx, array)
            assert sum(calls) == size and len(calls) == min(size, threads)
            with monkeypatch.context() as patch:
                patch.setattr(jit, "ENABLED", False)
                reference = nn_conv_fft._tame(ctx, array)
            assert looped is reference is expected, (flat, expected)
            if size > 8:  # a strided view: numpy's form, no loop call
                view = array[:, ::2]
                limit = 1e15 if dtype == np.float32 else 1e150
                calls.clear()
                assert nn_conv_fft._tame(ctx, view) is bool(
                    (np.abs(view.astype(np.float64)) < limit).all())
                assert not calls


def test_the_warm_up_compiles_the_tame_checks_signatures():
    """``_warm_read_out`` compiles ``_count_tame`` for what ``_tame`` passes (a read-only
    1-d slice, a float limit), both dtypes: no compile at a step's first check."""
    nn_conv_fft._warm_read_out()
    compiled = set(nn_conv_fft._count_tame._compiled.signatures)
    ctx = KernelContext(attrs("SAME", FUSED[0]), 2)
    ctx.xp = np
    for dtype in (np.float32, np.float64):
        array = np.ones((2, 3, 4, 5), dtype)
        assert nn_conv_fft._tame(ctx, array)
        array.flags.writeable = False
        assert nn_conv_fft._tame(ctx, array)
    assert set(nn_conv_fft._count_tame._compiled.signatures) == compiled
