"""Kernels of the diagonal family (see ops/diagonal.py), written once against ``ctx.xp``."""
from __future__ import annotations

from asyncflow import errors
from asyncflow.kernels.registry import register_kernel


def _need_rank(x, least, what):
    if x.ndim < least:
        raise errors.InvalidArgumentError(
            None, None, f"{what} must be at least {least}-D, got shape {list(x.shape)}")


@register_kernel("MatrixDiag")
def _matrix_diag(ctx, diagonal):
    xp = ctx.xp
    _need_rank(diagonal, 1, "diagonal")
    n = diagonal.shape[-1]
    out = xp.zeros(diagonal.shape + (n,), dtype=diagonal.dtype)
    index = xp.arange(n)
    out[..., index, index] = diagonal
    return (out,)


@register_kernel("MatrixDiagPart")
def _matrix_diag_part(ctx, x):
    _need_rank(x, 2, "input")
    return (ctx.xp.diagonal(x, axis1=-2, axis2=-1).copy(),)


@register_kernel("MatrixSetDiag")
def _matrix_set_diag(ctx, x, diagonal):
    xp = ctx.xp
    _need_rank(x, 2, "input")
    k = min(x.shape[-2:])
    if diagonal.shape != x.shape[:-2] + (k,):
        raise errors.InvalidArgumentError(
            None, None, f"diagonal must have shape {list(x.shape[:-2]) + [k]}, got "
                        f"{list(diagonal.shape)}")
    out = x.copy()
    index = xp.arange(k)
    out[..., index, index] = diagonal
    return (out,)


def _check_band(rows, columns, lower, upper):
    """TF1 refuses a band wider than the matrix rather than keep all of it."""
    if lower > rows:
        raise errors.InvalidArgumentError(
            None, None, f"num_lower must be negative or at most the number of rows ({rows}), "
            f"got {lower}")
    if upper > columns:
        raise errors.InvalidArgumentError(
            None, None, f"num_upper must be negative or at most the number of columns "
            f"({columns}), got {upper}")


@register_kernel("MatrixBandPart")
def _matrix_band_part(ctx, x):
    xp, lower, upper = ctx.xp, ctx.attrs["num_lower"], ctx.attrs["num_upper"]
    _need_rank(x, 2, "input")
    m, n = x.shape[-2:]
    _check_band(m, n, lower, upper)
    offset = xp.arange(m)[:, None] - xp.arange(n)[None, :]  # row - column
    keep = xp.ones((m, n), dtype=bool)
    if lower >= 0:
        keep &= offset <= lower
    if upper >= 0:
        keep &= -offset <= upper
    return (xp.where(keep, x, xp.zeros((), dtype=x.dtype)),)
