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
from asyncflow.ops.construct import as_tensor, make, static_value


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
