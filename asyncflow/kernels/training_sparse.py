"""Kernels of the sparse optimizer updates (``SparseApply*``, see ops/training.py): each applies
its rule to the unique rows ``indices`` names (repeated rows' gradients summed first), after
checking every index, so an error changes nothing.

A sparse kernel costs the rows it touches: it updates them in the array that ``writable()``
hands out, which is the stored value itself when no reader holds it and a private copy
otherwise; several passes over the variable and its slots, one update with respect to a
Ctrl-C (``sigint_hold.whole``, as the dense applies in kernels/training.py).
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import sigint_hold
from asyncflow.kernels.arguments import scatter_add as _accumulate
from asyncflow.kernels.registry import register_kernel
from asyncflow.kernels.training import _ftrl_rule, scalar_of


def _rows(ctx, var, grad, indices):
    """The unique touched rows and their summed gradients, after checking every index.

    Nothing is updated when an index is out of range (TF1's message names it and its offset).
    """
    xp = ctx.xp
    value = var.read()
    limit = value.shape[0] if value.ndim else 0
    rest = value.shape[1:]
    if indices.ndim != 1 or grad.shape != indices.shape + rest:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.type}: grad must be [len(indices)] + the variable's row shape "
            f"{list(rest)}, got grad {list(grad.shape)} and indices {list(indices.shape)} "
            f"(variable {var.name})")
    host = indices.get() if hasattr(indices, "get") else np.asarray(indices)
    bad = np.flatnonzero((host < 0) | (host >= limit))
    if bad.size:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Index {int(host[bad[0]])} at offset {int(bad[0])} in indices is out "
            f"of range [0, {limit}) (variable {var.name})")
    unique, inverse = xp.unique(indices, return_inverse=True)
    if unique.shape[0] == indices.shape[0]:
        order = xp.argsort(indices, kind="stable")
        return unique, grad[order]
    summed = xp.zeros((unique.shape[0],) + rest, dtype=grad.dtype)
    _accumulate(xp, summed, inverse.reshape(-1), grad)
    return unique, summed


@register_kernel("SparseApplyAdagrad")
@sigint_hold.whole
def _sparse_apply_adagrad(ctx, var, accum, lr, grad, indices):
    rows, grad = _rows(ctx, var, grad, indices)
    acc = accum.writable()
    acc[rows] += grad * grad
    value = var.writable()
    value[rows] -= scalar_of(lr, value) * grad / ctx.xp.sqrt(acc[rows])
    accum.assign(acc, fresh=True)
    return (var.assign(value, fresh=True),)


@register_kernel("SparseApplyMomentum")
@sigint_hold.whole
def _sparse_apply_momentum(ctx, var, accum, lr, grad, indices, momentum):
    rows, grad = _rows(ctx, var, grad, indices)
    acc = accum.writable()
    value = var.writable()
    lr, momentum = scalar_of(lr, value), scalar_of(momentum, value)
    acc[rows] = acc[rows] * momentum + grad
    if ctx.attrs["use_nesterov"]:
        value[rows] -= lr * grad + lr * momentum * acc[rows]
    else:
        value[rows] -= lr * acc[rows]
    accum.assign(acc, fresh=True)
    return (var.assign(value, fresh=True),)


@register_kernel("SparseApplyRMSProp")
@sigint_hold.whole
def _sparse_apply_rms_prop(ctx, var, ms, mom, lr, rho, momentum, epsilon, grad, indices):
    rows, grad = _rows(ctx, var, grad, indices)
    square, moment, value = ms.writable(), mom.writable(), var.writable()
    rho = scalar_of(rho, value)
    square[rows] = square[rows] * rho + (1 - rho) * grad * grad
    moment[rows] = moment[rows] * scalar_of(momentum, value) + scalar_of(lr, value) * grad / \
        ctx.xp.sqrt(square[rows] + scalar_of(epsilon, value))
    value[rows] -= moment[rows]
    ms.assign(square, fresh=True)
    mom.assign(moment, fresh=True)
    return (var.assign(value, fresh=True),)


@register_kernel("SparseApplyCenteredRMSProp")
@sigint_hold.whole
def _sparse_apply_centered_rms_prop(ctx, var, mg, ms, mom, lr, rho, momentum, epsilon, grad,
                                    indices):
    rows, grad = _rows(ctx, var, grad, indices)
    mean, square, moment, value = mg.writable(), ms.writable(), mom.writable(), var.writable()
    rho = scalar_of(rho, value)
    mean[rows] = mean[rows] * rho + (1 - rho) * grad
    square[rows] = square[rows] * rho + (1 - rho) * grad * grad
    denominator = ctx.xp.sqrt(square[rows] - mean[rows] * mean[rows] + scalar_of(epsilon, value))
    moment[rows] = (moment[rows] * scalar_of(momentum, value)
                    + scalar_of(lr, value) * grad / denominator)
    value[rows] -= moment[rows]
    mg.assign(mean, fresh=True)
    ms.assign(square, fresh=True)
    mom.assign(moment, fresh=True)
    return (var.assign(value, fresh=True),)


@register_kernel("SparseApplyAdam")
@sigint_hold.whole
def _sparse_apply_adam(ctx, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad,
                       indices):
    # TF1's core Adam on a sparse gradient is not lazy: both moments decay everywhere.
    xp = ctx.xp
    rows, grad = _rows(ctx, var, grad, indices)
    first, second, value = m.writable(), v.writable(), var.writable()
    beta1, beta2 = scalar_of(beta1, value), scalar_of(beta2, value)
    lr_t = scalar_of(lr * xp.sqrt(1 - beta2_power) / (1 - beta1_power), value)
    first *= beta1
    first[rows] += (1 - beta1) * grad
    second *= beta2
    second[rows] += (1 - beta2) * grad * grad
    value -= lr_t * first / (xp.sqrt(second) + scalar_of(epsilon, value))
    m.assign(first, fresh=True)
    v.assign(second, fresh=True)
    return (var.assign(value, fresh=True),)


@register_kernel("SparseApplyFtrlV2")
@sigint_hold.whole
def _sparse_apply_ftrl(ctx, var, accum, linear, grad, indices, lr, l1, l2, l2_shrinkage,
                       lr_power):
    rows, grad = _rows(ctx, var, grad, indices)
    acc, lin, value = accum.writable(), linear.writable(), var.writable()
    new_var, new_accum, new_linear = _ftrl_rule(ctx.xp, value[rows], acc[rows], lin[rows], grad,
                                                lr, l1, l2, l2_shrinkage, lr_power)
    value[rows], acc[rows], lin[rows] = new_var, new_accum, new_linear
    accum.assign(acc, fresh=True)
    linear.assign(lin, fresh=True)
    return (var.assign(value, fresh=True),)
