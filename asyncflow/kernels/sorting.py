"""Kernels of the sorting family (see ops/sorting.py), written once against ``ctx.xp``."""
from __future__ import annotations

from asyncflow import errors
from asyncflow.kernels.registry import register_kernel


def _axis(x, axis):
    """The attr's axis resolved against the value's rank (negative when the rank was unknown
    while the graph was built)."""
    if x.ndim == 0:
        raise errors.InvalidArgumentError(
            None, None, "the input must have at least 1 dimension, got a scalar")
    if not -x.ndim <= axis < x.ndim:
        raise errors.InvalidArgumentError(
            None, None, f"axis {axis} is out of range for a tensor of shape {list(x.shape)}")
    return axis % x.ndim


@register_kernel("Sort")
def _sort(ctx, x):
    xp = ctx.xp
    axis = _axis(x, ctx.attrs["axis"])
    if ctx.attrs["descending"]:
        # Largest first, equal values in index order (TF1's top_k): a stable ascending sort
        # of the reversed line, read backwards. Negating instead would wrap an int's minimum.
        last = x.shape[axis] - 1
        reversed_order = xp.argsort(xp.flip(x, axis), axis=axis, kind="stable")
        order = last - xp.flip(reversed_order, axis)
    else:
        order = xp.argsort(x, axis=axis, kind="stable")
    return xp.take_along_axis(x, order, axis=axis), order.astype(xp.int32)


@register_kernel("PermuteAlongAxis")
def _permute_along_axis(ctx, x, indices):
    xp = ctx.xp
    axis = _axis(x, ctx.attrs["axis"])
    if x.shape != indices.shape:
        raise errors.InvalidArgumentError(
            None, None, f"x {list(x.shape)} and indices {list(indices.shape)} differ")
    if ctx.attrs["inverse"]:
        indices = xp.argsort(indices, axis=axis)  # a permutation's inverse
    return (xp.take_along_axis(x, indices, axis=axis),)


def _bound(side):
    def kernel(ctx, sorted_inputs, values):
        xp = ctx.xp
        if sorted_inputs.ndim != 2 or values.ndim != 2 or \
                sorted_inputs.shape[0] != values.shape[0]:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"sorted_inputs {list(sorted_inputs.shape)} and values "
                f"{list(values.shape)} must be 2-D with the same number of rows")
        out = xp.empty(values.shape, dtype=ctx.output_dtypes[0])
        for row in range(values.shape[0]):  # (a row each: numpy searches one sorted array)
            out[row] = xp.searchsorted(sorted_inputs[row], values[row], side=side)
        return (out,)
    return kernel


register_kernel("LowerBound")(_bound("left"))
register_kernel("UpperBound")(_bound("right"))
