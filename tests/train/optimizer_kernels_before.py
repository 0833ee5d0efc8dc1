"""The dense optimizer kernels as they were before issue 37 rebuilt them without temporaries,
kept as the reference the rebuilt kernels are checked against bit for bit
(tests/train/test_optimizer_kernels.py). Plain functions; nothing is registered.

Their original notes follow.

Each kernel reads the variable (and its slots) once, computes the new values with array
arithmetic in the variable's dtype, assigns them (values are replaced, never mutated in
place) and returns the variable's new value.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors


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


def _apply_gradient_descent(ctx, var, alpha, delta):
    value = _read(ctx, var, delta)
    step = _scalar(alpha, value) * delta
    if value.ndim:  # in place into the fresh temporary (0-d operands give numpy scalars)
        step = ctx.xp.subtract(value, step, out=step)
    else:
        step = value - step
    # The new value has the shape the variable holds already.
    return (var.assign(step, validate_shape=False, fresh=True),)


def _apply_momentum(ctx, var, accum, lr, grad, momentum):
    value = _read(ctx, var, grad)
    lr, momentum = _scalar(lr, value), _scalar(momentum, value)
    new_accum = accum.assign(accum.read() * momentum + grad, fresh=True)
    if ctx.attrs["use_nesterov"]:
        return (var.assign(value - lr * grad - lr * momentum * new_accum, fresh=True),)
    return (var.assign(value - lr * new_accum, fresh=True),)


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


def _apply_adagrad(ctx, var, accum, lr, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    new_accum = accum.assign(accum.read() + xp.square(grad), fresh=True)
    return (var.assign(value - _scalar(lr, value) * grad / xp.sqrt(new_accum), fresh=True),)


def _apply_rms_prop(ctx, var, ms, mom, lr, rho, momentum, epsilon, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    rho = _scalar(rho, value)
    new_ms = ms.assign(ms.read() * rho + (1 - rho) * xp.square(grad), fresh=True)
    new_mom = mom.assign(mom.read() * _scalar(momentum, value)
                         + _scalar(lr, value) * grad / xp.sqrt(new_ms + _scalar(epsilon, value)),
                         fresh=True)
    return (var.assign(value - new_mom, fresh=True),)


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
