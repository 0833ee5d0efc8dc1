"""Kernel of ParallelConcat (see ops/parallel_concat.py): its inputs concatenated on the
first axis, into the shape its attribute gives."""
from __future__ import annotations

from asyncflow.kernels.arguments import invalid
from asyncflow.kernels.registry import register_kernel


@register_kernel("ParallelConcat")
def _parallel_concat(ctx, *values):
    shape = tuple(ctx.attrs["shape"])
    for i, value in enumerate(values):
        if value.shape != (1,) + shape[1:]:
            raise invalid(ctx, f"values[{i}] has shape {list(value.shape)}, the output "
                               f"{list(shape)} needs {[1] + list(shape[1:])}")
    return (ctx.xp.concatenate(values, axis=0),)
