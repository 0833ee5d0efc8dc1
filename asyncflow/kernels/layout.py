"""Kernels of the layout ops (see ops/layout.py): numpy/cupy rearrangements via ``ctx.xp``.

Every kernel re-validates its integer arguments, because a computed ``perm`` or ``paddings``
is only known at run time; bad values raise ``InvalidArgumentError`` naming the op.
Outputs may be views of inputs (never written to), which keeps the moves free.
"""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import ints as _ints, invalid as _invalid
from asyncflow.kernels.registry import host_memory, register_kernel


def _axis(ctx, axis, ndims):
    if not -ndims <= axis < max(ndims, 1):
        raise _invalid(ctx, f"axis {axis} is out of range for a tensor of rank {ndims}")
    return axis % max(ndims, 1)


@register_kernel("Transpose")
def _transpose(ctx, x, perm):
    perm = _ints(perm)
    if sorted(perm) != list(range(x.ndim)):
        raise _invalid(ctx, f"perm {perm} is not a permutation of the {x.ndim} input dims")
    return (ctx.xp.transpose(x, perm),)


@register_kernel("InvertPermutation")
def _invert_permutation(ctx, x):
    values = _ints(x)
    if sorted(values) != list(range(len(values))):
        raise _invalid(ctx, f"{values} is not a permutation of 0..{len(values) - 1}")
    return (ctx.xp.argsort(x).astype(x.dtype),)


@register_kernel("ConcatV2")
def _concat(ctx, *values):
    xp = ctx.xp
    axis = _axis(ctx, ctx.attrs["axis"], values[0].ndim)
    try:
        return (xp.concatenate(values, axis=axis),)
    except ValueError:
        raise _invalid(ctx, f"cannot concatenate shapes {[list(v.shape) for v in values]} "
                            f"along axis {axis}: other dims must match") from None


@register_kernel("Pack")
def _pack(ctx, *values):
    shapes = {v.shape for v in values}
    if len(shapes) > 1:
        raise _invalid(ctx, f"shapes of all inputs must match: {[list(v.shape) for v in values]}")
    axis = _axis(ctx, ctx.attrs["axis"], values[0].ndim + 1)
    return (ctx.xp.stack(values, axis=axis),)


@register_kernel("Unpack")
def _unpack(ctx, x):
    axis = _axis(ctx, ctx.attrs["axis"], x.ndim)
    num = ctx.attrs["num"]
    if x.shape[axis] != num:
        raise _invalid(ctx, f"dimension {axis} of the input has size {x.shape[axis]}, but "
                            f"num={num}")
    moved = ctx.xp.moveaxis(x, axis, 0)
    return tuple(moved[i] for i in range(num))


@register_kernel("Split")
def _split(ctx, x):
    axis = _axis(ctx, ctx.attrs["axis"], x.ndim)
    count = ctx.attrs["num_split"]
    if x.shape[axis] % count:
        raise _invalid(ctx, f"dimension {axis} of size {x.shape[axis]} is not divisible by "
                            f"num_split={count}")
    return tuple(ctx.xp.split(x, count, axis=axis))


@register_kernel("SplitV")
def _split_v(ctx, x):
    axis = _axis(ctx, ctx.attrs["axis"], x.ndim)
    sizes = list(ctx.attrs["size_splits"])
    dim = x.shape[axis]
    known = sum(s for s in sizes if s != -1)
    if -1 in sizes:
        if known > dim:
            raise _invalid(ctx, f"size_splits {sizes} add up to more than dimension {axis}'s "
                                f"size {dim}")
        sizes[sizes.index(-1)] = dim - known
    elif known != dim:
        raise _invalid(ctx, f"size_splits {sizes} must add up to dimension {axis}'s size {dim}")
    return tuple(ctx.xp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis))


@register_kernel("ExpandDims")
def _expand_dims(ctx, x):
    return (ctx.xp.expand_dims(x, _axis(ctx, ctx.attrs["axis"], x.ndim + 1)),)


@register_kernel("Squeeze")
def _squeeze(ctx, x):
    axes = ctx.attrs["squeeze_dims"]
    if not axes:
        return (x.reshape([d for d in x.shape if d != 1]),)
    axes = sorted({_axis(ctx, a, x.ndim) for a in axes})
    for a in axes:
        if x.shape[a] != 1:
            raise _invalid(ctx, f"can not squeeze dim[{a}], expected a dimension of 1, got "
                                f"{x.shape[a]}")
    return (x.reshape([d for i, d in enumerate(x.shape) if i not in axes]),)


# Arguments kept in host memory on a GPU (TF's HostMemory registrations; exec/gpu.py).
host_memory("Transpose", inputs=(1,))


@register_kernel("ReverseV2")
def _reverse(ctx, x):
    axes = tuple(_axis(ctx, a, x.ndim) for a in ctx.attrs["axis"])
    if len(set(axes)) != len(axes):
        raise _invalid(ctx, f"axis {list(ctx.attrs['axis'])} lists an axis twice")
    return (ctx.xp.ascontiguousarray(ctx.xp.flip(x, axes)) if axes else x,)
