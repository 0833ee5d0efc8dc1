"""Shape arithmetic as graph values, shared by builders and gradients of every op family.

Theory of operation:
- A shape a builder or gradient needs is a Python int where the static shape knows it and a
  computed int32 tensor (a ``Shape`` op, or an element of one) where it does not; the helpers
  here pick the cheaper form, so a fully known shape never adds a ``Shape`` op to the graph.
- This module sits just above ``array`` (``Shape``) and ``math`` (``Mul``) and below every
  family that rearranges elements (layout, tiling, indexing, embedding), which is what keeps
  those families free of import circles: none of them has to import another for its helpers.
- A list holding tensors becomes a vector through auto-packing (``convert_to_tensor``), the
  builder that ``ops/layout.py`` registers for ``Pack``.
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes
from asyncflow.graph.conversion import contains_tensor
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import math as math_ops
from asyncflow.ops.array import shape
from asyncflow.ops.construct import as_tensor, static_value


def int_const(values):
    """An int32 Const from a list or scalar; a list holding tensors is auto-packed (TF1)."""
    if isinstance(values, (list, tuple)) and contains_tensor(values):
        return as_tensor(values, dtype=dtypes.int32)
    return as_tensor(np.asarray(values, dtype=np.int32), dtype=dtypes.int32)


def static_ints(tensor):
    """The value of an integer Const tensor as a list (or int for a scalar), else None."""
    value = static_value(tensor)
    return None if value is None else np.asarray(value).tolist()


def shape_of(tensor):
    """``tensor``'s shape as an int32 vector: a Const when fully known, else a Shape op."""
    if tensor.shape.is_fully_defined():
        return int_const(list(tensor.shape.dims))
    return shape(tensor)


def normalize_axis(axis, ndims, op_name, extra=0):
    """``axis`` in ``[0, ndims + extra)``; negative axes count from the end (numpy rules).

    With an unknown rank the axis is returned unchanged (the kernel normalises it).

    Raises:
        ValueError: naming ``op_name`` when the axis is out of range.
    """
    axis = int(axis)
    if ndims is None:
        return axis
    size = ndims + extra
    if not -size <= axis < size:
        raise ValueError(f"{op_name}: axis {axis} is out of range [{-size}, {size}) for a "
                         f"tensor of rank {ndims}")
    return axis % size


# -- symbolic dims: Python ints where static, scalar tensors otherwise -------------------------
def dims_of(tensor):
    """``tensor``'s dims: ints where static, scalar int32 tensors where computed.

    Raises:
        ValueError: if the rank is unknown.
    """
    if tensor.shape.ndims is None:
        raise ValueError(f"the rank of {tensor.name} must be known here")
    return [d if d is not None else shape(tensor)[i] for i, d in enumerate(tensor.shape.dims)]


def dims_product(dims):
    """The product of symbolic dims: an int when all are static, else a scalar tensor."""
    ints = int(np.prod([d for d in dims if isinstance(d, int)], dtype=np.int64))
    out = ints
    for d in dims:
        if not isinstance(d, int):
            out = math_ops.multiply(d, out) if not isinstance(out, int) or out != 1 else d
    return out


def dims_vector(dims):
    """A 1-D int32 tensor from symbolic dims: a Const when all are static, else packed."""
    return int_const(list(dims))


def shape_from_vector(tensor):
    """What is statically known of the shape a 1-D int ``tensor`` holds (TF1's
    ``constant_value_as_shape``): a constant's values (-1: unknown); through ``Cast`` to an int,
    ``Shape`` (its input's static shape), ``Pack`` (its constant scalars), ``ConcatV2`` (its
    pieces') and a one-range ``StridedSlice`` (of what its input holds); else only the length.
    """
    value = static_value(tensor)
    if value is not None:
        return TensorShape([int(d) if d >= 0 else None for d in np.reshape(value, -1)])
    length = tensor.shape[0] if tensor.shape.ndims == 1 else None
    unknown = TensorShape(None if length is None else [None] * length)
    op = tensor.op
    if op.type == "Cast":
        held = shape_from_vector(op.inputs[0])
        return held if held.ndims is None or op.get_attr("DstT").is_integer else unknown
    if op.type == "Shape":
        return op.inputs[0].shape
    if op.type == "Pack":
        scalars = [static_value(t) for t in op.inputs]
        return TensorShape([None if v is None or int(v) < 0 else int(v) for v in scalars])
    if op.type == "ConcatV2":
        held = TensorShape([])
        for piece in op.inputs:  # (its axis is an attribute here)
            held = held.concatenate(shape_from_vector(piece))
        return held
    if op.type == "StridedSlice":
        bounds = [static_value(t) for t in op.inputs[1:4]]
        masks = [op.get_attr(m) for m in ("begin_mask", "end_mask", "ellipsis_mask",
                                          "new_axis_mask", "shrink_axis_mask")]
        if all(b is not None and np.size(b) == 1 for b in bounds) and masks[0] in (0, 1) \
                and masks[1] in (0, 1) and not any(masks[2:]):
            begin, end, stride = (int(np.reshape(b, -1)[0]) for b in bounds)
            held = shape_from_vector(op.inputs[0])
            if held.ndims is not None:
                return held[None if masks[0] else begin:None if masks[1] else end:stride]
    return unknown
