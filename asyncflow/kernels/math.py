"""Kernels of the math family (see ops/math.py), written once against ``ctx.xp``."""
from __future__ import annotations

import math
import threading

import numpy as np

from asyncflow import errors
from asyncflow.kernels import blas, intra_op
from asyncflow.kernels.arguments import host as _host, is_floating
from asyncflow.kernels.epilogue import fused_epilogue, preload as epilogue_preload, sigmoid_into
from asyncflow.kernels.registry import host_memory, register_kernel, register_prepare

# op type -> name of the array-module function computing it
_UNARY = {
    "Neg": "negative", "Abs": "abs", "Square": "square", "Sqrt": "sqrt", "Exp": "exp",
    "Log": "log", "Log1p": "log1p", "Tanh": "tanh", "Sign": "sign", "Floor": "floor",
    "Ceil": "ceil", "Sin": "sin", "Cos": "cos", "LogicalNot": "logical_not",
    "IsNan": "isnan", "IsFinite": "isfinite", "Reciprocal": "reciprocal",
}
_BINARY = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "RealDiv": "true_divide",
    "Maximum": "maximum",
    "Minimum": "minimum", "Equal": "equal", "NotEqual": "not_equal", "Less": "less",
    "LessEqual": "less_equal", "Greater": "greater", "GreaterEqual": "greater_equal",
    "LogicalAnd": "logical_and", "LogicalOr": "logical_or", "LogicalXor": "logical_xor",
}


def _unary_kernel(fn_name):
    def kernel(ctx, x):
        if ctx.prepared:  # the node may be large (intra_op.may_be_large)
            split = intra_op.elementwise(ctx, getattr(ctx.xp, fn_name), x)
            if split is not None:
                return (split,)
        return (getattr(ctx.xp, fn_name)(x),)
    kernel.__name__ = f"_{fn_name}"
    return kernel


def _binary_kernel(fn_name):
    def kernel(ctx, x, y):
        if ctx.prepared:  # the node may be large (intra_op.may_be_large)
            split = intra_op.elementwise(ctx, getattr(ctx.xp, fn_name), x, y)
            if split is not None:
                return (split,)
        try:
            return (getattr(ctx.xp, fn_name)(x, y),)
        except ValueError:
            if _broadcastable(x, y):
                raise
            # TF1's wording, which users search for.
            raise errors.InvalidArgumentError(
                None, ctx.name, f"Incompatible shapes: {_dims(x)} vs. {_dims(y)}") from None
    kernel.__name__ = f"_{fn_name}"
    return kernel


def _broadcastable(x, y):
    try:
        np.broadcast_shapes(np.shape(x), np.shape(y))
    except ValueError:
        return False
    return True


def _dims(array):
    return "[" + ",".join(str(d) for d in np.shape(array)) + "]"


for _type, _fn in _UNARY.items():
    register_kernel(_type)(_unary_kernel(_fn))
    register_prepare(_type)(intra_op.may_be_large)
for _type, _fn in _BINARY.items():
    register_kernel(_type)(_binary_kernel(_fn))
    register_prepare(_type)(intra_op.may_be_large)


@register_kernel("Sigmoid")
def _sigmoid(ctx, x):
    """``1 / (1 + exp(-x))`` in place when nothing overflows (``sigmoid_into``); otherwise
    ``1 / (1 + e)`` for x >= 0 and ``e / (1 + e)`` below, with ``e = exp(-|x|)`` in (0, 1]:
    never overflows, keeps full relative precision of tiny results (``sigmoid(-30)``), and the
    branch is an arithmetic mask: 11x faster than ``exp(-logaddexp(0, -x))`` on [256, 784]
    float32 here (0.37 against 4.0 ms), no less accurate. (``0.5 * tanh(x / 2) + 0.5`` is
    faster still but loses all relative precision below about -17.)"""
    xp = ctx.xp
    if x.ndim == 0:  # ufuncs give 0-d inputs numpy scalars, which out= cannot write
        return (_sigmoid(ctx, x.reshape(1))[0].reshape(()),)
    return (sigmoid_into(xp, x, xp.empty(x.shape, dtype=x.dtype)),)


@register_kernel("SigmoidGrad")
def _sigmoid_grad(ctx, y, dy):
    result = ctx.xp.subtract(y.dtype.type(1), y)
    result *= y
    result *= dy
    return (result,)


@register_kernel("TanhGrad")
def _tanh_grad(ctx, y, dy):
    result = ctx.xp.square(y)
    if result.ndim == 0:  # 0-d operands give numpy scalars, which out= cannot write
        return (ctx.xp.asarray((y.dtype.type(1) - result) * dy),)
    ctx.xp.subtract(y.dtype.type(1), result, out=result)   # 1 - y^2 in the squares' array
    result *= dy
    return (result,)


@register_kernel("Rsqrt")
def _rsqrt(ctx, x):
    root = ctx.xp.sqrt(x)
    if root.ndim == 0 or root.dtype.kind != "f":
        return (ctx.xp.reciprocal(root),)
    return (ctx.xp.divide(root.dtype.type(1), root, out=root),)  # see epilogue.sigmoid_into


@register_kernel("SquaredDifference")
def _squared_difference(ctx, x, y):
    return (ctx.xp.square(ctx.xp.subtract(x, y)),)


@register_kernel("Cast")
def _cast(ctx, x):
    return (x.astype(ctx.output_dtypes[0]),)


@register_kernel("Select")
def _select(ctx, cond, x, y):
    if cond.ndim == 1 and x.ndim > 1:
        cond = cond.reshape((-1,) + (1,) * (x.ndim - 1))
    return (ctx.xp.where(cond, x, y),)


@register_kernel("Where")
def _where_indices(ctx, cond):
    if cond.ndim == 0:  # TF1's WhereOp refuses a scalar rather than give a [1, 0] answer
        raise errors.InvalidArgumentError(
            None, ctx.name, "Where: the condition must have rank at least 1, got a scalar")
    return (ctx.xp.argwhere(cond).astype(np.int64),)


@register_kernel("AddN")
def _add_n(ctx, *inputs):
    first = inputs[0]
    if len(inputs) > 8 and first.size * len(inputs) <= 1 << 16:
        # Many small addends: one stacked reduction beats a Python loop of tiny adds 2-3x.
        total = ctx.xp.stack(inputs).sum(axis=0, dtype=accumulation_dtype(first.dtype))
        return (total.astype(first.dtype, copy=False),)
    total = first + inputs[1] if len(inputs) > 1 else first.copy()
    for value in inputs[2:]:
        total += value
    return (total,)


@register_kernel("MatMul", offload=True, offload_scale=intra_op.MACS_PER_WORK)
def _matmul(ctx, a, b):
    attrs = ctx.attrs
    if attrs["transpose_a"]:
        a = a.swapaxes(-1, -2)
    if attrs["transpose_b"]:
        b = b.swapaxes(-1, -2)
    if a.shape[-1] != b.shape[-2]:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Matrix size-incompatible: In[0]: {list(a.shape)}, In[1]: {list(b.shape)}")
    if not splits(a, b):
        return (blas.matmul(ctx, a, b),)
    return (_split_matmul(ctx, a, b),)


def splits(a, b):
    """Whether ``MatMul``'s kernel splits ``a @ b`` over the intra-op threads (then
    ``by_rows`` says which way)."""
    return not (a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype.kind not in "fc"
                or a.size * b.shape[1] < intra_op.MIN_SPLIT_WORK * intra_op.MACS_PER_WORK
                or blas.gram(a, b))


def by_rows(rows, cols):
    """Whether a split ``[rows, k] @ [k, cols]`` goes by rows of ``a`` (else by columns of
    ``b``: ``_split_matmul``)."""
    return (rows >= 64 or rows >= cols) and cols < COLUMNS_FROM * rows


def _split_matmul(ctx, a, b, epilogue=None):
    """``a @ b`` over the intra-op threads: by rows of ``a`` (each chunk a GEMM writing its
    rows of the output, then ``epilogue(rows)`` on them while they are in cache), or by
    columns of ``b`` when ``a`` has too few rows to share out, or when ``b`` is the larger
    operand by far (``COLUMNS_FROM``): each chunk then reads its share of ``b`` instead of all
    of it (BLAS packs the whole ``b`` once per call). Measured on the convnet's dense layer
    (one thread each, CPU summed over the chunks, bench/RESULTS.md): ``[128, 3136] @ [3136,
    1024]`` 9.4 ms whole, 11.0-11.4 in two row chunks, 9.6-10.3 in two column chunks; its
    input gradient ``[128, 1024] @ [1024, 3136]`` 10.7 whole, 12.9-13.6 by rows, 10.7-11.3
    by columns; the weight gradient ``[3136, 128] @ [128, 1024]`` as cheap by rows as whole."""
    (rows, inner), cols = a.shape, b.shape[1]
    out = ctx.xp.empty((rows, cols), dtype=a.dtype)
    mm = blas.gemm(ctx, a, b)  # (MKL's splits do not keep the whole product's bits)
    dtype = None if mm is blas.mkl_matmul else a.dtype
    if by_rows(rows, cols):
        def rows_chunk(start, stop):
            mm(a[start:stop], b, out[start:stop])
            if epilogue is not None:
                epilogue(out[start:stop])
        cache_bytes = cols * a.itemsize * 2
        if epilogue is None and ROW_CHUNKS_FOR_EPILOGUE_ONLY:
            cache_bytes = 0
        intra_op.for_gemm(ctx, rows, inner * cols, rows_chunk, cache_bytes, dtype)
    else:
        def by_columns(start, stop):
            mm(a, b[:, start:stop], out[:, start:stop])
            if epilogue is not None:
                epilogue(out[:, start:stop], start, stop)
        intra_op.for_gemm(ctx, cols, inner * rows, by_columns, dtype=dtype)
    return out


# ``b`` this many times wider than ``a`` is tall: split by columns (``_split_matmul``). The
# MLP's and the autoencoder's GEMMs (at most 784 columns over 128 or 256 rows) stay by rows.
COLUMNS_FROM = 4
# Cache-sized row chunks only where an epilogue reads them back (``_split_matmul``); a plain
# product by rows in one chunk a thread: the convnet's dense weight gradient went in eight
# chunks, each packing ``b`` again, for nothing read back (bench/RESULTS.md, c39cnn).
ROW_CHUNKS_FOR_EPILOGUE_ONLY = True


@register_kernel("_FusedMatMul", offload=True, offload_scale=intra_op.MACS_PER_WORK)
def _fused_matmul(ctx, a, b, bias):
    attrs = ctx.attrs
    if attrs["transpose_a"]:
        a = a.swapaxes(-1, -2)
    if attrs["transpose_b"]:
        b = b.swapaxes(-1, -2)
    check_dense(ctx, a.shape, b, bias)
    return (fused_product(ctx, a, b, bias, attrs["fused_ops"]),)


def check_dense(ctx, a_shape, b, bias, where=""):
    """A dense layer's operands (``b`` and ``bias`` as the product reads them) against ``a``'s
    shape: an InvalidArgumentError naming the op, ``where`` before its message (a layer of
    ``_FusedMatMulChain``, kernels/matmul_chain.py)."""
    if len(a_shape) != 2 or b.ndim != 2 or a_shape[1] != b.shape[0]:
        raise errors.InvalidArgumentError(None, ctx.name, f"{where}Matrix size-incompatible: "
                                          f"In[0]: {list(a_shape)}, In[1]: {list(b.shape)}")
    if bias.shape != (b.shape[1],):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{where}bias has shape {list(bias.shape)}, expected [{b.shape[1]}]")


def fused_product(ctx, a, b, bias, fused_ops):
    """``_FusedMatMul``'s work on checked 2-D operands: the product, whole or split, then
    ``fused_ops``' epilogue (also each layer of ``_FusedMatMulChain`` that does not split as
    a chain, kernels/matmul_chain.py)."""
    epilogue = fused_epilogue(ctx.xp, fused_ops, bias, ctx)
    if a.size * b.shape[1] < intra_op.MIN_SPLIT_WORK * intra_op.MACS_PER_WORK \
            or blas.gram(a, b):
        out = blas.matmul(ctx, a, b)
        epilogue(out)
        return out
    return _split_matmul(ctx, a, b, epilogue)


register_prepare("MatMul")(blas.preload)
register_prepare("_FusedMatMul")(lambda ctx: epilogue_preload(ctx, blas.preload(ctx)))


def accumulation_dtype(dtype):
    # Sums of half-precision values are accumulated in float32 (ml_dtypes' advice). bfloat16 is
    # known by its name: comparing with its numpy dtype would import ml_dtypes (dtypes.py).
    return np.float32 if dtype.itemsize == 2 and dtype.name in ("float16", "bfloat16") else dtype


def _empty_reduction(ctx, x, axes, fill):
    keep = ctx.attrs["keepdims"]
    shape = tuple((1 if keep else None) if i in axes else d for i, d in enumerate(x.shape))
    shape = tuple(d for d in shape if d is not None)
    return ctx.xp.full(shape, fill, dtype=x.dtype)


def _axes(ctx, x):
    return _resolved_axes(ctx, ctx.attrs["axis"], x.ndim)


def _resolved_axes(ctx, axes, ndim):
    """A reduction's axes for an input of rank ``ndim``: all of them for None; the builder
    sorts them, non-negative when it knew the rank, as given (negatives first) when not
    (TF1 resolves those when the op runs, and so do these, with TF1's errors; a positive
    axis past the rank, built on an unknown rank too, fails with TF1's message)."""
    if axes is None:
        return tuple(range(ndim))
    if not axes or axes[0] >= 0 and axes[-1] < ndim:
        return axes
    for axis in axes:
        if not -ndim <= axis < ndim:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"Invalid reduction dimension ({axis} for input with {ndim} "
                f"dimension(s)")
    resolved = sorted(axis % ndim for axis in axes)
    if len(set(resolved)) != len(resolved):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Invalid reduction arguments: Axes contains duplicate dimension: "
            f"{next(a for a in resolved if resolved.count(a) > 1)}")
    return tuple(resolved)


def as_array(ctx, out, dtype):
    """A reduction's result as an array of ``dtype`` (numpy returns scalars for full ones)."""
    if out.dtype != dtype:
        out = out.astype(dtype)
    return out if isinstance(out, ctx.xp.ndarray) else ctx.xp.asarray(out)


# Reductions call the array's methods: numpy's module functions add a Python-level dispatch
# layer that costs as much as reducing a few thousand elements.
@register_kernel("Sum", offload=True)
def _sum(ctx, x):
    attrs = ctx.attrs
    axes = _resolved_axes(ctx, attrs["axis"], x.ndim)
    if axes and type(x) is np.ndarray and x.dtype in GEMV_SUM_DTYPES and x.ndim > len(axes) \
            and x.flags.c_contiguous and tuple(axes) == _LEADING[len(axes)]:
        out = leading_sum(x, len(axes), attrs["keepdims"])
        if out is not None:
            return (out,)
    out = x.sum(axis=axes, keepdims=attrs["keepdims"], dtype=accumulation_dtype(x.dtype))
    return (as_array(ctx, out, x.dtype),)


GEMV_SUM_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# Exactly the leading axes, in order, once each: an attr of another form (a graph of unknown
# rank, an imported one) is numpy's sum over the axes it names, not the GEMV's.
_LEADING = tuple(tuple(range(n)) for n in range(65))  # (numpy: 64 dimensions at most)


def leading_sum(x, count, keepdims):
    """``x.sum(axis=(0, ..., count - 1))`` of a C-contiguous float32/64 array (a bias
    gradient: ``Sum`` over the batch of an ``Add``'s broadcast operand) as a GEMV with a vector
    of ones, as ``BiasAddGrad`` computes it: BLAS's blocked dot products stream the rows 2-3x
    faster than numpy's row-after-row axis-0 loop ([256, 784] float32: 9.9 against 18.0 us,
    [128, 256] 2.0 against 5.3) and are no less accurate (their largest error against a
    float64 sum is about half numpy's on these shapes). A different summation order, so
    results within float32 rounding of numpy's, not its bits (an all -0 column sums to +0).
    None where the reduced rows or the kept columns are too few to repay the call."""
    rows = 1
    for dim in x.shape[:count]:
        rows *= dim
    columns = x.size // rows if rows else 0
    if rows < 8 or columns < 8:
        return None
    out = np.ones(rows, x.dtype) @ x.reshape(rows, columns)
    kept = x.shape[count:]
    return out.reshape(((1,) * count + kept) if keepdims else kept)


@register_kernel("Prod")
def _prod(ctx, x):
    out = ctx.xp.prod(x, axis=_axes(ctx, x), keepdims=ctx.attrs["keepdims"], dtype=x.dtype)
    return (ctx.xp.asarray(out),)


@register_kernel("Mean", offload=True)
def _mean(ctx, x):
    axes = _axes(ctx, x)
    keep = ctx.attrs["keepdims"]
    if x.dtype.kind in "iu":
        count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        total = ctx.xp.sum(x, axis=axes, keepdims=keep, dtype=np.int64)
        if count == 0:
            return (ctx.xp.asarray(total).astype(x.dtype),)
        # TF1 integer mean truncates toward zero.
        return (ctx.xp.asarray(ctx.xp.trunc(total / count)).astype(x.dtype),)
    return (as_array(ctx, float_mean(ctx.xp, x, axes, keep), x.dtype),)


def float_mean(xp, x, axes, keep):
    acc = accumulation_dtype(x.dtype)
    count = 1
    for axis in axes:
        count *= x.shape[axis]
    if not count:
        return xp.mean(x, axis=axes, keepdims=keep, dtype=acc)  # NaN, as TF
    # what numpy's mean computes, without its Python-level layers
    return x.sum(axis=axes, keepdims=keep, dtype=acc) / count


_local = threading.local()


def _squares_scratch(xp, diff):
    """An array of ``diff``'s shape and dtype for its squares: numpy's is kept per thread
    and dtype between calls (a new one of a batch's size is above malloc's mmap threshold
    and may pay its page faults every step)."""
    if xp is not np:
        return xp.empty(diff.shape, dtype=diff.dtype)
    cache = getattr(_local, "squares", None)
    if cache is None:
        cache = _local.squares = {}
    flat = cache.get(diff.dtype)
    if flat is None or flat.size < diff.size:
        flat = cache[diff.dtype] = np.empty(diff.size, diff.dtype)
    return flat[:diff.size].reshape(diff.shape)


@register_kernel("_FusedMeanSquaredError")
def _fused_mean_squared_error(ctx, a, b):
    """``Mean(Square(Sub(a, b)))`` over every axis and ``a - b`` (compile/fuse_squared_error.py):
    the same operations in the same order as the three kernels, so the same bits, with one
    new array (the difference, which the gradient reads) instead of two; the squares go
    into a scratch array only the reduction reads."""
    xp = ctx.xp
    try:
        diff = xp.subtract(a, b)
    except ValueError:
        if _broadcastable(a, b):
            raise
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Incompatible shapes: {_dims(a)} vs. {_dims(b)}") from None
    if diff.ndim == 0:  # 0-d operands give a numpy scalar
        diff = xp.asarray(diff)
        squares = xp.square(diff)
    else:
        squares = xp.square(diff, out=_squares_scratch(xp, diff))
    loss = float_mean(xp, squares, tuple(range(diff.ndim)), False)
    return (as_array(ctx, loss, diff.dtype), diff)


@register_kernel("_FusedMeanSquaredErrorGrad")
def _fused_mean_squared_error_grad(ctx, grad, diff, loss=None):
    """The gradient of ``Mean(Square(diff))`` over every axis: what ``BroadcastToLike``
    (``grad / diff.size``, broadcast), ``Mul(diff, 2)`` and their ``Mul`` compute, elementwise
    in the same order (a product's bits do not depend on its operands' order), in one new
    array instead of three.

    With ``loss`` (the forward's mean of the squares, which the fusion pass passes too)
    finite, every ``diff * 2`` is finite (a square above float's max would have made it
    inf), so ``(diff * 2) * scale`` and ``diff * (2 * scale)`` round the same real product
    once: the same bits in one pass instead of two ([256, 784] float32: ~25 us less)."""
    if grad.size != 1:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"gradient of shape {list(grad.shape)} does not fit the mean "
            f"over every axis of a tensor of shape {list(diff.shape)}")
    scale = grad.reshape(())
    if diff.size > 1:
        scale = scale / scale.dtype.type(diff.size)
    if (loss is not None and ctx.xp is np and diff.ndim and diff.dtype.kind == "f"
            and scale.dtype == diff.dtype and np.isfinite(loss)):
        twice = scale * diff.dtype.type(2)
        if np.isfinite(twice):
            if ctx.prepared:  # large, it splits as the unfused Muls did (may_be_large)
                split = intra_op.elementwise(ctx, np.multiply, diff, twice)
                if split is not None:
                    return (split,)
            return (np.multiply(diff, twice),)
    out = ctx.xp.multiply(diff, diff.dtype.type(2))
    if out.ndim == 0:
        return (ctx.xp.asarray(out * scale),)
    out *= scale
    return (out,)


register_prepare("_FusedMeanSquaredErrorGrad")(intra_op.may_be_large)


def _extreme(fn_name, fill_for):
    def kernel(ctx, x):
        axes = _axes(ctx, x)
        if x.size == 0 or any(x.shape[a] == 0 for a in axes):
            return (_empty_reduction(ctx, x, axes, fill_for(x.dtype)),)
        out = getattr(ctx.xp, fn_name)(x, axis=axes, keepdims=ctx.attrs["keepdims"])
        return (ctx.xp.asarray(out),)
    return kernel


def _lowest(dtype):
    return -np.inf if is_floating(dtype) else np.iinfo(dtype).min


def _highest(dtype):
    return np.inf if is_floating(dtype) else np.iinfo(dtype).max


register_kernel("Max")(_extreme("max", _lowest))
register_kernel("Min")(_extreme("min", _highest))


@register_kernel("All")
def _all(ctx, x):
    return (ctx.xp.asarray(ctx.xp.all(x, axis=_axes(ctx, x), keepdims=ctx.attrs["keepdims"])),)


@register_kernel("Any")
def _any(ctx, x):
    return (ctx.xp.asarray(ctx.xp.any(x, axis=_axes(ctx, x), keepdims=ctx.attrs["keepdims"])),)


@register_kernel("SumToShape")
def _sum_to_shape(ctx, grad, shape):
    """Sum a broadcast gradient back to ``shape`` (leading axes and axes where shape is 1)."""
    target = tuple(int(d) for d in shape.reshape(-1).tolist())
    lead = grad.ndim - len(target)
    if lead < 0 or any(t not in (1, g) for t, g in zip(target, grad.shape[lead:])):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"cannot sum a gradient of shape {list(grad.shape)} to shape "
            f"{list(target)}: the shapes do not broadcast")
    axes = tuple(range(lead)) + tuple(lead + i for i, t in enumerate(target)
                                      if t == 1 and grad.shape[lead + i] != 1)
    if not axes:
        return (grad,)
    total = ctx.xp.sum(grad, axis=axes, dtype=accumulation_dtype(grad.dtype))
    return (ctx.xp.asarray(total).astype(grad.dtype, copy=False).reshape(target),)


@register_kernel("BroadcastToLike")
def _broadcast_to_like(ctx, grad, like):
    """The gradient of Sum/Mean(like, axis, keepdims) from that of its output (math_grad.py)."""
    attrs = ctx.attrs
    shape = like.shape
    axes = _resolved_axes(ctx, attrs["axis"], like.ndim)
    kept = list(shape)
    count = 1
    for axis in axes:
        count *= kept[axis]
        kept[axis] = 1
    kept = tuple(kept)
    if grad.shape != kept:
        if attrs["keepdims"] or grad.size != math.prod(kept):
            raise errors.InvalidArgumentError(
                None, ctx.name, f"gradient of shape {list(grad.shape)} does not fit the "
                f"reduction over axes {list(axes)} of a tensor of shape {list(shape)}")
        grad = grad.reshape(kept)
    if attrs["mean"] and count > 1:
        grad = grad / grad.dtype.type(count)
    out = ctx.xp.empty(shape, grad.dtype)
    out[...] = grad
    return (out,)


@register_kernel("ReducedShape")
def _reduced_shape(ctx, shape):
    """``shape`` with 1 at the reduced axes (all of them when ``axis`` is None)."""
    out = np.array(_host(shape), dtype=shape.dtype, copy=True)  # a host shape, as TF's
    out[list(_resolved_axes(ctx, ctx.attrs["axis"], out.size))] = 1
    return (out,)


# Arguments kept in host memory on a GPU (TF's HostMemory registrations; exec/gpu.py).
host_memory("SumToShape", inputs=(1,))
host_memory("BroadcastToLike", shape_only=(1,))
