"""A pooled zero's sign where +0 and -0 tie: the window's first zero cell (row-major) keeps it,
as in TF1's CPU MaxPool, for MaxPool and ``_MaxPoolWithTaps`` alike, whatever the intra-op
thread count, the chunk size, the channel count and wherever a NaN or -inf sends a chunk down
the ``fmax`` path (``kernels/pool_ties.py``). Checked against a loop over the windows and,
where TensorFlow is found (``ASYNCFLOW_TF_PYTHON``), against TF1 itself."""
import itertools

import ml_dtypes
import numpy as np
import pytest

from asyncflow.exec.devices import Device
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.kernels import nn_conv, nn_pool_taps, pool_ties
from tf1_reference import tf1_run

# (ksize, strides, padding)
WINDOWS = [((2, 2), (2, 2), "VALID"), ((3, 3), (1, 1), "SAME"), ((3, 1), (2, 1), "VALID"),
           ((2, 3), (1, 2), "SAME")]
CONFIGS = [(1, 4 << 20), (2, 4 << 20), (2, 512), (3, 96), (1, 64)]  # (threads, CHUNK_BYTES)


class KernelContext:
    def __init__(self, ksize, strides, padding, threads):
        self.attrs = {"ksize": (1, *ksize, 1), "strides": (1, *strides, 1), "padding": padding}
        self.name = "pool"
        self.xp = np
        self.device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, threads,
                             intra_op_threads=threads)


def signed_zeros(seed, shape, dtype, nans=3, minus_inf=0):
    """Cells of -1, +0, -0 and 1 (mostly zeros), with a few NaN and -inf here and there."""
    rng = np.random.default_rng(seed)
    x = rng.choice(np.array([-1.0, 0.0, -0.0, 0.0, -0.0, 1.0], dtype), size=shape)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, nans, replace=False)] = np.nan
    flat[rng.choice(flat.size, minus_inf, replace=False)] = -np.inf
    return x


def naive_max_pool(x, ksize, strides, padding):
    """The first maximal non-NaN cell of each window in row-major order (a strictly greater
    cell takes over), at least the lowest finite value: TF1's running maximum."""
    n, h, w, c = x.shape
    if padding == "VALID":
        oh, ow = (h - ksize[0]) // strides[0] + 1, (w - ksize[1]) // strides[1] + 1
        top = left = 0
    else:
        oh, ow = -(-h // strides[0]), -(-w // strides[1])
        top = max((oh - 1) * strides[0] + ksize[0] - h, 0) // 2
        left = max((ow - 1) * strides[1] + ksize[1] - w, 0) // 2
    out = np.empty((n, oh, ow, c), x.dtype)
    for b, i, j, k in itertools.product(range(n), range(oh), range(ow), range(c)):
        best = np.finfo(x.dtype).min
        for r, s in itertools.product(range(ksize[0]), range(ksize[1])):
            row, col = i * strides[0] - top + r, j * strides[1] - left + s
            if 0 <= row < h and 0 <= col < w and x[b, row, col, k] > best:
                best = x[b, row, col, k]
        out[b, i, j, k] = best
    return out


def run_pool(kernel, x, window, threads, chunk_bytes, monkeypatch):
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", chunk_bytes)
    return kernel(KernelContext(*window, threads), x)[0]


def assert_same_bits(got, want, case):
    assert got.dtype == want.dtype and got.shape == want.shape, case
    bits = np.dtype(f"u{got.itemsize}")
    mismatch = np.flatnonzero(got.view(bits) != want.view(bits))
    assert not mismatch.size, f"{case}: {mismatch.size} cells differ, first at " \
        f"{np.unravel_index(mismatch[0], got.shape)}: {got.flat[mismatch[0]]!r} " \
        f"against {want.flat[mismatch[0]]!r}"


# bfloat16: numpy's maximum keeps its second operand on a tie, and its kind is "V", not "f"
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("window", WINDOWS)
def test_a_pooled_zero_keeps_the_first_zeros_sign_whatever_the_chunking(dtype, window,
                                                                     monkeypatch):
    for seed, channels in ((0, 1), (1, 5), (2, 17), (3, 40)):
        x = signed_zeros(seed, (6, 7, 9, channels), dtype, nans=4, minus_inf=2 * (seed % 2))
        want = naive_max_pool(x, *window)
        for kernel, (threads, chunk_bytes) in itertools.product(
                (nn_conv._max_pool, nn_pool_taps._max_pool_with_taps), CONFIGS):
            got = run_pool(kernel, x, window, threads, chunk_bytes, monkeypatch)
            assert_same_bits(got, want, (kernel.__name__, seed, channels, threads, chunk_bytes))


def test_without_nan_or_minus_inf_the_common_path_keeps_the_first_zero_too(monkeypatch):
    x = signed_zeros(5, (4, 8, 8, 33), np.float32, nans=0)
    for window in WINDOWS:
        got = run_pool(nn_conv._max_pool, x, window, 2, 4 << 20, monkeypatch)
        assert_same_bits(got, naive_max_pool(x, *window), window)


def test_the_zero_sign_fix_alone_sets_each_zero_from_its_first_zero_cell():
    views = [np.array([-0.0, 0.0, 1.0, np.nan, -0.0], np.float32),
             np.array([0.0, -0.0, 0.0, -0.0, np.nan], np.float32)]
    out = np.array([0.0, -0.0, 1.0, -0.0, 0.0], np.float32)
    pool_ties.first_zero_signs(np, views, out)
    assert np.signbit(out).tolist() == [True, False, False, True, True]
    assert out[2] == 1.0


def test_each_dtype_gets_a_rule_that_keeps_the_accumulator():
    for dtype in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16, np.int32):
        update = pool_ties.accumulating_max(np, dtype)
        if update is None:  # numpy without one rule at every position: the fix-up instead
            continue
        for first, second in ((-0.0, 0.0), (0.0, -0.0)):
            acc = np.full(67, first, dtype) if dtype != np.int32 else np.zeros(67, dtype)
            update(acc, np.full(67, second, dtype) if dtype != np.int32 else acc.copy())
            want = dtype != np.int32 and bool(np.signbit(first))  # the accumulator's sign
            assert (np.signbit(acc) == want).all(), (dtype, first)


TF1_SNIPPET = """
for key in sorted(inputs):
    kh, kw, sh, sw, padding = key.split("_")[1:]
    x = tf.constant(inputs[key])
    outputs[key] = tf.Session().run(tf.nn.max_pool(
        x, [1, int(kh), int(kw), 1], [1, int(sh), int(sw), 1], padding))
"""


def test_pooled_zero_signs_are_tf1s(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # TF's own CPU kernel (oneDNN's agrees)
    inputs = {}
    for index, (window, dtype) in enumerate(itertools.product(WINDOWS, (np.float32,
                                                                        np.float64))):
        (kh, kw), (sh, sw), padding = window
        inputs[f"x{index}_{kh}_{kw}_{sh}_{sw}_{padding}"] = signed_zeros(
            index, (3, 7, 9, 19), dtype, nans=3, minus_inf=index % 2)
    want = tf1_run(TF1_SNIPPET, tmp_path, **inputs)
    for key, x in inputs.items():
        kh, kw, sh, sw, padding = key.split("_")[1:]
        window = ((int(kh), int(kw)), (int(sh), int(sw)), padding)
        for threads, chunk_bytes in CONFIGS:
            got = run_pool(nn_conv._max_pool, x, window, threads, chunk_bytes, monkeypatch)
            assert_same_bits(got, want[key], (key, threads, chunk_bytes))
