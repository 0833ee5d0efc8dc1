"""Kernels of the nn family (see ops/nn.py), written once against ``ctx.xp``.

Activations, softmax, cross entropies, BiasAdd and L2Loss; convolution and pooling are in
kernels/nn_conv.py. Kernels never modify their inputs; outputs are fresh arrays.
"""
from __future__ import annotations

import math

import numpy as np

from asyncflow import errors
from asyncflow.kernels import intra_op, jit
from asyncflow.kernels.epilogue import sigmoid_into
from asyncflow.kernels.registry import register_kernel, register_prepare


# -- activations ----------------------------------------------------------------------------
@register_kernel("Relu")
def _relu(ctx, x):
    zero = x.dtype.type(0)
    if ctx.prepared:  # the node may be large (intra_op.may_be_large)
        split = intra_op.elementwise(ctx, ctx.xp.maximum, x, zero)
        if split is not None:
            return (split,)
    return (ctx.xp.maximum(x, zero),)


# Masks multiply rather than select: numpy's where() is ~7x slower than a multiply here, and
# TF's own ReluGrad functor is `gradients * (features > 0)` too.
@register_kernel("ReluGrad")
def _relu_grad(ctx, grad, features):
    xp = ctx.xp
    if ctx.prepared and grad.shape == features.shape:
        def masked(g, f, out):
            xp.multiply(g, f > 0, out=out)
        split = intra_op.elementwise(ctx, masked, grad, features, dtype=grad.dtype)
        if split is not None:
            return (split,)
    return (grad * (features > 0),)


register_prepare("Relu")(intra_op.may_be_large)
register_prepare("ReluGrad")(intra_op.may_be_large)


@register_kernel("Relu6")
def _relu6(ctx, x):
    return (ctx.xp.clip(x, x.dtype.type(0), x.dtype.type(6)),)


@register_kernel("Relu6Grad")
def _relu6_grad(ctx, grad, features):
    return (grad * ((features > 0) & (features < 6)),)


# Elu and Selu take x's sign at the end: TF's ``x < 0 ? expm1(x) : x`` keeps -0.0, which
# max(x, 0) + expm1(min(x, 0)) turns into 0.0 (every other result already has x's sign).
@register_kernel("Elu")
def _elu(ctx, x):
    xp = ctx.xp
    # max(x, expm1(min(x, 0))) (expm1(x) >= x) in one buffer: cheaper than the old sum even
    # with the copysign
    result = xp.asarray(xp.minimum(x, x.dtype.type(0)))
    if not result.ndim:
        return (xp.copysign(xp.maximum(x, xp.expm1(result)), x),)
    xp.expm1(result, out=result)
    xp.maximum(x, result, out=result)
    return (xp.copysign(result, x, out=result),)


@register_kernel("EluGrad")
def _elu_grad(ctx, grad, outputs):
    # TF's EluGrad: outputs < 0 ? grad * (outputs + 1) : grad. fmin ignores NaN, so a NaN
    # output passes grad on as TF's does, at minimum's cost (a where() was 7x slower)
    return (grad * (ctx.xp.fmin(outputs, outputs.dtype.type(0)) + outputs.dtype.type(1)),)


@register_kernel("Softsign")
def _softsign(ctx, x):
    return (x / (x.dtype.type(1) + ctx.xp.abs(x)),)


@register_kernel("SoftsignGrad")
def _softsign_grad(ctx, grad, features):
    denominator = features.dtype.type(1) + ctx.xp.abs(features)
    return (grad / (denominator * denominator),)


# TF's SELU constants (Klambauer et al. 2017).
SELU_SCALE = 1.0507009873554804934193349852946
SELU_ALPHA = 1.6732632423543772848170429916717


@register_kernel("Selu")
def _selu(ctx, x):
    xp = ctx.xp
    scale, alpha = x.dtype.type(SELU_SCALE), x.dtype.type(SELU_SCALE * SELU_ALPHA)
    zero = x.dtype.type(0)
    result = xp.asarray(scale * xp.maximum(x, zero) + alpha * xp.expm1(xp.minimum(x, zero)))
    return (xp.copysign(result, x, out=result) if result.ndim else xp.copysign(result, x),)


@register_kernel("SeluGrad")
def _selu_grad(ctx, grad, outputs):
    # outputs < 0: grad * (outputs + scale * alpha); else grad * scale, as TF's SeluGrad.
    scale = outputs.dtype.type(SELU_SCALE)
    below = outputs + outputs.dtype.type(SELU_SCALE * SELU_ALPHA)
    return (grad * ctx.xp.where(outputs < 0, below, scale),)


@register_kernel("LeakyRelu")
def _leaky_relu(ctx, x):
    alpha = x.dtype.type(ctx.attrs["alpha"])
    return (ctx.xp.where(x > 0, x, x * alpha),)


@register_kernel("LeakyReluGrad")
def _leaky_relu_grad(ctx, grad, features):
    alpha = grad.dtype.type(ctx.attrs["alpha"])
    return (ctx.xp.where(features > 0, grad, grad * alpha),)


# Softplus as max(x, 0) + log1p(exp(-|x|)): exp never overflows, and for large negative x
# log1p keeps exp(x)'s full relative precision (TF switches between x, exp(x) and
# log1p(exp(x)) by thresholds instead). Every step writes in place: one result array.
@register_kernel("Softplus")
def _softplus(ctx, x):
    xp = ctx.xp
    if x.ndim == 0:  # ufuncs give 0-d inputs numpy scalars, which out= cannot write
        return (_softplus(ctx, x.reshape(1))[0].reshape(()),)
    tail = xp.abs(x)
    xp.negative(tail, out=tail)
    xp.exp(tail, out=tail)
    xp.log1p(tail, out=tail)
    result = xp.maximum(x, x.dtype.type(0))
    result += tail
    return (result,)


@register_kernel("SoftplusGrad")
def _softplus_grad(ctx, grad, features):
    """``grad * sigmoid(features)`` (TF's SoftplusGrad), the sigmoid in its stable form."""
    xp = ctx.xp
    if features.ndim == 0:
        return (_softplus_grad(ctx, grad.reshape(1), features.reshape(1))[0].reshape(()),)
    result = sigmoid_into(xp, features, xp.empty(features.shape, dtype=features.dtype))
    return ((result * grad).astype(grad.dtype, copy=False),)


_SQRT_TWO = math.sqrt(2)
_TANH_SCALE = math.sqrt(2 / math.pi)
_erfc_exact = np.frompyfunc(math.erfc, 1, 1)


def _erfc(xp, z, exact):
    """``erfc(z)`` elementwise for float64 ``z``. ``exact`` (float64 results): the C
    library's erfc, one Python call per element; else Numerical Recipes' Chebyshev form
    (relative error below 1.2e-7 everywhere, under one float32 ulp), vectorized."""
    if exact or type(z) is not np.ndarray:
        host = np.asarray(z.get() if hasattr(z, "get") else z, dtype=np.float64)
        return xp.asarray(_erfc_exact(host).astype(np.float64))
    a = np.abs(z)
    t = a * 0.5
    t += 1.0
    np.divide(1.0, t, out=t)                    # t = 1 / (1 + a/2)
    poly = np.multiply(t, 0.17087277)
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
              0.37409196, 1.00002368):
        poly += c
        poly *= t
    poly -= 1.26551223
    with np.errstate(over="ignore", invalid="ignore"):
        np.multiply(a, a, out=a)
        np.subtract(poly, a, out=poly)
        np.exp(poly, out=poly)
        poly *= t                               # erfc(|z|)
        below = np.less(z, 0).astype(np.float64)  # erfc(-a) = 2 - erfc(a): a mask, no where()
        np.multiply(poly, -2.0, out=t)
        t += 2.0
        below *= t
    poly += below
    return poly


def _gelu_parts(ctx, x):
    """``(wide, cdf, slope)``: ``x`` as float64, Phi(x) (the tanh form: ``sigmoid(2u)``)
    and d(cdf)/dx, all float64: gelu = ``wide * cdf``, its derivative ``cdf + wide * slope``."""
    xp = ctx.xp
    wide = x.astype(np.float64) if hasattr(x, "astype") else x
    if ctx.attrs.get("approximate"):
        with np.errstate(over="ignore", invalid="ignore"):
            cube = wide * wide * wide  # (``** 3`` is numpy's generic power: 200x slower)
            u = _TANH_SCALE * (wide + 0.044715 * cube)
            cdf = sigmoid_into(xp, 2 * u, xp.empty(wide.shape, dtype=np.float64))
            slope = 2 * cdf * (1 - cdf) * _TANH_SCALE * (1 + 3 * 0.044715 * wide * wide)
        return wide, cdf, slope
    # x / sqrt(2) divided, as TF does: the same rounded argument.
    cdf = 0.5 * _erfc(xp, -wide / _SQRT_TWO, x.dtype == np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        density = xp.exp(-0.5 * wide * wide) / math.sqrt(2 * math.pi)
    return wide, cdf, density


@register_kernel("Gelu")
def _gelu(ctx, x):
    """``x * Phi(x)``, written ``0.5 * x * erfc(-x / sqrt 2)`` so that large negative ``x``
    keeps its tiny result's precision (``1 + erf`` would cancel to 0); the tanh form as
    ``x * sigmoid(2u)`` (= ``0.5 x (1 + tanh u)``) for the same reason. Computed in float64,
    rounded once to the input's dtype."""
    if x.ndim == 0:
        return (_gelu(ctx, x.reshape(1))[0].reshape(()),)
    wide, cdf, _ = _gelu_parts(ctx, x)
    with np.errstate(invalid="ignore"):
        return ((wide * cdf).astype(x.dtype),)


@register_kernel("GeluGrad")
def _gelu_grad(ctx, grad, features):
    """``grad * (Phi(x) + x * phi(x))`` (the tanh form: its own derivative)."""
    if features.ndim == 0:
        return (_gelu_grad(ctx, grad.reshape(1), features.reshape(1))[0].reshape(()),)
    wide, cdf, slope = _gelu_parts(ctx, features)
    with np.errstate(invalid="ignore"):
        return ((grad * (cdf + wide * slope)).astype(grad.dtype),)


# -- softmax family -----------------------------------------------------------------------
def _log_softmax_of(xp, x, axis):
    if x.shape[axis] == 0:
        return x.copy()
    shifted = x - xp.max(x, axis=axis, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


@register_kernel("Softmax")
def _softmax(ctx, x):
    xp = ctx.xp
    axis = ctx.attrs["axis"]
    if x.shape[axis] == 0:
        return (x.copy(),)
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return (e / xp.sum(e, axis=axis, keepdims=True),)


@register_kernel("LogSoftmax")
def _log_softmax(ctx, x):
    return (_log_softmax_of(ctx.xp, x, ctx.attrs["axis"]),)


@register_kernel("SoftmaxCrossEntropyWithLogits")
def softmax_xent(ctx, logits, labels):
    xp = ctx.xp
    axis = ctx.attrs["axis"]
    if logits.shape != labels.shape:
        labels = _broadcast_labels(ctx, logits, labels, axis)
    if logits.ndim == 2 and axis in (1, -1) and logits.size and logits.dtype.kind == "f":
        return _softmax_xent_rows(xp, logits, labels)
    # sum(labels * -log p), as TF's kernel (labels * (log(sum) - shifted)): a certain class
    # loses +0.0, where -sum(labels * log p) would give -0.0.
    log_probs = _log_softmax_of(xp, logits, axis)
    loss = xp.sum(labels * xp.negative(log_probs), axis=axis)
    return (xp.asarray(loss, dtype=logits.dtype), xp.exp(log_probs) - labels)


def _broadcast_labels(ctx, logits, labels, axis):
    """``labels`` broadcast to ``logits``' shape by TF1's rule: both as ``[rows, classes]``
    matrices (the class ``axis`` last, the others flattened), the labels' rows and classes
    each the logits' or 1."""
    xp, ndim = ctx.xp, logits.ndim
    if ndim == 0 or labels.ndim == 0:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"logits and labels must have >= 1 dimension, got shapes "
            f"{list(logits.shape)} and {list(labels.shape)}")
    if not -ndim <= axis < ndim:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"axis {axis} is out of range for logits of rank {ndim}")
    axis %= ndim
    label_axis = axis if labels.ndim == ndim else labels.ndim - 1
    classes = logits.shape[axis]
    rows = logits.size // classes if classes else 0
    moved = xp.moveaxis(labels, label_axis, -1)
    label_classes = moved.shape[-1]
    label_rows = moved.size // label_classes if label_classes else 0
    if (labels.ndim != ndim and axis != ndim - 1) or label_rows not in (1, rows) \
            or label_classes not in (1, classes):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"logits and labels must be broadcastable: logits_size=[{rows},"
            f"{classes}] labels_size=[{label_rows},{label_classes}] (shapes "
            f"{list(logits.shape)} and {list(labels.shape)}, class axis {axis})")
    full = xp.broadcast_to(moved.reshape(label_rows, label_classes), (rows, classes))
    kept = tuple(d for i, d in enumerate(logits.shape) if i != axis)
    return xp.moveaxis(full.reshape(kept + (classes,)), -1, axis)


def _softmax_xent_rows(xp, logits, labels):
    """Rows of ``[batch, classes]``: ``log p = shifted - log(sum(exp(shifted)))`` in one
    array, the loss from it, and ``backprop = exp(shifted) / sum - labels`` in the exp's
    array (one exp, as TF's kernel), in place after the first copy. Few classes go
    class-major as in the sparse kernel: numpy reduces a short last axis row by row (~5x
    slower). [128, 10] float32: 13 us against 25 for the whole-array form; within float32
    rounding of it (the sums' order, and ``exp(s) / sum`` for ``exp(s - log(sum))``)."""
    major = logits.shape[1] <= CLASS_MAJOR_MAX
    shifted, labels = (logits.T.copy(), labels.T) if major else (logits.copy(), labels)
    axis = 0 if major else 1
    shifted -= shifted.max(axis=axis, keepdims=True)
    exp = xp.exp(shifted)
    total = exp.sum(axis=axis, keepdims=True)
    xp.subtract(xp.log(total), shifted, out=shifted)  # -log p (TF's order: a sure class is +0.0)
    shifted *= labels
    loss = shifted.sum(axis=axis)
    exp /= total
    exp -= labels
    return (loss, exp.T if major else exp)


CLASS_MAJOR_MAX = 32  # measured: class-major wins up to ~32 classes, loses from ~64


@register_kernel("SparseSoftmaxCrossEntropyWithLogits")
def sparse_softmax_xent(ctx, logits, labels):
    xp = ctx.xp
    classes = logits.shape[-1]
    if labels.shape != logits.shape[:-1]:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"labels shape {list(labels.shape)} must equal logits shape "
            f"{list(logits.shape)} without its last dimension")
    flat_labels = labels.reshape(-1)
    if flat_labels.size and (int(flat_labels.min()) < 0 or int(flat_labels.max()) >= classes):
        bad = int(flat_labels[(flat_labels < 0) | (flat_labels >= classes)][0])
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Received a label value of {bad} which is outside the valid range "
            f"of [0, {classes}).  Label values: {' '.join(str(v) for v in flat_labels.tolist()[:32])}")
    n = flat_labels.size
    if classes == 0:
        return (xp.zeros(labels.shape, logits.dtype), xp.zeros(logits.shape, logits.dtype))
    flat = logits.reshape(n, classes)
    # One exp serves both outputs: log p = shifted - log(sum), p = exp(shifted) / sum.
    if classes <= CLASS_MAJOR_MAX:
        # Few classes: numpy reduces a short last axis row by row, ~5x slower than reducing
        # the class-major copy along its contiguous rows.
        shifted = flat.T.copy()  # a fresh class-major array: never the input itself
        shifted -= shifted.max(axis=0)
        exp = xp.exp(shifted)
        total = exp.sum(axis=0)
        picked = xp.multiply(flat_labels, n, dtype=xp.intp) + xp.arange(n)  # [label, row]
    else:
        shifted = flat - flat.max(axis=-1, keepdims=True)
        exp = xp.ascontiguousarray(xp.exp(shifted))  # written through a flat view below
        total = exp.sum(axis=-1, keepdims=True)
        picked = xp.arange(n) * classes + flat_labels
    loss = xp.log(total.reshape(-1)) - shifted.reshape(-1).take(picked)
    exp /= total
    exp.reshape(-1)[picked] -= logits.dtype.type(1)
    backprop = exp.T if classes <= CLASS_MAJOR_MAX else exp
    return (loss.reshape(labels.shape), backprop.reshape(logits.shape))


@register_kernel("ExpandDimsMul")
def _expand_dims_mul(ctx, x, y):
    """``expand_dims(x, axis) * y``, ``x`` shaped like ``y`` without ``axis`` (ops/nn.py)."""
    axis = ctx.attrs["axis"]
    if y.shape[:axis] + y.shape[axis + 1:] != x.shape:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"x of shape {list(x.shape)} must be y of shape {list(y.shape)} "
            f"without axis {axis}")
    return (x.reshape(x.shape[:axis] + (1,) + x.shape[axis:]) * y,)


@register_kernel("BiasAdd")
def _bias_add(ctx, value, bias):
    if ctx.attrs.get("data_format") == "NCHW" and value.ndim >= 3:
        if bias.shape != (value.shape[1],):
            raise errors.InvalidArgumentError(
                None, ctx.name, f"Must provide as many biases as the channel dimension (1, "
                f"NCHW) of the input tensor: {list(bias.shape)} vs. {list(value.shape)}")
        return (value + bias.reshape((-1,) + (1,) * (value.ndim - 2)),)
    if value.shape[-1] != bias.shape[0]:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Must provide as many biases as the last dimension of the input "
            f"tensor: {list(bias.shape)} vs. {list(value.shape)}")
    xp = ctx.xp
    if (value.size >= intra_op.MIN_SPLIT_WORK and value.flags.c_contiguous
            and value.dtype == bias.dtype):
        rows = value.reshape(-1, value.shape[-1])
        out = xp.empty(rows.shape, dtype=value.dtype)

        def chunk(start, stop):
            xp.add(rows[start:stop], bias, out=out[start:stop])
        intra_op.for_batch(ctx, rows.shape[0], rows.shape[1], chunk,
                           2 * rows.shape[1] * value.itemsize)
        return (out.reshape(value.shape),)
    return (value + bias,)


@jit.loop
def _column_sums(rows, out):
    """``out[j] = sum_i rows[i, j]`` with eight interleaved partial sums per column (rows
    ``i mod 8``) added pairwise at the end: one pass, vectorized over the columns, the GIL
    released. numpy's vector-matrix product (the GEMV below) keeps the GIL for its whole
    call (numpy issue #11821), so the pool's helper could not start a chunk of a split
    BiasAddGrad while the caller ran one (bench/RESULTS.md, 2026-12-06, r37conv)."""
    n, m = rows.shape
    acc = np.zeros((8, m), rows.dtype)
    full = n - n % 8
    for i in range(0, full, 8):
        for r in range(8):
            for j in range(m):
                acc[r, j] += rows[i + r, j]
    for r in range(n - full):
        for j in range(m):
            acc[r, j] += rows[full + r, j]
    for j in range(m):
        out[j] = (((acc[0, j] + acc[1, j]) + (acc[2, j] + acc[3, j]))
                  + ((acc[4, j] + acc[5, j]) + (acc[6, j] + acc[7, j])))


def _warm_column_sums():
    for dtype in (np.float32, np.float64):
        _column_sums(jit.readonly(np.zeros((9, 2), dtype)), np.empty(2, dtype))


def _bias_add_grad_preload(ctx):
    """Compile (or load from numba's disk cache) ``_column_sums`` on a worker thread before
    the first step (``jit.preload``); None on a GPU and for dtypes the loop does not take."""
    if getattr(ctx, "xp", np) is not np or np.dtype(ctx.output_dtypes[0]) not in jit.SUPPORTED:
        return None
    return jit.preload(_warm_column_sums)


@register_kernel("BiasAddGrad")
def _bias_add_grad(ctx, grad):
    xp = ctx.xp
    if ctx.attrs.get("data_format") == "NCHW" and grad.ndim >= 3:
        axes = (0,) + tuple(range(2, grad.ndim))
        return (xp.asarray(xp.sum(grad, axis=axes), dtype=grad.dtype),)
    if (grad.size >= intra_op.MIN_SPLIT_WORK and grad.flags.c_contiguous and grad.ndim > 1
            and grad.dtype.kind == "f" and grad.itemsize >= 4):
        # Partial column sums per chunk of rows, added in chunk order (a reduction: close to
        # one whole sum, deterministic for a given chunking). Each is a GEMV with a vector of
        # ones: BLAS streams the rows 10x faster than numpy's axis-0 sum here ([32768, 32]
        # float32: 0.05 against 0.53 ms), and its blocked sums are no less accurate.
        rows = grad.reshape(-1, grad.shape[-1])
        partials = {}
        ones = xp.ones(min(rows.shape[0], max(1, intra_op.CHUNK_BYTES // (rows.shape[1]
                                                                      * grad.itemsize))),
                       dtype=grad.dtype)

        looped = jit.usable(ctx, rows)

        def chunk(start, stop):
            count = stop - start
            if looped:
                partials[start] = np.empty(rows.shape[1], rows.dtype)
                _column_sums(jit.readonly(rows[start:stop]), partials[start])
            elif count <= ones.shape[0]:
                partials[start] = xp.matmul(ones[:count], rows[start:stop])
            else:  # a chunk larger than the cache-sized ones (thread count above chunks)
                partials[start] = rows[start:stop].sum(axis=0)
        intra_op.for_batch(ctx, rows.shape[0], rows.shape[1], chunk,
                           rows.shape[1] * grad.itemsize)
        ordered = [partials[start] for start in sorted(partials)]
        total = ordered[0]
        for partial in ordered[1:]:
            total += partial
        return (total,)
    if grad.ndim > 1 and grad.flags.c_contiguous and grad.dtype.kind == "f" \
            and grad.itemsize >= 4 and grad.size:
        rows = grad.reshape(-1, grad.shape[-1])  # one GEMV with ones, as the chunks above
        return (xp.matmul(xp.ones(rows.shape[0], dtype=grad.dtype), rows),)
    axes = tuple(range(grad.ndim - 1))
    return (xp.asarray(xp.sum(grad, axis=axes), dtype=grad.dtype),)


@register_kernel("L2Loss")
def _l2_loss(ctx, x):
    xp = ctx.xp
    return (xp.asarray(xp.sum(xp.square(x)) / 2, dtype=x.dtype),)


register_prepare("BiasAddGrad")(_bias_add_grad_preload)
