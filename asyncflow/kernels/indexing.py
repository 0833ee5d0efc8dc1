"""Kernels of the indexing ops (see ops/indexing.py).

Index arguments are checked before use: a bad index is an ``InvalidArgumentError`` naming the
op and the offending position, as TF1's CPU kernels do, never numpy's silent wrap-around of
negative indices.
"""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import host as _host, invalid as _invalid
from asyncflow.kernels.arguments import scatter_add as _scatter_add
from asyncflow.kernels.registry import host_memory, register_kernel


def check_range(ctx, indices, limit, what="indices"):
    """Raise naming the first index outside ``[0, limit)``."""
    host = _host(indices)
    bad = (host < 0) | (host >= limit)
    if bad.any():
        position = np.argwhere(bad)[0].tolist()
        where = ",".join(str(p) for p in position)
        raise _invalid(ctx, f"{what}[{where}] = {host[tuple(position)]} is not in [0, {limit})")


@register_kernel("GatherV2")
def _gather(ctx, params, indices):
    xp = ctx.xp
    axis, batch_dims = ctx.attrs["axis"], ctx.attrs["batch_dims"]
    if not -params.ndim <= axis < params.ndim:  # (negative: built on params of unknown rank)
        raise _invalid(ctx, f"axis {axis} is out of range for params of rank {params.ndim}")
    if axis < 0:
        axis += params.ndim
        if batch_dims > axis:
            raise _invalid(ctx, f"batch_dims ({batch_dims}) must be <= axis ({axis})")
    check_range(ctx, indices, params.shape[axis])
    if batch_dims == 0:
        return (xp.take(params, indices, axis=axis),)
    batch = params.shape[:batch_dims]
    if indices.shape[:batch_dims] != batch:
        raise _invalid(ctx, f"the first {batch_dims} dims of params {list(params.shape)} and "
                            f"indices {list(indices.shape)} must match")
    count = int(np.prod(batch, dtype=np.int64))
    flat_params = params.reshape((count,) + params.shape[batch_dims:])
    flat_ids = indices.reshape((count,) + indices.shape[batch_dims:])
    # flat_params is [n, pre..., P_a, rest...]; index [n, P_a] pairs, then put pre first.
    inner_axis = axis - batch_dims + 1
    moved = xp.moveaxis(flat_params, inner_axis, 1)
    rows = xp.arange(count).reshape((count,) + (1,) * (flat_ids.ndim - 1))
    picked = moved[rows, flat_ids]  # [n, I'..., pre..., rest...]
    k, pre = flat_ids.ndim - 1, inner_axis - 1
    perm = [0] + list(range(1 + k, 1 + k + pre)) + list(range(1, 1 + k)) + \
        list(range(1 + k + pre, picked.ndim))
    out = xp.transpose(picked, perm)
    return (out.reshape(batch + out.shape[1:]),)


@register_kernel("GatherNd")
def _gather_nd(ctx, params, indices):
    depth = indices.shape[-1]
    if depth > params.ndim:
        raise _invalid(ctx, f"the last dim of indices ({depth}) is above the rank of params "
                            f"({params.ndim})")
    for k in range(depth):
        check_range(ctx, indices[..., k], params.shape[k], f"indices[..., {k}]")
    tuples = tuple(indices[..., k] for k in range(depth))
    if depth == 0:  # every empty tuple picks the whole of params
        return (ctx.xp.broadcast_to(params, indices.shape[:-1] + params.shape).copy(),)
    return (params[tuples],)


def unsorted_count(ctx, data, segment_ids, num_segments):
    """``num_segments`` as an int, once it and the ids' shape pass TF1's checks (the unsorted
    segment kernels of kernels/segment.py share it)."""
    if num_segments.ndim != 0:
        raise _invalid(ctx, f"num_segments should be a scalar, got shape "
                            f"{list(num_segments.shape)}")
    count = int(num_segments)
    if count < 0:
        raise _invalid(ctx, f"num_segments must be non-negative, got {count}")
    if data.shape[:segment_ids.ndim] != segment_ids.shape:
        raise _invalid(ctx, f"segment_ids shape {list(segment_ids.shape)} must be a prefix of "
                            f"data shape {list(data.shape)}")
    return count


@register_kernel("UnsortedSegmentSum")
def _unsorted_segment_sum(ctx, data, segment_ids, num_segments):
    xp = ctx.xp
    count = unsorted_count(ctx, data, segment_ids, num_segments)
    host = _host(segment_ids)
    if (host >= count).any():
        check_range(ctx, np.where(host < 0, 0, host), count, "segment_ids")
    rest = data.shape[segment_ids.ndim:]
    out = xp.zeros((count,) + rest, dtype=data.dtype)
    ids = segment_ids.reshape(-1)
    rows = data.reshape((ids.size,) + rest)  # (not -1: rest may hold a 0)
    kept = ids >= 0  # TF1 drops negative ids
    _scatter_add(xp, out, ids[kept], rows[kept])
    return (out,)


def sorted_count(ctx, data, ids):
    """The segment count of a sorted segment reduction over ``data`` (host ``ids``), its ids
    checked as TF1's kernel does: a vector as long as data's first dimension, non-negative,
    not decreasing (InvalidArgumentError naming the op and where)."""
    if ids.ndim != 1:
        raise _invalid(ctx, f"segment_ids should be a vector, got shape {list(ids.shape)}")
    if data.ndim == 0 or data.shape[0] != ids.size:
        raise _invalid(ctx, f"segment_ids should be the same size as dimension 0 of input: "
                            f"{ids.size} ids for data shape {list(data.shape)}")
    if ids.size and ids[0] < 0:
        raise _invalid(ctx, f"segment ids must be >= 0: segment_ids[0] = {ids[0]}")
    falls = np.flatnonzero(ids[1:] < ids[:-1])
    if falls.size:  # TF1's message; the position says where
        at = int(falls[0]) + 1
        raise _invalid(ctx, f"segment ids are not increasing: segment_ids[{at}] = {ids[at]} "
                            f"after segment_ids[{at - 1}] = {ids[at - 1]}")
    return int(ids[-1]) + 1 if ids.size else 0


@register_kernel("SegmentSum")
def _segment_sum(ctx, data, segment_ids):
    ids = _host(segment_ids)
    count = sorted_count(ctx, data, ids)
    xp = ctx.xp
    out = xp.zeros((count,) + tuple(data.shape[1:]), dtype=data.dtype)
    _scatter_add(xp, out, xp.asarray(ids), data)
    return (out,)


# Arguments kept in host memory on a GPU (TF's HostMemory registrations; exec/gpu.py).
host_memory("UnsortedSegmentSum", inputs=(2,))
