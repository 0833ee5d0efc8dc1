"""Kernel of Roll (see ops/roll.py): ``ctx.xp.roll`` with TF1's argument checks."""
from __future__ import annotations

from asyncflow.kernels.arguments import ints, invalid
from asyncflow.kernels.registry import host_memory, register_kernel


@register_kernel("Roll")
def _roll(ctx, x, shift, axis):
    shifts, axes = ints(shift), ints(axis)
    if x.ndim == 0:
        raise invalid(ctx, "input must be 1-D or higher, got a scalar")
    if shift.ndim > 1 or axis.ndim > 1 or len(shifts) != len(axes):
        raise invalid(ctx, f"shift and axis must be scalars or vectors of the same size, got "
                           f"shapes {list(shift.shape)} and {list(axis.shape)}")
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise invalid(ctx, f"axis {a} is out of range for a tensor of rank {x.ndim}")
    if not axes or x.size == 0:
        return (x,)
    return (ctx.xp.roll(x, shifts, [a % x.ndim for a in axes]),)


host_memory("Roll", inputs=(1, 2))
