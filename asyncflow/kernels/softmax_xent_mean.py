"""The mean softmax cross entropy, its logits' gradient and the bias gradient, one node.

Theory of operation (issue 37): an MLP's loss ``reduce_mean(softmax_cross_entropy_with_logits
(labels, logits))`` and its gradient run as ``SoftmaxCrossEntropyWithLogits`` (the per-example
loss and ``backprop = softmax - labels``), ``Mean``, the mean's ``BroadcastToLike`` (``grad /
batch`` in a batch-long array), ``ExpandDimsMul`` (each row of ``backprop`` times it) and the
last layer's bias gradient (``Sum`` over the batch): five small kernels one after the other on
one thread, each paying its dispatch. ``compile/fuse_softmax_xent.py`` makes them one
``_FusedSoftmaxCrossEntropyMean(logits, labels[, grad]) -> (loss[, dlogits[, dbias]])`` node
(``_FusedSparseSoftmaxCrossEntropyMean`` for integer labels), as TF's kernel returns the
backprop with the loss.

On CPU, for float32/float64 ``[batch, classes]`` logits (labels of the same shape, or valid
class indices), the kernel is one compiled pass over the rows (``kernels/jit.py``) writing per
row, in the unfused kernels' order of operations:

    shifted = logits - max;  total = sum(exp(shifted));  log_total = log(total)
    loss[i] = sum_j labels * (log_total - shifted)       (sparse: log_total - shifted[label])
    dlogits = (exp(shifted) / total - labels) * scale    (scale = grad / batch, as the mean's
    dbias  += dlogits                                     BroadcastToLike computes it)

and the mean is the ``Mean`` kernel's sum of the per-example losses over the batch: within
float rounding of the five kernels, not their bits (numba's ``exp`` and ``log`` are libm's,
numpy's its own SIMD ones; the bias sum runs row after row where the ``Sum`` kernel's GEMV
blocks it). NaN or inf in a row gives the unfused chain's NaN / inf in the same places (the
same operations: an inf logit makes its row NaN, a -inf logit with a nonzero label an inf
loss). Labels that do not sum to 1 are used as given, as TF's kernel does. Other shapes
(labels that broadcast, other ranks), dtypes (float16, which TF1's builder computes in float32
anyway), a GPU, or numba missing run the unfused kernels' own code, in their order (the same
bits as the chain), which stays the reference.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import jit
from asyncflow.kernels import math as _math
from asyncflow.kernels import nn as _nn
from asyncflow.kernels.registry import register_kernel, register_prepare

DENSE = "_FusedSoftmaxCrossEntropyMean"
SPARSE = "_FusedSparseSoftmaxCrossEntropyMean"


@jit.loop
def _dense_rows(logits, labels, scale, loss, dlogits, dbias):
    """The pass over the rows (see the module docstring); ``dlogits`` holds the exps."""
    rows, classes = logits.shape
    for j in range(classes):
        dbias[j] = 0
    for i in range(rows):
        top = logits[i, 0]
        for j in range(1, classes):
            if logits[i, j] > top:
                top = logits[i, j]
        total = np.exp(logits[i, 0] - top)
        dlogits[i, 0] = total
        for j in range(1, classes):
            e = np.exp(logits[i, j] - top)
            dlogits[i, j] = e
            total += e
        log_total = np.log(total)
        acc = labels[i, 0] * (log_total - (logits[i, 0] - top))
        for j in range(1, classes):
            acc += labels[i, j] * (log_total - (logits[i, j] - top))
        loss[i] = acc
        for j in range(classes):
            d = (dlogits[i, j] / total - labels[i, j]) * scale
            dlogits[i, j] = d
            dbias[j] += d


@jit.loop
def _sparse_rows(logits, labels, scale, one, loss, dlogits, dbias):
    """The sparse form's pass: ``labels`` the class of each row (checked in range before)."""
    rows, classes = logits.shape
    for j in range(classes):
        dbias[j] = 0
    for i in range(rows):
        top = logits[i, 0]
        for j in range(1, classes):
            if logits[i, j] > top:
                top = logits[i, j]
        total = np.exp(logits[i, 0] - top)
        dlogits[i, 0] = total
        for j in range(1, classes):
            e = np.exp(logits[i, j] - top)
            dlogits[i, j] = e
            total += e
        label = labels[i]
        loss[i] = np.log(total) - (logits[i, label] - top)
        for j in range(classes):
            p = dlogits[i, j] / total
            if j == label:
                p = p - one
            d = p * scale
            dlogits[i, j] = d
            dbias[j] += d


def _scale(ctx, grad, batch, dtype):
    """``grad / batch`` as the mean's ``BroadcastToLike`` computes it."""
    if grad.size != 1:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"gradient of shape {list(grad.shape)} does not fit the mean of a "
            f"loss of {batch} examples")
    scale = grad.reshape(())
    if batch > 1:
        scale = scale / scale.dtype.type(batch)
    if scale.dtype != dtype:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"gradient of dtype {scale.dtype} for logits of dtype {dtype}")
    return scale


def _mean(ctx, per_example):
    """The ``Mean`` kernel's value over every axis of ``per_example``."""
    axes = tuple(range(per_example.ndim))
    return _math._as_array(ctx, _math._float_mean(ctx.xp, per_example, axes, False),
                           per_example.dtype)


def _batch_sum(ctx, x):
    """The ``Sum`` kernel's value over the leading axis of ``x`` (the bias gradient)."""
    if type(x) is np.ndarray and x.dtype in _math._GEMV_SUM_DTYPES and x.ndim > 1 \
            and x.flags.c_contiguous:
        out = _math._leading_sum(x, 1, False)
        if out is not None:
            return out
    out = x.sum(axis=0, dtype=_math._accumulation_dtype(x.dtype))
    return _math._as_array(ctx, out, x.dtype)


def _check_sparse_labels(ctx, logits, labels):
    classes = logits.shape[-1]
    if labels.shape != logits.shape[:-1]:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"labels shape {list(labels.shape)} must equal logits shape "
            f"{list(logits.shape)} without its last dimension")
    flat = labels.reshape(-1)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= classes):
        bad = int(flat[(flat < 0) | (flat >= classes)][0])
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Received a label value of {bad} which is outside the valid range "
            f"of [0, {classes}).  Label values: {' '.join(str(v) for v in flat.tolist()[:32])}")


def _fast(ctx, logits, labels, grad, sparse):
    """``(loss, dlogits, dbias)`` by the compiled pass, or None where it does not apply."""
    dtype = logits.dtype
    if (logits.ndim != 2 or 0 in logits.shape or not jit.usable(ctx, logits)
            or type(grad) is not np.ndarray or ctx.attrs.get("axis", -1) not in (1, -1)):
        return None
    if sparse:
        if type(labels) is not np.ndarray or labels.dtype.kind not in "iu":
            return None
        _check_sparse_labels(ctx, logits, labels)
    elif type(labels) is not np.ndarray or labels.shape != logits.shape \
            or labels.dtype != dtype:
        return None
    rows, classes = logits.shape
    scale = _scale(ctx, grad, rows, dtype)
    loss = np.empty(rows, dtype)
    dlogits = np.empty((rows, classes), dtype)
    dbias = np.empty(classes, dtype)
    logits = jit.readonly(np.ascontiguousarray(logits))
    if sparse:
        _sparse_rows(logits, jit.readonly(np.ascontiguousarray(labels, np.int64)), scale,
                     dtype.type(1), loss, dlogits, dbias)
    else:
        _dense_rows(logits, jit.readonly(np.ascontiguousarray(labels)), scale, loss, dlogits,
                    dbias)
    return _mean(ctx, loss), dlogits, dbias


def _chain(ctx, logits, labels, grad, sparse):
    """The unfused kernels' values, in their order: ``(loss, dlogits, dbias)`` (the last two
    None without ``grad``; ``dbias`` computed only where the node has the output)."""
    if sparse:
        per_example, backprop = _nn._sparse_softmax_xent(ctx, logits, labels)
    else:
        per_example, backprop = _nn._softmax_xent(ctx, logits, labels)
    loss = _mean(ctx, per_example)
    if grad is None:
        return loss, None, None
    if per_example.ndim != 1 or backprop.ndim != 2:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"logits of shape {list(logits.shape)}: the fused cross entropy "
            "takes [batch, classes]")
    scale = _scale(ctx, grad, per_example.size, backprop.dtype)
    # ExpandDimsMul's product of the broadcast scale and each row (the same bits)
    dlogits = ctx.xp.full(per_example.shape, scale, dtype=backprop.dtype)[:, None] * backprop
    dbias = _batch_sum(ctx, dlogits) if ctx.attrs.get("bias_grad") else None
    return loss, dlogits, dbias


def _kernel(sparse):
    def kernel(ctx, logits, labels, grad=None):
        if grad is not None and ctx.xp is np:
            fast = _fast(ctx, logits, labels, grad, sparse)
            if fast is not None:
                return fast if ctx.attrs.get("bias_grad") else fast[:2]
        loss, dlogits, dbias = _chain(ctx, logits, labels, grad, sparse)
        if grad is None:
            return (loss,)
        return (loss, dlogits, dbias) if ctx.attrs.get("bias_grad") else (loss, dlogits)
    kernel.__name__ = "_sparse_xent_mean" if sparse else "_xent_mean"
    kernel.__doc__ = ("The mean cross entropy, the logits' and the bias's gradients "
                      "(see the module docstring).")
    return kernel


register_kernel(DENSE)(_kernel(False))
register_kernel(SPARSE)(_kernel(True))

_warms = {}  # (op type, dtype) -> the warm function jit.preload keeps track of


def _preloader(sparse):
    def prepare(ctx):
        """Compile (or load from numba's disk cache) the pass for the node's dtype on a worker
        thread before the first step; None for other dtypes, on a GPU, or without the
        gradient's output."""
        dtype = np.dtype(ctx.output_dtypes[0])
        if (getattr(ctx, "xp", np) is not np or dtype not in jit.SUPPORTED
                or len(ctx.output_dtypes) < 2):
            return None
        key = (sparse, dtype)
        warm = _warms.get(key)
        if warm is None:
            def warm():
                tiny = jit.readonly(np.zeros((2, 2), dtype))
                out = (np.empty(2, dtype), np.empty((2, 2), dtype), np.empty(2, dtype))
                if sparse:
                    _sparse_rows(tiny, jit.readonly(np.zeros(2, np.int64)), dtype.type(1),
                                 dtype.type(1), *out)
                else:
                    _dense_rows(tiny, tiny, dtype.type(1), *out)
            warm = _warms.setdefault(key, warm)
        return jit.preload(warm)
    return prepare


register_prepare(DENSE)(_preloader(False))
register_prepare(SPARSE)(_preloader(True))
