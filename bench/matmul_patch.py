"""What the measuring patches of ``bench_ab_setting.py``'s dense models share
(``bench/blas_callback_scratch.py``, ``bench/nogil_split_scratch.py``): which float32 products a
patch may take (:func:`pool_for`) and the patch itself over ``asyncflow.kernels.math.
_split_matmul`` and ``asyncflow.kernels.blas.matmul`` (:func:`install`). Bench only: nothing
in ``asyncflow/`` imports it.
"""
from __future__ import annotations

import atexit

import numpy as np

from asyncflow.kernels import blas, math as kmath


def pool_for(ctx, a, b, min_macs, fits, passed):
    """The device's intra-op pool where ``a @ b`` may take a patch's form, else None: both
    operands 2-D float32, ``min_macs`` <= m*k*n, not a Gram product (``blas.gram``),
    ``fits(m, k, n)`` (the patch's own limits), a pool of two threads whose worker is idle and
    that does not run kernels whole on this thread (a pair, a lane). A product eligible but
    for the last two is counted in ``passed["alone"]`` or ``passed["busy"]``."""
    if a.ndim != 2 or b.ndim != 2 or a.dtype != np.float32 or b.dtype != np.float32:
        return None
    (m, k), n = a.shape, b.shape[1]
    pool = getattr(getattr(ctx, "device", None), "intra_op", None)
    if (m * k * n < min_macs or pool is None or pool.threads != 2 or blas.gram(a, b)
            or not fits(m, k, n)):
        return None
    if pool.alone():
        passed["alone"] += 1
        return None
    if pool.all_busy():
        passed["busy"] += 1
        return None
    return pool


def install(split_matmul, whole_form, report):
    """Patch ``kmath._split_matmul`` with ``split_matmul`` and ``blas.matmul`` with one that
    first offers each product its caller does not say how to run (``whole`` None) to
    ``whole_form(ctx, a, b)`` (its result, or None: the tree's ``blas.matmul`` runs it);
    ``report`` runs at exit. Returns the tree's ``_split_matmul``, for the patch's fallback."""
    split, matmul = kmath._split_matmul, blas.matmul

    def patched(ctx, a, b, whole=None):
        if whole is None:
            out = whole_form(ctx, a, b)
            if out is not None:
                return out
        return matmul(ctx, a, b, whole)
    atexit.register(report)
    kmath._split_matmul = split_matmul
    blas.matmul = patched
    return split
