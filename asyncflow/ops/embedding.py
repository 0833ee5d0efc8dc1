"""Embeddings: dynamic_partition, dynamic_stitch and (sharded) embedding_lookup.

Theory of operation: ``embedding_lookup`` over a list of shards uses TF1's partition
strategies: ``"mod"`` puts id ``i`` in shard ``i % n`` at row ``i // n``; ``"div"`` gives each
shard a contiguous range of ids, the first ``total % n`` shards one row more. The lookup
partitions the flat ids by shard (DynamicPartition), gathers from each shard (GatherV2) and
puts the rows back in id order (DynamicStitch), so each shard receives the gradient of just
the rows it served. A single tensor or variable is a plain gather. Each gather is colocated
with its shard (TF1), so on a parameter server only the looked-up rows leave the table's task,
and the gradient (an ``IndexedSlices``) comes back as rows and ids.

Kernels live in ``asyncflow/kernels/embedding.py``.
"""
from __future__ import annotations

import builtins

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import math as math_ops
from asyncflow.ops import sources
from asyncflow.ops.array import reshape
from asyncflow.ops.construct import as_tensor, check_dtype, make, make_op, static_value
from asyncflow.ops.indexing import gather
from asyncflow.ops.numerics import clip_by_norm
from asyncflow.ops.shapes import dims_of, dims_product, dims_vector, shape_of


# -- dynamic partition / stitch ----------------------------------------------------------------
def _infer_partition(op):
    data, partitions = op.inputs
    check_dtype(op.type, partitions, lambda d: d is dtypes.int32, "partitions")
    count = op.get_attr("num_partitions")
    if data.shape.ndims is None or partitions.shape.ndims is None:
        return [(data.dtype, TensorShape(None))] * count
    if not data.shape[:partitions.shape.ndims].is_compatible_with(partitions.shape):
        raise ValueError(f"partitions shape {partitions.shape} must be a prefix of data shape "
                         f"{data.shape}")
    return [(data.dtype, TensorShape([None] + list(data.shape.dims[partitions.shape.ndims:])))
            ] * count


register_op("DynamicPartition", infer=_infer_partition)


def dynamic_partition(data, partitions, num_partitions, name=None):
    """Split ``data`` into ``num_partitions`` lists by the int32 ``partitions`` (row order kept)."""
    data = as_tensor(data)
    partitions = as_tensor(partitions, dtype=dtypes.int32) if not hasattr(partitions, "op") \
        else partitions
    op = make_op("DynamicPartition", (data, partitions), {"num_partitions": int(num_partitions)},
                 name, "DynamicPartition")
    return list(op.outputs)


def _infer_stitch(op):
    count = op.get_attr("N")
    indices, data = op.inputs[:count], op.inputs[count:]
    dtype = data[0].dtype
    for tensor in indices:
        check_dtype(op.type, tensor, lambda d: d is dtypes.int32, "indices")
    for tensor in data:
        if tensor.dtype is not dtype:
            raise TypeError(f"all data must have dtype {dtype.name}, got {tensor.dtype.name}")
    statics = [static_value(t) for t in indices]
    first = None if any(v is None for v in statics) else \
        builtins.max([int(np.max(v)) + 1 for v in statics if np.size(v)], default=0)
    i0, d0 = indices[0], data[0]
    if i0.shape.ndims is None or d0.shape.ndims is None:
        return [(dtype, TensorShape(None))]
    return [(dtype, TensorShape([first] + list(d0.shape.dims[i0.shape.ndims:])))]


register_op("DynamicStitch", infer=_infer_stitch)


def dynamic_stitch(indices, data, name=None):
    """``merged[indices[m][i...]] = data[m][i...]``; later entries win on duplicates."""
    if len(indices) != len(data) or not indices:
        raise ValueError("DynamicStitch: indices and data must be non-empty lists of one length")
    indices = [as_tensor(t, dtype=dtypes.int32) if not hasattr(t, "op") else t for t in indices]
    data = [as_tensor(t) for t in data]
    return make("DynamicStitch", tuple(indices) + tuple(data), {"N": len(indices)}, name,
                "DynamicStitch")


@register_gradient("DynamicStitch")
def _stitch_grad(op, grad):
    count = op.get_attr("N")
    indices = op.inputs[:count]
    return [None] * count + [gather(grad, i) for i in indices]


@register_gradient("DynamicPartition")
def _partition_grad(op, *grads):
    data, partitions = op.inputs
    grads = [g if g is not None else sources.zeros_like(out) for g, out in zip(grads, op.outputs)]
    positions = reshape(sources.range(0, dims_product(dims_of(partitions))),
                        shape_of(partitions))
    spread = dynamic_partition(positions, partitions, op.get_attr("num_partitions"))
    return [reshape(dynamic_stitch(spread, grads), shape_of(data)), None]


# -- embedding lookup --------------------------------------------------------------------------
def embedding_lookup(params, ids, partition_strategy="mod", name=None, validate_indices=True,
                     max_norm=None):
    """Rows of an embedding table, possibly sharded over a list of tensors or variables.

    Args:
        params: a tensor/variable, a list of them (shards of one table along dim 0), or a
            ``PartitionedVariable`` (its parts; they are contiguous, so say ``"div"``).
        ids: an int tensor of row ids into the whole table.
        partition_strategy: ``"mod"`` (id ``i`` lives in shard ``i % n``, row ``i // n``) or
            ``"div"`` (shards hold contiguous id ranges, the first ones one row longer).
        name: op name scope.
        validate_indices: ignored (ids are always checked).
        max_norm: if given, each looked-up row is clipped to this L2 norm.

    Returns:
        A tensor of shape ``ids.shape + params[0].shape[1:]``.

    Raises:
        ValueError: on an empty list or an unknown partition strategy.
        InvalidArgumentError: at run time when an id falls outside its shard.
    """
    del validate_indices
    if hasattr(params, "_get_variable_list"):  # a PartitionedVariable: its parts
        params = params._get_variable_list()
    if not isinstance(params, (list, tuple)):
        params = [params]
    if not params:
        raise ValueError("embedding_lookup: params must not be empty")
    if partition_strategy not in ("mod", "div"):
        raise ValueError(f"embedding_lookup: unknown partition_strategy {partition_strategy!r}")
    shards = [as_tensor(p) for p in params]
    ids = as_tensor(ids)
    if len(shards) == 1:
        # Colocated with the table (TF1): the rows cross the wire, not the table.
        with shards[0].graph.colocate_with(shards[0].op):
            result = gather(shards[0], ids, name=name or "embedding_lookup")
    else:
        result = _sharded_lookup(shards, ids, partition_strategy, name)
    if max_norm is not None:
        axes = list(builtins.range(ids.shape.ndims, result.shape.ndims))
        result = clip_by_norm(result, max_norm, axes=axes)
    return result


def _shard_assignment(shards, flat_ids, strategy):
    count = len(shards)
    if strategy == "mod":
        return math_ops.floormod(flat_ids, count), math_ops.floordiv(flat_ids, count)
    rows = [dims_of(s)[0] for s in shards]
    total = rows[0]
    for r in rows[1:]:
        total = math_ops.add(total, r) if not (isinstance(total, int) and isinstance(r, int)) \
            else total + r
    total = math_ops.cast(as_tensor(total), flat_ids.dtype)
    per = math_ops.floordiv(total, count)
    extras = math_ops.floormod(total, count)
    assign = math_ops.maximum(math_ops.floordiv(flat_ids, math_ops.add(per, 1)),
                              math_ops.floordiv(math_ops.subtract(flat_ids, extras), per))
    rows_in = math_ops.where(math_ops.less(assign, extras),
                             math_ops.floormod(flat_ids, math_ops.add(per, 1)),
                             math_ops.floormod(math_ops.subtract(flat_ids, extras), per))
    return assign, rows_in


def _sharded_lookup(shards, ids, strategy, name):
    flat = reshape(ids, [-1])
    assign, rows = _shard_assignment(shards, flat, strategy)
    assign = math_ops.cast(assign, dtypes.int32)
    count = len(shards)
    gather_ids = dynamic_partition(rows, assign, count)
    positions = dynamic_partition(sources.range(0, dims_product(dims_of(flat))), assign, count)
    parts = []
    for shard, part_ids in zip(shards, gather_ids):
        with shard.graph.colocate_with(shard.op):
            parts.append(gather(shard, part_ids))
    merged = dynamic_stitch(positions, parts)
    row_dims = dims_of(shards[0])[1:]
    result = reshape(merged, dims_vector(dims_of(ids) + row_dims),
                     name=name or "embedding_lookup")
    return result
