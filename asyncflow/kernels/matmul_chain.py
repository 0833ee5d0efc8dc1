"""Consecutive narrow dense layers in one row split (``_FusedMatMulChain``, made by
compile/fuse_matmul_chain.py; issue 37).

A product too small to split alone (below ``intra_op``'s GEMM threshold, ~16.8 M
multiply-adds: a hand-off to the other core and back costs about as much as its half saves)
runs whole on one thread, and a forward pass of such layers one after the other leaves the
second core idle for all of them: the autoencoder's ``[256, 256] @ [256, 128]`` and ``[256,
128] @ [128, 256]`` layers, ~0.2 ms each. Each layer's rows depend only on the same rows of
the layer below, so the chain splits once by rows of its input: each thread runs every
layer's GEMM and epilogue on its own rows, one hand-off for the chain instead of one a layer.

The same bits as the layers' own kernels: a chunk of a GEMM by rows has the whole product's
bits where the BLAS keeps them wherever the rows are cut (``intra_op.split_keeps_bits``:
OpenBLAS's SkylakeX kernels in float32), each chunk stays above the BLAS's small-matrix
path (``intra_op.BLAS_SMALL_MACS``), and the epilogues are elementwise over rows
(``epilogue.fused_epilogue``, as a split ``_FusedMatMul`` runs them). Everywhere else (the
bits not kept, MKL, a layer large enough to split alone, the chain too small to split, the
pool running kernels whole on this thread or every worker busy, another array module) the
layers run one after the other as ``_FusedMatMul``'s kernel runs each
(``math.fused_product``): as unfused. Shapes are checked before anything runs.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import blas, intra_op, math as math_kernels
from asyncflow.kernels.epilogue import fused_epilogue, preload as epilogue_preload
from asyncflow.kernels.registry import register_kernel, register_prepare


def _layers(ctx, a, params):
    """``[(b, bias, fused_ops)]``, each ``b`` transposed as its layer says, after checking
    every layer's shapes against the rows before it."""
    attrs = ctx.attrs
    if a.ndim != 2:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.type}: input must be 2-D, got shape {list(a.shape)}")
    layers, width = [], a.shape[1]
    for i, (ops, tb) in enumerate(zip(attrs["fused_ops"], attrs["transpose_b"])):
        b, bias = params[2 * i], params[2 * i + 1]
        if tb:
            b = b.swapaxes(-1, -2)
        math_kernels.check_dense(ctx, (a.shape[0], width), b, bias, f"{ctx.type}: layer {i}: ")
        if b.dtype != a.dtype or bias.dtype != a.dtype:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"{ctx.type}: layer {i}: dtypes {a.dtype}, {b.dtype} and "
                f"{bias.dtype} differ")
        layers.append((b, bias, ops))
        width = b.shape[1]
    return layers


def _gemms(ctx, a, layers):
    """Each layer's GEMM function as ``blas.gemm`` chooses it for the layer's whole product."""
    rows = a.shape[0]
    return [blas.gemm(ctx, a, b, (rows, b.shape[0], b.shape[1])) for b, _, _ in layers]


def split_bounds(ctx, a, layers):
    """``(row chunks, each layer's GEMM function)`` where the chain splits as one (the module
    docstring), else None."""
    pool = getattr(ctx.device, "intra_op", None)
    rows = a.shape[0]
    threshold = intra_op.MIN_SPLIT_WORK * intra_op.MACS_PER_WORK
    per_row = [b.shape[0] * b.shape[1] for b, _, _ in layers]
    if (pool is None or pool.threads < 2 or ctx.xp is not np or type(a) is not np.ndarray
            or rows * max(per_row) >= threshold or rows * sum(per_row) < threshold
            or blas.gram(a, layers[0][0])):
        return None
    gemms = _gemms(ctx, a, layers)
    if (blas.mkl_matmul in gemms or not intra_op.split_keeps_bits(a.dtype) or pool.alone()
            or pool.all_busy()):
        return None
    # rows a chunk, at least: every layer's chunk above the BLAS's small-matrix path (a layer
    # of no multiply-adds, ``b`` with a zero side, counts one a row: no split, as ``for_gemm``)
    least = max(2, intra_op.BLAS_SMALL_MACS // max(1, min(per_row)) + 1)
    parts = min(pool.threads, rows // least)
    if parts < 2:
        return None
    lead = max(0, min(round(intra_op.GEMM_LEAD_MACS / sum(per_row)), rows - parts * least))
    return intra_op.lead_bounds(rows, parts, lead), gemms


@register_kernel("_FusedMatMulChain", offload=True, offload_scale=intra_op.MACS_PER_WORK)
def _matmul_chain(ctx, a, *params):
    if ctx.attrs["transpose_a"]:
        a = a.swapaxes(-1, -2)
    layers = _layers(ctx, a, params)
    split = split_bounds(ctx, a, layers)
    if split is None:  # the layers one after the other, each as ``_FusedMatMul`` runs it
        outs, x = [], a
        for b, bias, ops in layers:
            x = math_kernels.fused_product(ctx, x, b, bias, ops)
            outs.append(x)
        return tuple(outs)
    bounds, gemms = split
    rows = a.shape[0]
    outs = [np.empty((rows, b.shape[1]), dtype=a.dtype) for b, _, _ in layers]
    steps = [(mm, b, out, fused_epilogue(ctx.xp, ops, bias, ctx))
             for mm, (b, bias, ops), out in zip(gemms, layers, outs)]

    def by_rows(start, stop):
        x = a[start:stop]
        for mm, b, out, epilogue in steps:
            y = out[start:stop]
            mm(x, b, y)
            epilogue(y)
            x = y
    ctx.device.intra_op.run(by_rows, bounds)
    return tuple(outs)


class _Layer:
    """One layer's view of the chain's context, for ``_FusedMatMul``'s prepare hook."""

    def __init__(self, ctx, ops):
        self.attrs = {"fused_ops": ops}
        self.xp = getattr(ctx, "xp", np)
        self.output_dtypes = ctx.output_dtypes


@register_prepare("_FusedMatMulChain")
def _prepare(ctx):
    preload = blas.preload(ctx)
    for ops in dict.fromkeys(tuple(ops) for ops in ctx.attrs["fused_ops"]):
        preload = epilogue_preload(_Layer(ctx, ops), preload)
    return preload
