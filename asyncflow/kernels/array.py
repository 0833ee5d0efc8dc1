"""Kernels of the array family (see ops/array.py)."""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels.arguments import host
from asyncflow.kernels.registry import host_memory, register_kernel


@register_kernel("Identity")
def _identity(ctx, x):
    return (x,)


register_kernel("StopGradient")(_identity)


@register_kernel("Shape")
def _shape(ctx, x):
    return (np.asarray(x.shape, dtype=ctx.output_dtypes[0]),)


@register_kernel("Size")
def _size(ctx, x):
    return (np.asarray(x.size, dtype=ctx.output_dtypes[0]),)


@register_kernel("Rank")
def _rank(ctx, x):
    return (np.asarray(x.ndim, dtype=ctx.output_dtypes[0]),)


@register_kernel("Reshape")
def _reshape(ctx, x, shape):
    dims = [int(d) for d in shape.reshape(-1).tolist()]
    try:
        return (x.reshape(dims),)
    except ValueError:
        pass
    if -1 in dims and 0 in dims and dims.count(-1) == 1:  # never in the hot path: numpy refuses
        # TF's rule (ops/array.py's reshape_dims): beside a 0 in the shape, the -1 is solved
        # from the input's nonzero dims, so [0, -1] of a (0, 3) tensor is (0, 3), not an error
        count = int(np.prod([d for d in x.shape if d > 0]))
        known = int(np.prod([d for d in dims if d > 0]))
        dims = [count // known if d == -1 else d for d in dims]
        if x.size == 0 and 0 in dims:
            return (x.reshape(dims),)
    raise errors.InvalidArgumentError(
        None, ctx.name, f"Input to reshape is a tensor with {x.size} values, but the "
        f"requested shape is {dims}")


# Arguments kept in host memory on a GPU (TF's HostMemory registrations; exec/gpu.py).
host_memory("Shape", outputs=(0,), shape_only=(0,))
host_memory("Size", outputs=(0,), shape_only=(0,))
host_memory("Rank", outputs=(0,), shape_only=(0,))
host_memory("Reshape", inputs=(1,))


@register_kernel("IdentityN")
def _identity_n(ctx, *xs):
    return xs


@register_kernel("ShapeN")
def _shape_n(ctx, *xs):
    return tuple(np.asarray(x.shape, dtype=ctx.output_dtypes[0]) for x in xs)


@register_kernel("EnsureShape")
def _ensure_shape(ctx, x):
    expected = ctx.attrs["shape"]
    if expected is not None and (len(expected) != x.ndim or any(
            d is not None and d != n for d, n in zip(expected, x.shape))):
        shown = "[" + ",".join("?" if d is None else str(d) for d in expected) + "]"
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Shape of tensor {ctx.name} [{','.join(map(str, x.shape))}] is not compatible "
            f"with expected shape {shown}.")
    return (x,)


@register_kernel("BroadcastArgs")
def _broadcast_args(ctx, s0, s1):
    a, b = (host(s).reshape(-1).tolist() for s in (s0, s1))
    rank = max(len(a), len(b))
    a, b = [1] * (rank - len(a)) + a, [1] * (rank - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Incompatible shapes: [{','.join(map(str, a[rank - len(a):]))}] "
            f"vs. [{','.join(map(str, b[rank - len(b):]))}]")
    return (np.asarray([y if x == 1 else x for x, y in zip(a, b)], dtype=s0.dtype),)


@register_kernel("UnravelIndex")
def _unravel_index(ctx, indices, dims):
    flat, shape = host(indices), host(dims).reshape(-1)
    if (shape <= 0).any():
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Input dims must be > 0, got {shape.tolist()}")
    count = int(np.prod(shape, dtype=np.int64))
    bad = (flat < 0) | (flat >= count)
    if bad.any():
        raise errors.InvalidArgumentError(
            None, ctx.name, f"index {int(flat[bad].reshape(-1)[0])} is out of bound as with "
            f"dims {shape.tolist()} ({count} elements)")
    coords = np.unravel_index(flat.astype(np.int64), [int(d) for d in shape])
    return (np.asarray(coords, dtype=indices.dtype).reshape((len(shape),) + flat.shape),)


host_memory("ShapeN", outputs=range(64), shape_only=range(64))
host_memory("BroadcastArgs", inputs="all", outputs=(0,))
host_memory("UnravelIndex", inputs="all", outputs=(0,))
