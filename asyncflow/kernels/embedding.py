"""Kernels of the embedding ops (see ops/embedding.py): DynamicPartition, DynamicStitch."""
from __future__ import annotations

from asyncflow.kernels.indexing import check_range
from asyncflow.kernels.arguments import invalid as _invalid
from asyncflow.kernels.registry import register_kernel


@register_kernel("DynamicPartition")
def _dynamic_partition(ctx, data, partitions):
    count = ctx.attrs["num_partitions"]
    if data.shape[:partitions.ndim] != partitions.shape:
        raise _invalid(ctx, f"partitions shape {list(partitions.shape)} must be a prefix of "
                            f"data shape {list(data.shape)}")
    check_range(ctx, partitions, count, "partitions")
    rest = data.shape[partitions.ndim:]
    flat = data.reshape((partitions.size,) + rest)  # (not -1: rest may hold a 0)
    keys = partitions.reshape(-1)
    return tuple(flat[keys == i] for i in range(count))


@register_kernel("DynamicStitch")
def _dynamic_stitch(ctx, *inputs):
    count = ctx.attrs["N"]
    indices, data = inputs[:count], inputs[count:]
    first_rest = data[0].shape[indices[0].ndim:]
    size = max((int(i.max()) + 1 for i in indices if i.size), default=0)
    out = ctx.xp.zeros((size,) + first_rest, dtype=data[0].dtype)
    for m, (index, values) in enumerate(zip(indices, data)):
        if values.shape != index.shape + first_rest:
            raise _invalid(ctx, f"data[{m}] has shape {list(values.shape)}, but indices[{m}] "
                                f"{list(index.shape)} requires {list(index.shape + first_rest)}")
        if index.size and int(index.min()) < 0:
            raise _invalid(ctx, f"indices[{m}] has a negative index {int(index.min())}")
        out[index.reshape(-1)] = values.reshape((index.size,) + first_rest)
    return (out,)
