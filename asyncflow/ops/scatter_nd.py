"""Scattering slices into a tensor at index tuples: TF1's ``tf.scatter_nd`` (into zeros, adding
repeated tuples), ``tf.tensor_scatter_nd_update`` (into a copy of a tensor, replacing; its
``_add``/``_sub``/``_max``/``_min`` combine, repeated tuples included) and the
variable updates ``tf.scatter_nd_update``/``scatter_nd_add``/``scatter_nd_sub`` (into the
variable; a repeated tuple is replaced by its last update, or adds up, as TF1 on CPU).

``indices`` has shape ``I + [K]``; each row of length K addresses a slice of the first K dims
of the result, and ``updates`` has shape ``I + shape[K:]``. Every tuple is checked at run time
(an ``InvalidArgumentError`` naming the op, as TF1 on CPU). Gradients are TF1's: the updates'
gradient gathers the incoming gradient at the tuples (``gather_nd``); a tensor updated in
place passes the incoming gradient on with the replaced slices zeroed.

Kernels live in ``asyncflow/kernels/scatter_nd.py``.
"""
from __future__ import annotations

from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import INTEGER, as_tensor, check_dtype, make
from asyncflow.ops.shapes import int_const, static_ints
from asyncflow.ops.state import Variable, _ref_of


def _check_updates(op, indices, updates, shape):
    """Check ``updates`` against ``indices.shape[:-1] + shape[K:]`` where both are known."""
    check_dtype(op.type, indices, INTEGER, "indices")
    if indices.shape.ndims == 0:
        raise ValueError(f"{op.type} '{op.name}': indices must have rank >= 1, got a scalar")
    depth = indices.shape.dims[-1] if indices.shape.ndims else None
    if depth is None or shape.ndims is None or indices.shape.ndims is None:
        return
    if depth > shape.ndims:
        raise ValueError(f"{op.type} '{op.name}': the last dim of indices ({depth}) must be <= "
                         f"the rank of the output ({shape.ndims})")
    expected = TensorShape(list(indices.shape.dims[:-1]) + list(shape.dims[depth:]))
    if not expected.is_compatible_with(updates.shape):
        raise ValueError(f"{op.type} '{op.name}': updates must have shape {expected} for "
                         f"indices of shape {indices.shape} into shape {shape}, got "
                         f"{updates.shape}")


def _numeric_or_bool(d):  # TF1's ScatterNd takes bools too: repeated tuples or their values
    return d.is_numeric or d.is_bool


def _infer_scatter_nd(op):
    indices, updates, shape = op.inputs
    check_dtype(op.type, updates, _numeric_or_bool, "updates")
    check_dtype(op.type, shape, INTEGER, "shape")
    dims = static_ints(shape)
    if dims is not None and any(d < 0 for d in dims):
        raise ValueError(f"{op.type} '{op.name}': shape must be non-negative, got {dims}")
    out = TensorShape(None) if dims is None else TensorShape(dims)
    _check_updates(op, indices, updates, out)
    return [(updates.dtype, out)]


def _infer_tensor_scatter(op):
    tensor, indices, updates = op.inputs
    if tensor.dtype != updates.dtype:
        raise TypeError(f"{op.type} '{op.name}': tensor and updates must have the same dtype, "
                        f"got {tensor.dtype.name} and {updates.dtype.name}")
    _check_updates(op, indices, updates, tensor.shape)
    return [(tensor.dtype, tensor.shape)]


register_op("ScatterNd", infer=_infer_scatter_nd)
TENSOR_SCATTER_OPS = ("TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub",
                      "TensorScatterMax", "TensorScatterMin")
for _type in TENSOR_SCATTER_OPS:
    register_op(_type, infer=_infer_tensor_scatter)
VARIABLE_SCATTER_ND_OPS = ("ScatterNdUpdate", "ScatterNdAdd", "ScatterNdSub")
for _type in VARIABLE_SCATTER_ND_OPS:
    register_op(_type, infer=_infer_tensor_scatter, stateful=True, ref_inputs=(0,))
not_differentiable(*VARIABLE_SCATTER_ND_OPS)


def _scatter_nd_variable(op_type, ref, indices, updates, name):
    ref = _ref_of(ref)
    updates = as_tensor(updates) if hasattr(updates, "op") else as_tensor(updates, ref.dtype)
    with ref.graph.colocate_with(ref.op):
        return make(op_type, (ref, as_tensor(indices), updates), {"use_locking": True}, name,
                    op_type)


def scatter_nd_update(ref, indices, updates, use_locking=True, name=None):
    """Replace the slices of the variable ``ref`` at the tuples of ``indices`` by ``updates``
    (TF1's ``tf.scatter_nd_update``; a repeated tuple takes its last update). Returns the
    variable's new value."""
    return _scatter_nd_variable("ScatterNdUpdate", ref, indices, updates, name)


def scatter_nd_add(ref, indices, updates, use_locking=False, name=None):
    """Add ``updates`` to the slices of the variable ``ref`` at the tuples of ``indices``
    (repeated tuples add up). Returns the variable's new value."""
    return _scatter_nd_variable("ScatterNdAdd", ref, indices, updates, name)


def scatter_nd_sub(ref, indices, updates, use_locking=False, name=None):
    """Subtract ``updates`` from the slices of the variable ``ref`` at the tuples of
    ``indices`` (repeated tuples add up). Returns the variable's new value."""
    return _scatter_nd_variable("ScatterNdSub", ref, indices, updates, name)


# TF1's ``Variable.scatter_nd_update(indices, updates)`` and the other two.
Variable.scatter_nd_update = lambda self, indices, updates, name=None: scatter_nd_update(
    self, indices, updates, name=name)
Variable.scatter_nd_add = lambda self, indices, updates, name=None: scatter_nd_add(
    self, indices, updates, name=name)
Variable.scatter_nd_sub = lambda self, indices, updates, name=None: scatter_nd_sub(
    self, indices, updates, name=name)


def scatter_nd(indices, updates, shape, name=None):
    """A tensor of ``shape``, zero but for ``updates`` added at the tuples of ``indices``.

    Raises:
        ValueError, TypeError: for shapes or dtypes that do not fit (named after ``ScatterNd``).
    """
    shape = shape if hasattr(shape, "op") else int_const(shape)
    return make("ScatterNd", (as_tensor(indices), as_tensor(updates), shape), None, name,
                "ScatterNd")


def tensor_scatter_nd_update(tensor, indices, updates, name=None):
    """A copy of ``tensor`` with the slices at the tuples of ``indices`` replaced by
    ``updates`` (TF1's ``tf.tensor_scatter_nd_update``, also ``tf.tensor_scatter_update``).

    Raises:
        ValueError, TypeError: for shapes or dtypes that do not fit (named after
            ``TensorScatterUpdate``).
    """
    return _tensor_scatter("TensorScatterUpdate", tensor, indices, updates, name)


def _tensor_scatter(op_type, tensor, indices, updates, name):
    t = as_tensor(tensor)
    # A Python or numpy value takes the tensor's dtype; a tensor keeps its own (checked).
    updates = as_tensor(updates) if hasattr(updates, "op") else as_tensor(updates, t.dtype)
    return make(op_type, (t, as_tensor(indices), updates), None, name, op_type)


def tensor_scatter_nd_add(tensor, indices, updates, name=None):
    """A copy of ``tensor`` with ``updates`` added at the tuples of ``indices`` (repeated
    tuples add up; TF1's ``tf.tensor_scatter_nd_add``, also ``tf.tensor_scatter_add``)."""
    return _tensor_scatter("TensorScatterAdd", tensor, indices, updates, name)


def tensor_scatter_nd_sub(tensor, indices, updates, name=None):
    """A copy of ``tensor`` with ``updates`` subtracted at the tuples of ``indices``."""
    return _tensor_scatter("TensorScatterSub", tensor, indices, updates, name)


def tensor_scatter_nd_max(tensor, indices, updates, name=None):
    """A copy of ``tensor`` holding the larger of each slice and the updates at its tuples."""
    return _tensor_scatter("TensorScatterMax", tensor, indices, updates, name)


def tensor_scatter_nd_min(tensor, indices, updates, name=None):
    """A copy of ``tensor`` holding the smaller of each slice and the updates at its tuples."""
    return _tensor_scatter("TensorScatterMin", tensor, indices, updates, name)


@register_gradient("ScatterNd")
def _scatter_nd_grad(op, grad):
    from asyncflow.ops.indexing import gather_nd
    return [None, gather_nd(grad, op.inputs[0]), None]


@register_gradient("TensorScatterUpdate")
def _tensor_scatter_update_grad(op, grad):
    from asyncflow.ops.indexing import gather_nd
    from asyncflow.ops.sources import zeros_like
    _, indices, updates = op.inputs
    return [tensor_scatter_nd_update(grad, indices, zeros_like(updates)), None,
            gather_nd(grad, indices)]


@register_gradient("TensorScatterAdd")
def _tensor_scatter_add_grad(op, grad):
    from asyncflow.ops.indexing import gather_nd
    return [grad, None, gather_nd(grad, op.inputs[1])]


@register_gradient("TensorScatterSub")
def _tensor_scatter_sub_grad(op, grad):
    from asyncflow.ops import math as math_ops
    from asyncflow.ops.indexing import gather_nd
    return [grad, None, math_ops.negative(gather_nd(grad, op.inputs[1]))]


def _tensor_scatter_min_or_max_grad(op, grad):
    """TF's: the gradient shared evenly among the tensor's value and the updates that equal
    the result at each place."""
    from asyncflow.ops import math as math_ops
    from asyncflow.ops.array import shape as shape_of
    from asyncflow.ops.indexing import gather_nd
    tensor, indices, updates = op.inputs
    output = op.outputs[0]
    x_hits = math_ops.cast(math_ops.equal(tensor, output), grad.dtype)
    y_hits = math_ops.cast(math_ops.equal(updates, gather_nd(output, indices)), grad.dtype)
    hits = math_ops.add(x_hits, scatter_nd(indices, y_hits,
                                           math_ops.cast(shape_of(tensor), indices.dtype)))
    shared = math_ops.divide(grad, hits)
    return [math_ops.multiply(shared, x_hits), None,
            math_ops.multiply(gather_nd(shared, indices), y_hits)]


register_gradient("TensorScatterMax")(_tensor_scatter_min_or_max_grad)
register_gradient("TensorScatterMin")(_tensor_scatter_min_or_max_grad)
