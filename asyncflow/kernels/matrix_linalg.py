"""Kernels of the dense linear algebra family (see ops/matrix_linalg.py): numpy's LAPACK on
the host."""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import invalid as _invalid
from asyncflow.kernels.registry import register_kernel


def _check(ctx, x, square):
    if x.ndim < 2:
        raise _invalid(ctx, f"input must be at least 2-D, got shape {list(x.shape)}")
    if square and x.shape[-1] != x.shape[-2]:
        raise _invalid(ctx, f"input must be square matrices, got shape {list(x.shape)}")


@register_kernel("MatrixInverse", "CPU")
def _matrix_inverse(ctx, x):
    _check(ctx, x, square=True)
    if ctx.attrs["adjoint"]:
        x = np.swapaxes(x, -1, -2)
    try:
        return (np.linalg.inv(x).astype(x.dtype, copy=False),)
    except np.linalg.LinAlgError:
        raise _invalid(ctx, "Input is not invertible.") from None


@register_kernel("MatrixDeterminant", "CPU")
def _matrix_determinant(ctx, x):
    _check(ctx, x, square=True)
    return (np.asarray(np.linalg.det(x), dtype=x.dtype),)


@register_kernel("Cholesky", "CPU")
def _cholesky(ctx, x):
    _check(ctx, x, square=True)
    lower = np.tril(x)
    symmetric = lower + np.swapaxes(np.tril(x, -1), -1, -2)  # TF1 reads the lower triangle
    try:
        return (np.linalg.cholesky(symmetric).astype(x.dtype, copy=False),)
    except np.linalg.LinAlgError:
        raise _invalid(ctx, "Cholesky decomposition was not successful. The input might not "
                            "be valid (not symmetric positive definite).") from None


@register_kernel("Qr", "CPU")
def _qr(ctx, x):
    _check(ctx, x, square=False)
    q, r = np.linalg.qr(x, mode="complete" if ctx.attrs["full_matrices"] else "reduced")
    return (q.astype(x.dtype, copy=False), r.astype(x.dtype, copy=False))


@register_kernel("Svd", "CPU")
def _svd(ctx, x):
    _check(ctx, x, square=False)
    if not ctx.attrs["compute_uv"]:
        empty = np.zeros(0, x.dtype)
        return (np.linalg.svd(x, compute_uv=False).astype(x.dtype, copy=False), empty, empty)
    u, s, vh = np.linalg.svd(x, full_matrices=ctx.attrs["full_matrices"])
    return (s.astype(x.dtype, copy=False), u.astype(x.dtype, copy=False),
            np.ascontiguousarray(np.swapaxes(vh, -1, -2)).astype(x.dtype, copy=False))
