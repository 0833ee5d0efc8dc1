"""Kernels of variables (see ops/state.py).

``VariableV2`` outputs the resource itself (a reference); the executor dereferences it for
consumers that take values. Assign-like kernels receive the resource and replace its value
with a new array, so earlier reads and fetches never change.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels.arguments import scatter_add as _accumulate
from asyncflow.kernels.registry import register_kernel


@register_kernel("VariableV2")
def _variable(ctx):
    return (ctx.variable_resource(),)


@register_kernel("Assign")
def _assign(ctx, ref, value):
    return (ref.assign(value, validate_shape=ctx.attrs["validate_shape"]),)


@register_kernel("AssignAdd")
def _assign_add(ctx, ref, delta):
    return (ref.assign(ctx.xp.add(ref.read(), delta), fresh=True),)


@register_kernel("AssignSub")
def _assign_sub(ctx, ref, delta):
    return (ref.assign(ctx.xp.subtract(ref.read(), delta), fresh=True),)


def _scatter(ctx, ref, indices, updates, combine):
    current = ref.read()
    if indices.size and (indices.min() < 0 or indices.max() >= current.shape[0]):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"indices {indices.tolist()} out of range [0, {current.shape[0]}) "
            f"for variable {ref.name}")
    new = current.copy()
    combine(new, indices, updates.reshape(indices.shape + current.shape[1:]))
    return (ref.assign(new, fresh=True),)


@register_kernel("ScatterUpdate")
def _scatter_update(ctx, ref, indices, updates):
    return _scatter(ctx, ref, indices, updates, lambda a, i, u: a.__setitem__(i, u))


@register_kernel("ScatterAdd")
def _scatter_add(ctx, ref, indices, updates):
    return _scatter(ctx, ref, indices, updates, lambda a, i, u: _accumulate(ctx.xp, a, i, u))


@register_kernel("ScatterSub")
def _scatter_sub(ctx, ref, indices, updates):
    return _scatter(ctx, ref, indices, updates,
                    lambda a, i, u: _accumulate(ctx.xp, a, i, u, subtract=True))


@register_kernel("IsVariableInitialized")
def _is_initialized(ctx, ref):
    return (np.asarray(ref.initialized),)


@register_kernel("ReportUninitializedVariables")
def _report_uninitialized(ctx, *refs):
    names = [ref.name.encode() for ref in refs if not ref.initialized]
    out = np.empty(len(names), dtype=object)
    out[:] = names
    return (out,)
