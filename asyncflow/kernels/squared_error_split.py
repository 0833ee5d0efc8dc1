"""A mean squared error's forward split in two halves over the intra-op threads, with the
bits of the one-thread kernel (issue 37).

``_FusedMeanSquaredError`` (kernels/math.py) computes ``diff = a - b``, its squares and their
sum: three passes over the batch, on one thread, on the critical path of the autoencoder's
step (its forward and loss run before any lane can start; 0.25-0.36 ms on [256, 784]
float32, the other core idle). numpy sums a contiguous array pairwise: for n > 128 values the
sum is ``pairwise(x[:h]) + pairwise(x[h:])`` with ``h = n // 2 - (n // 2) % 8`` (its blocks
of eight accumulators), so two threads that each compute one half's difference, squares and
sum, added in that order, give the bits of the whole kernel (elementwise passes are exact;
tests/ops/test_squared_error_split.py compares them, NaN and inf included, over odd sizes).

``squared_difference_sum(ctx, a, b)`` returns ``(diff, sum of squares)`` so split, or None
where it does not apply (no pool of two threads, a lane holding every thread, not numpy,
operands of another shape or layout, float16/bfloat16, whose sums accumulate in float32, or
fewer than ``MIN_SIZE`` values); the kernel then computes them whole.
"""
from __future__ import annotations

import threading

import numpy as np

# Values from which the two halves repay a hand-off (the kernel alone, [256, 784] float32:
# 0.25 ms whole, 0.16 ms in two halves; bench/RESULTS.md).
MIN_SIZE = 1 << 16
DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64))

_scratch = threading.local()  # the caller's squares array per dtype (see ``_squares``)


def squared_difference_sum(ctx, a, b):
    if (type(a) is not np.ndarray or type(b) is not np.ndarray or a.size < MIN_SIZE
            or a.shape != b.shape or a.dtype != b.dtype or a.dtype not in DTYPES
            or not (a.flags.c_contiguous and b.flags.c_contiguous)):
        return None
    pool = getattr(getattr(ctx, "device", None), "intra_op", None)
    if pool is None or pool.threads < 2 or pool.alone():
        return None
    count = a.size
    half = count // 2 - (count // 2) % 8  # numpy's pairwise split (see the docstring)
    diff = np.empty(a.shape, a.dtype)
    flat, left, right = diff.reshape(-1), a.reshape(-1), b.reshape(-1)
    squares = _squares(a.dtype, count)
    sums = [None, None]

    def part(start, stop):
        values = np.subtract(left[start:stop], right[start:stop], out=flat[start:stop])
        sums[start != 0] = np.square(values, out=squares[start:stop]).sum(dtype=a.dtype)
    pool.run(part, [(0, half), (half, count)])
    return diff, sums[0] + sums[1]


def _squares(dtype, count):
    """A flat array of ``count`` values for the squares, kept per calling thread and dtype
    (only the sums read it): a fresh one of a batch's size is above malloc's mmap threshold
    and may pay its page faults every step. Both halves write their own range of it."""
    cache = getattr(_scratch, "arrays", None)
    if cache is None:
        cache = _scratch.arrays = {}
    flat = cache.get(dtype)
    if flat is None or flat.size < count:
        flat = cache[dtype] = np.empty(count, dtype)
    return flat[:count]
