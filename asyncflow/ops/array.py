"""Arrays: identity, stop_gradient, shape/size/rank and reshape, which every family builds on.

It imports no other op family; the rest of the array family lives in modules named after what
they own (layout, tiling, slicing, indexing, embedding, numerics) and is imported from there.
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op, not_differentiable
from asyncflow.graph.conversion import contains_tensor
from asyncflow.graph.indexed_slices import accepts_indexed_slices
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import (
    as_tensor, check_dtype, is_tensor_like, make, make_op, static_value,
)


def _infer_same(op):
    x = op.inputs[0]
    return [(x.dtype, x.shape)]


register_op("Identity", infer=_infer_same)
register_op("StopGradient", infer=_infer_same)
not_differentiable("StopGradient")


def identity(input, name=None):  # noqa: A002 - TF1 spelling
    """The same value; reading a variable reference through it snapshots the variable."""
    return make("Identity", (as_tensor(input) if not getattr(input, "_is_ref", False) else input,),
                None, name, "Identity")


def stop_gradient(input, name=None):  # noqa: A002
    """The same value, but gradients do not flow through it."""
    return make("StopGradient", (as_tensor(input),), None, name, "StopGradient")


def _infer_shape(op):
    x = op.inputs[0]
    return [(op.get_attr("out_type"), TensorShape([x.shape.ndims]))]


def _infer_scalar_int(op):
    return [(op.get_attr("out_type"), TensorShape([]))]


register_op("Shape", infer=_infer_shape)
register_op("Size", infer=_infer_scalar_int)
register_op("Rank", infer=_infer_scalar_int)
not_differentiable("Shape", "Size", "Rank")


def shape(input, name=None, out_type=dtypes.int32):  # noqa: A002
    """The dynamic shape of ``input`` as a 1-D int tensor."""
    return make("Shape", (as_tensor(input),), {"out_type": dtypes.as_dtype(out_type)}, name, "Shape")


def size(input, name=None, out_type=dtypes.int32):  # noqa: A002
    return make("Size", (as_tensor(input),), {"out_type": dtypes.as_dtype(out_type)}, name, "Size")


def rank(input, name=None):  # noqa: A002
    return make("Rank", (as_tensor(input),), {"out_type": dtypes.int32}, name, "Rank")


def _infer_reshape(op):
    x, shape_tensor = op.inputs
    target = static_value(shape_tensor)
    if target is None and shape_tensor.op.type == "Shape":
        # TF1 reads ``reshape(x, shape(y))`` as y's static shape (constant_value_as_shape)
        return [(x.dtype, _solved(x.shape, shape_tensor.op.inputs[0].shape))]
    if target is None:
        n = shape_tensor.shape[0] if shape_tensor.shape.ndims == 1 else None
        return [(x.dtype, TensorShape(None if n is None else [None] * n))]
    dims = [int(d) for d in np.reshape(target, -1)]
    if sum(d == -1 for d in dims) > 1:
        raise ValueError(f"at most one dimension may be -1, got {dims}")
    if x.shape.is_fully_defined():
        given = dims
        dims = reshape_dims(x.shape.as_list(), given)
        if dims is None:
            raise ValueError(f"cannot reshape a tensor with {x.shape.num_elements()} elements "
                             f"to shape {given}")
        if 0 in given and 0 in x.shape.as_list():  # TF1 leaves such a -1 unknown: (0, ?)
            dims = [None if d == -1 else n for d, n in zip(given, dims)]
    elif x.shape.ndims and 0 in x.shape.dims and -1 in dims and 0 not in dims:  # TF1: the -1
        dims = [0 if d == -1 else d for d in dims]  # of an input with no elements is 0
    else:
        dims = [None if d == -1 else d for d in dims]
    return [(x.dtype, TensorShape(dims))]


def _solved(x_shape, target):
    """``target`` (a partly known shape), its one unknown dim solved from ``x_shape``'s
    element count where everything else is known, as TF's Reshape shape function does; a
    ValueError, as there, where ``x_shape``'s known element count cannot fit ``target``."""
    if target.ndims is None:
        return TensorShape(None)
    dims = list(target.dims)
    unknown = [i for i, d in enumerate(dims) if d is None]
    known = int(np.prod([d for d in dims if d is not None]))
    if x_shape.is_fully_defined():
        count = x_shape.num_elements()
        if not unknown:
            fits = count == known
        else:  # (TF1 checks the divisibility for one unknown dim only)
            fits = count % known == 0 or len(unknown) > 1 if known else count == 0
        if not fits:
            raise ValueError(f"cannot reshape a tensor with {count} elements to shape "
                             f"{TensorShape(dims)}")
        if len(unknown) == 1 and known:
            dims[unknown[0]] = count // known
    return TensorShape(dims)


def reshape_dims(input_dims, dims):
    """``dims`` with its -1 resolved for an input of ``input_dims``, or None if they do not
    fit. TF's rule: where ``dims`` holds a 0, the input's zero-sized dims are left out of the
    count the -1 is solved from, so ``[0, -1]`` of a (0, 3) tensor is (0, 3)."""
    has_zero = 0 in dims
    known = int(np.prod([d for d in dims if d not in (-1, 0)]))
    if -1 in dims:
        counted = [d for d in input_dims if d > 0 or not has_zero]
        count = int(np.prod(counted))
        if 0 not in input_dims and count % known:
            return None
        dims = [count // known if d == -1 else d for d in dims]
    return dims if int(np.prod(dims)) == int(np.prod(input_dims)) else None


register_op("Reshape", infer=_infer_reshape)


def reshape(tensor, shape, name=None):  # noqa: F811 - parameter named like TF1
    """``tensor`` with a new shape (one dim may be -1)."""
    tensor = as_tensor(tensor)
    if isinstance(shape, (list, tuple)) and contains_tensor(shape):
        shape = as_tensor(shape, dtype=dtypes.int32)  # auto-packed: [batch, 37]
    elif not hasattr(shape, "op"):
        shape = as_tensor(np.asarray(shape, dtype=np.int32).reshape(-1), dtype=dtypes.int32)
    return make("Reshape", (tensor, shape), None, name, "Reshape")


@register_gradient("Identity")
def _identity_grad(op, grad):
    return [grad]


accepts_indexed_slices("Identity")  # a variable's read passes a sparse gradient on as is


@register_gradient("Reshape")
def _reshape_grad(op, grad):
    x = op.inputs[0]
    if x.shape.is_fully_defined():
        return [reshape(grad, x.shape.as_list()), None]
    return [make("Reshape", (grad, shape(x)), None, None, "Reshape"), None]


# -- TF1's identity_n, shape_n, ensure_shape -------------------------------------------------
def _infer_identity_n(op):
    return [(x.dtype, x.shape) for x in op.inputs]


def _infer_shape_n(op):
    return [(op.get_attr("out_type"), TensorShape([x.shape.ndims])) for x in op.inputs]


def _infer_ensure_shape(op):
    x = op.inputs[0]
    expected = TensorShape(op.get_attr("shape"))
    if not x.shape.is_compatible_with(expected):
        raise ValueError(f"the input's shape {x.shape} is not "
                         f"compatible with the expected shape {expected}")
    return [(x.dtype, x.shape.merge_with(expected))]


register_op("IdentityN", infer=_infer_identity_n)
register_op("ShapeN", infer=_infer_shape_n)
register_op("EnsureShape", infer=_infer_ensure_shape)
not_differentiable("ShapeN")


def _non_empty(values, op_type):
    if isinstance(values, (list, tuple)) and not values:
        raise ValueError(f"{op_type}: needs at least one input, got an empty list")
    return [as_tensor(v) for v in values]


def identity_n(input, name=None):  # noqa: A002 - TF1 spelling
    """TF1's ``tf.identity_n``: each input unchanged, as the outputs of one ``IdentityN`` op
    (a list, in order)."""
    tensors = _non_empty(input, "IdentityN")
    return list(make_op("IdentityN", tensors, None, name, "IdentityN").outputs)


def shape_n(input, out_type=dtypes.int32, name=None):  # noqa: A002
    """TF1's ``tf.shape_n``: the dynamic shapes of the inputs, the outputs of one ``ShapeN``.

    Raises:
        TypeError: for an ``out_type`` other than int32 or int64.
    """
    out_type = dtypes.as_dtype(out_type)
    if out_type not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"ShapeN: out_type must be int32 or int64, got {out_type.name}")
    tensors = _non_empty(input, "ShapeN")
    return list(make_op("ShapeN", tensors, {"out_type": out_type}, name, "ShapeN").outputs)


def ensure_shape(x, shape, name=None):  # noqa: F811 - TF1's argument name
    """TF1's ``tf.ensure_shape``: ``x`` unchanged, its static shape merged with ``shape``
    (``None`` dims match any), checked against the running value.

    Raises:
        ValueError: when ``x``'s static shape is not compatible with ``shape``. A value of
            another shape fails the run with InvalidArgumentError naming the op.
    """
    expected = shape if isinstance(shape, TensorShape) else TensorShape(shape)
    dims = None if expected.dims is None else tuple(expected.dims)
    return make("EnsureShape", (as_tensor(x),), {"shape": dims}, name, "EnsureShape")


@register_gradient("IdentityN")
def _identity_n_grad(op, *grads):
    return list(grads)


@register_gradient("EnsureShape")
def _ensure_shape_grad(op, grad):
    return [grad]


# -- TF1's broadcast_dynamic_shape / broadcast_static_shape, unravel_index -------------------
def _infer_broadcast_args(op):
    s0, s1 = op.inputs
    for t in (s0, s1):
        if t.shape.ndims not in (None, 1):
            raise ValueError(f"shapes must be vectors, got rank "
                             f"{t.shape.ndims}")
    if s0.dtype is not s1.dtype:
        raise TypeError(f"s0 and s1 have different dtypes "
                        f"{s0.dtype.name} and {s1.dtype.name}")
    a, b = static_value(s0), static_value(s1)
    if a is not None and b is not None:
        broadcast_static_shape(TensorShape(np.reshape(a, -1).tolist()),
                               TensorShape(np.reshape(b, -1).tolist()))
    n0 = s0.shape[0] if s0.shape.ndims == 1 else None
    n1 = s1.shape[0] if s1.shape.ndims == 1 else None
    return [(s0.dtype, TensorShape([None if n0 is None or n1 is None else max(n0, n1)]))]


def _infer_unravel_index(op):
    indices, dims = op.inputs
    if indices.dtype is not dims.dtype:
        raise TypeError(f"indices and dims have different dtypes "
                        f"{indices.dtype.name} and {dims.dtype.name}")
    if dims.shape.ndims not in (None, 1):
        raise ValueError(f"dims must be a vector, got rank "
                         f"{dims.shape.ndims}")
    if indices.shape.ndims not in (None, 0, 1):
        raise ValueError(f"indices must be a scalar or a vector, "
                         f"got rank {indices.shape.ndims}")
    n = dims.shape[0] if dims.shape.ndims == 1 else None
    if indices.shape.ndims is None:
        return [(indices.dtype, TensorShape(None))]
    return [(indices.dtype, TensorShape([n] + list(indices.shape.dims)))]


register_op("BroadcastArgs", infer=_infer_broadcast_args)
register_op("UnravelIndex", infer=_infer_unravel_index)
not_differentiable("BroadcastArgs", "UnravelIndex")


def broadcast_static_shape(shape_x, shape_y):
    """TF1's ``tf.broadcast_static_shape``: the ``TensorShape`` two static shapes broadcast
    to (unknown dims where undecidable).

    Raises:
        ValueError: as TF1's, when known dims cannot broadcast.
    """
    shape_x, shape_y = TensorShape(shape_x), TensorShape(shape_y)
    if shape_x.dims is None or shape_y.dims is None:
        return TensorShape(None)
    rank = max(len(shape_x.dims), len(shape_y.dims))
    pairs = zip((1,) * (rank - len(shape_x.dims)) + tuple(shape_x.dims),
                (1,) * (rank - len(shape_y.dims)) + tuple(shape_y.dims))
    out = []
    for a, b in pairs:
        if a is not None and b is not None and a != b and 1 not in (a, b):
            raise ValueError(
                "Incompatible shapes for broadcasting. Two shapes are compatible if for each "
                "dimension pair they are either equal or one of them is 1. Received: "
                f"{shape_x} and {shape_y}.")
        if a == 1:
            out.append(b)
        elif b == 1:
            out.append(a)
        else:  # TF1's: an unknown beside a known dim > 1 is that dim
            out.append(a if b is None else b)
    return TensorShape(out)


def broadcast_dynamic_shape(shape_x, shape_y):
    """TF1's ``tf.broadcast_dynamic_shape``: the shape two shape vectors broadcast to, one
    ``BroadcastArgs`` op.

    Raises:
        ValueError: for constant shapes that cannot broadcast; fed ones fail the run with
            InvalidArgumentError naming the op.
    """
    s0, s1 = int_operand(shape_x, "BroadcastArgs"), int_operand(shape_y, "BroadcastArgs")
    return make("BroadcastArgs", (s0, s1), None, None, "BroadcastArgs")


def int_operand(value, op_type, what="shape"):
    """``value`` as an int32/int64 tensor: Python ints (and an empty list) as int32, numpy
    keeps its int dtype (TF1's conversion); another dtype raises TypeError naming
    ``op_type``."""
    if not is_tensor_like(value):
        array = np.asarray(value)
        if not isinstance(value, (np.ndarray, np.generic)):  # TF1's Python conversion
            array = array.astype(np.int32 if array.dtype.kind in "iu" or array.size == 0
                                 else np.float32 if array.dtype.kind == "f" else array.dtype)
        value = array
    t = as_tensor(value)
    check_dtype(op_type, t, lambda d: d in (dtypes.int32, dtypes.int64), what)
    return t


def unravel_index(indices, dims, name=None):
    """TF1's ``tf.unravel_index``: flat ``indices`` into coordinates of an array of shape
    ``dims`` (row-major), ``[len(dims)]`` for a scalar index, ``[len(dims), n]`` for n.

    Raises:
        TypeError: for indices or dims not int32/int64, or of two dtypes.
        ValueError: for indices of rank above 1. An index out of range fails the run naming
            the op.
    """
    indices = int_operand(indices, "UnravelIndex", "indices")
    dims = as_tensor(dims, dtype=None if is_tensor_like(dims) else indices.dtype)
    check_dtype("UnravelIndex", dims, lambda d: d in (dtypes.int32, dtypes.int64), "dims")
    return make("UnravelIndex", (indices, dims), None, name, "UnravelIndex")
