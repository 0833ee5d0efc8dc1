"""Kernels of the cumulative family (see ops/cumulative.py), written once against ``ctx.xp``."""
from __future__ import annotations

from asyncflow import errors
from asyncflow.kernels.registry import register_kernel


def _cumulative(ctx, x, running, identity):
    xp, attrs = ctx.xp, ctx.attrs
    axis = attrs["axis"]
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise errors.InvalidArgumentError(
            None, None, f"axis {axis} is out of range for an input of shape {list(x.shape)}")
    axis %= x.ndim
    if attrs["reverse"]:
        x = xp.flip(x, axis)
    if attrs["exclusive"]:
        # Shift by one along the axis, the identity in front: the entry leaves its own result.
        pad = [(0, 0)] * x.ndim
        pad[axis] = (1, 0)
        head = [slice(None)] * x.ndim
        head[axis] = slice(0, x.shape[axis])
        x = xp.pad(x, pad, constant_values=identity)[tuple(head)]
    out = running(x, axis=axis, dtype=x.dtype)
    if attrs["reverse"]:
        out = xp.flip(out, axis)
    return (xp.ascontiguousarray(out),)


@register_kernel("Cumsum")
def _cumsum(ctx, x):
    return _cumulative(ctx, x, ctx.xp.cumsum, 0)


@register_kernel("Cumprod")
def _cumprod(ctx, x):
    return _cumulative(ctx, x, ctx.xp.cumprod, 1)
