"""Kernels of the segment reductions (see ops/segment.py).

The reduction runs on the host with numpy's ``ufunc.at`` (repeated ids accumulate) and the
result goes back to the op's device: CuPy has no ``maximum.at``/``multiply.at`` before v13.
Ids are checked first, with TF1's messages: sorted ids must be >= 0 and never decrease, an
unsorted id must be below ``num_segments`` (a negative one is dropped).
"""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import host as _host, invalid as _invalid, is_floating
from asyncflow.kernels.indexing import sorted_count, unsorted_count
from asyncflow.kernels.registry import host_memory, register_kernel

_REDUCERS = {"Max": np.maximum, "Min": np.minimum, "Prod": np.multiply, "Mean": np.add}


def _empty_value(kind, dtype, sorted_ids):
    """What an empty segment holds: TF1's sorted kernels give 0 (1 for the product), its
    unsorted ones the reduction's identity (the lowest finite value for max, the highest for
    min)."""
    if kind == "Prod":
        return 1
    if sorted_ids or kind == "Mean":
        return 0
    if is_floating(dtype):  # (bfloat16's numpy kind is "V": ml_dtypes' finfo knows it)
        import ml_dtypes
        info = ml_dtypes.finfo(dtype)
    else:
        info = np.iinfo(dtype)
    return info.min if kind == "Max" else info.max  # finite, as TF1's numeric_limits


def _reduce(kind, data, ids, count, sorted_ids):
    # start from the reduction's identity; a sorted kernel's empty segments become 0 below
    out = np.full((count,) + data.shape[ids.ndim:], _empty_value(kind, data.dtype, False),
                  data.dtype)
    flat_ids = ids.reshape(-1)
    rows = data.reshape((ids.size,) + data.shape[ids.ndim:])  # (-1 fails on a 0 in them)
    kept = flat_ids >= 0
    flat_ids, rows = flat_ids[kept], rows[kept]
    if kind == "Mean":
        # -0.0 + x is x: a segment of -0.0 keeps its sign (TF1's), where 0.0 + -0.0 is 0.0
        out[...] = -0.0 if is_floating(out.dtype) else 0
        np.add.at(out, flat_ids, rows)
        sizes = np.bincount(flat_ids, minlength=count).reshape((count,) + (1,) * (rows.ndim - 1))
        if is_floating(out.dtype):
            np.divide(out, np.maximum(sizes, 1), out=out)
        else:  # TF1's integer mean: the sum over the count, both in the dtype (wrapping),
            # truncated toward zero; not through float64, which loses low bits past 2**53
            divisor = np.maximum(sizes, 1).astype(out.dtype)
            inexact = (out % divisor != 0) & ((out < 0) != (divisor < 0))
            out[...] = out // divisor + inexact
        out[np.bincount(flat_ids, minlength=count) == 0] = 0
        return out
    _REDUCERS[kind].at(out, flat_ids, rows)
    if sorted_ids and flat_ids.size:  # a segment no id names is 0 (1 for prod) in TF1
        present = np.zeros(count, bool)
        present[flat_ids] = True
        out[~present] = _empty_value(kind, data.dtype, True)
    return out


def _sorted_kernel(kind):
    def kernel(ctx, data, segment_ids):
        data, ids = _host(data), _host(segment_ids)
        count = sorted_count(ctx, data, ids)
        return (ctx.xp.asarray(_reduce(kind, data, ids, count, True)),)
    return kernel


def _unsorted_kernel(kind):
    def kernel(ctx, data, segment_ids, num_segments):
        data, ids = _host(data), _host(segment_ids)
        count = unsorted_count(ctx, data, ids, _host(num_segments))
        if (ids >= count).any():
            position = np.argwhere(ids >= count)[0].tolist()
            raise _invalid(ctx, f"segment_ids[{','.join(map(str, position))}] = "
                                f"{ids[tuple(position)]} is not in [0, {count})")
        return (ctx.xp.asarray(_reduce(kind, data, ids, count, False)),)
    return kernel


for _kind in ("Max", "Min", "Mean", "Prod"):
    register_kernel(f"Segment{_kind}")(_sorted_kernel(_kind))
    host_memory(f"Segment{_kind}", inputs=(1,))
for _kind in ("Max", "Min", "Prod"):
    register_kernel(f"UnsortedSegment{_kind}")(_unsorted_kernel(_kind))
    host_memory(f"UnsortedSegment{_kind}", inputs=(1, 2))
