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
    # Largest first, equal values in index order (TF's): a stable ascending sort of the
    # reversed row, read backwards. Negating instead would wrap an int's minimum around.
    # Only the k kept are mapped back to the row's indices.
    last = x.shape[-1] - 1
    order = last - xp.argsort(x[..., ::-1], axis=-1, kind="stable")[..., :-k - 1:-1]
    return xp.take_along_axis(x, order, axis=-1), order.astype(xp.int32)


@register_kernel("InTopKV2")
def _in_top_k(ctx, predictions, targets):
    xp, k = ctx.xp, ctx.attrs["k"]
    rows = predictions.shape[0]
    if targets.shape != (rows,):
        raise errors.InvalidArgumentError(
            None, None, f"targets must have shape [{rows}], got {list(targets.shape)}")
    classes = predictions.shape[1]
    if not classes:
        return (xp.zeros(rows, bool),)
    # TF1 answers False for a row whose target is out of range or whose predictions hold a
    # non-finite value (it "cannot say"); the other rows are still counted.
    valid = (targets >= 0) & (targets < classes)
    finite = xp.isfinite(predictions)
    if not finite.all():  # a quicker pass than the rows' when all are finite (TF1 checks all)
        valid &= finite.all(axis=1)
    target_values = predictions[xp.arange(rows), xp.where(valid, targets, 0)]
    larger = (predictions > target_values[:, None]).sum(axis=1)
    return (valid & (larger < k),)
