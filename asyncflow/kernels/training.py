"""Kernels of the fused optimizer updates (see ops/training.py).

Each dense kernel reads the variable (and its slots) once, computes the new values with array
arithmetic in the variable's dtype, assigns them (values are replaced, never mutated in
place: a value fetched earlier stays as it was) and returns the variable's new value.

The dense applies allocate only the arrays they assign (the new variable and slots) and
compute into them with ``out=``: no temporaries of the variable's size beyond those (the
step's scratch is the new variable's own buffer, and what needs a second scratch gets a
chunk-sized one). The work is split over the device's intra-op threads in contiguous
chunks of the flattened arrays (``kernels/intra_op.py``); elementwise, so the bits do not
depend on the split, and each formula keeps the operation order of TF's (and of the
expressions these kernels had before), so the results are the same bits as those.

A sparse kernel (``SparseApply*``) costs the rows it touches: it updates them in the array that
``writable()`` hands out, which is the stored value itself when no reader holds it and a private
copy otherwise.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import intra_op
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
