"""Kernels of the tiling ops (see ops/tiling.py): Tile, PadV2, MirrorPad(Grad), OneHot."""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import host as _host, ints as _ints, invalid as _invalid
from asyncflow.kernels.arguments import scatter_add as _scatter_add
from asyncflow.kernels.registry import host_memory, register_kernel


@register_kernel("Tile")
def _tile(ctx, x, multiples):
    multiples = _ints(multiples)
    if len(multiples) != x.ndim or any(m < 0 for m in multiples):
        raise _invalid(ctx, f"multiples {multiples} must have {x.ndim} non-negative entries")
    if x.ndim == 0:
        return (x,)
    return (ctx.xp.tile(x, multiples),)


def _paddings(ctx, x, paddings):
    paddings = _host(paddings)
    if paddings.shape != (x.ndim, 2):
        raise _invalid(ctx, f"paddings must have shape [{x.ndim}, 2], got {list(paddings.shape)}")
    if (paddings < 0).any():
        raise _invalid(ctx, f"paddings must be non-negative, got {paddings.tolist()}")
    return [tuple(int(v) for v in row) for row in paddings.tolist()]


@register_kernel("PadV2")
def _pad(ctx, x, paddings, constant_values):
    widths = _paddings(ctx, x, paddings)
    if x.ndim == 0:
        return (x,)
    return (ctx.xp.pad(x, widths, mode="constant", constant_values=constant_values),)


def _check_mirror(ctx, mode, shape, widths):
    for dim, (before, after) in zip(shape, widths):
        limit = dim - 1 if mode == "REFLECT" else dim
        if before > limit or after > limit:
            raise _invalid(ctx, f"paddings ({before}, {after}) must be at most {limit} for a "
                                f"dimension of size {dim} in {mode} mode")


@register_kernel("MirrorPad")
def _mirror_pad(ctx, x, paddings):
    widths = _paddings(ctx, x, paddings)
    mode = ctx.attrs["mode"]
    _check_mirror(ctx, mode, x.shape, widths)
    if x.ndim == 0:
        return (x,)
    if x.size == 0:  # still padded along its other dims, as TF1 does: (0, 4) by 2 is (0, 8)
        shape = tuple(d + before + after for d, (before, after) in zip(x.shape, widths))
        return (ctx.xp.zeros(shape, dtype=x.dtype),)
    return (ctx.xp.pad(x, widths, mode=mode.lower()),)


@register_kernel("MirrorPadGrad")
def _mirror_pad_grad(ctx, grad, paddings):
    """The adjoint of MirrorPad: padding is separable, so fold one axis at a time."""
    widths = _paddings(ctx, grad, paddings)
    mode = ctx.attrs["mode"].lower()
    xp = ctx.xp
    out = grad
    for axis, (before, after) in enumerate(widths):
        dim = out.shape[axis] - before - after
        if dim < 0:
            raise _invalid(ctx, f"paddings {widths} exceed the gradient's shape {grad.shape}")
        # Which input position each padded position copies, e.g. reflect of 3 by (2, 1):
        # [2, 1, 0, 1, 2, 1].
        source = np.pad(np.arange(dim), (before, after), mode=mode)
        moved = xp.moveaxis(out, axis, 0)
        folded = xp.zeros((dim,) + moved.shape[1:], dtype=grad.dtype)
        _scatter_add(xp, folded, xp.asarray(source), moved)
        out = xp.moveaxis(folded, 0, axis)
    return (out,)


@register_kernel("OneHot")
def _one_hot(ctx, indices, depth, on_value, off_value):
    xp = ctx.xp
    depth = int(depth)
    if depth < 0:
        raise _invalid(ctx, f"depth must be non-negative, got {depth}")
    hot = indices[..., None] == xp.arange(depth, dtype=indices.dtype)
    out = xp.where(hot, on_value, off_value).astype(ctx.output_dtypes[0], copy=False)
    axis = ctx.attrs["axis"]
    if axis != -1:
        out = xp.moveaxis(out, -1, axis)
    return (out,)


# Arguments kept in host memory on a GPU (TF's HostMemory registrations; exec/gpu.py).
host_memory("Tile", inputs=(1,))
host_memory("PadV2", inputs=(1, 2))
host_memory("MirrorPad", inputs=(1,))
host_memory("MirrorPadGrad", inputs=(1,))
host_memory("OneHot", inputs=(1,))
