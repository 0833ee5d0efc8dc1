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
    out[tuple(ctx.xp.asarray(indices).T)] = values
    return (out,)


@register_kernel("SparseReorder")
def _sparse_reorder(ctx, indices, values, dense_shape):
    host = _host(indices)
    order = np.lexsort(host.T[::-1]) if host.size else np.arange(host.shape[0])
    return (ctx.xp.asarray(host[order]), values[ctx.xp.asarray(order)])


@register_kernel("SparseReshape")
def _sparse_reshape(ctx, indices, input_shape, new_shape):
    old = [int(d) for d in _host(input_shape)]
    new = [int(d) for d in _host(new_shape)]
    size = int(np.prod(old))
    unknown = [i for i, d in enumerate(new) if d == -1]
    if len(unknown) > 1:
        raise _invalid(ctx, f"only one output dimension may be -1, not {len(unknown)}: {new}")
    if unknown:
        known = int(np.prod([d for d in new if d != -1]))
        if known == 0 or size % known:
            raise _invalid(ctx, f"Input to reshape is a SparseTensor with {size} dense values, "
                                f"but the requested shape {new} cannot hold them")
        new[unknown[0]] = size // known
    if int(np.prod(new)) != size:
        raise _invalid(ctx, f"Input to reshape is a tensor with {size} dense values, but the "
                            f"requested shape has {int(np.prod(new))}")
    host = _host(indices).astype(np.int64)
    linear = np.ravel_multi_index(host.T, old) if host.size else np.zeros(0, np.int64)
    out = np.stack(np.unravel_index(linear, new), axis=1) if host.size else \
        np.zeros((0, len(new)), np.int64)
    return (ctx.xp.asarray(out.astype(np.int64)), ctx.xp.asarray(np.asarray(new, np.int64)))


@register_kernel("SparseAdd")
def _sparse_add(ctx, a_indices, a_values, a_shape, b_indices, b_values, b_shape, threshold):
    a_shape, b_shape = _host(a_shape), _host(b_shape)
    if a_shape.tolist() != b_shape.tolist():
        raise _invalid(ctx, f"Operands do not have the same dense shape: "
                            f"[{','.join(map(str, a_shape.tolist()))}] and "
                            f"[{','.join(map(str, b_shape.tolist()))}]")
    a_indices, b_indices = _host(a_indices).astype(np.int64), _host(b_indices).astype(np.int64)
    indices = np.concatenate([a_indices, b_indices])
    values = np.concatenate([_host(a_values), _host(b_values)])
    if indices.size:
        linear = np.ravel_multi_index(indices.T, a_shape.tolist())
        unique, inverse = np.unique(linear, return_inverse=True)
        summed = np.zeros(unique.shape, values.dtype)
        np.add.at(summed, inverse.reshape(-1), values)
        # TF1 thresholds only the sums of an index both operands hold: an entry of one
        # operand alone is kept whatever its magnitude
        in_a = np.isin(unique, linear[:len(a_indices)])
        in_b = np.isin(unique, linear[len(a_indices):])
        keep = ~(in_a & in_b) | (np.abs(summed) >= _host(threshold))
        indices = np.stack(np.unravel_index(unique[keep], a_shape.tolist()), axis=1)
        values = summed[keep]
    xp = ctx.xp
    return (xp.asarray(indices.astype(np.int64).reshape(-1, len(a_shape))), xp.asarray(values),
            xp.asarray(a_shape.astype(np.int64)))


@register_kernel("SparseAddGrad")
def _sparse_add_grad(ctx, grad, a_indices, b_indices, sum_indices):
    position = {tuple(index): n for n, index in enumerate(_host(sum_indices).tolist())}
    grad = _host(grad)

    def pick(indices):
        rows = [position.get(tuple(index)) for index in _host(indices).tolist()]
        out = np.zeros(len(rows), grad.dtype)
        for n, row in enumerate(rows):
            if row is not None:
                out[n] = grad[row]
        return ctx.xp.asarray(out)
    return pick(a_indices), pick(b_indices)
