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
        return (xp.asarray(_bounds(xp, sorted_inputs, values, side),
                           dtype=ctx.output_dtypes[0]),)
    return kernel


def _bounds(xp, sequences, values, side):
    """TF1's ``std::lower_bound``/``upper_bound`` of each value in its row, every row and
    value at once: a binary search of ``bit_length(n)`` halving steps. Its comparisons are
    TF1's (``entry < value``; for 'right' ``not value < entry``), so a NaN value goes first
    ('left') or last ('right') as in TF1, where numpy's ``searchsorted`` sorts NaN last."""
    n = sequences.shape[1]
    low = xp.zeros(values.shape, dtype=xp.int64)
    high = xp.full(values.shape, n, dtype=xp.int64)
    for _ in range(n.bit_length()):
        middle = (low + high) // 2
        active = low < high
        entry = xp.take_along_axis(sequences, xp.minimum(middle, n - 1), axis=1)
        after = entry < values if side == "left" else ~(values < entry)
        low = xp.where(active & after, middle + 1, low)
        high = xp.where(active & ~after, middle, high)
    return low


register_kernel("LowerBound")(_bound("left"))
register_kernel("UpperBound")(_bound("right"))
