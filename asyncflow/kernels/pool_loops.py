"""Max pools and their gradients as compiled loops (``kernels/jit.py``; issue 37).

Theory of operation: numpy's forms of MaxPool, MaxPoolGrad and the pools routed by taps
(kernels/nn_conv.py, kernels/nn_pool_taps.py) make one pass per tap over strided runs of C
cells, where numpy's per-run overhead is most of the time (bench/RESULTS.md, 2026-12-06). The
loops here visit each window once, its real (unpadded) cells in row-major tap order, with
the channels innermost (contiguous, vectorized), and compute what those forms compute, bit
for bit:

- ``max_with_taps``: per window and channel, the maximum of the non-NaN cells (the window's
  first real cell to start with; a later cell takes over where it is strictly greater, so a
  +0/-0 tie keeps the first zero, as ``pool_ties`` makes numpy's forms do; a NaN start is
  replaced by the next cell, as ``fmax`` does), raised to the lowest finite value (a window of
  -inf and NaN only gives that); its winner is the tap that last took over, or the first real
  cell's tap where nothing beat it, with ``nan_flag`` added where that first cell is NaN
  (``NAN_FIRST``: the Relu fold reads it). Padded cells (-inf in numpy's forms) never take
  over, so they are skipped.
- ``route``: each window's gradient (masked first by ``pooled > 0`` and not NaN-first where
  the Relu's gradient is folded in) written to the winner's cell and +0 to the window's
  other cells, as TF1's zeroed output (the gradient taken as ``0 + gradient``, so -0 gives
  +0, before the mask); windows that tile the input assign, others add the winners'
  gradients into a zeroed output tap by tap (the order of numpy's tap passes; a miss's +-0
  would leave a sum begun at +0 as it is), a NaN sum taking numpy's NaN.

Every function here takes a chunk of the batch: the kernels split it over the intra-op pool
(``intra_op.for_batch``), one loop call a chunk, the GIL released. Where ``jit.usable`` is
false (other dtypes, a GPU, numba missing or ``ASYNCFLOW_JIT=0``) the numpy forms run.
"""
from __future__ import annotations

import numpy as np

from asyncflow.kernels import intra_op, jit

MAX_TAPS = 256  # winners are uint8


@jit.loop
def _max_loop(x, out, winners, kh, kw, sh, sw, top, left, lowest, nan_flag, with_index):
    n, height, width, depth = x.shape
    out_h, out_w = out.shape[1], out.shape[2]
    for b in range(n):
        for oy in range(out_h):
            y0 = oy * sh - top
            y_start, y_stop = max(y0, 0), min(y0 + kh, height)
            for ox in range(out_w):
                x0 = ox * sw - left
                x_start, x_stop = max(x0, 0), min(x0 + kw, width)
                if (kh == 2 and kw == 2 and y_start == y0 and y_stop == y0 + 2
                        and x_start == x0 and x_stop == x0 + 2):
                    # 2x2 inside the input: the four taps in registers, one store each
                    for c in range(depth):
                        first = x[b, y0, x0, c]
                        kept, tap = first, 0
                        value = x[b, y0, x0 + 1, c]
                        takes = (value > kept) | (kept != kept)
                        kept, tap = (value, 1) if takes else (kept, tap)
                        value = x[b, y0 + 1, x0, c]
                        takes = (value > kept) | (kept != kept)
                        kept, tap = (value, 2) if takes else (kept, tap)
                        value = x[b, y0 + 1, x0 + 1, c]
                        takes = (value > kept) | (kept != kept)
                        kept, tap = (value, 3) if takes else (kept, tap)
                        out[b, oy, ox, c] = kept if kept >= lowest else lowest
                        if with_index:
                            winners[b, oy, ox, c] = np.uint8(nan_flag if first != first else tap)
                    continue
                first_tap = (y_start - y0) * kw + (x_start - x0)
                for c in range(depth):
                    out[b, oy, ox, c] = x[b, y_start, x_start, c]
                    if with_index:
                        winners[b, oy, ox, c] = np.uint8(first_tap)
                for y in range(y_start, y_stop):
                    for col in range(x_start, x_stop):
                        if y == y_start and col == x_start:
                            continue
                        tap = np.uint8((y - y0) * kw + (col - x0))
                        for c in range(depth):
                            value, kept = x[b, y, col, c], out[b, oy, ox, c]
                            takes = (value > kept) | (kept != kept)
                            out[b, oy, ox, c] = value if takes else kept
                            if with_index:
                                winners[b, oy, ox, c] = tap if takes else winners[b, oy, ox, c]
                for c in range(depth):
                    kept = out[b, oy, ox, c]
                    out[b, oy, ox, c] = kept if kept >= lowest else lowest
                    first = x[b, y_start, x_start, c]
                    if with_index and first != first:
                        winners[b, oy, ox, c] = np.uint8(first_tap + nan_flag)


@jit.loop
def _route_tiled_loop(winners, grad, pooled, out, kh, kw, sh, sw, top, left, flagged, masked):
    n, height, width, depth = out.shape
    out_h, out_w = grad.shape[1], grad.shape[2]
    one, zero = out.dtype.type(1), out.dtype.type(0)
    for b in range(n):
        for oy in range(out_h):
            y0 = oy * sh - top
            for ox in range(out_w):
                x0 = ox * sw - left
                inside = (kh == 2 and kw == 2 and y0 >= 0 and y0 + 2 <= height and x0 >= 0
                          and x0 + 2 <= width)
                for i in range(kh):
                    y = y0 + i
                    if y < 0 or y >= height:
                        continue
                    for j in range(kw):
                        col = x0 + j
                        if col < 0 or col >= width or (inside and j == 1):
                            continue
                        tap = i * kw + j
                        for c in range(depth):
                            # the window's gradient (masked: the Relu's), a miss's value
                            gradient = grad[b, oy, ox, c] + zero  # TF1's 0 + g
                            won = np.int64(winners[b, oy, ox, c])
                            nan_first = flagged and won >= 128
                            if nan_first:
                                won -= 128
                            if masked:
                                gradient = gradient * (
                                    one if pooled[b, oy, ox, c] > 0 and not nan_first else zero)
                            miss = zero
                            out[b, y, col, c] = gradient if won == tap else miss
                            if inside:  # 2x2 inside the input: a row's two cells at once
                                out[b, y, col + 1, c] = gradient if won == tap + 1 else miss


@jit.loop
def _route_added_loop(winners, grad, features, out, kh, kw, sh, sw, top, left, flagged, relu):
    n, height, width, depth = out.shape
    out_h, out_w = grad.shape[1], grad.shape[2]
    one, zero = out.dtype.type(1), out.dtype.type(0)
    for b in range(n):  # image by image, in cache: each image's cells add only its windows'
        out[b] = zero
        for i in range(kh):
            for j in range(kw):
                tap = i * kw + j
                for oy in range(out_h):
                    y = oy * sh - top + i
                    if y < 0 or y >= height:
                        continue
                    for ox in range(out_w):
                        col = ox * sw - left + j
                        if col < 0 or col >= width:
                            continue
                        for c in range(depth):
                            won = np.int64(winners[b, oy, ox, c])
                            if flagged and won >= 128:
                                won -= 128
                            # A miss adds +0 (numpy adds its +-0: either leaves a sum begun
                            # at +0, never -0, as it is); a NaN sum takes numpy's NaN, the
                            # first operand's (LLVM may swap an addition's operands).
                            kept = out[b, y, col, c]
                            value = grad[b, oy, ox, c] if won == tap else zero
                            total = kept + value
                            if total != total:
                                total = kept if kept != kept else (
                                    value if value != value else total)
                            out[b, y, col, c] = total
        if relu:  # ReluGrad by the pooled input: numpy's ``out * (x > 0)``
            for y in range(height):
                for col in range(width):
                    for c in range(depth):
                        out[b, y, col, c] = out[b, y, col, c] * (
                            one if features[b, y, col, c] > 0 else zero)


def usable(ctx, kernel_hw, *arrays):
    """Whether the loops run for these arrays (``jit.usable``) and a window's taps fit uint8."""
    return kernel_hw[0] * kernel_hw[1] <= MAX_TAPS and jit.usable(ctx, *arrays)


def _geometry(ctx, kernel_hw, rows, cols):
    strides = ctx.attrs["strides"]
    return tuple(int(n) for n in (kernel_hw[0], kernel_hw[1], strides[1], strides[2], rows[1],
                                  cols[1]))


def max_pool(ctx, x, out, kernel_hw, rows, cols, winners=None, nan_flag=0):
    """MaxPool of ``x`` into ``out`` (and each window's winner into ``winners``, with
    ``nan_flag`` added where a window's first real cell is NaN), split over the intra-op
    pool; ``rows``/``cols``: ``nn_conv._spatial``'s geometry."""
    x = jit.readonly(np.ascontiguousarray(x))  # the one signature ``warm`` compiles
    geometry = _geometry(ctx, kernel_hw, rows, cols)
    lowest = x.dtype.type(np.finfo(x.dtype).min)
    with_index = winners is not None
    if winners is None:
        winners = np.empty((1, 1, 1, 1), dtype=np.uint8)

    def chunk(start, stop):
        _max_loop(x[start:stop], out[start:stop], winners[start:stop] if with_index else winners,
                  *geometry, lowest, nan_flag, with_index)
    intra_op.for_batch(ctx, x.shape[0], out[0].size * kernel_hw[0] * kernel_hw[1], chunk)
    return out


def route(ctx, winners, grad, out, kernel_hw, rows, cols, tiled, flagged, pooled=None,
          features=None):
    """``out`` (the pooled input's shape): ``grad`` routed by ``winners`` (uint8 taps, with
    ``NAN_FIRST`` flags where ``flagged``), masked by ``pooled > 0`` where ``pooled`` is given
    (then the windows must tile), or, given ``features`` (the pooled input, a Relu's output:
    windows that do not tile), the routed sums multiplied by ``features > 0``; split over
    the intra-op pool."""
    relu = features is not None
    # Inputs read-only, whatever their flags (a variable's value is, a fresh array is not):
    # numba types the two apart, and ``warm`` compiles the read-only signature.
    features = jit.readonly(np.ascontiguousarray(features) if relu else out)
    grad = jit.readonly(np.ascontiguousarray(grad))
    winners = jit.readonly(np.ascontiguousarray(winners))
    geometry = _geometry(ctx, kernel_hw, rows, cols)
    masked = pooled is not None
    pooled = jit.readonly(np.ascontiguousarray(pooled)) if masked else grad

    def chunk(start, stop):
        if tiled:
            _route_tiled_loop(winners[start:stop], grad[start:stop], pooled[start:stop],
                              out[start:stop], *geometry, flagged, masked)
        else:
            _route_added_loop(winners[start:stop], grad[start:stop], features[start:stop],
                              out[start:stop], *geometry, flagged, relu)
    intra_op.for_batch(ctx, out.shape[0], grad[0].size * kernel_hw[0] * kernel_hw[1], chunk)
    return out


def max_pool_grad(ctx, x, grad, out, kernel_hw, rows, cols, tiled):
    """MaxPoolGrad into ``out``: the windows' winners (``max_pool``), then ``route``."""
    winners = np.empty(grad.shape, dtype=np.uint8)
    max_pool(ctx, x, np.empty(grad.shape, dtype=x.dtype), kernel_hw, rows, cols, winners)
    return route(ctx, winners, grad, out, kernel_hw, rows, cols, tiled, False)


def warm():
    """Compile (or load from numba's disk cache) every loop for float32 and float64."""
    for dtype in sorted(jit.SUPPORTED, key=str):
        x = np.zeros((1, 2, 2, 1), dtype=dtype)
        out = np.zeros((1, 1, 1, 1), dtype=dtype)
        winners = np.zeros((1, 1, 1, 1), dtype=np.uint8)
        geometry = (2, 2, 2, 2, 0, 0)
        ro = jit.readonly
        _max_loop(ro(x), out, winners, *geometry, dtype.type(0), 0, True)
        _route_tiled_loop(ro(winners), ro(out), ro(out), x, *geometry, True, True)
        _route_added_loop(ro(winners), ro(out), ro(x), x, *geometry, True, True)


def preload(ctx):
    """A prepare hook of the max pools: ``jit.preload(warm)`` where the node's arrays are
    numpy's and its output a dtype the loops take (None elsewhere, and once warmed)."""
    dtypes = ctx.output_dtypes
    if getattr(ctx, "xp", np) is not np or not dtypes or np.dtype(dtypes[0]) not in jit.SUPPORTED:
        return None
    return jit.preload(warm)
