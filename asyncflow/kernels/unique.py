"""Kernels of the unique family (see ops/unique.py): on the host, as TF1 registers them."""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import invalid as _invalid
from asyncflow.kernels.registry import register_kernel


def _vector(ctx, x, what):
    if x.ndim != 1:
        raise _invalid(ctx, f"{what} must be 1-D, got shape {list(x.shape)}")


def _unique(ctx, x):
    """Distinct values in order of first occurrence, each element's position, the counts."""
    _vector(ctx, x, "x")
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                               return_counts=True)
    order = np.argsort(first, kind="stable")  # sorted position -> order of appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    idx_dtype = ctx.output_dtypes[1]
    return (values[order], rank[inverse.reshape(-1)].astype(idx_dtype),
            counts[order].astype(idx_dtype))


@register_kernel("Unique", "CPU")
def _unique_kernel(ctx, x):
    return _unique(ctx, x)[:2]


@register_kernel("UniqueWithCounts", "CPU")
def _unique_with_counts(ctx, x):
    return _unique(ctx, x)


@register_kernel("ListDiff", "CPU")
def _list_diff(ctx, x, y):
    _vector(ctx, x, "x")
    _vector(ctx, y, "y")
    keep = np.flatnonzero(~np.isin(x, y))
    return (x[keep], keep.astype(ctx.output_dtypes[1]))


@register_kernel("Bincount", "CPU")
def _bincount(ctx, arr, size, weights):
    size = int(size)
    if size < 0:
        raise _invalid(ctx, f"size ({size}) must be non-negative")
    if weights.size and weights.shape != arr.shape:
        raise _invalid(ctx, f"weights must have arr's shape {list(arr.shape)} or be empty, got "
                            f"{list(weights.shape)}")
    flat = arr.reshape(-1)
    if flat.size and flat.min() < 0:
        raise _invalid(ctx, f"arr must be non-negative, got {int(flat.min())}")
    kept = flat < size
    out = np.zeros(size, dtype=weights.dtype)
    if weights.size:
        np.add.at(out, flat[kept], weights.reshape(-1)[kept])
    else:
        np.add.at(out, flat[kept], 1)
    return (out,)
