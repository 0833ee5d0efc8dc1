"""Kernels of the contraction family (see ops/linalg.py)."""
from __future__ import annotations

from asyncflow.kernels.registry import register_kernel


@register_kernel("Einsum", offload=True)
def _einsum(ctx, *operands):
    out = ctx.xp.einsum(ctx.attrs["equation"], *operands, optimize=len(operands) > 2)
    return (ctx.xp.asarray(out, dtype=operands[0].dtype),)
