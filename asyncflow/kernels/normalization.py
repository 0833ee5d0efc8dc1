"""Kernels of the normalization family (ops/normalization.py): LRN and its gradient."""
from __future__ import annotations

from asyncflow.kernels.registry import register_kernel


def _window_sum(xp, values, radius):
    """``out[..., d] = sum(values[..., d - radius : d + radius + 1])`` over the last axis."""
    depth = values.shape[-1]
    out = xp.zeros_like(values)
    for shift in range(-radius, radius + 1):
        lo, hi = max(0, -shift), min(depth, depth - shift)
        if lo < hi:
            out[..., lo:hi] += values[..., lo + shift:hi + shift]
    return out


def _norm(ctx, x):
    attrs = ctx.attrs
    wide = x.astype("float32") if x.dtype.itemsize < 4 else x
    norm = wide.dtype.type(attrs["bias"]) + wide.dtype.type(attrs["alpha"]) * _window_sum(
        ctx.xp, wide * wide, attrs["depth_radius"])
    return wide, norm


@register_kernel("LRN")
def _lrn(ctx, x):
    wide, norm = _norm(ctx, x)
    return ((wide * norm ** wide.dtype.type(-ctx.attrs["beta"])).astype(x.dtype),)


@register_kernel("LRNGrad")
def _lrn_grad(ctx, grad, x, y):
    # dx_j = g_j N_j^-beta - 2 alpha beta x_j sum_{i near j} g_i x_i N_i^(-beta - 1)
    wide, norm = _norm(ctx, x)
    kind = wide.dtype.type
    beta, alpha = kind(ctx.attrs["beta"]), kind(ctx.attrs["alpha"])
    g = grad.astype(wide.dtype)
    scaled = norm ** -beta
    inner = _window_sum(ctx.xp, g * wide * scaled / norm, ctx.attrs["depth_radius"])
    return ((g * scaled - kind(2) * alpha * beta * wide * inner).astype(x.dtype),)
