"""Indexing by tensors of indices: gather, gather_nd and their sum back, the segment sums
(``unsorted_segment_sum``, ``segment_sum``), and ``boolean_mask``.

Theory of operation:
- ``GatherNd`` (TF1's ``gather_nd``) checks every index tuple at run time; its gradient is the
  ``UnsortedSegmentSum`` of the incoming slices at each tuple's row-major position.
- ``GatherV2`` checks every index at run time (an out-of-range index is an
  ``InvalidArgumentError`` naming the op, like TF1 on CPU). Along axis 0 its gradient is an
  ``IndexedSlices`` (the incoming rows and the flat ids, never a dense table); along another
  axis or with batch dims it is dense: an ``UnsortedSegmentSum`` of the incoming gradient into
  the gathered rows (repeated indices add), which is also how an IndexedSlices densifies.
  On params of unknown rank both gradients compute every dim when they run, as TF1's.
- The segment sums live here, not in ``ops/segment.py``, because gather's gradient is one and
  theirs is a gather.

``slice`` and ``strided_slice`` (and ``t[...]``) are defined in ``ops/slicing.py`` and still
importable from here. Kernels live in ``asyncflow/kernels/indexing.py``.
"""
from __future__ import annotations

import builtins

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.graph.indexed_slices import IndexedSlices, register_densifier
from asyncflow.ops import math as math_ops
from asyncflow.ops import sources
from asyncflow.ops.array import reshape, shape, size
from asyncflow.ops.construct import INTEGER, as_tensor, check_dtype, graph_of, make, static_value
from asyncflow.ops.layout import concat, stack, transpose
from asyncflow.ops.shapes import (
    dims_of, dims_product, dims_vector, normalize_axis, shape_of, static_ints,
)
from asyncflow.ops import slicing
from asyncflow.ops.slicing import strided_slice

slice = slicing.slice  # noqa: A001 - defined in ops/slicing.py, importable from here as before


# -- gather ------------------------------------------------------------------------------------
def _infer_gather(op):
    params, indices = op.inputs
    check_dtype(op.type, indices, INTEGER, "indices")
    axis, batch_dims = op.get_attr("axis"), op.get_attr("batch_dims")
    if params.shape.ndims is None or indices.shape.ndims is None:
        return [(params.dtype, TensorShape(None))]
    if batch_dims > axis:
        raise ValueError(f"batch_dims ({batch_dims}) must be <= axis ({axis})")
    if batch_dims > indices.shape.ndims:
        raise ValueError(f"batch_dims ({batch_dims}) must be <= rank(indices) "
                         f"({indices.shape.ndims})")
    try:
        batch = params.shape[:batch_dims].merge_with(indices.shape[:batch_dims])
    except ValueError:
        raise ValueError(f"the first {batch_dims} dims of params {params.shape} and indices "
                         f"{indices.shape} must match") from None
    dims = list(batch.dims) + list(params.shape.dims[batch_dims:axis]) + \
        list(indices.shape.dims[batch_dims:]) + list(params.shape.dims[axis + 1:])
    return [(params.dtype, TensorShape(dims))]


register_op("GatherV2", infer=_infer_gather)


def gather(params, indices, axis=0, batch_dims=0, name=None, validate_indices=None):
    """Rows (slices along ``axis``) of ``params`` picked by ``indices``.

    Output shape: ``params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis+1:]``.

    Args:
        params: the tensor (or Variable) to gather from.
        indices: an int32/int64 tensor of positions in ``[0, params.shape[axis])``.
        axis: the gathered axis (negative: from the end, when the op runs if the rank is unknown).
        batch_dims: the number of leading dims of ``params`` and ``indices`` that are batch
            dims (gathered element-wise); must be <= axis.
        name: op name.
        validate_indices: ignored (indices are always checked, as TF1 on CPU).

    Raises:
        ValueError: on a bad axis or batch_dims (build time); InvalidArgumentError at run
            time when an index (or an axis resolved then) is out of range.
    """
    del validate_indices
    params = as_tensor(params)
    indices = as_tensor(indices)
    if hasattr(axis, "op"):
        axis = static_ints(axis)
        if axis is None:
            raise ValueError("GatherV2: axis must be a constant")
    axis = normalize_axis(axis, params.shape.ndims, "GatherV2")
    batch_dims = int(batch_dims)
    if batch_dims < 0:
        if indices.shape.ndims is None:
            raise ValueError("GatherV2: negative batch_dims needs the rank of indices")
        batch_dims += indices.shape.ndims
    return make("GatherV2", (params, indices), {"axis": axis, "batch_dims": batch_dims}, name,
                "GatherV2")


def batch_gather(params, indices, name=None):
    """TF1's ``tf.batch_gather``: ``gather`` with every dim of ``indices`` but its last a batch
    dim (``batch_dims = axis = rank(indices) - 1``), in a scope ``name`` (``BatchGather``).

    Raises:
        ValueError: for ``indices`` of unknown rank (as TF1), or ranks and batch dims that
            ``gather`` refuses. An index out of range fails the run naming the op (TF1's CPU
            kernel reads another batch's row instead).
    """
    with graph_of([params, indices]).name_scope(name or "BatchGather"):
        indices = as_tensor(indices)
        params = as_tensor(params)
        if indices.shape.ndims is None:
            raise ValueError("batch_gather does not allow indices with unknown shape.")
        batch_dims = indices.shape.ndims - 1
        return gather(params, indices, axis=batch_dims, batch_dims=batch_dims)


@register_gradient("GatherV2")
def _gather_grad(op, grad):
    params, indices = op.inputs
    a, b = op.get_attr("axis"), op.get_attr("batch_dims")
    if params.shape.ndims is None:
        return [_unknown_rank_gather_grad(params, indices, grad, a, b), None]
    if a < 0:  # built on params of unknown rank, which became known since
        a += params.shape.ndims
    p_dims, i_dims = dims_of(params), dims_of(indices)
    if a == 0 and b == 0:
        return [_sparse_gather_grad(params, indices, grad, p_dims, i_dims), None]
    k = len(i_dims) - b
    # grad is B + P[b:a] + I' + P[a+1:]: move I' next to B, flatten them, sum into rows.
    perm = list(builtins.range(b)) + list(builtins.range(a, a + k)) + \
        list(builtins.range(b, a)) + list(builtins.range(a + k, len(p_dims) - 1 + k))
    moved = grad if perm == sorted(perm) else transpose(grad, perm)
    rest = p_dims[b:a] + p_dims[a + 1:]
    batch = p_dims[:b]
    rows = reshape(moved, dims_vector([dims_product(batch + i_dims[b:])] + rest))
    ids = indices
    if b:
        offsets = math_ops.cast(math_ops.multiply(sources.range(0, dims_product(batch)),
                                                  p_dims[a]), indices.dtype)
        ids = math_ops.add(indices, reshape(offsets, dims_vector(batch + [1] * k)))
    summed = unsorted_segment_sum(rows, reshape(ids, [-1]),
                                  dims_product(batch + [p_dims[a]]))
    unflat = reshape(summed, dims_vector(batch + [p_dims[a]] + rest))
    back = list(builtins.range(b)) + list(builtins.range(b + 1, a + 1)) + [b] + \
        list(builtins.range(a + 1, len(p_dims)))
    return [unflat if back == sorted(back) else transpose(unflat, back), None]


def _unknown_rank_gather_grad(params, indices, grad, a, b):
    """The gradient of a gather from params of unknown rank, every dim computed when it runs
    (TF1's, whose axis is a tensor; a negative ``a`` slices the shape from the end). Along axis
    0 an IndexedSlices; else ``grad`` as ``[batch, outer, ids, inner]`` summed into
    ``batch * params.shape[a]`` rows, then put back in place."""
    with params.graph.colocate_with(params.op):
        dims = shape(params)
    if a == 0 and b == 0:
        count = reshape(size(indices), [1])
        values = reshape(grad, concat([count, dims[1:]], 0))
        return IndexedSlices(values, reshape(indices, [-1]), dims)
    batch, outer, inner = (math_ops.reduce_prod(d) for d in (dims[:b], dims[b:a], dims[a:][1:]))
    rows = dims[a]
    moved = transpose(reshape(grad, stack([batch, outer, -1, inner])), [0, 2, 1, 3])
    offsets = math_ops.cast(math_ops.multiply(sources.range(0, batch), rows), indices.dtype)
    ids = math_ops.add(reshape(indices, stack([batch, -1])), reshape(offsets, [-1, 1]))
    summed = unsorted_segment_sum(reshape(moved, stack([-1, outer, inner])), reshape(ids, [-1]),
                                  math_ops.multiply(batch, rows))
    back = transpose(reshape(summed, stack([batch, rows, outer, inner])), [0, 2, 1, 3])
    return reshape(back, dims)


# -- gather_nd -----------------------------------------------------------------------------------
def _infer_gather_nd(op):
    params, indices = op.inputs
    check_dtype(op.type, indices, INTEGER, "indices")
    if params.shape.ndims is None or indices.shape.ndims is None:
        return [(params.dtype, TensorShape(None))]
    if indices.shape.ndims == 0:
        raise ValueError(f"GatherNd {op.name}: indices must have rank >= 1, got a scalar")
    depth = indices.shape.dims[-1]
    if depth is not None and depth > params.shape.ndims:
        raise ValueError(f"GatherNd {op.name}: the last dim of indices ({depth}) must be <= "
                         f"the rank of params ({params.shape.ndims})")
    tail = None if depth is None else list(params.shape.dims[depth:])
    if tail is None:
        return [(params.dtype, TensorShape(None))]
    return [(params.dtype, TensorShape(list(indices.shape.dims[:-1]) + tail))]


register_op("GatherNd", infer=_infer_gather_nd)


def gather_nd(params, indices, name=None, batch_dims=0):
    """TF1's ``tf.gather_nd``: slices of ``params`` at the index tuples of ``indices``.

    ``indices`` has shape ``I + [K]``: each row of length K indexes the first K dims of
    ``params``; the result has shape ``I + params.shape[K:]``. Every index is checked at run
    time (``InvalidArgumentError`` naming the op and the bad position, as TF1 on CPU). The
    gradient with respect to ``params`` adds the incoming slices at their positions.

    Raises:
        ValueError: at build time, for a scalar ``indices``, a K above the rank of
            ``params``, or ``batch_dims`` that the ranks or batch dims do not allow.
    """
    params, indices = as_tensor(params), as_tensor(indices)
    if batch_dims:
        return _batch_gather_nd(params, indices, int(batch_dims), name)
    return make("GatherNd", (params, indices), None, name, "GatherNd")


def _batch_gather_nd(params, indices, batch_dims, name):
    """Each of the leading ``batch_dims`` entries' index tuples into its own params: one plain
    GatherNd over the batch-flattened params, the batch's number prepended to every tuple."""
    from asyncflow.ops.sources import ones_like, range as _range
    p_dims, i_dims = dims_of(params), dims_of(indices)
    depth = i_dims[-1] if i_dims else None
    if not (0 < batch_dims < builtins.min(len(p_dims), len(i_dims)) and isinstance(depth, int)
            and batch_dims + depth <= len(p_dims)) or builtins.any(
                isinstance(a, int) and isinstance(b, int) and a != b
                for a, b in zip(p_dims[:batch_dims], i_dims[:batch_dims])):
        raise ValueError(f"gather_nd: batch_dims={batch_dims} does not fit params "
                         f"{params.shape} and indices {indices.shape}")
    with params.graph.name_scope(name or "GatherNd"):
        batch = dims_product(p_dims[:batch_dims])
        flat_params = reshape(params, dims_vector([batch] + p_dims[batch_dims:]))
        flat = reshape(indices, dims_vector([batch, dims_product(i_dims[batch_dims:-1]), depth]))
        static = [d if isinstance(d, int) else None for d in [batch] + p_dims[batch_dims:]]
        flat_params.set_shape(TensorShape(static))  # GatherNd's gradient needs the ranks
        flat.set_shape(TensorShape([static[0], None, depth]))
        rows = reshape(math_ops.cast(_range(0, batch), indices.dtype), [-1, 1, 1])
        tuples = concat([math_ops.multiply(rows, ones_like(flat[..., :1])), flat], 2)
        gathered = make("GatherNd", (flat_params, tuples), None, None, "GatherNd")
        out = reshape(gathered, dims_vector(i_dims[:-1] + p_dims[batch_dims + depth:]))
    # what TF1 knows: a batch dim from either side, the indices' others, params' trailing ones
    batch_known = [p if p is not None else i for p, i in
                   zip(params.shape.dims[:batch_dims], indices.shape.dims[:batch_dims])]
    out.set_shape(TensorShape(batch_known + list(indices.shape.dims[batch_dims:-1])
                              + list(params.shape.dims[batch_dims + depth:])))
    return out


@register_gradient("GatherNd")
def _gather_nd_grad(op, grad):
    params, indices = op.inputs
    depth = indices.shape.dims[-1] if indices.shape.ndims else None
    if depth is None:
        raise ValueError(f"the gradient of GatherNd {op.name} needs the static last dim of "
                         "its indices")
    if params.shape.ndims is None:  # every dim computed when the gradient runs, as TF1's
        with params.graph.colocate_with(params.op):
            dims = shape(params)
        lead = [dims[k] for k in builtins.range(depth)]
        rows_shape, full = concat([[-1], dims[depth:]], 0), dims
    else:
        p_dims = dims_of(params)
        lead, full = p_dims[:depth], dims_vector(p_dims)
        rows_shape = dims_vector([-1] + p_dims[depth:])
    flat = None  # row-major position of each index tuple among the first ``depth`` dims
    for k in builtins.range(depth):
        column = math_ops.cast(indices[..., k], dtypes.int32)
        flat = column if flat is None else math_ops.add(math_ops.multiply(flat, lead[k]),
                                                        column)
    rows = reshape(grad, rows_shape)
    summed = unsorted_segment_sum(rows, reshape(flat, [-1]), dims_product(lead))
    return [reshape(summed, full), None]


def _sparse_gather_grad(params, indices, grad, p_dims, i_dims):
    """TF1's sparse gradient of a gather along axis 0: the incoming rows at the flat ids.

    The dense shape is a constant when known, else computed colocated with ``params`` (so it
    never crosses the wire); a sparse optimizer update does not even read it.
    """
    count = dims_product(i_dims)
    values = reshape(grad, dims_vector([count] + p_dims[1:]))
    if params.shape.ndims is not None and indices.shape.ndims is not None:
        values.set_shape(TensorShape([indices.shape.num_elements()] + list(params.shape.dims[1:])))
    flat_ids = reshape(indices, dims_vector([count]))
    if params.shape.is_fully_defined():
        dense_shape = sources.constant(np.asarray(params.shape.as_list(), np.int32))
    else:
        with params.graph.colocate_with(params.op):
            dense_shape = shape_of(params)
    return IndexedSlices(values, flat_ids, dense_shape)


def _densify(slices):
    """``convert_to_tensor(IndexedSlices)``: the values summed into their rows."""
    shape = slices.dense_shape
    known = static_value(shape)
    rows = int(np.asarray(known).reshape(-1)[0]) if known is not None else \
        strided_slice(shape, [0], [1], shrink_axis_mask=1)
    dense = unsorted_segment_sum(slices.values, slices.indices, rows)
    if known is not None:
        dense.set_shape(TensorShape([int(d) for d in np.asarray(known).reshape(-1)]))
    return dense


register_densifier(_densify)


# -- unsorted segment sum ----------------------------------------------------------------------
def infer_unsorted_segment(op):  # ops/segment.py's unsorted reductions' too
    data, ids, num = op.inputs
    check_dtype(op.type, ids, INTEGER, "segment_ids")
    check_dtype(op.type, num, INTEGER, "num_segments")
    count = static_value(num)
    if num.shape.ndims not in (None, 0) or count is not None and int(count) < 0:  # TF1's too
        raise ValueError(f"{op.type} '{op.name}': num_segments must be a non-negative scalar, "
                         f"got {f'shape {num.shape}' if num.shape.ndims else count}")
    if data.shape.ndims is None or ids.shape.ndims is None:
        return [(data.dtype, TensorShape(None))]
    if not data.shape[:ids.shape.ndims].is_compatible_with(ids.shape):
        raise ValueError(f"{op.name}: segment_ids {ids.shape} must be a prefix of {data.shape}")
    return [(data.dtype, TensorShape([None if count is None else int(count)] +
                                     list(data.shape.dims[ids.shape.ndims:])))]


register_op("UnsortedSegmentSum", infer=infer_unsorted_segment)


def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """``out[j] = sum of data[i...] where segment_ids[i...] == j``; negative ids are dropped.

    Raises:
        InvalidArgumentError: at run time when an id is >= ``num_segments``.
    """
    data, segment_ids = as_tensor(data), as_tensor(segment_ids)
    num_segments = as_tensor(num_segments, dtype=dtypes.int32) \
        if not hasattr(num_segments, "op") else num_segments
    return make("UnsortedSegmentSum", (data, segment_ids, num_segments), None, name,
                "UnsortedSegmentSum")


@register_gradient("UnsortedSegmentSum")
def _segment_sum_grad(op, grad):
    data, ids, _ = op.inputs
    kept = math_ops.greater_equal(ids, 0)
    rows = gather(grad, math_ops.maximum(ids, 0))
    extra = (data.shape.ndims or 0) - (ids.shape.ndims or 0)
    mask = reshape(math_ops.cast(kept, grad.dtype), dims_vector(dims_of(ids) + [1] * extra))
    return [math_ops.multiply(rows, mask), None, None]


# -- sorted segment sum ------------------------------------------------------------------------
def _infer_sorted_segment_sum(op):
    data, ids = op.inputs
    check_dtype(op.type, ids, INTEGER, "segment_ids")
    if ids.shape.ndims not in (None, 1):
        raise ValueError(f"segment_ids must be a vector, got shape {ids.shape}")
    if data.shape.ndims is None:
        return [(data.dtype, TensorShape(None))]
    if data.shape.ndims == 0 or not data.shape[:1].is_compatible_with(ids.shape):
        raise ValueError(f"segment_ids shape {ids.shape} must be the first dimension of data "
                         f"shape {data.shape}")
    return [(data.dtype, TensorShape([None] + list(data.shape.dims[1:])))]


register_op("SegmentSum", infer=_infer_sorted_segment_sum)


def segment_sum(data, segment_ids, name=None):
    """``out[j] = sum of data[i] where segment_ids[i] == j`` for sorted ``segment_ids`` (TF1's
    ``tf.segment_sum``): ``last id + 1`` rows, a row without entries is zeros.

    Raises:
        InvalidArgumentError: at run time, with TF1's message, when the ids are not
            increasing (``"segment ids are not increasing"``) or one is negative.
    """
    return make("SegmentSum", (as_tensor(data), as_tensor(segment_ids)), None, name,
                "SegmentSum")


@register_gradient("SegmentSum")
def _sorted_segment_sum_grad(op, grad):
    return [gather(grad, op.inputs[1]), None]


def boolean_mask(tensor, mask, name=None, axis=None):
    """The entries (slices) of ``tensor`` where the boolean ``mask`` is true, flattened along
    the mask's dimensions starting at ``axis`` (TF1's ``tf.boolean_mask``).

    Raises:
        ValueError: if the mask's rank is unknown or 0, or its shape does not fit the tensor's.
    """
    from asyncflow.ops.array import shape as _shape
    from asyncflow.ops.layout import squeeze
    tensor, mask = as_tensor(tensor), as_tensor(mask)
    axis = 0 if axis is None else int(axis)
    k = mask.shape.ndims
    if k is None or k == 0:
        raise ValueError(f"boolean_mask: the mask needs a known rank >= 1, got {mask.shape}")
    if tensor.shape.ndims is not None:
        inner = TensorShape(tensor.shape.dims[axis:axis + k])
        if not inner.is_compatible_with(mask.shape):
            raise ValueError(f"boolean_mask: mask shape {mask.shape} does not fit tensor shape "
                             f"{tensor.shape} at axis {axis}")
    with tensor.graph.name_scope(name or "boolean_mask"):
        dims = _shape(tensor)
        masked = mask.shape.num_elements()  # their count, not -1: a tensor may be empty
        if masked is None:
            masked = math_ops.reduce_prod(_shape(mask))  # a scalar: one piece of the shape
        flat = reshape(tensor, concat([dims[:axis], [masked], dims[axis + k:]], 0))
        picked = squeeze(math_ops.where(reshape(mask, [-1])), axis=[1])
        out = gather(flat, picked, axis=axis)
        if tensor.shape.ndims is not None:  # what TF1 knows: the dims beside the mask's
            out.set_shape(TensorShape(list(tensor.shape.dims[:axis]) + [None]
                                      + list(tensor.shape.dims[axis + k:])))
        return out
