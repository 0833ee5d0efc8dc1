"""Kernels of the scatter_nd family (see ops/scatter_nd.py), written once against ``ctx.xp``."""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import host as _host, ints as _ints, invalid as _invalid
from asyncflow.kernels.arguments import scatter_add as _scatter_add
from asyncflow.kernels.indexing import check_range
from asyncflow.kernels.registry import host_memory, register_kernel


def _rows(ctx, indices, updates, shape):
    """The row-major position of each index tuple among ``shape[:K]`` and the updates as
    rows ``[count, *shape[K:]]`` (checking shapes and ranges)."""
    xp = ctx.xp
    if indices.ndim == 0:
        raise _invalid(ctx, "indices must have rank >= 1, got a scalar")
    depth = indices.shape[-1]
    if depth > len(shape):
        raise _invalid(ctx, f"the last dim of indices ({depth}) must be <= the rank of the "
                            f"output ({len(shape)})")
    tail = tuple(shape[depth:])
    if updates.shape != indices.shape[:-1] + tail:
        raise _invalid(ctx, f"updates must have shape {list(indices.shape[:-1] + tail)} for "
                            f"indices of shape {list(indices.shape)} into shape {list(shape)},"
                            f" got {list(updates.shape)}")
    if 0 in shape and (indices.size or updates.size):  # (TF1's kernel refuses these too)
        raise _invalid(ctx, f"indices and updates specified for empty output shape "
                            f"{list(shape)} (indices of shape {list(indices.shape)})")
    flat = xp.zeros(indices.shape[:-1], dtype=np.int64)
    for k in range(depth):
        check_range(ctx, indices[..., k], shape[k], f"indices[..., {k}]")
        flat = flat * shape[k] + indices[..., k].astype(np.int64)
    count = int(np.prod(shape[:depth], dtype=np.int64))
    return flat.reshape(-1), updates.reshape((flat.size,) + tail), count, tail  # (-1: no 0s)


@register_kernel("ScatterNd")
def _scatter_nd(ctx, indices, updates, shape):
    shape = tuple(_ints(shape))
    if any(d < 0 for d in shape):
        raise _invalid(ctx, f"shape must be non-negative, got {list(shape)}")
    positions, rows, count, tail = _rows(ctx, indices, updates, shape)
    if updates.dtype == np.bool_:  # repeated tuples or their values, as TF1 (its bool sum)
        hits = ctx.xp.zeros((count,) + tail, dtype=np.int32)
        _scatter_add(ctx.xp, hits, positions, rows.astype(np.int32))
        return ((hits > 0).reshape(shape),)
    out = ctx.xp.zeros((count,) + tail, dtype=updates.dtype)
    _scatter_add(ctx.xp, out, positions, rows)
    return (out.reshape(shape),)


@register_kernel("TensorScatterUpdate")
def _tensor_scatter_update(ctx, tensor, indices, updates):
    positions, rows, count, tail = _rows(ctx, indices, updates, tensor.shape)
    out = tensor.copy().reshape((count,) + tail)
    out[positions] = rows
    return (out.reshape(tensor.shape),)


def _tensor_scatter_kernel(combine):
    """A kernel combining ``updates`` into a copy of ``tensor`` (repeated tuples combine)."""
    def kernel(ctx, tensor, indices, updates):
        positions, rows, count, tail = _rows(ctx, indices, updates, tensor.shape)
        out = tensor.copy().reshape((count,) + tail)
        combine(ctx.xp, out, positions, rows)
        return (out.reshape(tensor.shape),)
    return kernel


def _host_ufunc_at(ufunc):
    """``ufunc.at`` on the host (CuPy has no ``maximum.at`` before v13), copied back."""
    def combine(xp, target, positions, rows):
        host = _host(target)
        ufunc.at(host, _host(positions), _host(rows))
        target[...] = xp.asarray(host)
    return combine


register_kernel("TensorScatterAdd")(_tensor_scatter_kernel(_scatter_add))
register_kernel("TensorScatterSub")(_tensor_scatter_kernel(
    lambda xp, target, positions, rows: _scatter_add(xp, target, positions, rows, subtract=True)))
register_kernel("TensorScatterMax")(_tensor_scatter_kernel(_host_ufunc_at(np.maximum)))
register_kernel("TensorScatterMin")(_tensor_scatter_kernel(_host_ufunc_at(np.minimum)))


def _variable_kernel(combine):
    """A kernel that updates the variable's slices at the tuples, in the array ``writable()``
    hands out (every tuple and the updates' shape are checked first: nothing changes on bad
    input)."""
    def kernel(ctx, ref, indices, updates):
        shape = ref.read().shape
        positions, rows, count, tail = _rows(ctx, indices, updates, shape)
        new = ref.writable().reshape((count,) + tail)
        combine(ctx.xp, new, positions, rows)
        return (ref.assign(new.reshape(shape), fresh=True),)
    return kernel


def _replace(xp, target, positions, rows):
    # numpy: a repeated position keeps its last row, as TF1 on CPU; CuPy leaves which one
    # undefined, as TF1's GPU kernel does
    target[positions] = rows


register_kernel("ScatterNdUpdate")(_variable_kernel(_replace))
register_kernel("ScatterNdAdd")(_variable_kernel(_scatter_add))
register_kernel("ScatterNdSub")(_variable_kernel(
    lambda xp, target, positions, rows: _scatter_add(xp, target, positions, rows, subtract=True)))
host_memory("ScatterNd", inputs=(2,))
