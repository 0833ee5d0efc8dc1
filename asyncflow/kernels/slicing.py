"""Kernels of the slicing ops (see ops/slicing.py): ``Slice``, ``StridedSlice`` and its gradient.

A bad bound is an ``InvalidArgumentError`` naming the op, as TF1's CPU kernels give.
"""
from __future__ import annotations

from asyncflow.kernels.arguments import ints as _ints, invalid as _invalid
from asyncflow.kernels.registry import host_memory, register_kernel


@register_kernel("Slice")
def _slice(ctx, x, begin, size):
    begin, size = _ints(begin), _ints(size)
    if len(begin) != x.ndim or len(size) != x.ndim:
        raise _invalid(ctx, f"begin {begin} and size {size} must have {x.ndim} entries")
    index = []
    for i, (b, s, d) in enumerate(zip(begin, size, x.shape)):
        end = d if s == -1 else b + s
        if b < 0 or s < -1 or end > d:
            raise _invalid(ctx, f"expected begin[{i}] in [0, {d}] and begin[{i}] + size[{i}] in "
                                f"[0, {d}], got begin {begin} and size {size} for shape "
                                f"{list(x.shape)}")
        index.append(slice(b, end))
    return (x[tuple(index)],)


def _strided_index(ctx, begin, end, strides):
    attrs = ctx.attrs
    index = []
    for i, (b, e, s) in enumerate(zip(_ints(begin), _ints(end), _ints(strides))):
        bit = 1 << i
        if attrs["ellipsis_mask"] & bit:
            index.append(Ellipsis)
        elif attrs["new_axis_mask"] & bit:
            index.append(None)
        elif attrs["shrink_axis_mask"] & bit:
            if s <= 0:  # TF1 refuses t[i] spelled with a negative step
                raise _invalid(ctx, f"only stride 1 allowed on non-range indexing (strides[{i}]"
                                    f" = {s} with shrink_axis_mask)")
            index.append(b)
        else:
            if s == 0:
                raise _invalid(ctx, f"strides[{i}] must be non-zero")
            index.append(slice(None if attrs["begin_mask"] & bit else b,
                               None if attrs["end_mask"] & bit else e, s))
    return tuple(index)


@register_kernel("StridedSlice")
def _strided_slice(ctx, x, begin, end, strides):
    index = _strided_index(ctx, begin, end, strides)
    try:
        return (x[index],)
    except IndexError as exc:
        raise _invalid(ctx, f"slice index out of bounds for shape {list(x.shape)}: {exc}") from None


@register_kernel("StridedSliceGrad")
def _strided_slice_grad(ctx, shape, begin, end, strides, dy):
    out = ctx.xp.zeros(_ints(shape), dtype=dy.dtype)
    index = _strided_index(ctx, begin, end, strides)
    try:
        out[index] = dy
    except (IndexError, ValueError) as exc:
        raise _invalid(ctx, f"gradient of shape {list(dy.shape)} does not fit the slice of "
                            f"shape {_ints(shape)}: {exc}") from None
    return (out,)


# Arguments kept in host memory on a GPU (TF's HostMemory registrations; exec/gpu.py).
host_memory("Slice", inputs=(1, 2))
host_memory("StridedSlice", inputs=(1, 2, 3))
host_memory("StridedSliceGrad", inputs=(0, 1, 2, 3))
