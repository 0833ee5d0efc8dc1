"""Sorting along an axis: TF1's ``tf.sort`` and ``tf.argsort``; and searching a sorted
axis, TF1's ``tf.searchsorted`` (its ``LowerBound``/``UpperBound`` ops, no gradient).

Theory of operation: TF1 writes both in Python over ``top_k`` (a transpose to bring the axis
last, ``top_k`` with ``k`` the axis's size, and a negation for an ascending sort). Here one
primitive, ``Sort``, does the whole thing along any axis, so the axis's size need not be
known when the graph is built (``top_k`` takes ``k`` as a constant). Its answers are TF1's:
equal values keep their order in either direction (TF1's ``top_k`` is stable, and so its sort
is whether or not ``stable=True`` is asked for), indices are int32, and a rank-0, bool or
complex input is refused. Where a row holds a NaN, TF1's order is whatever its ``std::sort``
makes of comparisons that are all false (the rest of such a row is not even in order); here a
NaN sorts as larger than every number (last ascending, first descending), as numpy's.

``Sort``'s gradient sends each sorted value's gradient back to where the value came from:
``PermuteAlongAxis(grad, indices, inverse=True)``, the inverse permutation of the line, whose
own gradient is the forward permutation. ``PermuteAlongAxis`` is linear in its first input
and takes the indices as they are (no gradient): they are a permutation made by ``Sort``.

Kernels live in ``asyncflow/kernels/sorting.py``.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, check_dtype, make, make_op, static_value
from asyncflow.ops.shapes import normalize_axis

DIRECTIONS = ("ASCENDING", "DESCENDING")
# TF1's TopKV2 kernels: real numbers only.
_SORTABLE = lambda d: d.is_numeric and not d.is_complex and not d.is_bool  # noqa: E731


def _resolve_axis(op_name, axis, ndims):
    """``axis`` in [0, ndims) for a known rank (a scalar refused); as given (perhaps
    negative) for an unknown one, for the kernel to resolve when the op runs, as TF1 does."""
    if ndims == 0:
        raise ValueError(f"{op_name}: the input must have at least 1 dimension, got a scalar")
    return normalize_axis(axis, ndims, op_name)


def _infer_sort(op):
    x = op.inputs[0]
    check_dtype(op.type, x, _SORTABLE, "values")
    _resolve_axis(f"Sort '{op.name}'", op.get_attr("axis"), x.shape.ndims)
    return [(x.dtype, x.shape), (dtypes.int32, x.shape)]


register_op("Sort", infer=_infer_sort)


def _infer_permute(op):
    x, indices = op.inputs
    check_dtype(op.type, indices, lambda d: d is dtypes.int32, "indices")
    shape = x.shape
    if not shape.is_compatible_with(indices.shape):
        raise ValueError(f"PermuteAlongAxis '{op.name}': x {x.shape} and indices "
                         f"{indices.shape} differ")
    return [(x.dtype, shape.merge_with(indices.shape))]


register_op("PermuteAlongAxis", infer=_infer_permute)


def _constant_axis(op_name, axis):
    if hasattr(axis, "op"):
        value = static_value(axis)
        if value is None or value.ndim != 0:
            raise ValueError(f"{op_name}: axis must be a constant scalar, got {axis}")
        axis = value
    try:
        return int(axis)
    except TypeError as exc:
        raise ValueError(f"{op_name}: axis must be a constant scalar, got {axis!r}") from exc


def _sort_op(values, axis, direction, op_name, name):
    if direction not in DIRECTIONS:
        raise ValueError(f"{op_name}: direction must be one of {', '.join(DIRECTIONS)}, "
                         f"got {direction!r}")
    x = as_tensor(values)
    axis = _resolve_axis(op_name, _constant_axis(op_name, axis), x.shape.ndims)
    return make_op("Sort", (x,), {"axis": axis, "descending": direction == "DESCENDING"},
                   name, op_name)


def sort(values, axis=-1, direction="ASCENDING", name=None):
    """TF1's ``tf.sort``: ``values`` sorted along ``axis`` (a constant; -1: the last).

    Args:
        values: a real tensor of rank 1 or more.
        axis: a constant scalar, negative counting from the end.
        direction: ``'ASCENDING'`` or ``'DESCENDING'``.
        name: the op's name (default ``sort``).

    Returns:
        A tensor of ``values``' dtype and shape.

    Raises:
        ValueError: for a scalar, an axis out of range or not constant, another direction.
        TypeError: for a bool or complex tensor.
    """
    return _sort_op(values, axis, direction, "sort", name).outputs[0]


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None):
    """TF1's ``tf.argsort``: the int32 indices that sort ``values`` along ``axis``.

    Equal values keep their order whatever ``stable`` says (TF1's sort is stable too).
    Raises as ``sort``.
    """
    del stable  # always stable, as TF1's
    return _sort_op(values, axis, direction, "argsort", name).outputs[1]


@register_gradient("Sort")
def _sort_grad(op, grad_values, grad_indices=None):
    if grad_values is None:
        return [None]
    return [make("PermuteAlongAxis", (as_tensor(grad_values), op.outputs[1]),
                 {"axis": op.get_attr("axis"), "inverse": True}, None, "SortGrad")]


@register_gradient("PermuteAlongAxis")
def _permute_grad(op, grad):
    return [make("PermuteAlongAxis", (as_tensor(grad), op.inputs[1]),
                 {"axis": op.get_attr("axis"), "inverse": not op.get_attr("inverse")},
                 None, "PermuteAlongAxisGrad"), None]


# -- searchsorted (TF1's LowerBound / UpperBound) ----------------------------------------------
def _infer_bound(op):
    sorted_inputs, values = op.inputs
    if sorted_inputs.dtype is not values.dtype:
        raise TypeError(f"Input 'values' of '{op.type}' Op has type {values.dtype.name} that "
                        f"does not match type {sorted_inputs.dtype.name} of argument "
                        f"'sorted_inputs'.")
    check_dtype(op.type, values, _SORTABLE, "values")
    for t, what in ((sorted_inputs, "sorted_inputs"), (values, "values")):
        if t.shape.ndims not in (None, 2):
            raise ValueError(f"{what} must be 2-D, got shape {t.shape}")
    rows = [t.shape.dims[0] for t in (sorted_inputs, values) if t.shape.ndims == 2]
    known = [r for r in rows if r is not None]
    if len(known) == 2 and known[0] != known[1]:
        raise ValueError(f"sorted_inputs and values must have the same number of rows, got "
                         f"{known[0]} and {known[1]}")
    columns = values.shape.dims[1] if values.shape.ndims == 2 else None
    return [(op.get_attr("out_type"), TensorShape([known[0] if known else None, columns]))]


register_op("LowerBound", infer=_infer_bound)
register_op("UpperBound", infer=_infer_bound)
not_differentiable("LowerBound", "UpperBound")


def searchsorted(sorted_sequence, values, side="left", out_type=dtypes.int32, name=None):
    """TF1's ``tf.searchsorted``: where each of ``values`` would go in the last dim of
    ``sorted_sequence`` (``side='left'``: before equal entries, ``'right'``: after), its
    leading dims matching ``values``' (written as TF1's: both reshaped to rows, one
    ``LowerBound``/``UpperBound`` op named ``name``, the result reshaped back).

    Raises:
        ValueError: for a ``side`` other than 'left' or 'right', or leading dims that differ.
        TypeError: for two dtypes, or an ``out_type`` other than int32/int64.
    """
    from asyncflow.ops.array import reshape
    from asyncflow.ops.shapes import shape_of
    if side not in ("left", "right"):
        raise ValueError(f"side must be either 'right' or 'left'. Saw: {side}.")
    out_type = dtypes.as_dtype(out_type)
    if out_type not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"searchsorted: out_type must be int32 or int64, got {out_type.name}")
    sequence, values = as_tensor(sorted_sequence), as_tensor(values)
    seq_lead = sequence.shape.dims[:-1] if sequence.shape.ndims else None
    val_lead = values.shape.dims[:-1] if values.shape.ndims else None
    if seq_lead is not None and val_lead is not None and (len(seq_lead) != len(val_lead) or any(
            a is not None and b is not None and a != b for a, b in zip(seq_lead, val_lead))):
        raise ValueError(f"searchsorted: the leading dims of sorted_sequence {sequence.shape} "
                         f"and values {values.shape} must match")
    sequence_size = sequence.shape.dims[-1] if sequence.shape.ndims and \
        sequence.shape.dims[-1] is not None else shape_of(sequence)[-1]
    values_size = values.shape.dims[-1] if values.shape.ndims and \
        values.shape.dims[-1] is not None else shape_of(values)[-1]
    rows = make("UpperBound" if side == "right" else "LowerBound",
                (reshape(sequence, [-1, sequence_size]), reshape(values, [-1, values_size])),
                {"out_type": out_type}, name, "UpperBound" if side == "right" else "LowerBound")
    return reshape(rows, shape_of(values))
