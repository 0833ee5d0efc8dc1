"""Roll and repeat: TF1's ``tf.roll`` (``tf.manip.roll``), elements shifted cyclically
along axes, and ``tf.repeat``, elements copied along an axis.

Theory of operation: ``Roll``'s ``shift`` and ``axis`` are int tensors as in TF1 (scalars or
vectors of one length; an axis listed twice adds its shifts), so a fed shift works; the
output has the input's shape. The gradient rolls back by ``-shift``. The kernel
(``kernels/roll.py``) is numpy's ``roll`` through ``ctx.xp``. ``repeat`` adds no op type: it
gathers the repeated positions (it sits above ``indexing`` for that).
"""
from __future__ import annotations

import builtins

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.ops import math as math_ops
from asyncflow.ops.array import identity, int_operand, reshape
from asyncflow.ops.construct import as_tensor, graph_of, make
from asyncflow.ops.indexing import boolean_mask, gather
from asyncflow.ops.layout import expand_dims, stack
from asyncflow.ops.logging_ops import Assert
from asyncflow.ops.shapes import normalize_axis, shape_of, static_ints
from asyncflow.ops.sources import range as _range
from asyncflow.ops.tiling import broadcast_to, sequence_mask, tile


def _infer_roll(op):
    x, shift, axis = op.inputs
    if x.shape.ndims == 0:
        raise ValueError("input must be 1-D or higher, got a scalar")
    for t, what in ((shift, "shift"), (axis, "axis")):
        if t.shape.ndims not in (None, 0, 1):
            raise ValueError(f"{what} must be a scalar or a vector, got rank "
                             f"{t.shape.ndims}")
    if shift.shape.ndims is not None and axis.shape.ndims is not None and \
            shift.shape.num_elements() is not None and axis.shape.num_elements() is not None \
            and shift.shape.num_elements() != axis.shape.num_elements():
        raise ValueError(f"shift and axis must have the same size, got "
                         f"shapes {shift.shape} and {axis.shape}")
    axes = static_ints(axis)
    if axes is not None and x.shape.ndims is not None:
        for a in ([axes] if isinstance(axes, int) else axes):
            if not -x.shape.ndims <= a < x.shape.ndims:
                raise ValueError(f"axis {a} is out of range for a tensor of "
                                 f"rank {x.shape.ndims}")
    return [(x.dtype, x.shape)]


register_op("Roll", infer=_infer_roll)


def roll(input, shift, axis, name=None):  # noqa: A002 - TF1's argument name
    """TF1's ``tf.roll``: ``input`` with its elements shifted ``shift[i]`` places along
    ``axis[i]`` (cyclically; negative shifts go the other way).

    Raises:
        ValueError: for shift and axis of different sizes, or a constant axis out of range
            (a fed one fails the run naming the op).
        TypeError: for shift or axis not int32/int64.
    """
    x = as_tensor(input)
    shift, axis = int_operand(shift, "Roll", "shift"), int_operand(axis, "Roll", "axis")
    return make("Roll", (x, shift, axis), None, name, "Roll")


@register_gradient("Roll")
def _roll_grad(op, grad):
    _, shift, axis = op.inputs
    return [make("Roll", (grad, math_ops.negative(shift), axis), None, None, "Roll"), None, None]


def repeat(input, repeats, axis=None, name=None):  # noqa: A002 - TF1's argument name
    """TF1's ``tf.repeat``: each element of ``input`` repeated ``repeats`` times along
    ``axis`` (numpy's ``repeat``; ``axis=None`` flattens first), in a scope ``name``
    (``Repeat``). ``repeats`` is a scalar or one count per entry of that axis.

    Written as a ``gather`` along ``axis`` of the repeated positions (a tile of
    ``range(n)``, masked by ``sequence_mask(repeats)`` for a vector of counts), so the
    gradient sums each element's copies, and a fed shape or an unknown rank works as TF1's.

    A negative count is refused: while building where it is known, otherwise when the step
    runs (an ``InvalidArgumentError`` from ``Repeat/check_repeats``). TF1's own refusal
    depends on the path its ``repeat`` takes (its Tile's "Expected multiples[1] >= 0" for
    a count of one element, a Reshape's size error off axis 0, and none at all on axis 0,
    where it copies the entry 0 times).

    Raises:
        ValueError: for an axis out of range (or negative on an unknown rank), repeats of
            rank above 1, a known negative count, or a count of repeats that differs from
            the axis's known size.
        TypeError: for repeats not int32/int64.
    """
    with graph_of([input, repeats]).name_scope(name or "Repeat"):
        data = as_tensor(input, name="input")
        repeats = int_operand(repeats, "Repeat", "repeats")
        if repeats.shape.ndims not in (None, 0, 1):
            raise ValueError(f"Repeat: repeats must be a scalar or a vector, got rank "
                             f"{repeats.shape.ndims}")
        repeats = _non_negative(repeats)
        if axis is None:
            data, axis = reshape(data, [-1]), 0
        elif data.shape.ndims == 0:
            data = reshape(data, [1])
        if data.shape.ndims is None and int(axis) < 0:
            raise ValueError(f"Repeat: axis {axis} must be non-negative for an input of "
                             f"unknown rank")
        axis = normalize_axis(axis, data.shape.ndims, "Repeat")
        known = data.shape.ndims is not None and data.shape.dims[axis] is not None
        n = data.shape.dims[axis] if known else shape_of(data)[axis]
        if repeats.shape.ndims == 1 and repeats.shape.num_elements() == 1:
            value = static_ints(repeats)
            repeats = reshape(repeats, []) if value is None else \
                as_tensor(np.asarray(value[0], repeats.dtype.as_numpy_dtype), repeats.dtype)
        positions = expand_dims(_range(0, n, 1), 1)  # [n, 1]
        # (gathered from a reshape of itself: the gradient is dense, as TF1's tile's)
        source = reshape(data, shape_of(data))
        counts = static_ints(repeats)
        if repeats.shape.ndims == 0:
            tiled = tile(positions, [1, counts] if counts is not None else
                         stack([1, math_ops.cast(repeats, dtypes.int32)]))
            out = gather(source, reshape(tiled, [-1]), axis=axis)
            total = None if counts is None or not known else n * max(counts, 0)
        else:
            count = repeats.shape.num_elements()
            if known and count is not None and count != n:
                raise ValueError(f"Repeat: repeats has {count} entries, but dimension {axis} "
                                 f"of the input has {n}")
            repeats = math_ops.cast(repeats, dtypes.int32)
            if count is None:  # (TF1's: a fed scalar, or one count, serves every entry)
                lengths = [n] if known else stack([n])
                repeats = reshape(broadcast_to(repeats, lengths), lengths)
            longest = math_ops.maximum(math_ops.reduce_max(repeats), 0)
            tiled = tile(positions, stack([1, longest]))
            out = gather(source, boolean_mask(tiled, sequence_mask(repeats, longest)),
                         axis=axis)
            # (TF1's static size: its Reshape's folded sum, which axis 0 does not have)
            total = None if counts is None or (axis == 0 and counts) else \
                builtins.sum(max(c, 0) for c in counts)
        if total is not None and out.shape.ndims is not None:
            out.set_shape(out.shape.dims[:axis] + (total,) + out.shape.dims[axis + 1:])
        return out


def _non_negative(repeats):
    """``repeats`` refused now where known and negative, else passed through an Assert that
    every count is ``>= 0`` (a fed -1 would otherwise copy its entry 0 times)."""
    counts = static_ints(repeats)
    if counts is not None:
        if builtins.min([counts] if isinstance(counts, int) else counts, default=0) < 0:
            raise ValueError(f"Repeat: repeats must be non-negative, got {counts}")
        return repeats
    check = Assert(math_ops.reduce_all(math_ops.greater_equal(repeats, 0)),
                   ["Repeat: repeats must be non-negative, got", repeats],
                   name="check_repeats")
    with repeats.graph.control_dependencies([check]):
        return identity(repeats)
