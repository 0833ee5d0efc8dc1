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

On CPU, for float32/float64 ``[batch, classes]`` logits of at most ``CLASS_MAJOR_MAX`` (32)
classes and a batch of 2 or more (labels of the same shape, or valid class indices), the kernel
runs three compiled loops (``kernels/jit.py``) around numpy's ``exp`` and ``log``, writing per
row

    shifted = logits - max;  exp = np.exp(shifted);  total = sum(exp);  log_total = np.log(total)
    loss[i] = sum_j labels * (log_total - shifted)       (sparse: log_total - shifted[label])
    dlogits = (exp / total - labels) * scale             (scale = grad / batch, as the mean's
                                                          BroadcastToLike computes it)

then the ``Mean`` kernel's sum of the per-example losses and the ``Sum`` kernel's bias sum. The
gradient is written class-major (a transposed view), as the chain's backprop and so its
``ExpandDimsMul``'s product are: the GEMMs that read it and the bias sum see the layout they saw
before (numpy's axis-0 sum of it, not the ``Sum`` kernel's GEMV of a C-contiguous array). The
same operations in the same order as the unfused kernels (the cross entropy's class-major form
sums a row's classes in order; numpy's ``exp`` and ``log``, not libm's), so **the same bits**,
NaN and inf included (a row's max is its first NaN, as ``np.maximum``'s). [128, 10] float32,
hot: the node ~13.5 us (the loops and ufuncs ~4.4 of it, the rest the Python around them and the
two sums) against ~22.6 us for the five kernels' code. Labels that do not sum to 1 are used as
given, as TF's kernel does (the backprop ``softmax - labels`` is then not the loss's derivative:
TF1's behaviour). Other shapes (labels that broadcast, more classes or a batch of 1, where numpy
sums a row pairwise), dtypes (float16, which TF1's builder computes in float32 anyway), a GPU,
or numba missing run the unfused kernels' own code in their order (the same bits again), which
stays the reference.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import jit
from asyncflow.kernels import math as math_kernels
from asyncflow.kernels import nn as nn_kernels
from asyncflow.kernels.registry import register_kernel, register_prepare

DENSE = "_FusedSoftmaxCrossEntropyMean"
SPARSE = "_FusedSparseSoftmaxCrossEntropyMean"


@jit.loop
def _shift(logits, shifted):
    """``shifted = logits - max`` per row, the max as numpy's (the first NaN of a row where
    it has one: ``np.maximum``'s rule, so the NaNs that follow keep the chain's bits)."""
    rows, classes = logits.shape
    for i in range(rows):
        top = logits[i, 0]
        for j in range(1, classes):
            if top != top:
                break
            value = logits[i, j]
            if value > top or value != value:
                top = value
        for j in range(classes):
            shifted[i, j] = logits[i, j] - top


@jit.loop
def _row_sums(exp, total):
    """``total[i] = sum_j exp[i, j]`` in the class order (numpy's class-major sum's)."""
    rows, classes = exp.shape
    for i in range(rows):
        acc = exp[i, 0]
        for j in range(1, classes):
            acc += exp[i, j]
        total[i] = acc


@jit.loop
def _dense_rest(shifted, exp, total, log_total, labels, scale, loss, dlogits):
    """The per-example loss and the scaled backprop, class-major (see the module docstring)."""
    rows, classes = exp.shape
    for i in range(rows):
        acc = labels[i, 0] * (log_total[i] - shifted[i, 0])
        for j in range(1, classes):
            acc += labels[i, j] * (log_total[i] - shifted[i, j])
        loss[i] = acc
        for j in range(classes):
            dlogits[j, i] = (exp[i, j] / total[i] - labels[i, j]) * scale


@jit.loop
def _sparse_rest(shifted, exp, total, log_total, labels, scale, one, loss, dlogits):
    """The sparse form's: ``labels`` the class of each row (checked in range before)."""
    rows, classes = exp.shape
    for i in range(rows):
        label = labels[i]
        loss[i] = log_total[i] - shifted[i, label]
        for j in range(classes):
            p = exp[i, j] / total[i]
            if j == label:
                p = p - one
            dlogits[j, i] = p * scale


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
    return math_kernels.as_array(ctx, math_kernels.float_mean(ctx.xp, per_example, axes, False),
                           per_example.dtype)


def _batch_sum(ctx, x):
    """The ``Sum`` kernel's value over the leading axis of ``x`` (the bias gradient)."""
    if type(x) is np.ndarray and x.dtype in math_kernels.GEMV_SUM_DTYPES and x.ndim > 1 \
            and x.flags.c_contiguous:
        out = math_kernels.leading_sum(x, 1, False)
        if out is not None:
            return out
    out = x.sum(axis=0, dtype=math_kernels.accumulation_dtype(x.dtype))
    return math_kernels.as_array(ctx, out, x.dtype)


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
    if classes > nn_kernels.CLASS_MAJOR_MAX or rows < 2:
        return None  # numpy sums pairwise there (a row's classes are contiguous): the chain's
    if grad.size != 1 or grad.dtype != dtype:
        return None  # the chain's code says what is wrong
    # the mean's BroadcastToLike's grad / batch, as a scalar of the dtype (the same division)
    scale = dtype.type(grad.reshape(-1)[0]) / dtype.type(rows)
    shifted = np.empty((rows, classes), dtype)
    _shift(jit.readonly(np.ascontiguousarray(logits)), shifted)
    exp = np.exp(shifted)
    total = np.empty(rows, dtype)
    _row_sums(exp, total)
    log_total = np.log(total)
    loss = np.empty(rows, dtype)
    dlogits = np.empty((classes, rows), dtype)  # class-major, as the chain's backprop
    if sparse:
        _sparse_rest(shifted, exp, total, log_total,
                     jit.readonly(np.ascontiguousarray(labels, np.int64)), scale,
                     dtype.type(1), loss, dlogits)
    else:
        _dense_rest(shifted, exp, total, log_total, jit.readonly(np.ascontiguousarray(labels)),
                    scale, loss, dlogits)
    dlogits = dlogits.T
    dbias = _batch_sum(ctx, dlogits) if ctx.attrs.get("bias_grad") else None
    # the Mean kernel's: its sum over axis (0,) of a vector is the vector's sum
    return np.asarray(loss.sum(dtype=dtype) / rows), dlogits, dbias


def _chain(ctx, logits, labels, grad, sparse):
    """The unfused kernels' values, in their order: ``(loss, dlogits, dbias)`` (the last two
    None without ``grad``; ``dbias`` computed only where the node has the output)."""
    if sparse:
        per_example, backprop = nn_kernels.sparse_softmax_xent(ctx, logits, labels)
    else:
        per_example, backprop = nn_kernels.softmax_xent(ctx, logits, labels)
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
                matrix, vector = np.zeros((2, 2), dtype), np.ones(2, dtype)
                _shift(tiny, np.empty((2, 2), dtype))
                _row_sums(matrix, np.empty(2, dtype))
                out = (np.empty(2, dtype), np.empty((2, 2), dtype))
                if sparse:
                    _sparse_rest(matrix, matrix, vector, vector,
                                 jit.readonly(np.zeros(2, np.int64)), dtype.type(1),
                                 dtype.type(1), *out)
                else:
                    _dense_rest(matrix, matrix, vector, vector, tiny, dtype.type(1), *out)
            warm = _warms.setdefault(key, warm)
        return jit.preload(warm)
    return prepare


register_prepare(DENSE)(_preloader(False))
register_prepare(SPARSE)(_preloader(True))
