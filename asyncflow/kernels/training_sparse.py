"""Kernels of the sparse optimizer updates (``SparseApply*``, see ops/training.py): each applies
its rule to the unique rows ``indices`` names (repeated rows' gradients summed first), after
checking each slot's shape against the variable's and every index, so an error changes nothing.

A sparse kernel costs the rows it touches: it updates them in the array that ``writable()``
hands out, which is the stored value itself when no reader holds it and a private copy
otherwise; several passes over the variable and its slots, one update with respect to a
Ctrl-C (``sigint_hold.whole``, as the dense applies in kernels/training.py). Every sparse
apply (these and kernels/training_proximal.py's) is its rule inside :func:`apply_rows`, which
checks and sums the rows, takes the writable arrays and assigns them; a rule written on the
touched rows alone is made an update by :func:`gathered`.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import sigint_hold
from asyncflow.kernels.arguments import scatter_add as _accumulate
from asyncflow.kernels.registry import register_kernel
from asyncflow.kernels.training import _ftrl_rule, check_slots, scalar_of


def _rows(ctx, var, slots, grad, indices):
    """The unique touched rows and their summed gradients, after checking each slot's shape
    and every index.

    Nothing is updated when a slot's shape is not the variable's (one assigned with
    ``validate_shape=False``: TF1 refuses it too, as the dense applies do, ``check_slots``) or
    an index is out of range (TF1's message names it and its offset).
    """
    xp = ctx.xp
    value = var.read()
    check_slots(ctx, slots, value.shape, f"the variable {var.name}")
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


def apply_rows(ctx, var, slots, grad, indices, update):
    """A sparse apply's frame: ``update(rows, grad, value, *slot_values)`` updates the unique
    ``rows`` (``_rows``: each slot's shape and every index checked first, repeated rows'
    gradients summed) of the variable's and its ``slots``' writable arrays in place; then each
    slot is assigned and the variable's new value returned as the kernel's outputs.

    The checks come before any array is taken (``writable``, the slots' first), and every
    array is taken before any is assigned, so an error in them leaves every stored value as it
    was. (A rule must not raise past them: an array taken in place keeps what it updated.)
    """
    rows, grad = _rows(ctx, var, slots, grad, indices)
    arrays = [ref.writable() for ref in slots]
    value = var.writable()
    update(rows, grad, value, *arrays)
    for ref, array in zip(slots, arrays):
        ref.assign(array, fresh=True)
    return (var.assign(value, fresh=True),)


def gathered(rule):
    """An ``apply_rows`` update from a rule on the touched rows alone: ``rule(value_rows,
    *slot_rows, grad)`` returns their new rows in the same order, written back in place."""
    def update(rows, grad, *arrays):
        news = rule(*(array[rows] for array in arrays), grad)
        for array, new in zip(arrays, news):
            array[rows] = new
    return update


@register_kernel("SparseApplyAdagrad")
@sigint_hold.whole
def _sparse_apply_adagrad(ctx, var, accum, lr, grad, indices):
    def update(rows, grad, value, acc):
        acc[rows] += grad * grad
        value[rows] -= scalar_of(lr, value) * grad / ctx.xp.sqrt(acc[rows])
    return apply_rows(ctx, var, (accum,), grad, indices, update)


@register_kernel("SparseApplyMomentum")
@sigint_hold.whole
def _sparse_apply_momentum(ctx, var, accum, lr, grad, indices, momentum):
    def update(rows, grad, value, acc):
        rate, decay = scalar_of(lr, value), scalar_of(momentum, value)
        acc[rows] = acc[rows] * decay + grad
        if ctx.attrs["use_nesterov"]:
            value[rows] -= rate * grad + rate * decay * acc[rows]
        else:
            value[rows] -= rate * acc[rows]
    return apply_rows(ctx, var, (accum,), grad, indices, update)


@register_kernel("SparseApplyRMSProp")
@sigint_hold.whole
def _sparse_apply_rms_prop(ctx, var, ms, mom, lr, rho, momentum, epsilon, grad, indices):
    def update(rows, grad, value, square, moment):
        decay = scalar_of(rho, value)
        square[rows] = square[rows] * decay + (1 - decay) * grad * grad
        moment[rows] = moment[rows] * scalar_of(momentum, value) + scalar_of(lr, value) * \
            grad / ctx.xp.sqrt(square[rows] + scalar_of(epsilon, value))
        value[rows] -= moment[rows]
    return apply_rows(ctx, var, (ms, mom), grad, indices, update)


@register_kernel("SparseApplyCenteredRMSProp")
@sigint_hold.whole
def _sparse_apply_centered_rms_prop(ctx, var, mg, ms, mom, lr, rho, momentum, epsilon, grad,
                                    indices):
    def update(rows, grad, value, mean, square, moment):
        decay = scalar_of(rho, value)
        mean[rows] = mean[rows] * decay + (1 - decay) * grad
        square[rows] = square[rows] * decay + (1 - decay) * grad * grad
        denominator = ctx.xp.sqrt(square[rows] - mean[rows] * mean[rows]
                                  + scalar_of(epsilon, value))
        moment[rows] = (moment[rows] * scalar_of(momentum, value)
                        + scalar_of(lr, value) * grad / denominator)
        value[rows] -= moment[rows]
    return apply_rows(ctx, var, (mg, ms, mom), grad, indices, update)


@register_kernel("SparseApplyAdam")
@sigint_hold.whole
def _sparse_apply_adam(ctx, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad,
                       indices):
    # TF1's core Adam on a sparse gradient is not lazy: both moments decay everywhere.
    xp = ctx.xp

    def update(rows, grad, value, first, second):
        decay1, decay2 = scalar_of(beta1, value), scalar_of(beta2, value)
        lr_t = scalar_of(lr * xp.sqrt(1 - beta2_power) / (1 - beta1_power), value)
        first *= decay1
        first[rows] += (1 - decay1) * grad
        second *= decay2
        second[rows] += (1 - decay2) * grad * grad
        value -= lr_t * first / (xp.sqrt(second) + scalar_of(epsilon, value))
    return apply_rows(ctx, var, (m, v), grad, indices, update)


@register_kernel("SparseApplyFtrlV2")
@sigint_hold.whole
def _sparse_apply_ftrl(ctx, var, accum, linear, grad, indices, lr, l1, l2, l2_shrinkage,
                       lr_power):
    return apply_rows(ctx, var, (accum, linear), grad, indices, gathered(
        lambda value, acc, lin, grad: _ftrl_rule(ctx.xp, value, acc, lin, grad, lr, l1, l2,
                                                 l2_shrinkage, lr_power)))
