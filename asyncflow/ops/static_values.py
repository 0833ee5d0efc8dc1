"""TF1's ``tf.is_tensor`` and ``tf.get_static_value``: what a graph-building program may ask
of a value before any step runs.

``get_static_value`` folds, as TF1's ``constant_value``, the ops whose value is known from the
graph alone: a ``Const``; ``Shape``/``Size``/``Rank`` of a fully known static shape;
``Identity``/``StopGradient``, ``Cast``, ``Pack`` (on axis 0), ``ConcatV2`` and ``Fill`` of known values.
Anything else (a placeholder, a variable, a random op) is None. Unlike TF1 it does not mark
the tensor as unfeedable (asyncflow's feeds replace any tensor's value; a program that folds a
value and then feeds that tensor sees the fed value in the step, the folded one in Python).
"""
from __future__ import annotations

import numpy as np

from asyncflow.graph.graph import Tensor


def is_tensor(x):
    """TF1's ``tf.is_tensor``: True for a graph value ops take as is (a ``Tensor``, a
    ``Variable``, a ``SparseTensor``), False for what must be converted first (numpy arrays,
    Python numbers and lists)."""
    from asyncflow.ops.sparse_ops import SparseTensor
    return isinstance(x, (Tensor, SparseTensor)) or hasattr(x, "_as_tensor")


def get_static_value(tensor, partial=False):
    """TF1's ``tf.get_static_value``: ``tensor``'s value as a numpy array where the graph
    alone determines it, else None; a value that is not a tensor is returned as is.

    ``partial`` is accepted (TF1's partially known ``Pack``s are not folded here: None).
    """
    if not is_tensor(tensor):
        return tensor
    if not isinstance(tensor, Tensor):
        return None  # a variable's or a SparseTensor's value is known only to a step
    return _fold(tensor)


def _fold(tensor):
    op = tensor.op
    kind = op.type
    dtype = tensor.dtype.as_numpy_dtype
    if kind == "Const":
        return np.asarray(op.get_attr("value"))
    if kind in ("Shape", "Size", "Rank"):
        shape = op.inputs[0].shape
        if kind == "Rank" and shape.ndims is not None:
            return np.asarray(shape.ndims, dtype)
        if not shape.is_fully_defined():
            return None
        dims = shape.as_list()
        return np.asarray(dims if kind == "Shape" else int(np.prod(dims, dtype=np.int64)), dtype)
    values = [_fold(t) for t in op.inputs]
    if any(v is None for v in values) or kind not in _FOLDS:
        return None
    return _FOLDS[kind](op, values, dtype)


_FOLDS = {
    "Identity": lambda op, v, dtype: v[0],
    "StopGradient": lambda op, v, dtype: v[0],
    "Cast": lambda op, v, dtype: np.asarray(v[0]).astype(dtype),
    # (TF1's folds only a Pack on axis 0)
    "Pack": lambda op, v, dtype: np.stack(v).astype(dtype) if op.get_attr("axis") == 0 else None,
    "ConcatV2": lambda op, v, dtype: np.concatenate(v, axis=op.get_attr("axis")).astype(dtype),
    "Fill": lambda op, v, dtype: np.full(tuple(v[0]), v[1], dtype),
}
