"""Kernels of the array family (see ops/array.py)."""
from __future__ import annotations

import numpy as np

from asyncflow import errors
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
