"""Set-like ops on 1-D tensors and counting: TF1's ``tf.unique``, ``tf.unique_with_counts``,
``tf.setdiff1d`` and ``tf.bincount``.

``Unique`` keeps each distinct value once, in order of first occurrence (TF1's order, not
sorted), with ``idx`` mapping every input element to its value's position (and the counts
for ``UniqueWithCounts``). ``ListDiff`` keeps the entries of ``x`` not in ``y``, in order,
with their positions. ``Bincount`` counts each non-negative value of an int32 array (or adds
its weights) into ``size`` bins. Their result sizes depend on the values, so the static shape
is ``[None]``; none is differentiable (as in TF1). Their kernels run on the host (TF1
registers them for the CPU).

Kernels live in ``asyncflow/kernels/unique.py``.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import ANY, INTEGER, NUMERIC, as_tensor, check_dtype, make_op

_IDX = (dtypes.int32, dtypes.int64)


def _vector(op, tensor, what):
    if tensor.shape.ndims not in (None, 1):
        raise ValueError(f"{op.type} '{op.name}': {what} must be 1-D, got shape {tensor.shape}")


def _out_idx(op):
    out_idx = dtypes.as_dtype(op.get_attr("out_idx"))
    if out_idx not in _IDX:
        raise TypeError(f"{op.type} '{op.name}': out_idx must be int32 or int64, got "
                        f"{out_idx.name}")
    return out_idx


def _infer_unique(op):
    x = op.inputs[0]
    check_dtype(op.type, x, ANY)
    _vector(op, x, "x")
    out_idx = _out_idx(op)
    outs = [(x.dtype, TensorShape([None])), (out_idx, x.shape)]
    if op.type == "UniqueWithCounts":
        outs.append((out_idx, TensorShape([None])))
    return outs


def _infer_list_diff(op):
    x, y = op.inputs
    _vector(op, x, "x")
    _vector(op, y, "y")
    if x.dtype != y.dtype:
        raise TypeError(f"{op.type} '{op.name}': x and y must have the same dtype, got "
                        f"{x.dtype.name} and {y.dtype.name}")
    return [(x.dtype, TensorShape([None])), (_out_idx(op), TensorShape([None]))]


def _infer_bincount(op):
    arr, size, weights = op.inputs
    if arr.dtype != dtypes.int32:
        raise TypeError(f"{op.type} '{op.name}': arr must be int32, got {arr.dtype.name}")
    check_dtype(op.type, size, INTEGER, "size")
    check_dtype(op.type, weights, NUMERIC, "weights")
    if size.shape.ndims not in (None, 0):
        raise ValueError(f"{op.type} '{op.name}': size must be a scalar, got shape {size.shape}")
    if weights.shape.num_elements() != 0 and not weights.shape.is_compatible_with(arr.shape):
        raise ValueError(f"{op.type} '{op.name}': weights must have arr's shape {arr.shape} "
                         f"or be empty, got {weights.shape}")
    return [(weights.dtype, TensorShape([None]))]


register_op("Unique", infer=_infer_unique)
register_op("UniqueWithCounts", infer=_infer_unique)
register_op("ListDiff", infer=_infer_list_diff)
register_op("Bincount", infer=_infer_bincount)
not_differentiable("Unique", "UniqueWithCounts", "ListDiff", "Bincount")


def unique(x, out_idx=dtypes.int32, name=None):
    """``(y, idx)``: the distinct values of 1-D ``x`` in order of first occurrence and, for
    each element of ``x``, its value's position in ``y``.

    Raises:
        ValueError: for an ``x`` that is not 1-D. TypeError: for an ``out_idx`` not int32/64.
    """
    op = make_op("Unique", (as_tensor(x),), {"out_idx": dtypes.as_dtype(out_idx)}, name,
                 "Unique")
    return op.outputs[0], op.outputs[1]


def unique_with_counts(x, out_idx=dtypes.int32, name=None):
    """``(y, idx, count)``: ``unique``'s results and how often each value occurs.

    Raises:
        ValueError: for an ``x`` that is not 1-D. TypeError: for an ``out_idx`` not int32/64.
    """
    op = make_op("UniqueWithCounts", (as_tensor(x),), {"out_idx": dtypes.as_dtype(out_idx)},
                 name, "UniqueWithCounts")
    return op.outputs[0], op.outputs[1], op.outputs[2]


def setdiff1d(x, y, index_dtype=dtypes.int32, name=None):
    """``(out, idx)``: the entries of 1-D ``x`` not in ``y``, in order, and their positions in
    ``x`` (TF1's ``tf.setdiff1d``).

    Raises:
        ValueError, TypeError: for inputs that are not 1-D or differ in dtype.
    """
    x = as_tensor(x)
    y = as_tensor(y) if hasattr(y, "op") else as_tensor(y, x.dtype)
    op = make_op("ListDiff", (x, y),
                 {"out_idx": dtypes.as_dtype(index_dtype)}, name, "ListDiff")
    return op.outputs[0], op.outputs[1]


def bincount(arr, weights=None, minlength=None, maxlength=None, dtype=dtypes.int32,
             name=None):
    """TF1's ``tf.bincount``: how often each value of the int32 ``arr`` occurs (or the sum of
    its ``weights``), in ``max(arr) + 1`` bins, at least ``minlength`` and at most
    ``maxlength`` (values from ``maxlength`` on are dropped).

    Raises:
        TypeError: for an ``arr`` that is not int32.
    """
    from asyncflow.ops import math as math_ops
    from asyncflow.ops.construct import graph_of
    arr = as_tensor(arr)
    if arr.dtype != dtypes.int32:
        raise TypeError(f"bincount: arr must be int32, got {arr.dtype.name}")
    with graph_of((arr,)).name_scope(name or "bincount"):
        nonempty = math_ops.cast(math_ops.greater(_size(arr), 0), dtypes.int32)
        size = math_ops.multiply(nonempty, math_ops.add(math_ops.reduce_max(arr), 1))
        if minlength is not None:
            size = math_ops.maximum(as_tensor(minlength, dtypes.int32), size)
        if maxlength is not None:
            size = math_ops.minimum(as_tensor(maxlength, dtypes.int32), size)
        weights = (as_tensor([], dtypes.as_dtype(dtype)) if weights is None
                   else as_tensor(weights, dtypes.as_dtype(dtype)))
        return make_op("Bincount", (arr, size, weights), None, None, "Bincount").outputs[0]


def _size(tensor):
    from asyncflow.ops.array import size
    return size(tensor)
