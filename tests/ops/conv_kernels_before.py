"""The Conv2D and pooling kernels as they were before their rebuild for speed (issue 37),
kept as the reference the rebuilt kernels are checked against (tests/ops/test_conv_kernels.py):
``np.stack`` patches, one GEMM scattered back tap by tap, an ``argmax`` MaxPoolGrad. Plain
functions ``fn(ctx, *inputs)``; nothing is registered.

Their original notes follow.

Theory of operation for the spatial kernels (Conv2D, pooling and their gradients; NHWC):
- ``_geometry`` turns one spatial dimension's (size, kernel, stride, dilation, padding) into
  the output size and the zero padding before/after, exactly as TF computes SAME and VALID.
- ``_taps`` yields, for every kernel tap (i, j), a strided view of the padded input whose
  element ``[n, y, x, c]`` is the input cell that tap reads for output ``[n, y, x]``. Taps are
  plain basic slicing, so they cost nothing and work for numpy and cupy alike.
- Conv2D stacks the taps into an im2col matrix ``[N*OH*OW, KH*KW*C]`` and does one matmul with
  the filter reshaped to ``[KH*KW*C, O]`` (BLAS does the work). The input gradient is the
  transposed matmul scattered back tap by tap (for one tap the strided positions are distinct,
  so ``+=`` on the view is exact); the filter gradient is ``im2col.T @ grad``.
- Pooling reduces over the taps elementwise; MaxPoolGrad routes each output's gradient to the
  first maximal cell of its window (row-major), as TF's CPU kernel; AvgPool divides by the number
  of real (unpadded) cells, as TF.

Kernels never modify their inputs; outputs are fresh arrays.
"""
from __future__ import annotations

import functools

import numpy as np

from asyncflow import errors


# -- spatial geometry -----------------------------------------------------------------------
def _geometry(size, kernel, stride, dilation, padding, name):
    """``(out, pad_before, pad_after)`` of one spatial dimension, as TF computes them."""
    effective = (kernel - 1) * dilation + 1
    if padding == "VALID":
        if size < effective:
            raise errors.InvalidArgumentError(
                None, name, f"Computed output size would be negative: input size {size} is "
                f"smaller than the (dilated) window {effective} with VALID padding")
        out = (size - effective) // stride + 1
        return out, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return out, total // 2, total - total // 2


def _spatial(ctx, shape, kernel_hw):
    """Geometry of both spatial dims: ``((oh, top, bottom), (ow, left, right))``."""
    strides, padding = ctx.attrs["strides"], ctx.attrs["padding"]
    dilations = ctx.attrs.get("dilations", (1, 1, 1, 1))
    return tuple(_geometry(shape[1 + d], kernel_hw[d], strides[1 + d], dilations[1 + d],
                           padding, ctx.name) for d in range(2))


def _pad(xp, x, rows, cols, value=0):
    (_, top, bottom), (_, left, right) = rows, cols
    if not (top or bottom or left or right):
        return x
    return xp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def _taps(padded, kernel_hw, strides, dilations, out_hw):
    """Yield one strided view per kernel tap, in row-major tap order (see module docstring)."""
    (kh, kw), (oh, ow) = kernel_hw, out_hw
    sh, sw, dh, dw = strides[1], strides[2], dilations[1], dilations[2]
    for i in range(kh):
        for j in range(kw):
            yield padded[:, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                         j * dw:j * dw + sw * (ow - 1) + 1:sw, :]


def _tap_args(ctx, kernel_hw, rows, cols):
    return (kernel_hw, ctx.attrs["strides"], ctx.attrs.get("dilations", (1, 1, 1, 1)),
            (rows[0], cols[0]))


def _crop(padded, rows, cols, height, width):
    return padded[:, rows[1]:rows[1] + height, cols[1]:cols[1] + width, :]


def _im2col(xp, x, ctx, kernel_hw, rows, cols):
    """The ``[N*OH*OW, KH*KW*C]`` patch matrix of ``x``."""
    views = list(_taps(_pad(xp, x, rows, cols), *_tap_args(ctx, kernel_hw, rows, cols)))
    if len(views) == 1:
        return xp.ascontiguousarray(views[0]).reshape(-1, x.shape[3])
    return xp.stack(views, axis=3).reshape(-1, len(views) * x.shape[3])


def _sizes(ctx, tensor, what):
    dims = [int(d) for d in tensor.reshape(-1).tolist()]
    if len(dims) != 4 or any(d < 0 for d in dims):
        raise errors.InvalidArgumentError(None, ctx.name, f"{what} must be 4 non-negative "
                                                          f"sizes, got {dims}")
    return dims


def _check_depth(ctx, x_shape, filter_shape):
    if x_shape[3] != filter_shape[2]:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"input depth {x_shape[3]} does not match the filter's input depth "
            f"{filter_shape[2]} (input {list(x_shape)}, filter {list(filter_shape)})")


# -- convolution ----------------------------------------------------------------------------
def _conv2d(ctx, x, filters):
    xp = ctx.xp
    _check_depth(ctx, x.shape, filters.shape)
    kh, kw, _, depth_out = filters.shape
    rows, cols = _spatial(ctx, x.shape, (kh, kw))
    out_shape = (x.shape[0], rows[0], cols[0], depth_out)
    if 0 in out_shape or x.size == 0:
        return (xp.zeros(out_shape, dtype=x.dtype),)
    patches = _im2col(xp, x, ctx, (kh, kw), rows, cols)
    return (xp.matmul(patches, filters.reshape(-1, depth_out)).reshape(out_shape),)


def _conv2d_backprop_input(ctx, input_sizes, filters, grad):
    xp = ctx.xp
    x_shape = _sizes(ctx, input_sizes, "input_sizes")
    _check_depth(ctx, x_shape, filters.shape)
    kh, kw, depth_in, depth_out = filters.shape
    rows, cols = _spatial(ctx, x_shape, (kh, kw))
    expected = [x_shape[0], rows[0], cols[0], depth_out]
    if list(grad.shape) != expected:
        raise errors.InvalidArgumentError(None, ctx.name, f"out_backprop has shape "
                                          f"{list(grad.shape)}, expected {expected}")
    padded_shape = (x_shape[0], x_shape[1] + rows[1] + rows[2], x_shape[2] + cols[1] + cols[2],
                    depth_in)
    padded = xp.zeros(padded_shape, dtype=grad.dtype)
    if grad.size and filters.size:
        columns = xp.matmul(grad.reshape(-1, depth_out), filters.reshape(-1, depth_out).T)
        columns = columns.reshape(expected[:3] + [kh * kw, depth_in])
        for tap, view in enumerate(_taps(padded, *_tap_args(ctx, (kh, kw), rows, cols))):
            view += columns[:, :, :, tap, :]
    return (xp.ascontiguousarray(_crop(padded, rows, cols, x_shape[1], x_shape[2])),)


def _conv2d_backprop_filter(ctx, x, filter_sizes, grad):
    xp = ctx.xp
    f_shape = _sizes(ctx, filter_sizes, "filter_sizes")
    _check_depth(ctx, x.shape, f_shape)
    kh, kw, depth_in, depth_out = f_shape
    rows, cols = _spatial(ctx, x.shape, (kh, kw))
    if grad.size == 0 or x.size == 0:
        return (xp.zeros(f_shape, dtype=x.dtype),)
    patches = _im2col(xp, x, ctx, (kh, kw), rows, cols)
    return (xp.matmul(patches.T, grad.reshape(-1, depth_out)).reshape(f_shape),)


# -- pooling ----------------------------------------------------------------------------------
def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _pool_setup(ctx, shape):
    kernel_hw = tuple(ctx.attrs["ksize"][1:3])
    rows, cols = _spatial(ctx, shape, kernel_hw)
    return kernel_hw, rows, cols


def _max_pool(ctx, x):
    xp = ctx.xp
    kernel_hw, rows, cols = _pool_setup(ctx, x.shape)
    out_shape = (x.shape[0], rows[0], cols[0], x.shape[3])
    if 0 in out_shape:
        return (xp.zeros(out_shape, dtype=x.dtype),)
    padded = _pad(xp, x, rows, cols, _lowest(x.dtype))
    views = _taps(padded, *_tap_args(ctx, kernel_hw, rows, cols))
    return (xp.ascontiguousarray(functools.reduce(xp.maximum, views)),)


def _max_pool_grad(ctx, x, _output, grad):
    xp = ctx.xp
    kernel_hw, rows, cols = _pool_setup(ctx, x.shape)
    padded = _pad(xp, x, rows, cols, _lowest(x.dtype))
    result = xp.zeros(padded.shape, dtype=grad.dtype)
    if grad.size == 0:
        return (xp.ascontiguousarray(_crop(result, rows, cols, x.shape[1], x.shape[2])),)
    tap_args = _tap_args(ctx, kernel_hw, rows, cols)
    winners = xp.argmax(xp.stack(list(_taps(padded, *tap_args)), axis=0), axis=0)
    zero = grad.dtype.type(0)
    for tap, view in enumerate(_taps(result, *tap_args)):
        view += xp.where(winners == tap, grad, zero)
    return (xp.ascontiguousarray(_crop(result, rows, cols, x.shape[1], x.shape[2])),)


def _window_counts(xp, rows, cols, shape, ctx, kernel_hw, dtype):
    """How many real (unpadded) cells each output window covers, ``[1, OH, OW, 1]``."""
    counts = []
    for (out, before, _), size, k, d in zip((rows, cols), shape[1:3], kernel_hw, (1, 2)):
        starts = np.arange(out) * ctx.attrs["strides"][d] - before
        counts.append(np.clip(starts + k, 0, size) - np.clip(starts, 0, size))
    table = np.outer(counts[0], counts[1]).astype(dtype)
    return xp.asarray(table.reshape(1, rows[0], cols[0], 1))


def _avg_pool(ctx, x):
    xp = ctx.xp
    kernel_hw, rows, cols = _pool_setup(ctx, x.shape)
    out_shape = (x.shape[0], rows[0], cols[0], x.shape[3])
    if 0 in out_shape:
        return (xp.zeros(out_shape, dtype=x.dtype),)
    padded = _pad(xp, x, rows, cols)
    total = functools.reduce(xp.add, _taps(padded, *_tap_args(ctx, kernel_hw, rows, cols)))
    counts = _window_counts(xp, rows, cols, x.shape, ctx, kernel_hw, x.dtype)
    return (xp.ascontiguousarray(total / counts),)


def _avg_pool_grad(ctx, input_shape, grad):
    xp = ctx.xp
    shape = _sizes(ctx, input_shape, "orig_input_shape")
    kernel_hw, rows, cols = _pool_setup(ctx, shape)
    padded_shape = (shape[0], shape[1] + rows[1] + rows[2], shape[2] + cols[1] + cols[2], shape[3])
    result = xp.zeros(padded_shape, dtype=grad.dtype)
    if grad.size:
        share = grad / _window_counts(xp, rows, cols, shape, ctx, kernel_hw, grad.dtype)
        for view in _taps(result, *_tap_args(ctx, kernel_hw, rows, cols)):
            view += share
    return (xp.ascontiguousarray(_crop(result, rows, cols, shape[1], shape[2])),)
