"""Kernels of the selection family (see ops/selection.py), written once against ``ctx.xp``."""
from __future__ import annotations

from asyncflow import errors
from asyncflow.kernels.registry import register_kernel


@register_kernel("TopKV2")
def _top_k(ctx, x):
    xp, k = ctx.xp, ctx.attrs["k"]
    if x.ndim == 0 or x.shape[-1] < k:
        raise errors.InvalidArgumentError(
            None, None, f"input must have at least k={k} columns, has shape {list(x.shape)}")
    # A stable sort of the negated values: largest first, equal values in index order (TF's).
    order = xp.argsort(-x, axis=-1, kind="stable")[..., :k]
    return xp.take_along_axis(x, order, axis=-1), order.astype(xp.int32)


@register_kernel("InTopKV2")
def _in_top_k(ctx, predictions, targets):
    xp, k = ctx.xp, ctx.attrs["k"]
    rows = predictions.shape[0]
    if targets.shape != (rows,):
        raise errors.InvalidArgumentError(
            None, None, f"targets must have shape [{rows}], got {list(targets.shape)}")
    if rows and (targets.min() < 0 or targets.max() >= predictions.shape[1]):
        return (xp.zeros(rows, bool),)
    target_values = predictions[xp.arange(rows), targets]
    larger = (predictions > target_values[:, None]).sum(axis=1)
    return (larger < k,)
