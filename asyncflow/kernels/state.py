"""Kernels of variables (see ops/state.py).

``VariableV2`` outputs the resource itself (a reference); the executor dereferences it for
consumers that take values. Assign-like kernels receive the resource and replace its value
with a new array, so earlier reads and fetches never change.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels.arguments import invalid as _invalid
from asyncflow.kernels.arguments import scatter_add as _accumulate
from asyncflow.kernels.indexing import check_range
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
    """Check every index and the updates' shape first (nothing changes on bad input), then
    update the touched rows in place when no reader holds the value (``writable``)."""
    current = ref.read()
    check_range(ctx, indices, current.shape[0])
    rows = indices.shape + current.shape[1:]
    if updates.shape != rows and updates.ndim:
        raise _invalid(ctx, f"Must have updates.shape = indices.shape + params.shape[1:] or "
                            f"updates.shape = [], got updates.shape {list(updates.shape)}, "
                            f"indices.shape {list(indices.shape)}, params.shape "
                            f"{list(current.shape)} (variable {ref.name})")
    del current  # a reference held here would make writable() copy the table
    new = ref.writable()
    combine(new, indices, ctx.xp.broadcast_to(updates, rows))
    return (ref.assign(new, fresh=True),)


def _combine_at(ufunc_name):
    """``a[i] = f(a[i], u)`` with repeated indices applied one after another (``ufunc.at``)."""
    def combine(xp, target, indices, values):
        if xp is np:
            getattr(np, ufunc_name).at(target, indices, values)
            return
        for position, index in enumerate(indices.reshape(-1).tolist()):  # CuPy: no ufunc.at
            row = values.reshape((indices.size,) + target.shape[1:])[position]
            target[index] = getattr(xp, ufunc_name)(target[index], row)
    return combine


@register_kernel("ScatterUpdate")
def _scatter_update(ctx, ref, indices, updates):
    return _scatter(ctx, ref, indices, updates, lambda a, i, u: a.__setitem__(i, u))


def _add_rows(xp, target, indices, values, subtract=False):
    """``target[indices] += values``; repeated indices accumulate. Without repeats (the
    usual batch) plain fancy indexing is several times faster than ``ufunc.at``."""
    flat = indices.reshape(-1)
    if xp.unique(flat).shape[0] == flat.shape[0]:
        rows = values.reshape(flat.shape + target.shape[1:])
        if subtract:
            target[flat] -= rows
        else:
            target[flat] += rows
        return
    _accumulate(xp, target, indices, values, subtract=subtract)


@register_kernel("ScatterAdd")
def _scatter_add(ctx, ref, indices, updates):
    return _scatter(ctx, ref, indices, updates, lambda a, i, u: _add_rows(ctx.xp, a, i, u))


@register_kernel("ScatterSub")
def _scatter_sub(ctx, ref, indices, updates):
    return _scatter(ctx, ref, indices, updates,
                    lambda a, i, u: _add_rows(ctx.xp, a, i, u, subtract=True))


for _type, _ufunc in (("ScatterMul", "multiply"), ("ScatterDiv", "true_divide"),
                      ("ScatterMin", "minimum"), ("ScatterMax", "maximum")):
    def _kernel(ctx, ref, indices, updates, _combine=_combine_at(_ufunc)):
        return _scatter(ctx, ref, indices, updates, lambda a, i, u: _combine(ctx.xp, a, i, u))
    register_kernel(_type)(_kernel)


@register_kernel("IsVariableInitialized")
def _is_initialized(ctx, ref):
    return (np.asarray(ref.initialized),)


@register_kernel("ReportUninitializedVariables")
def _report_uninitialized(ctx, *refs):
    names = [ref.name.encode() for ref in refs if not ref.initialized]
    out = np.empty(len(names), dtype=object)
    out[:] = names
    return (out,)
