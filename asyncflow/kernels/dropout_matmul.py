"""``_FusedMatMulDropout``: a ``_FusedMatMul`` and the ``_FusedDropout`` that reads its
output, as one kernel (compile/fuse_matmul_dropout.py makes the node; ops/dropout.py).

The MLP's forward after its first GEMM ran on one thread with the other core idle: the
dropout (55-70 us a step), the second GEMM, the second dropout, the loss (bench/RESULTS.md,
c43mlp). Here the dropout runs inside the product's row chunks, each chunk's mask drawn
after its rows' bias and Relu while they are in cache (``kernels/math.py``'s
``fused_product``, ``then``), on whichever thread runs the chunk: the first GEMM's split
carries it over both cores and the dropout node is gone from the one-thread stretch.

Each chunk draws from its own position in the generator's stream: the kernel takes the
whole call's draws from the generator first (``kernels/dropout.py``'s ``reserve_draws``: the
state jumped ahead to where ``rng.random(shape, dtype)`` leaves it, under its lock), and a
chunk's first state is the reserved one jumped ahead by the draws before its first value
(``M^k`` and the increment's k-step sum); a float32 chunk starting at a draw's high half
takes that half alone first. The chunk then runs ``_FusedDropout``'s compiled loop: the
same integers and float operations, so the result, the mask and the generator's state after
are ``_FusedDropout``'s on ``_FusedMatMul``'s output, bit for bit, and the product's chunks
are ``_FusedMatMul``'s (``fused_product``). Outputs: the dropout's result, its mask (the
gradient reads it) and the product's activations (the Relu's gradient reads them).

Where the compiled loop does not apply (a GPU, other dtypes or generators, numba missing,
``ASYNCFLOW_JIT=0``, ``STREAMS`` off) the two kernels run in turn, as the two nodes would.
"""
from __future__ import annotations

import numpy as np

from asyncflow.kernels import blas, dropout, intra_op, jit
from asyncflow.kernels.epilogue import preload as epilogue_preload
from asyncflow.kernels.math import fused_operands, fused_product
from asyncflow.kernels.registry import Preload, register_kernel, register_prepare

# Whether the mask is drawn in the product's chunks (read at each call); False: the two
# kernels in turn, within the one node.
STREAMS = True


def _in_chunks(ctx, rng, a, b, bias, keep, dtype):
    """Whether the mask is drawn in the product's chunks: ``_FusedDropout``'s compiled case
    (a PCG64 generator, float32/float64 throughout, a scalar ``keep``, compiled loops usable
    and checked against this numpy)."""
    return (STREAMS and dropout.COMPILED and type(rng.bit_generator) is np.random.PCG64
            and a.dtype == b.dtype == bias.dtype == keep.dtype == dtype and keep.ndim == 0
            and jit.usable(ctx, a, b, bias, keep) and dropout.loop_matches_numpy(dtype))


@register_kernel("_FusedMatMulDropout", offload=True, offload_scale=intra_op.MACS_PER_WORK)
def _fused_matmul_dropout(ctx, a, b, bias, keep):
    """``(output, mask, activations)``: ``_FusedDropout(_FusedMatMul(a, b, bias))`` with
    the product's activations, the dropout in the product's row chunks (module docstring)."""
    dtype = np.dtype(ctx.output_dtypes[1])
    a, b = fused_operands(ctx, a, b, bias)
    rng = ctx.random_generator()
    if not _in_chunks(ctx, rng, a, b, bias, keep, dtype):
        features = fused_product(ctx, a, b, bias)
        dims = np.asarray(features.shape, dtype=np.int64)
        return dropout._fused_dropout(ctx, features, dims, keep) + (features,)
    rows, cols = a.shape[0], b.shape[1]
    draws = dropout.reserve_draws(rng, rows * cols, keep, dtype)
    out = np.empty((rows, cols), dtype=dtype)
    mask = np.empty((rows, cols), dtype=dtype)
    flat_out, flat_mask = out.reshape(-1), mask.reshape(-1)

    def then(features, start, stop):  # rows start:stop done, in cache
        if not features.flags.c_contiguous:  # (a whole product from a library of its own)
            features = np.ascontiguousarray(features)
        draws.apply(features.reshape(-1), flat_out, flat_mask, start * cols, stop * cols)
    features = fused_product(ctx, a, b, bias, then)
    return out, mask, features


def _preload(ctx):
    """Prepare hook: ``_FusedMatMul``'s (MKL, the sigmoid loops) then ``_FusedDropout``'s
    (its loop compiled off the event loop), each where it applies."""
    return Preload.chained(epilogue_preload(ctx, blas.preload(ctx)), dropout._preload(ctx))


register_prepare("_FusedMatMulDropout")(_preload)
