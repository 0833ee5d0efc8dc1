"""A layer's input gradient and the sigmoid's gradient under it in one kernel
(``_FusedMatMulSigmoidGrad``, made by compile/fuse_matmul_sigmoid_grad.py; issue 37).

In a sigmoid network's backward pass each hidden layer's input gradient ``dy @ W^T`` (a
``MatMul``) is read only by the previous layer's ``SigmoidGrad(y, product)``, which makes a
second node, three numpy passes and a temporary over the product the GEMM just wrote. Here the
sigmoid's slope is applied to the product where it lies: ``out = ((1 - y) * y) * out``, one
compiled pass (``kernels/jit.py``) over each row chunk the GEMM wrote (the whole product, a
few hundred KB in L2, where the GEMM runs whole).

The same bits as the two kernels: the product is ``MatMul``'s (``blas.matmul`` whole, or split
by ``intra_op.for_gemm`` with the chunks ``MatMul``'s split takes, kernels/math.py), and the
pass makes ``SigmoidGrad``'s operations in its order (``r = 1 - y; r *= y; r *= dy``: each
element's product the same, the operands in the same order). Where the compiled pass does not
apply (another dtype, a GPU, numba missing, a product split by columns, non-contiguous
arrays) the slope is numpy's in-place form of the same operations, or the two registered
kernels themselves.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import blas, intra_op, jit, math as math_kernels
from asyncflow.kernels.registry import ANY, get_kernel, register_kernel, register_prepare

FUSED = "_FusedMatMulSigmoidGrad"


@jit.loop
def _times_slope(y, out, one):
    """``out[i] = ((1 - y[i]) * y[i]) * out[i]``: SigmoidGrad's operations, in its order."""
    for i in range(out.size):
        r = one - y[i]
        r = r * y[i]
        out[i] = r * out[i]


def _numpy_slope(y, out):
    slope = np.subtract(y.dtype.type(1), y)
    slope *= y
    np.multiply(slope, out, out=out)


def _slope(y, out, compiled):
    """``out`` times the sigmoid's slope at ``y`` (same shapes), in place."""
    if compiled and y.flags.c_contiguous and out.flags.c_contiguous:
        _times_slope(jit.readonly(y.reshape(-1)), out.reshape(-1), y.dtype.type(1))
    else:
        _numpy_slope(y, out)


def _check(ctx, a, b, y):
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise errors.InvalidArgumentError(None, ctx.name, f"Matrix size-incompatible: In[0]: "
                                          f"{list(a.shape)}, In[1]: {list(b.shape)}")
    if y.shape != (a.shape[0], b.shape[1]) or y.dtype != a.dtype:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.type}: the sigmoid's output y is {y.dtype.name} "
            f"{list(y.shape)} but the product is {a.dtype.name} {[a.shape[0], b.shape[1]]}")


def _two_kernels(ctx, a, b, y):
    (product,) = get_kernel("MatMul", ANY).fn(ctx, a, b)
    return get_kernel("SigmoidGrad", ANY).fn(ctx, y, product)


@register_kernel(FUSED, offload=True, offload_scale=intra_op.MACS_PER_WORK)
def _matmul_sigmoid_grad(ctx, a, b, y):
    """``SigmoidGrad(y, MatMul(a, b))`` (``transpose_a``/``transpose_b`` as MatMul's); see the
    module docstring."""
    x, w = a, b
    if ctx.attrs["transpose_a"]:
        x = x.swapaxes(-1, -2)
    if ctx.attrs["transpose_b"]:
        w = w.swapaxes(-1, -2)
    if ctx.xp is not np or x.ndim != 2 or w.ndim != 2 or x.dtype != w.dtype:
        return _two_kernels(ctx, a, b, y)  # (their own errors and forms)
    _check(ctx, x, w, y)
    compiled = jit.usable(ctx, x, w, y)
    if not math_kernels.splits(x, w):
        out = blas.matmul(ctx, x, w)
        _slope(y, out, compiled)
        return (out,)
    (rows, inner), cols = x.shape, w.shape[1]
    if not math_kernels.by_rows(rows, cols):
        (out,) = get_kernel("MatMul", ANY).fn(ctx, a, b)
        _slope(y, out, compiled)
        return (out,)
    out = np.empty((rows, cols), dtype=x.dtype)
    mm = blas.gemm(ctx, x, w)
    split_dtype = None if mm is blas.mkl_matmul else x.dtype

    def by_rows(start, stop):
        mm(x[start:stop], w, out[start:stop])
        _slope(y[start:stop], out[start:stop], compiled)
    # MatMul's own chunks (kernels/math._split_matmul without an epilogue), so its rounding
    cache_bytes = 0 if math_kernels.ROW_CHUNKS_FOR_EPILOGUE_ONLY else cols * x.itemsize * 2
    intra_op.for_gemm(ctx, rows, inner * cols, by_rows, cache_bytes, split_dtype)
    return (out,)


_warms = {}  # dtype -> the warm function jit.preload keeps track of


def _preload_slope(ctx):
    """Compile (or load from numba's disk cache) the pass for the node's dtype on a worker
    thread before the first step (``jit.preload``); None for other dtypes and on a GPU."""
    dtype = np.dtype(ctx.output_dtypes[0])
    if getattr(ctx, "xp", np) is not np or dtype not in jit.SUPPORTED:
        return None
    warm = _warms.get(dtype)
    if warm is None:
        def warm():
            _times_slope(jit.readonly(np.zeros(2, dtype)), np.ones(2, dtype), dtype.type(1))
        warm = _warms.setdefault(dtype, warm)
    return jit.preload(warm)


register_prepare(FUSED)(lambda ctx: blas.preload(ctx, _preload_slope(ctx)))
