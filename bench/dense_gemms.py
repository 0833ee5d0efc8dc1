"""The dense models' GEMM products and the forms every two-thread GEMM bench sets beside its
own (issue 37): shared by ``bench_blas_callback.py`` and ``bench_nogil_split.py``.

``SHAPES``: name -> (a's shape as the kernel gets it, b's, "N"/"T" for each: a transposed
view), the MLP's (784-256-256-10, batch 128) and the autoencoder's (784-256-128-256-784,
batch 256) products as `bench_models.py --nodes` names them. ``baseline_forms`` gives the
three forms such a bench measures against: ``one`` (one BLAS thread), ``today`` (the MatMul
kernel's path: ``kernels/math._split_matmul`` where ``splits`` says, else whole) and
``halves`` (our row halves on the pool whatever the size, ``for_gemm``'s bounds for two
threads).
"""
from __future__ import annotations

import types

import numpy as np

from asyncflow.kernels import intra_op, math as kmath

SHAPES = {
    "mlp MatMul NN": ((128, 784), (784, 256), "NN"),
    "mlp MatMul_grad/MatMul_1 TN": ((784, 128), (128, 256), "TN"),
    "mlp MatMul_1 NN": ((128, 256), (256, 256), "NN"),
    "mlp MatMul_1_grad/MatMul NT": ((128, 256), (256, 256), "NT"),
    "mlp MatMul_1_grad/MatMul_1 TN": ((256, 128), (128, 256), "TN"),
    "ae MatMul NN": ((256, 784), (784, 256), "NN"),
    "ae MatMul_3 NN": ((256, 256), (256, 784), "NN"),
    "ae MatMul_3_grad/MatMul NT": ((256, 784), (784, 256), "NT"),
    "ae MatMul_3_grad/MatMul_1 TN": ((256, 256), (256, 784), "TN"),
    "ae MatMul_grad/MatMul_1 TN": ((784, 256), (256, 256), "TN"),
    "ae 8.4M NN": ((256, 256), (256, 128), "NN"),
    "ae 8.4M TN": ((256, 256), (256, 128), "TN"),
}


def picked(spec):
    """The names ``--shapes`` picks (comma-separated parts of names; empty: all)."""
    return [name for name in SHAPES
            if not spec or any(part in name for part in spec.split(","))]


def operands(rng, name):
    """Random float32 ``a`` and ``b`` for product ``name``, a "T" side as a transposed view of
    a contiguous array (as a gradient's operand reaches the kernel)."""
    shape_a, shape_b, form = SHAPES[name]
    a = rng.standard_normal(shape_a[::-1] if form[0] == "T" else shape_a, dtype=np.float32)
    b = rng.standard_normal(shape_b[::-1] if form[1] == "T" else shape_b, dtype=np.float32)
    return (a.T if form[0] == "T" else a), (b.T if form[1] == "T" else b)


def kernel_context(pool):
    """The least a MatMul kernel's split reads of its context: the device's pool and numpy."""
    return types.SimpleNamespace(device=types.SimpleNamespace(intra_op=pool), xp=np)


def lead_bounds(a, b, lead=True):
    """``for_gemm``'s row bounds for two threads (``lead=False``: even halves)."""
    (m, k), n = a.shape, b.shape[1]
    cut = max(0, min(round(intra_op.GEMM_LEAD_MACS / (k * n)), m - 2 * 2)) if lead else 0
    return intra_op.lead_bounds(m, 2, cut)


def baseline_forms(ctx, pool, a, b, out):
    """``one``, ``today`` and ``halves`` for ``a @ b`` into ``out`` (see the module)."""
    bounds = lead_bounds(a, b)

    def one():
        np.matmul(a, b, out=out)
        return out

    def today():
        if kmath.splits(a, b):
            return kmath._split_matmul(ctx, a, b)
        return one()

    def halves():
        def rows(start, stop):
            np.matmul(a[start:stop], b, out=out[start:stop])
        pool.run(rows, bounds)
        return out

    return one, today, halves
