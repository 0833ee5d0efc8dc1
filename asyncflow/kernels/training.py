"""Kernels of the fused optimizer updates (see ops/training.py).

Each kernel reads the variable (and its slots) once, computes the new values with array
arithmetic in the variable's dtype, assigns them (values are replaced, never mutated in
place: a value fetched earlier stays as it was) and returns the variable's new value.

The dense applies allocate only the arrays they assign (the new variable and slots) and
compute into them with ``out=``: no temporaries of the variable's size beyond those (the
step's scratch is the new variable's own buffer, and what needs a second scratch gets a
chunk-sized one). The work is split over the device's intra-op threads in contiguous
chunks of the flattened arrays (``kernels/intra_op.py``); elementwise, so the bits do not
depend on the split, and each formula keeps the operation order of TF's (and of the
expressions these kernels had before), so the results are the same bits as those.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import intra_op
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


def _fresh(xp, value, count):
    """``count`` new arrays shaped like ``value`` (the values the kernel will assign)."""
    return [xp.empty(value.shape, dtype=value.dtype) for _ in range(count)]


def _chunked(ctx, arrays, per_item_ops, fn):
    """Call ``fn(*flat_chunks)`` over contiguous chunks of the flattened ``arrays`` (all of
    one size), split over the intra-op threads when large."""
    flat = [a.reshape(-1) for a in arrays]
    itemsize = flat[0].itemsize

    def chunk(start, stop):
        fn(*(a[start:stop] for a in flat))
    intra_op.for_batch(ctx, flat[0].size, per_item_ops, chunk, len(flat) * itemsize)


@register_kernel("ApplyMomentum")
def _apply_momentum(ctx, var, accum, lr, grad, momentum):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    lr, momentum = _scalar(lr, value), _scalar(momentum, value)
    nesterov = ctx.attrs["use_nesterov"]
    lr_momentum = lr * momentum
    new_accum, new_value = _fresh(xp, value, 2)

    def update(x, a0, g, a1, out):
        xp.multiply(a0, momentum, out=a1)
        a1 += g                                   # accum * momentum + grad
        if nesterov:                              # value - lr * grad - lr * momentum * accum
            xp.multiply(g, lr, out=out)
            xp.subtract(x, out, out=out)
            scratch = xp.multiply(a1, lr_momentum)
            out -= scratch
        else:                                     # value - lr * accum
            xp.multiply(a1, lr, out=out)
            xp.subtract(x, out, out=out)
    _chunked(ctx, (value, accum.read(), grad, new_accum, new_value), 5, update)
    accum.assign(new_accum, fresh=True)
    return (var.assign(new_value, fresh=True),)


@register_kernel("ApplyAdam")
def _apply_adam(ctx, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    beta1, beta2 = _scalar(beta1, value), _scalar(beta2, value)
    one = value.dtype.type(1)
    lr_t = _scalar(lr * xp.sqrt(1 - beta2_power) / (1 - beta1_power), value)
    epsilon = _scalar(epsilon, value)
    nesterov = ctx.attrs["use_nesterov"]
    new_m, new_v, new_value = _fresh(xp, value, 3)

    def update(x, m0, v0, g, m1, v1, out):
        xp.multiply(m0, beta1, out=m1)
        xp.multiply(g, one - beta1, out=out)
        m1 += out                                  # m * beta1 + (1 - beta1) * grad
        xp.multiply(v0, beta2, out=v1)
        xp.square(g, out=out)
        out *= one - beta2
        v1 += out                                  # v * beta2 + (1 - beta2) * grad^2
        if nesterov:                               # step = m * beta1 + (1 - beta1) * grad
            step = xp.multiply(m1, beta1)
            xp.multiply(g, one - beta1, out=out)
            step += out
        else:
            step = m1
        scratch = xp.multiply(step, lr_t)          # lr_t * step / (sqrt(v) + epsilon)
        xp.sqrt(v1, out=out)
        out += epsilon
        xp.divide(scratch, out, out=scratch)
        xp.subtract(x, scratch, out=out)
    _chunked(ctx, (value, m.read(), v.read(), grad, new_m, new_v, new_value), 12, update)
    m.assign(new_m, fresh=True)
    v.assign(new_v, fresh=True)
    return (var.assign(new_value, fresh=True),)


@register_kernel("ApplyAdagrad")
def _apply_adagrad(ctx, var, accum, lr, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    lr = _scalar(lr, value)
    new_accum, new_value = _fresh(xp, value, 2)

    def update(x, a0, g, a1, out):
        xp.square(g, out=a1)
        a1 += a0                                   # accum + grad^2
        xp.multiply(g, lr, out=out)                # value - lr * grad / sqrt(accum)
        scratch = xp.sqrt(a1)
        out /= scratch
        xp.subtract(x, out, out=out)
    _chunked(ctx, (value, accum.read(), grad, new_accum, new_value), 6, update)
    accum.assign(new_accum, fresh=True)
    return (var.assign(new_value, fresh=True),)


@register_kernel("ApplyRMSProp")
def _apply_rms_prop(ctx, var, ms, mom, lr, rho, momentum, epsilon, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    rho = _scalar(rho, value)
    one = value.dtype.type(1)
    lr, momentum, epsilon = (_scalar(s, value) for s in (lr, momentum, epsilon))
    new_ms, new_mom, new_value = _fresh(xp, value, 3)

    def update(x, ms0, mom0, g, ms1, mom1, out):
        xp.multiply(ms0, rho, out=ms1)
        xp.square(g, out=out)
        out *= one - rho
        ms1 += out                                 # ms * rho + (1 - rho) * grad^2
        xp.add(ms1, epsilon, out=out)
        xp.sqrt(out, out=out)
        xp.multiply(g, lr, out=mom1)
        mom1 /= out                                # lr * grad / sqrt(ms + epsilon)
        xp.multiply(mom0, momentum, out=out)
        mom1 += out                                # + mom * momentum
        xp.subtract(x, mom1, out=out)
    _chunked(ctx, (value, ms.read(), mom.read(), grad, new_ms, new_mom, new_value), 10, update)
    ms.assign(new_ms, fresh=True)
    mom.assign(new_mom, fresh=True)
    return (var.assign(new_value, fresh=True),)


@register_kernel("ApplyCenteredRMSProp")
def _apply_centered_rms_prop(ctx, var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    rho = _scalar(rho, value)
    one = value.dtype.type(1)
    lr, momentum, epsilon = (_scalar(s, value) for s in (lr, momentum, epsilon))
    new_mg, new_ms, new_mom, new_value = _fresh(xp, value, 4)

    def update(x, mg0, ms0, mom0, g, mg1, ms1, mom1, out):
        xp.multiply(mg0, rho, out=mg1)
        xp.multiply(g, one - rho, out=out)
        mg1 += out                                 # mg * rho + (1 - rho) * grad
        xp.multiply(ms0, rho, out=ms1)
        xp.square(g, out=out)
        out *= one - rho
        ms1 += out                                 # ms * rho + (1 - rho) * grad^2
        xp.square(mg1, out=out)
        xp.subtract(ms1, out, out=out)
        out += epsilon
        xp.sqrt(out, out=out)                      # sqrt(ms - mg^2 + epsilon)
        xp.multiply(g, lr, out=mom1)
        mom1 /= out
        xp.multiply(mom0, momentum, out=out)
        mom1 += out
        xp.subtract(x, mom1, out=out)
    _chunked(ctx, (value, mg.read(), ms.read(), mom.read(), grad, new_mg, new_ms, new_mom,
                   new_value), 14, update)
    mg.assign(new_mg, fresh=True)
    ms.assign(new_ms, fresh=True)
    mom.assign(new_mom, fresh=True)
    return (var.assign(new_value, fresh=True),)
