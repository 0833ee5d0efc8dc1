"""Checkpoint ops: ``Save`` and ``Restore``, the graph half of ``af.train.Saver``.

``Save(filename, global_step, *tensors)`` writes the tensors (variable references are read
at the moment Save runs) to one safetensors file named by the string scalar ``filename``;
``global_step`` (an int64 scalar, -1 for none) goes into the file's metadata. It has no
outputs: a client orders on it through a control dependency.

``Restore(filename)`` reads the tensors named by its ``tensor_names`` attr and outputs them
with the dtypes and static shapes given by its ``dtypes``/``shapes`` attrs; the Saver feeds
them to ``Assign`` ops, so restoring needs no initializer. An optional ``shape_and_slices``
attr asks for one region of a tensor per name (a part of a partitioned variable), from the
whole tensor or the slices saved (``asyncflow.kernels.checkpoint_slices``).

Sharded saving adds two ops: ``ShardedFilename(filename)`` (attrs ``shard``, ``num_shards``)
names one shard's file, and ``MergeCheckpointShards(filename, global_step)`` (attr
``shard_tensor_names``: per shard, the names it holds) checks every shard and writes the
index that makes them one checkpoint (see ``asyncflow.kernels.checkpoint``).

Save, Restore and MergeCheckpointShards do file I/O. Their kernels are ``offload`` kernels and the ops declare an unbounded
cost, so the executor always runs them on a worker thread and the event loop never waits on
the disk (kernels may not import trio themselves; see the layer table of docs/architecture.md).
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.shape import TensorShape, as_shape
from asyncflow.ops.construct import as_tensor, make_op


def _io_cost(shapes, op):
    """File I/O is always worth a worker thread."""
    return float("inf")


def _check_filename(op):
    filename = op.inputs[0]
    if not filename.dtype.is_string or filename.shape.ndims not in (None, 0):
        raise TypeError(f"filename must be a string scalar, got {filename.dtype.name} "
                        f"{filename.shape}")


def _infer_save(op):
    _check_filename(op)
    step = op.inputs[1]
    if step.dtype is not dtypes.int64 or step.shape.ndims not in (None, 0):
        raise TypeError(f"global_step must be an int64 scalar, got {step.dtype.name} {step.shape}")
    names = op.get_attr("tensor_names")
    tensors = op.inputs[2:]
    if len(names) != len(tensors):
        raise ValueError(f"{len(names)} tensor_names for {len(tensors)} tensors")
    if len(set(names)) != len(names):
        raise ValueError(f"tensor_names must be unique, got {list(names)}")
    for name, tensor in zip(names, tensors):
        if tensor.dtype.is_string:
            raise TypeError(f"cannot save string tensor {name!r} ({tensor.name}): the "
                            "safetensors format has no string dtype")
    return []


def _infer_restore(op):
    _check_filename(op)
    names, kinds, shapes = (op.get_attr(k) for k in ("tensor_names", "dtypes", "shapes"))
    if not len(names) == len(kinds) == len(shapes):
        raise ValueError("tensor_names, dtypes and shapes must have the same length")
    specs = op.attrs.get("shape_and_slices") or ("",) * len(names)
    if len(specs) != len(names):
        raise ValueError(f"{len(specs)} shape_and_slices for {len(names)} tensor_names")
    for name, spec, shape in zip(names, specs, shapes):
        if spec and not _spec_fits(spec, as_shape(shape)):
            raise ValueError(f"Restore of {name!r}: slice spec {spec!r} does not have the "
                             f"shape {as_shape(shape)} of its output")
    return [(dtypes.as_dtype(d), as_shape(s)) for d, s in zip(kinds, shapes)]


def _spec_fits(spec, shape):
    """Whether TF1 slice spec ``spec`` (``"10 4 0,5:0,4"``) cuts a region of ``shape``."""
    head, _, slices = spec.strip().rpartition(" ")
    full, parts = head.split(), slices.split(":")
    if len(full) != len(parts) or (shape.ndims is not None and shape.ndims != len(full)):
        return False
    try:
        lengths = [int(f) if p == "-" else int(p.split(",")[1]) for f, p in zip(full, parts)]
    except (ValueError, IndexError):
        return False
    return shape.is_compatible_with(lengths)


def _infer_sharded_filename(op):
    _check_filename(op)
    shard, num_shards = op.get_attr("shard"), op.get_attr("num_shards")
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} is not one of {num_shards} shards")
    return [(dtypes.string, as_shape([]))]


def _infer_merge(op):
    _check_filename(op)
    if not op.get_attr("shard_tensor_names"):
        raise ValueError("MergeCheckpointShards needs at least one shard")
    return []


# Save reads its inputs as values (TF1's SaveV2): taking them as references would make the
# placer colocate every saved variable with the one Save op, across tasks.
register_op("Save", infer=_infer_save, stateful=True, cost=_io_cost)
register_op("Restore", infer=_infer_restore, stateful=True, cost=_io_cost)
register_op("ShardedFilename", infer=_infer_sharded_filename)
register_op("MergeCheckpointShards", infer=_infer_merge, stateful=True, cost=_io_cost)
not_differentiable("Save", "Restore", "ShardedFilename", "MergeCheckpointShards")


def save(filename, global_step, tensor_names, tensors, name=None):
    """A ``Save`` op writing ``tensors`` (Variables, refs or tensors) under ``tensor_names``.

    Args:
        filename: string scalar tensor (or value): the file to write.
        global_step: int64 scalar tensor (or value), -1 for none; stored in the metadata.
        tensor_names: names of the tensors in the file (unique).
        tensors: Variables, variable references or Tensors, aligned with ``tensor_names``.
        name: the op's name.

    Returns:
        The Save Operation (it has no outputs).
    """
    refs = [t._ref() if hasattr(t, "_ref") else as_tensor(t) for t in tensors]
    inputs = [as_tensor(filename, dtype=dtypes.string), as_tensor(global_step, dtype=dtypes.int64)]
    return make_op("Save", tuple(inputs + refs), {"tensor_names": tuple(tensor_names)}, name,
                   "Save")


def restore(filename, tensor_names, dtypes_list, shapes, shape_and_slices=None, name=None):
    """A ``Restore`` op reading ``tensor_names`` from ``filename``.

    Args:
        shape_and_slices: per name, ``""`` for the whole tensor or a TF1 slice spec (full
            shape, then ``offset,length`` per dimension) for one region of it (TF1's
            ``RestoreV2``); the checkpoint may hold the tensor whole or as any slices.

    Returns:
        The list of output tensors, aligned with ``tensor_names``.
    """
    attrs = {"tensor_names": tuple(tensor_names),
             "dtypes": tuple(dtypes.as_dtype(d) for d in dtypes_list),
             "shapes": tuple(s if isinstance(s, TensorShape) else as_shape(s) for s in shapes)}
    if shape_and_slices is not None and any(shape_and_slices):
        attrs["shape_and_slices"] = tuple(str(spec) for spec in shape_and_slices)
    op = make_op("Restore", (as_tensor(filename, dtype=dtypes.string),), attrs, name, "Restore")
    return list(op.outputs)


def sharded_filename(filename, shard, num_shards, name=None):
    """The file name of shard ``shard`` of ``num_shards`` of checkpoint file ``filename``."""
    return make_op("ShardedFilename", (as_tensor(filename, dtype=dtypes.string),),
                   {"shard": int(shard), "num_shards": int(num_shards)}, name,
                   "ShardedFilename").outputs[0]


def merge_checkpoint_shards(filename, global_step, shard_tensor_names, name=None):
    """A ``MergeCheckpointShards`` op writing the index of the shards of ``filename``.

    Args:
        filename: string scalar: the checkpoint's single-file name (``<prefix>.safetensors``).
        global_step: int64 scalar, -1 for none; stored in the index metadata.
        shard_tensor_names: per shard, the tensor names it holds.
    """
    inputs = (as_tensor(filename, dtype=dtypes.string), as_tensor(global_step, dtype=dtypes.int64))
    attrs = {"shard_tensor_names": tuple(tuple(names) for names in shard_tensor_names)}
    return make_op("MergeCheckpointShards", inputs, attrs, name, "MergeCheckpointShards")
