"""The segment reductions other than the sum (which ops/indexing.py holds): TF1's
``segment_max/min/mean/prod`` (sorted ids: ``last id + 1`` rows, an empty segment is 0, or 1
for the product) and ``unsorted_segment_max/min/prod`` (``num_segments`` rows, negative ids
dropped, an empty segment the dtype's lowest finite value for max, highest for min, 1 for the
product), with ``unsorted_segment_mean`` and ``unsorted_segment_sqrt_n`` composed from sums
as TF1 composes them, and ``sparse_segment_sum/mean/sqrt_n`` (a gather of rows, then the
sorted reduction; with ``num_segments`` an unsorted sum after the sorted kernel checked the
ids). Gradients are TF1's: max and min share the gradient among the entries
that equal the result, the product's handles zeros (one zero: the product of the others; two:
zero). Kernels live in asyncflow/kernels/segment.py.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import math as math_ops
from asyncflow.ops import sources
from asyncflow.ops.array import identity, reshape
from asyncflow.ops.construct import INTEGER, as_tensor, check_dtype, make, static_value
from asyncflow.ops.indexing import (
    gather, infer_unsorted_segment, segment_sum, unsorted_segment_sum)
from asyncflow.ops.shapes import dims_of, dims_vector

SORTED = ("SegmentMax", "SegmentMin", "SegmentMean", "SegmentProd")
UNSORTED = ("UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd")


def _infer_sorted(op):
    data, ids = op.inputs
    check_dtype(op.type, ids, INTEGER, "segment_ids")
    if ids.shape.ndims not in (None, 1):
        raise ValueError(f"{op.type} '{op.name}': segment_ids must be a vector, got shape "
                         f"{ids.shape}")
    if data.shape.ndims is None:
        return [(data.dtype, TensorShape(None))]
    if data.shape.ndims == 0 or not data.shape[:1].is_compatible_with(ids.shape):
        raise ValueError(f"{op.type} '{op.name}': segment_ids shape {ids.shape} must be the "
                         f"first dimension of data shape {data.shape}")
    return [(data.dtype, TensorShape([None] + list(data.shape.dims[1:])))]


for _type in SORTED:
    register_op(_type, infer=_infer_sorted)
for _type in UNSORTED:
    register_op(_type, infer=infer_unsorted_segment)


def _sorted(op_type, default_name):
    def build(data, segment_ids, name=None):
        return make(op_type, (as_tensor(data), as_tensor(segment_ids)), None, name, default_name)
    build.__name__ = default_name
    build.__doc__ = (f"TF1's ``tf.{default_name}``: per segment of sorted ``segment_ids``, "
                     "the reduction of its rows (InvalidArgumentError at run time for ids "
                     "that decrease or are negative).")
    return build


def _num(num_segments):
    return num_segments if hasattr(num_segments, "op") else as_tensor(num_segments,
                                                                       dtype=dtypes.int32)


def _unsorted(op_type, default_name):
    def build(data, segment_ids, num_segments, name=None):
        return make(op_type, (as_tensor(data), as_tensor(segment_ids), _num(num_segments)),
                    None, name, default_name)
    build.__name__ = default_name
    build.__doc__ = (f"TF1's ``tf.{default_name}``: ``num_segments`` rows, negative ids "
                     "dropped (InvalidArgumentError at run time for an id >= num_segments).")
    return build


segment_max = _sorted("SegmentMax", "segment_max")
segment_min = _sorted("SegmentMin", "segment_min")
segment_mean = _sorted("SegmentMean", "segment_mean")
segment_prod = _sorted("SegmentProd", "segment_prod")
unsorted_segment_max = _unsorted("UnsortedSegmentMax", "unsorted_segment_max")
unsorted_segment_min = _unsorted("UnsortedSegmentMin", "unsorted_segment_min")
unsorted_segment_prod = _unsorted("UnsortedSegmentProd", "unsorted_segment_prod")


def _segment_counts(data, segment_ids, num_segments):
    """How many rows each segment holds, at least 1, shaped to divide the sums (TF1's
    ``_unsorted_segment_N``)."""
    data, segment_ids = as_tensor(data), as_tensor(segment_ids)
    extra = data.shape.ndims - segment_ids.shape.ndims
    ones = sources.ones_like(segment_ids, dtype=data.dtype)
    counts = unsorted_segment_sum(ones, segment_ids, num_segments)
    counts = math_ops.maximum(counts, sources.ones_like(counts))
    return reshape(counts, [-1] + [1] * extra)  # [-1]: the static rows stay known


def unsorted_segment_mean(data, segment_ids, num_segments, name=None):
    """TF1's ``tf.unsorted_segment_mean``: the sum over the count of each segment (an empty
    segment is 0)."""
    data = as_tensor(data)
    with data.graph.name_scope(name or "UnsortedSegmentMean"):
        counts = _segment_counts(data, segment_ids, num_segments)
        return math_ops.divide(unsorted_segment_sum(data, segment_ids, num_segments), counts)


def unsorted_segment_sqrt_n(data, segment_ids, num_segments, name=None):
    """TF1's ``tf.unsorted_segment_sqrt_n``: the sum over the square root of each segment's
    count (floats only, as TF1)."""
    data = as_tensor(data)
    if not data.dtype.is_floating:
        raise TypeError(f"unsorted_segment_sqrt_n: data must be floating, got {data.dtype.name}")
    with data.graph.name_scope(name or "UnsortedSegmentSqrtN"):
        counts = _segment_counts(data, segment_ids, num_segments)
        return math_ops.divide(unsorted_segment_sum(data, segment_ids, num_segments),
                               math_ops.sqrt(counts))


# -- gradients (TF1's math_grad.py) -------------------------------------------------------------
def _kept_mask(ids, like):
    """``ids >= 0`` shaped to broadcast against ``like`` (TF1's ``_GatherDropNegatives``)."""
    extra = like.shape.ndims - ids.shape.ndims
    return reshape(math_ops.greater_equal(ids, 0), dims_vector(dims_of(ids) + [1] * extra))


def _gather_kept(params, ids):
    """``params[ids]`` with the rows of negative ids zero."""
    gathered = gather(params, math_ops.maximum(ids, 0))
    return math_ops.where(_kept_mask(ids, gathered), gathered, sources.zeros_like(gathered))


def _min_or_max_grad(op, grad):
    data, ids = op.inputs[0], op.inputs[1]
    unsorted = len(op.inputs) == 3
    chosen = _gather_kept(op.outputs[0], ids) if unsorted else gather(op.outputs[0], ids)
    selected = math_ops.equal(data, chosen)
    if unsorted:
        selected = math_ops.logical_and(selected, _kept_mask(ids, data))
        count = unsorted_segment_sum(math_ops.cast(selected, grad.dtype), ids, op.inputs[2])
        shared = _gather_kept(math_ops.divide(grad, count), ids)
    else:
        count = segment_sum(math_ops.cast(selected, grad.dtype), ids)
        shared = gather(math_ops.divide(grad, count), ids)
    return [math_ops.where(selected, shared, sources.zeros_like(shared)), None] + \
        [None] * unsorted


for _type in ("SegmentMax", "SegmentMin", "UnsortedSegmentMax", "UnsortedSegmentMin"):
    register_gradient(_type)(_min_or_max_grad)


@register_gradient("SegmentMean")
def _segment_mean_grad(op, grad):
    data, ids = op.inputs
    extra = data.shape.ndims - 1
    ones = reshape(sources.ones_like(ids, dtype=grad.dtype),
                   dims_vector(dims_of(ids) + [1] * extra))
    return [gather(math_ops.divide(grad, segment_sum(ones, ids)), ids), None]


def _prod_grad(op, grad):
    """TF1's: with no zero in a segment, product / x; with one, the product of the others at
    the zero (0 elsewhere); with two or more, 0."""
    data, ids = op.inputs[0], op.inputs[1]
    unsorted = len(op.inputs) == 3
    zero = math_ops.equal(data, sources.zeros_like(data))
    if unsorted:
        def segment_reduce(x, kind):
            return (unsorted_segment_sum if kind == "sum" else unsorted_segment_prod)(
                x, ids, op.inputs[2])
        pick = _gather_kept
    else:
        def segment_reduce(x, kind):
            return (segment_sum if kind == "sum" else segment_prod)(x, ids)
        pick = gather
    zeros = segment_reduce(math_ops.cast(zero, dtypes.int32), "sum")
    grad = math_ops.where(math_ops.greater(zeros, 1), sources.zeros_like(grad), grad)
    others = segment_reduce(math_ops.where(zero, sources.ones_like(data), data), "prod")
    at_zero = gather(others, math_ops.maximum(ids, 0))
    elsewhere = math_ops.divide(gather(op.outputs[0], math_ops.maximum(ids, 0)), data)
    partial = math_ops.where(zero, at_zero, elsewhere)
    return [math_ops.multiply(pick(grad, ids), partial), None] + [None] * unsorted


register_gradient("SegmentProd")(_prod_grad)
register_gradient("UnsortedSegmentProd")(_prod_grad)


# -- sparse segment reductions (TF1 composes them from a gather and a segment reduction) ----
def _sparse_segment(kind, data, indices, segment_ids, name, num_segments):
    data = as_tensor(data)
    if kind != "sum" and not data.dtype.is_floating:
        raise TypeError(f"sparse_segment_{kind}: data must be floating (TF1's kernel), got "
                        f"{data.dtype.name}")
    with data.graph.name_scope(name or f"SparseSegment{kind.capitalize()}"):
        rows = gather(data, indices)
        if num_segments is not None:  # the ids must still increase (TF1's kernel checks)
            check = segment_sum(sources.zeros_like(as_tensor(segment_ids)), segment_ids)
            with data.graph.control_dependencies([check]):
                rows = identity(rows)
        if num_segments is None:
            total = segment_sum(rows, segment_ids)
            if kind == "sum":
                return total
            if kind == "mean":
                return segment_mean(rows, segment_ids)
            ones = sources.ones_like(as_tensor(segment_ids), dtype=data.dtype)
            counts = math_ops.maximum(segment_sum(ones, segment_ids), 1.0)
            extra = data.shape.ndims - 1
            return math_ops.divide(total, reshape(math_ops.sqrt(counts), [-1] + [1] * extra))
        total = unsorted_segment_sum(rows, segment_ids, num_segments)
        if kind == "sum":
            return total
        counts = _segment_counts(rows, segment_ids, num_segments)
        return math_ops.divide(total, counts if kind == "mean" else math_ops.sqrt(counts))


def sparse_segment_sum(data, indices, segment_ids, name=None, num_segments=None):
    """TF1's ``tf.sparse_segment_sum``: ``segment_sum(gather(data, indices), segment_ids)``
    (``num_segments`` rows when given)."""
    return _sparse_segment("sum", data, indices, segment_ids, name, num_segments)


def sparse_segment_mean(data, indices, segment_ids, name=None, num_segments=None):
    """TF1's ``tf.sparse_segment_mean``: the mean of the rows ``data[indices]`` per segment."""
    return _sparse_segment("mean", data, indices, segment_ids, name, num_segments)


def sparse_segment_sqrt_n(data, indices, segment_ids, name=None, num_segments=None):
    """TF1's ``tf.sparse_segment_sqrt_n``: the sum of the rows ``data[indices]`` per segment
    over the square root of their count."""
    return _sparse_segment("sqrt_n", data, indices, segment_ids, name, num_segments)
