"""Kernels of TF1's Adadelta and proximal updates (see ops/training.py), dense and sparse,
as whole-array expressions in the variable's dtype (the rules of TF1's ``training_ops``):

- Adadelta: ``accum = rho accum + (1 - rho) g^2``;
  ``update = sqrt(accum_update + eps) / sqrt(accum + eps) * g``;
  ``accum_update = rho accum_update + (1 - rho) update^2``; ``var -= lr update``.
- Proximal gradient descent: ``prox = var - alpha g``; ``var = sign(prox) max(|prox| -
  alpha l1, 0) / (1 + alpha l2)`` (``prox / (1 + alpha l2)`` when ``l1`` is 0).
- Proximal Adagrad: ``accum += g^2``, then the proximal step with ``alpha = lr / sqrt(accum)``.
- Adagrad dual averaging (``ApplyAdagradDA``, ``T`` the global step): ``ga += g``,
  ``gg += g^2``; ``var = -sign(ga) lr max(|ga| - T l1, 0) / (T l2 lr + sqrt(gg))`` (``-lr ga /
  (...)`` when ``l1`` is 0): the variable is a closed form of the accumulators, not updated
  from its old value. TF1 writes this rule three ways, which round differently, and so do
  these kernels: the dense one as above; the sparse one on a variable with rows of more than
  one element as ``-sign(ga) max(|ga| / T - l1, 0) / (l2 + sqrt(gg) / (T lr))``; on rows of one
  element in float64 arithmetic, rounded to the variable's dtype once at the end.

The sparse forms apply the rule to the unique touched rows, repeated rows summed first
(``kernels/training_sparse.py``'s ``apply_rows``), and check every index before changing
anything.
Each kernel is one update with respect to a Ctrl-C (``sigint_hold.whole``). The
proximal Adagrad kernels refuse, as TF1's, a learning rate that is not positive (or NaN) and a
negative l1 or l2, before changing anything; TF1's Adadelta and proximal gradient descent
kernels check no value, and neither do these.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import sigint_hold
from asyncflow.kernels.registry import register_kernel
from asyncflow.kernels.training import _read, scalar_of
from asyncflow.kernels.training_sparse import apply_rows, gathered


def _adadelta(xp, value, accum, accum_update, lr, rho, epsilon, grad):
    lr, rho, epsilon = (scalar_of(s, value) for s in (lr, rho, epsilon))
    one = value.dtype.type(1)
    accum = accum * rho + grad * grad * (one - rho)
    update = xp.sqrt(accum_update + epsilon) / xp.sqrt(accum + epsilon) * grad
    accum_update = accum_update * rho + update * update * (one - rho)
    return value - update * lr, accum, accum_update


def _proximal(xp, value, alpha, l1, l2, grad):
    """TF1's proximal step; ``alpha`` a scalar or an array of per-element rates."""
    prox = value - grad * alpha
    if float(l1) > 0:
        shrunk = xp.maximum(xp.abs(prox) - alpha * l1, value.dtype.type(0))
        return (xp.sign(prox) * shrunk / (value.dtype.type(1) + alpha * l2)).astype(value.dtype)
    return (prox / (value.dtype.type(1) + alpha * l2)).astype(value.dtype)


def _proximal_adagrad(xp, value, accum, lr, l1, l2, grad):
    lr, l1, l2 = (scalar_of(s, value) for s in (lr, l1, l2))
    accum = accum + grad * grad
    return _proximal(xp, value, lr / xp.sqrt(accum), l1, l2, grad), accum


def _check_proximal_adagrad(ctx, lr, l1, l2):
    """TF1's checks of ``ApplyProximalAdagrad``: ``lr > 0`` (a NaN fails), ``l1, l2 >= 0``."""
    if not float(lr) > 0:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.type}: lr is not a positive scalar: {float(lr)}")
    for value, which in ((l1, "l1"), (l2, "l2")):
        if not float(value) >= 0:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"{ctx.type}: {which} regularization strength is not a "
                f"non-negative scalar: {float(value)}")


@register_kernel("ApplyAdadelta")
@sigint_hold.whole
def _apply_adadelta(ctx, var, accum, accum_update, lr, rho, epsilon, grad):
    value = _read(ctx, var, grad)
    new, new_accum, new_update = _adadelta(ctx.xp, value, accum.read(), accum_update.read(),
                                           lr, rho, epsilon, grad)
    accum.assign(new_accum, fresh=True)
    accum_update.assign(new_update, fresh=True)
    return (var.assign(new, fresh=True),)


@register_kernel("SparseApplyAdadelta")
@sigint_hold.whole
def _sparse_apply_adadelta(ctx, var, accum, accum_update, lr, rho, epsilon, grad, indices):
    return apply_rows(ctx, var, (accum, accum_update), grad, indices, gathered(
        lambda value, acc, upd, grad: _adadelta(ctx.xp, value, acc, upd, lr, rho, epsilon, grad)))


@register_kernel("ApplyProximalGradientDescent")
@sigint_hold.whole
def _apply_proximal_gradient_descent(ctx, var, alpha, l1, l2, delta):
    value = _read(ctx, var, delta)
    alpha, l1, l2 = (scalar_of(s, value) for s in (alpha, l1, l2))
    return (var.assign(_proximal(ctx.xp, value, alpha, l1, l2, delta), fresh=True),)


@register_kernel("SparseApplyProximalGradientDescent")
@sigint_hold.whole
def _sparse_apply_proximal_gradient_descent(ctx, var, alpha, l1, l2, grad, indices):
    def rule(value, grad):
        return (_proximal(ctx.xp, value, *(scalar_of(s, value) for s in (alpha, l1, l2)), grad),)
    return apply_rows(ctx, var, (), grad, indices, gathered(rule))


@register_kernel("ApplyProximalAdagrad")
@sigint_hold.whole
def _apply_proximal_adagrad(ctx, var, accum, lr, l1, l2, grad):
    value = _read(ctx, var, grad)
    _check_proximal_adagrad(ctx, lr, l1, l2)
    new, new_accum = _proximal_adagrad(ctx.xp, value, accum.read(), lr, l1, l2, grad)
    accum.assign(new_accum, fresh=True)
    return (var.assign(new, fresh=True),)


@register_kernel("SparseApplyProximalAdagrad")
@sigint_hold.whole
def _sparse_apply_proximal_adagrad(ctx, var, accum, lr, l1, l2, grad, indices):
    _check_proximal_adagrad(ctx, lr, l1, l2)
    return apply_rows(ctx, var, (accum,), grad, indices, gathered(
        lambda value, acc, grad: _proximal_adagrad(ctx.xp, value, acc, lr, l1, l2, grad)))


def _adagrad_da_dense(xp, accum, squared, lr, l1, l2, step):
    """TF1's dense AdagradDA rule in the accumulators' dtype: ``step`` enters as a float32
    (TF1's ``static_cast<float>``), ``T lr`` rounds before it meets ``l2``."""
    dtype = accum.dtype.type
    lr, l1, l2 = dtype(float(lr)), dtype(float(l1)), dtype(float(l2))
    step32 = np.float32(step)
    step_lr = dtype(step32 * lr)
    denominator = l2 * step_lr + xp.sqrt(squared)
    if l1 > 0:
        shrunk = xp.maximum(xp.abs(accum) - dtype(step32) * l1, dtype(0))
        return (-lr * xp.sign(accum)) * shrunk / denominator
    return lr * accum * dtype(-1) / denominator


def _adagrad_da_rows(xp, accum, squared, lr, l1, l2, step):
    """TF1's sparse AdagradDA rule on rows of more than one element, in their dtype."""
    dtype = accum.dtype.type
    lr, l1, l2, step = dtype(float(lr)), dtype(float(l1)), dtype(float(l2)), dtype(step)
    step_lr = dtype(step * lr)
    denominator = l2 + xp.sqrt(squared) / step_lr
    if l1 > 0:
        shrunk = xp.maximum(xp.abs(accum) / step - l1, dtype(0))
        return -xp.sign(accum) * shrunk / denominator
    return -(accum / step) / denominator


def _adagrad_da_scalars(xp, accum, squared, lr, l1, l2, step):
    """TF1's sparse AdagradDA rule on rows of one element: float64 arithmetic (``sqrt`` of the
    accumulator in its own dtype), one rounding to the variable's dtype."""
    dtype = accum.dtype
    lr, l1, l2 = float(lr), float(l1), float(l2)
    step_l1, step_l2_lr = step * l1, step * l2 * lr
    denominator = step_l2_lr + xp.sqrt(squared).astype(np.float64)
    wide = accum.astype(np.float64)
    if l1 > 0:
        value = xp.sign(-wide) * lr * xp.maximum(xp.abs(wide) - step_l1, 0.0) / denominator
    else:
        value = (-wide * lr) / denominator
    return value.astype(dtype)


def _global_step(ctx, step):
    return int(step.get() if hasattr(step, "get") else step)


@register_kernel("ApplyAdagradDA")
@sigint_hold.whole
def _apply_adagrad_da(ctx, var, accum, squared_accum, grad, lr, l1, l2, global_step):
    _read(ctx, var, grad)
    new_accum = accum.read() + grad
    new_squared = squared_accum.read() + grad * grad
    new = _adagrad_da_dense(ctx.xp, new_accum, new_squared, lr, l1, l2,
                            _global_step(ctx, global_step))
    accum.assign(new_accum, fresh=True)
    squared_accum.assign(new_squared, fresh=True)
    return (var.assign(new, fresh=True),)


@register_kernel("SparseApplyAdagradDA")
@sigint_hold.whole
def _sparse_apply_adagrad_da(ctx, var, accum, squared_accum, grad, indices, lr, l1, l2,
                             global_step):
    shape = var.read().shape
    if len(shape) < 1 or not all(shape[1:]):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.type}: var must be at least 1 dimensional with rows of at "
            f"least one element, got shape {list(shape)} (variable {var.name})")

    def update(rows, grad, value, acc, squared):
        step = _global_step(ctx, global_step)
        if not rows.shape[0]:
            return
        if int(np.prod(shape[1:])) > 1:  # TF1: rows of more than one element, in their dtype
            acc[rows] += grad
            squared[rows] += grad * grad
            value[rows] = _adagrad_da_rows(ctx.xp, acc[rows], squared[rows], lr, l1, l2, step)
        else:  # one element a row: float64 accumulation rounded to the dtype, as TF1's
            wide = grad.astype(np.float64)
            acc[rows] = (acc[rows].astype(np.float64) + wide).astype(acc.dtype)
            squared[rows] = (squared[rows].astype(np.float64) + wide * wide).astype(acc.dtype)
            value[rows] = _adagrad_da_scalars(ctx.xp, acc[rows], squared[rows], lr, l1, l2,
                                              step)
    return apply_rows(ctx, var, (accum, squared_accum), grad, indices, update)
