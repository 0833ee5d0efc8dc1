"""Kernels of the fused optimizer updates (see ops/training.py).

Each dense kernel reads the variable (and its slots) once, computes the new values with array
arithmetic in the variable's dtype, assigns them (values are replaced, never mutated in
place) and returns the variable's new value. A sparse kernel (``SparseApply*``) costs the rows
it touches: it updates them in the array that ``writable()`` hands out, which is the stored
value itself when no reader holds it and a private copy otherwise.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels.arguments import scatter_add as _accumulate
from asyncflow.kernels.registry import register_kernel


def _read(ctx, ref, grad):
    value = ref.read()
    if value.shape != grad.shape:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.type}: variable {ref.name} has shape {list(value.shape)} "
            f"but the gradient has shape {list(grad.shape)}")
    return value


def _scalar(value, like):
    """``value`` in ``like``'s dtype: a numpy scalar from host values; a 0-d device array
    stays on the device (``float32(cupy_array)`` would be an implicit host copy: TypeError)."""
    if isinstance(value, (np.ndarray, np.generic, int, float)):
        return like.dtype.type(value)
    return value.astype(like.dtype)


@register_kernel("ApplyGradientDescent")
def _apply_gradient_descent(ctx, var, alpha, delta):
    value = _read(ctx, var, delta)
    step = _scalar(alpha, value) * delta
    if value.ndim:  # in place into the fresh temporary (0-d operands give numpy scalars)
        step = ctx.xp.subtract(value, step, out=step)
    else:
        step = value - step
    # The new value has the shape the variable holds already.
    return (var.assign(step, validate_shape=False, fresh=True),)


@register_kernel("ApplyMomentum")
def _apply_momentum(ctx, var, accum, lr, grad, momentum):
    value = _read(ctx, var, grad)
    lr, momentum = _scalar(lr, value), _scalar(momentum, value)
    new_accum = accum.assign(accum.read() * momentum + grad, fresh=True)
    if ctx.attrs["use_nesterov"]:
        return (var.assign(value - lr * grad - lr * momentum * new_accum, fresh=True),)
    return (var.assign(value - lr * new_accum, fresh=True),)


@register_kernel("ApplyAdam")
def _apply_adam(ctx, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    beta1, beta2 = _scalar(beta1, value), _scalar(beta2, value)
    lr_t = _scalar(lr * xp.sqrt(1 - beta2_power) / (1 - beta1_power), value)
    new_m = m.assign(m.read() * beta1 + (1 - beta1) * grad, fresh=True)
    new_v = v.assign(v.read() * beta2 + (1 - beta2) * xp.square(grad), fresh=True)
    step = new_m * beta1 + (1 - beta1) * grad if ctx.attrs["use_nesterov"] else new_m
    return (var.assign(value - lr_t * step / (xp.sqrt(new_v) + _scalar(epsilon, value)),
                       fresh=True),)


@register_kernel("ApplyAdagrad")
def _apply_adagrad(ctx, var, accum, lr, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    new_accum = accum.assign(accum.read() + xp.square(grad), fresh=True)
    return (var.assign(value - _scalar(lr, value) * grad / xp.sqrt(new_accum), fresh=True),)


@register_kernel("ApplyRMSProp")
def _apply_rms_prop(ctx, var, ms, mom, lr, rho, momentum, epsilon, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    rho = _scalar(rho, value)
    new_ms = ms.assign(ms.read() * rho + (1 - rho) * xp.square(grad), fresh=True)
    new_mom = mom.assign(mom.read() * _scalar(momentum, value)
                         + _scalar(lr, value) * grad / xp.sqrt(new_ms + _scalar(epsilon, value)),
                         fresh=True)
    return (var.assign(value - new_mom, fresh=True),)


@register_kernel("ApplyCenteredRMSProp")
def _apply_centered_rms_prop(ctx, var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    rho = _scalar(rho, value)
    new_mg = mg.assign(mg.read() * rho + (1 - rho) * grad, fresh=True)
    new_ms = ms.assign(ms.read() * rho + (1 - rho) * xp.square(grad), fresh=True)
    denominator = xp.sqrt(new_ms - xp.square(new_mg) + _scalar(epsilon, value))
    new_mom = mom.assign(mom.read() * _scalar(momentum, value)
                         + _scalar(lr, value) * grad / denominator, fresh=True)
    return (var.assign(value - new_mom, fresh=True),)


@register_kernel("ApplyFtrlV2")
def _apply_ftrl(ctx, var, accum, linear, grad, lr, l1, l2, l2_shrinkage, lr_power):
    value = _read(ctx, var, grad)
    new_var, new_accum, new_linear = _ftrl_rule(ctx.xp, value, accum.read(), linear.read(),
                                                grad, lr, l1, l2, l2_shrinkage, lr_power)
    accum.assign(new_accum, fresh=True)
    linear.assign(new_linear, fresh=True)
    return (var.assign(new_var, fresh=True),)


def _ftrl_rule(xp, value, accum, linear, grad, lr, l1, l2, l2_shrinkage, lr_power):
    """TF1's FTRL-Proximal step (``ApplyFtrlV2``): new (var, accum, linear)."""
    lr, l1, l2 = _scalar(lr, value), _scalar(l1, value), _scalar(l2, value)
    shrinkage, power = _scalar(l2_shrinkage, value), _scalar(lr_power, value)
    shrunk = grad + 2 * shrinkage * value
    new_accum = accum + grad * grad
    if float(power) == -0.5:
        root_new, root_old = xp.sqrt(new_accum), xp.sqrt(accum)
    else:
        root_new, root_old = new_accum ** -power, accum ** -power
    new_linear = linear + shrunk - (root_new - root_old) / lr * value
    quadratic = root_new / lr + 2 * l2
    shrunk_var = (xp.sign(new_linear) * l1 - new_linear) / quadratic
    new_var = xp.where(xp.abs(new_linear) > l1, shrunk_var, xp.zeros_like(shrunk_var))
    return new_var.astype(value.dtype), new_accum, new_linear


# -- sparse applies: the rule on the rows named by ``indices`` ---------------------------------
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
def _sparse_apply_adagrad(ctx, var, accum, lr, grad, indices):
    rows, grad = _rows(ctx, var, grad, indices)
    acc = accum.writable()
    acc[rows] += grad * grad
    value = var.writable()
    value[rows] -= _scalar(lr, value) * grad / ctx.xp.sqrt(acc[rows])
    accum.assign(acc, fresh=True)
    return (var.assign(value, fresh=True),)


@register_kernel("SparseApplyMomentum")
def _sparse_apply_momentum(ctx, var, accum, lr, grad, indices, momentum):
    rows, grad = _rows(ctx, var, grad, indices)
    acc = accum.writable()
    value = var.writable()
    lr, momentum = _scalar(lr, value), _scalar(momentum, value)
    acc[rows] = acc[rows] * momentum + grad
    if ctx.attrs["use_nesterov"]:
        value[rows] -= lr * grad + lr * momentum * acc[rows]
    else:
        value[rows] -= lr * acc[rows]
    accum.assign(acc, fresh=True)
    return (var.assign(value, fresh=True),)


@register_kernel("SparseApplyRMSProp")
def _sparse_apply_rms_prop(ctx, var, ms, mom, lr, rho, momentum, epsilon, grad, indices):
    rows, grad = _rows(ctx, var, grad, indices)
    square, moment, value = ms.writable(), mom.writable(), var.writable()
    rho = _scalar(rho, value)
    square[rows] = square[rows] * rho + (1 - rho) * grad * grad
    moment[rows] = moment[rows] * _scalar(momentum, value) + _scalar(lr, value) * grad / \
        ctx.xp.sqrt(square[rows] + _scalar(epsilon, value))
    value[rows] -= moment[rows]
    ms.assign(square, fresh=True)
    mom.assign(moment, fresh=True)
    return (var.assign(value, fresh=True),)


@register_kernel("SparseApplyCenteredRMSProp")
def _sparse_apply_centered_rms_prop(ctx, var, mg, ms, mom, lr, rho, momentum, epsilon, grad,
                                    indices):
    rows, grad = _rows(ctx, var, grad, indices)
    mean, square, moment, value = mg.writable(), ms.writable(), mom.writable(), var.writable()
    rho = _scalar(rho, value)
    mean[rows] = mean[rows] * rho + (1 - rho) * grad
    square[rows] = square[rows] * rho + (1 - rho) * grad * grad
    denominator = ctx.xp.sqrt(square[rows] - mean[rows] * mean[rows] + _scalar(epsilon, value))
    moment[rows] = moment[rows] * _scalar(momentum, value) + _scalar(lr, value) * grad / denominator
    value[rows] -= moment[rows]
    mg.assign(mean, fresh=True)
    ms.assign(square, fresh=True)
    mom.assign(moment, fresh=True)
    return (var.assign(value, fresh=True),)


@register_kernel("SparseApplyAdam")
def _sparse_apply_adam(ctx, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad,
                       indices):
    # TF1's core Adam on a sparse gradient is not lazy: both moments decay everywhere.
    xp = ctx.xp
    rows, grad = _rows(ctx, var, grad, indices)
    first, second, value = m.writable(), v.writable(), var.writable()
    beta1, beta2 = _scalar(beta1, value), _scalar(beta2, value)
    lr_t = _scalar(lr * xp.sqrt(1 - beta2_power) / (1 - beta1_power), value)
    first *= beta1
    first[rows] += (1 - beta1) * grad
    second *= beta2
    second[rows] += (1 - beta2) * grad * grad
    value -= lr_t * first / (xp.sqrt(second) + _scalar(epsilon, value))
    m.assign(first, fresh=True)
    v.assign(second, fresh=True)
    return (var.assign(value, fresh=True),)


@register_kernel("SparseApplyFtrlV2")
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
