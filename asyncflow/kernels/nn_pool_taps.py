"""MaxPool's window winners kept for its gradient (compile/pool_taps.py pairs the ops; see
ops/nn_conv.py ``_MaxPoolWithTaps``).

Theory of operation: ``_MaxPoolWithTaps`` runs MaxPool's passes (the same bits) and, per
output cell, keeps the uint8 index (row-major tap order) of the cell MaxPoolGrad routes to:
the first maximal non-NaN cell (a strictly greater tap takes over, so ties stay with the
first, and a NaN never does), or the window's first real cell where that is NaN or nothing
beats -inf (TF's CPU kernel starts there; kernels/nn_conv.py ``_first_cells``), with
``NAN_FIRST`` added where that first cell is NaN. ``_MaxPoolGradByTaps`` then writes each tap's
cells by one equality on bytes and one multiply, the arithmetic MaxPoolGrad applies after
recomputing every window's maximum (kernels/nn_conv.py): the same bits, with ``where`` for
inf/NaN gradients as there. ``_MaxPoolReluGradByTaps`` also applies ReluGrad by the pooled
input (module docstring of compile/pool_taps.py); a window whose first cell is NaN keeps
the gradient there and ReluGrad zeroes it (NaN is not > 0) while the pooled maximum ignores
the NaN, so the fold learns of those windows from the flag, per chunk, and not by a pass
over the input (which cost it 1.4x). Every kernel splits the batch over the
intra-op pool as MaxPool does. On CPU for float32/float64 the kernels run the compiled loops
of ``kernels/pool_loops.py`` instead (the same bits); the numpy forms below serve the rest.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import intra_op, pool_loops
from asyncflow.kernels.arguments import is_floating
from asyncflow.kernels.nn_conv import (
    _crop, _first_cells, _layout, _lowest, _pad, _padded_shape,
    _pool_setup, _route, _tap_args, _taps,
)
from asyncflow.kernels.pool_ties import accumulating_max, all_above_minus_inf, first_zero_signs
from asyncflow.kernels.registry import register_kernel, register_prepare

MAX_TAPS = 256
# Where a window has at most this many taps, ``_MaxPoolWithTaps`` adds it to the tap index of
# a window whose first real cell is NaN (and keeps the gradient): the Relu fold learns of
# them from the winners it reads anyway, with no pass over the input.
NAN_FIRST = 128


def _tap_count(ctx, kernel_hw):
    if kernel_hw[0] * kernel_hw[1] > MAX_TAPS:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.name}: a {kernel_hw[0]}x{kernel_hw[1]} window has more than "
            f"{MAX_TAPS} taps; its winners do not fit uint8")


@register_kernel("_MaxPoolWithTaps", offload=True)
@_layout(arrays=(0,))
def _max_pool_with_taps(ctx, x):
    xp = ctx.xp
    kernel_hw, rows, cols = _pool_setup(ctx, x.shape)
    _tap_count(ctx, kernel_hw)
    out_shape = (x.shape[0], rows[0], cols[0], x.shape[3])
    if 0 in out_shape:
        return xp.zeros(out_shape, dtype=x.dtype), xp.zeros(out_shape, dtype=np.uint8)
    out = xp.empty(out_shape, dtype=x.dtype)
    winners = xp.empty(out_shape, dtype=np.uint8)
    tap_args = _tap_args(ctx, kernel_hw, rows, cols)
    flagged = kernel_hw[0] * kernel_hw[1] <= NAN_FIRST
    if pool_loops.usable(ctx, kernel_hw, x):  # the same bits in one pass (pool_loops.py)
        pool_loops.max_pool(ctx, x, out, kernel_hw, rows, cols, winners,
                            NAN_FIRST if flagged else 0)
        return out, winners

    def chunk(start, stop):
        padded = _pad(xp, x[start:stop], rows, cols, _lowest(x.dtype))
        views = list(_taps(padded, *tap_args))
        best, index = out[start:stop], winners[start:stop]
        hit = xp.empty(best.shape, dtype=bool)
        won = xp.empty(best.shape, dtype=np.uint8)

        def reduce(maximum, first):
            index.fill(0)
            for tap, view in enumerate(views[first:], first):
                xp.greater(view, best, out=hit)  # strictly greater: the first maximum stays
                maximum(best, view)
                xp.multiply(hit, np.uint8(tap), out=won)
                xp.maximum(index, won, out=index)  # later taps carry larger indices
        xp.copyto(best, views[0])            # the same passes as MaxPool: the same bits
        update = accumulating_max(xp, best.dtype)  # (a +0/-0 tie keeps the first: pool_ties)
        reduce(update or (lambda acc, view: xp.maximum(acc, view, out=acc)), 1)
        if not all_above_minus_inf(best):  # a NaN or -inf: again by fmax (NaN never
            xp.copyto(best, views[0])          # wins), then raised to the lowest finite
            reduce(lambda acc, view: xp.fmax(acc, view, out=acc), 1)  # value: MaxPool's
            update = None
            first, tap = _first_cells(xp, x[start:stop], kernel_hw, ctx.attrs["strides"],
                                      rows, cols)
            nan_first = xp.isnan(first)
            keeps = nan_first | (best == -np.inf)  # the first real cell keeps the gradient
            xp.copyto(index, xp.asarray(tap, dtype=np.uint8), where=keeps)
            if flagged:
                index += nan_first.astype(np.uint8) * np.uint8(NAN_FIRST)
            xp.fmax(best, np.finfo(best.dtype).min, out=best)
        if update is None:
            first_zero_signs(xp, views, best)
    intra_op.for_batch(ctx, x.shape[0], out[0].size * kernel_hw[0] * kernel_hw[1] * 4, chunk,
                       x[0].size * x.itemsize)
    return out, winners


@register_kernel("_MaxPoolGradByTaps", offload=True)
@_layout(arrays=(0, 1, 2))
def _max_pool_grad_by_taps(ctx, x, winners, grad):
    return (_route_by_taps(ctx, x, winners, grad),)


def _tiled(ctx, shape, kernel_hw, rows, cols):
    """Whether the windows do not overlap and tile the padded input."""
    strides = ctx.attrs["strides"]
    return (strides[1] == kernel_hw[0] and strides[2] == kernel_hw[1]
            and shape[1] + rows[1] + rows[2] == rows[0] * strides[1]
            and shape[2] + cols[1] + cols[2] == cols[0] * strides[2])


@register_kernel("_MaxPoolReluGradByTaps", offload=True)
@_layout(arrays=(0, 1, 2, 3))
def _max_pool_relu_grad_by_taps(ctx, x, winners, grad, pooled):
    """``ReluGrad(_MaxPoolGradByTaps(x, taps, grad), x)`` where ``x`` is a Relu's output: with
    windows that tile, each cell gets at most its window's gradient, and its ``x > 0`` is the
    window's ``pooled > 0``, so the mask goes on the pooled-size gradient (a quarter of the
    cells for 2x2): the same bits. Overlapping windows sum several gradients into one cell,
    where masking after the sum decides a zero's sign: there the mask follows the routing, as
    it does where a window's first cell is NaN (it keeps the gradient, and ``x > 0`` is false
    there, while the pooled maximum ignores it)."""
    kernel_hw, rows, cols = _pool_setup(ctx, x.shape)
    if tuple(pooled.shape) != tuple(grad.shape):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.name}: pooled has shape {list(pooled.shape)}, grad "
            f"{list(grad.shape)}")
    if _tiled(ctx, x.shape, kernel_hw, rows, cols) and (
            kernel_hw[0] * kernel_hw[1] <= NAN_FIRST  # NaN first cells flagged in winners
            or not _nan_first_cells(ctx.xp, x, kernel_hw, ctx.attrs["strides"], rows, cols)):
        return (_route_by_taps(ctx, x, winners, grad, pooled),)
    if pool_loops.usable(ctx, kernel_hw, x, grad):  # routed and masked in one loop
        return (_route_by_taps(ctx, x, winners, grad, features=x),)
    out = _route_by_taps(ctx, x, winners, grad)
    return (out * (x > 0),)


def _nan_first_cells(xp, x, kernel_hw, strides, rows, cols):
    """Whether some window's first real cell is NaN (one ``min``, which keeps NaN)."""
    first = _first_cells(xp, x, kernel_hw, strides, rows, cols)[0]
    return is_floating(x.dtype) and first.size and bool(xp.isnan(first.min()))


def _route_by_taps(ctx, x, winners, grad, pooled=None, features=None):
    """``x``'s gradient, routed by ``winners``; with ``pooled``, each chunk's gradient is
    first masked by ``pooled > 0`` (in cache: no full-size temporary); ``features``: the
    routed gradient multiplied by ``features > 0`` (compiled loops only)."""
    xp = ctx.xp
    kernel_hw, rows, cols = _pool_setup(ctx, x.shape)
    _tap_count(ctx, kernel_hw)
    expected = (x.shape[0], rows[0], cols[0], x.shape[3])
    for what, value in (("taps", winners), ("grad", grad)):
        if tuple(value.shape) != expected:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"{ctx.name}: {what} has shape {list(value.shape)}, the pooled "
                f"input's windows give {list(expected)}")
    if winners.dtype != np.uint8:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.name}: taps must be uint8, got {winners.dtype}")
    if grad.size == 0:
        return xp.zeros(x.shape, dtype=grad.dtype)
    out = xp.empty(x.shape, dtype=grad.dtype)
    tap_args = _tap_args(ctx, kernel_hw, rows, cols)
    tiled = _tiled(ctx, x.shape, kernel_hw, rows, cols)
    flagged = kernel_hw[0] * kernel_hw[1] <= NAN_FIRST
    if pool_loops.usable(ctx, kernel_hw, grad, *(() if pooled is None else (pooled,))):
        return pool_loops.route(ctx, winners, grad, out, kernel_hw, rows, cols, tiled,
                                flagged, pooled, features)
    finite = not is_floating(grad.dtype) or bool(xp.isfinite(grad).all())
    unpadded = not (rows[1] or rows[2] or cols[1] or cols[2])

    def chunk(start, stop):
        g, index = grad[start:stop], winners[start:stop]
        if tiled:  # TF1's ``0 + g`` (MaxPoolGrad's zeroed output): +0 for -0
            g = g + grad.dtype.type(0)
        mask = None if pooled is None else pooled[start:stop] > 0
        if flagged and int(index.max()) >= NAN_FIRST:  # windows whose first cell is NaN
            nan_first = index >= NAN_FIRST
            index = index - nan_first.astype(np.uint8) * np.uint8(NAN_FIRST)
            if mask is not None:  # ReluGrad there: the winner is NaN, not > 0
                mask &= ~nan_first
        if mask is not None:
            g = g * mask
        if unpadded:
            result = out[start:stop]
            if not tiled:
                result.fill(0)
        else:
            result = (xp.empty if tiled else xp.zeros)(
                _padded_shape((stop - start,) + tuple(x.shape[1:]), rows, cols),
                dtype=grad.dtype)
        hit = xp.empty(g.shape, dtype=bool)
        routed = None if tiled else xp.empty(g.shape, dtype=grad.dtype)
        # The same arithmetic as MaxPoolGrad, tap by tap: the same bits.
        for tap, target in enumerate(_taps(result, *tap_args)):
            xp.equal(index, np.uint8(tap), out=hit)
            _route(xp, g, hit, target, tiled, finite, routed)
        if not unpadded:
            out[start:stop] = _crop(result, rows, cols, x.shape[1], x.shape[2])
    intra_op.for_batch(ctx, x.shape[0], grad[0].size * kernel_hw[0] * kernel_hw[1] * 2, chunk,
                       (x[0].size + 2 * grad[0].size) * grad.itemsize)
    return out


for _type in ("MaxPool", "MaxPoolGrad", "_MaxPoolWithTaps", "_MaxPoolGradByTaps",
              "_MaxPoolReluGradByTaps"):  # (MaxPool's kernels are in nn_conv.py)
    register_prepare(_type)(pool_loops.preload)
