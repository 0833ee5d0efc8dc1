"""Kernels of the sparse ops (see ops/sparse_ops.py)."""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import host as _host
from asyncflow.kernels.arguments import invalid as _invalid
from asyncflow.kernels.registry import register_kernel


def check_indices(ctx, indices, shape):
    """TF1's ``SparseTensor::IndicesValid``: in bounds, row-major order, no repeats."""
    shape_text = ",".join(str(d) for d in shape)
    previous = None
    for n, index in enumerate(indices.tolist()):
        text = ",".join(str(i) for i in index)
        if any(i < 0 or i >= d for i, d in zip(index, shape)):
            raise _invalid(ctx, f"indices[{n}] = [{text}] is out of bounds: need 0 <= index < "
                                f"[{shape_text}]")
        if previous is not None and index < previous:
            raise _invalid(ctx, f"indices[{n}] = [{text}] is out of order. Many sparse ops "
                                "require sorted indices.\n    Use `tf.sparse.reorder` to "
                                "create a correctly ordered copy.\n\n")
        if previous is not None and index == previous:
            raise _invalid(ctx, f"indices[{n}] = [{text}] is repeated")
        previous = index


@register_kernel("SparseToDense")
def _sparse_to_dense(ctx, indices, output_shape, values, default):
    shape = [int(d) for d in _host(output_shape).reshape(-1)]
    indices = _host(indices).astype(np.int64)
    if indices.ndim < 2:
        indices = indices.reshape(-1, 1) if len(shape) == 1 or indices.ndim == 1 \
            else indices.reshape(1, -1)
    if indices.shape[1] != len(shape):
        raise _invalid(ctx, f"sparse_indices has {indices.shape[1]} columns but output_shape "
                            f"{shape} has rank {len(shape)}")
    if values.ndim not in (0, 1) or (values.ndim == 1 and values.shape[0] != indices.shape[0]):
        raise _invalid(ctx, f"sparse_values has shape {list(values.shape)}; it must be a scalar "
                            f"or have {indices.shape[0]} elements")
    if ctx.attrs["validate_indices"]:
        check_indices(ctx, indices, shape)
    else:
        bad = (indices < 0) | (indices >= np.asarray(shape, np.int64))
        if bad.any():
            n = int(np.argwhere(bad.any(axis=1))[0][0])
            raise _invalid(ctx, f"indices[{n}] = [{','.join(map(str, indices[n].tolist()))}] "
                                f"is out of bounds: need 0 <= index < "
                                f"[{','.join(map(str, shape))}]")
    out = ctx.xp.full(shape, default, dtype=values.dtype)
    out[tuple(indices.T)] = values
    return (out,)
