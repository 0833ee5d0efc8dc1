"""Kernel of Cross (see ops/cross.py): the three components from the last axis's slices."""
from __future__ import annotations

from asyncflow.kernels.arguments import invalid
from asyncflow.kernels.registry import register_kernel


@register_kernel("Cross")
def _cross(ctx, a, b):
    if a.shape != b.shape:
        raise invalid(ctx, f"Both inputs must be of same shape: {list(a.shape)} vs. "
                           f"{list(b.shape)}")
    if a.ndim == 0 or a.shape[-1] != 3:
        raise invalid(ctx, f"Trailing dimension must be of size 3, got shape {list(a.shape)}")
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return (ctx.xp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1),)
