"""The fused squared error's difference and squares, and SigmoidGrad, as compiled loops
(``kernels/jit.py``; issue 37), with the bits of their numpy forms (kernels/math.py).

- ``difference_and_squares``: ``diff = a - b`` and ``diff * diff`` in one pass over ``a`` and
  ``b`` (numpy's form makes two, the second over the new difference); the kernel then sums
  the squares with numpy, as before: its pairwise summation stays numpy's own. (A loop with
  that summation too, numpy's tree walked on a stack, gave the same bits but ran 1.3x slower
  than numpy's three passes on [256, 784] float32: numba does not vectorize its eight
  interleaved partial sums, which numpy's C does; bench/RESULTS.md 2026-12-06, r37ae.)
- ``sigmoid_grad``: ``((1 - y) * y) * dy`` in one pass instead of three, each value's
  operations in numpy's order.

Both take only same-shape C-contiguous numpy operands of one ``jit.SUPPORTED`` dtype (None
otherwise: the numpy forms run), and split over the intra-op pool by ranges of the flattened
arrays when large (``intra_op.for_batch``: exact, the same bits). The kernels register
``preload`` as their prepare hook, so the loops compile (or load from numba's disk cache) on
a worker thread before the first step.
"""
from __future__ import annotations

import numpy as np

from asyncflow.kernels import intra_op, jit


@jit.loop
def _difference_and_squares_loop(a, b, d, squares, start, stop):
    a, b, d, squares = a[start:stop], b[start:stop], d[start:stop], squares[start:stop]
    for i in range(a.shape[0]):
        e = a[i] - b[i]
        d[i] = e
        squares[i] = e * e


@jit.loop
def _sigmoid_grad_loop(y, dy, out, one, start, stop):
    y, dy, out = y[start:stop], dy[start:stop], out[start:stop]
    for i in range(y.shape[0]):
        yi = y[i]
        out[i] = ((one - yi) * yi) * dy[i]


def _flat(ctx, a, b):
    """``a`` and ``b`` flattened where the loops take them (one shape of at least one axis,
    one supported dtype, C-contiguous), else None."""
    if (type(a) is not np.ndarray or type(b) is not np.ndarray or a.shape != b.shape
            or a.dtype != b.dtype or not a.ndim or not a.flags.c_contiguous
            or not b.flags.c_contiguous or not jit.usable(ctx, a, b)):
        return None
    return a.reshape(-1), b.reshape(-1)


def difference_and_squares(ctx, a, b, squares):
    """``a - b`` (a new array) and its squares written into ``squares`` (an array of its
    shape and dtype, C-contiguous), in one pass; None where the loop does not apply."""
    flat = _flat(ctx, a, b)
    if flat is None:
        return None
    diff = np.empty(a.shape, a.dtype)
    _split(ctx, _difference_and_squares_loop, flat + (diff.reshape(-1), squares.reshape(-1)), 2)
    return diff


def sigmoid_grad(ctx, y, dy):
    """``((1 - y) * y) * dy`` in one pass (split over the intra-op pool when large), or None
    where the loop does not apply."""
    flat = _flat(ctx, y, dy)
    if flat is None:
        return None
    out = np.empty(y.shape, y.dtype)
    _split(ctx, _sigmoid_grad_loop, flat + (out.reshape(-1), y.dtype.type(1)), 1)
    return out


def _split(ctx, loop, args, work):
    """``loop(*args, start, stop)`` over the flattened arrays (``work`` element-operations an
    element), split over the intra-op pool when large (``for_batch``), else one call here."""
    size = args[0].size
    if size * work < intra_op.MIN_SPLIT_WORK:
        loop(*args, 0, size)
    else:
        intra_op.for_batch(ctx, size, work, lambda start, stop: loop(*args, start, stop))


def warm():
    """Compile (or load from numba's disk cache) both loops for every supported dtype."""
    for dtype in sorted(jit.SUPPORTED, key=str):
        x = np.zeros(2, dtype)
        _difference_and_squares_loop(x, x, np.empty(2, dtype), np.empty(2, dtype), 0, 2)
        _sigmoid_grad_loop(x, x, np.empty(2, dtype), dtype.type(1), 0, 2)


def preload(ctx):
    """A prepare hook: ``jit.preload(warm)`` where the node's output is a numpy array of a
    dtype the loops take (None elsewhere, and once warmed)."""
    dtypes = ctx.output_dtypes
    if getattr(ctx, "xp", np) is not np or not dtypes or np.dtype(dtypes[0]) not in jit.SUPPORTED:
        return None
    return jit.preload(warm)
