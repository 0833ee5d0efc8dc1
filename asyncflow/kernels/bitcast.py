"""Kernel of Bitcast (see ops/bitcast.py): a view of the contiguous array as another dtype."""
from __future__ import annotations

from asyncflow.kernels.arguments import invalid
from asyncflow.kernels.registry import register_kernel


@register_kernel("Bitcast")
def _bitcast(ctx, x):
    out = ctx.output_dtypes[0]
    size_in, size_out = x.dtype.itemsize, out.itemsize
    if size_in < size_out and (x.ndim == 0 or x.shape[-1] * size_in != size_out):
        raise invalid(ctx, f"Cannot bitcast from {x.dtype.name} to {out.name}: the last "
                           f"dimension of shape {list(x.shape)} must be {size_out // size_in}")
    shape = x.shape + (size_in // size_out,) if size_in > size_out else \
        x.shape[:-1] if size_in < size_out else x.shape
    # (flat first: numpy views a 0-d array only as a type of its own size)
    return (ctx.xp.ascontiguousarray(x).reshape(-1).view(out).reshape(shape),)
