"""Kernels of the linear solves (see ops/matrix_solve.py): numpy's LAPACK on the host, as the
dense linear algebra family's."""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import invalid
from asyncflow.kernels.registry import register_kernel


def _check(ctx, a, b):
    if a.shape[-1] != a.shape[-2]:
        raise invalid(ctx, f"Input matrix must be square, got shape {list(a.shape)}")
    if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise invalid(ctx, f"Input matrix and right-hand side must have matching shapes, got "
                           f"{list(a.shape)} and {list(b.shape)}")


def _solve(ctx, a, b):
    try:
        return (np.linalg.solve(a, b).astype(b.dtype, copy=False),)
    except np.linalg.LinAlgError:
        raise invalid(ctx, "Input matrix is not invertible.") from None


@register_kernel("MatrixSolve", "CPU")
def _matrix_solve(ctx, a, b):
    _check(ctx, a, b)
    if ctx.attrs["adjoint"]:
        a = np.swapaxes(a, -1, -2)
    return _solve(ctx, a, b)


@register_kernel("MatrixTriangularSolve", "CPU")
def _matrix_triangular_solve(ctx, a, b):
    _check(ctx, a, b)
    a = np.tril(a) if ctx.attrs["lower"] else np.triu(a)  # only that triangle is read
    if ctx.attrs["adjoint"]:
        a = np.swapaxes(a, -1, -2)
    return _solve(ctx, a, b)
