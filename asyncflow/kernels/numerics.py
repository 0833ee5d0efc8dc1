"""Kernels of the numerics ops (see ops/numerics.py)."""
from __future__ import annotations

from asyncflow import errors
from asyncflow.kernels.registry import register_kernel


@register_kernel("CheckNumerics")
def _check_numerics(ctx, x):
    xp = ctx.xp
    if not bool(xp.isfinite(x).all()):
        has_nan, has_inf = bool(xp.isnan(x).any()), bool(xp.isinf(x).any())
        found = " and ".join(w for w, hit in (("NaN", has_nan), ("Inf", has_inf)) if hit)
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.attrs['message']} : Tensor had {found} values")
    return (x,)
