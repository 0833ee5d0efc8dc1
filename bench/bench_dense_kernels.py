"""The dense models' non-GEMM kernels alone, one source tree against another (issue 37).

Times, called directly on one intra-op thread (float32, the autoencoder's and the MLP's
shapes): ApplyRMSProp on [784, 256] and [256, 256] in place, momentum 0 (the optimizer's
default, the models') and 0.9, with the variable's arrays in cache ("warm": called in a
loop) and after 32 MiB of other memory was written ("cold": as a training step finds the
slots, untouched for a step; "gradient warm": the gradient written just before, as by its
GEMM); the fused MatMul's BiasAdd + Sigmoid epilogue on [256, 784] and [256, 256]; a bias
gradient (``Sum`` over the batch) of [256, 784], [256, 256] and [128, 256]; the dropout's
gradient on [128, 256] (``_FusedDropoutGrad`` where the tree has it, else its Mul,
SumToShape and RealDiv kernels); the mean squared error's gradient on [256, 784] (given the
loss where the tree's kernel takes it). Each tree is imported in a process of its own (``PYTHONPATH=TREE``); rounds
alternate the trees, so load phases hit both alike; the figure is the best round's median
call in microseconds, the last column the last tree's over the first's.

Run: ``.venv/bin/python bench/bench_dense_kernels.py --tree OLD --tree . [--rounds 5]``.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_model_kernels import KernelContext, compare_trees, median_seconds  # noqa: E402


def _Context(attrs):
    return KernelContext(attrs, 1)


def _median_us(fn, calls, before=None):
    return 1e6 * median_seconds(fn, calls, before)


def measure(calls):
    from asyncflow import dtypes
    from asyncflow.exec.resources import VariableResource
    from asyncflow.kernels import math as kmath
    from asyncflow.kernels.registry import get_kernel
    rng = np.random.default_rng(0)
    other = np.ones(8 << 20, np.float32)  # 32 MiB: the L3 of this machine

    def evict(hot=None):
        other.__iadd__(1.0)
        if hot is not None:  # (as the GEMM that made it left it)
            hot.__imul__(1.0)

    rows = {}
    rms = get_kernel("ApplyRMSProp", "CPU").fn
    ctx = _Context({})
    for shape in ((784, 256), (256, 256)):
        refs = []
        for index, value in enumerate((rng.standard_normal(shape), np.ones(shape),
                                       np.zeros(shape))):
            ref = VariableResource(f"v{index}", dtypes.float32, shape)
            ref.assign(value.astype(np.float32))
            refs.append(ref)
        grad = rng.standard_normal(shape).astype(np.float32)
        label = "x".join(str(d) for d in shape)
        for momentum in (0.0, 0.9):
            scalars = [np.float32(v) for v in (0.01, 0.9, momentum, 1e-10)]

            def apply(scalars=scalars):
                rms(ctx, *refs, *scalars, grad)
            rows[f"ApplyRMSProp {label} momentum {momentum}, warm"] = _median_us(apply, calls)
            if momentum == 0.0:
                rows[f"ApplyRMSProp {label} momentum {momentum}, cold"] = _median_us(
                    apply, max(5, calls // 4), evict)
                rows[f"ApplyRMSProp {label} momentum {momentum}, cold, gradient warm"] = \
                    _median_us(apply, max(5, calls // 4), lambda: evict(grad))
    for shape in ((256, 784), (256, 256)):
        z = (rng.standard_normal(shape) * 3).astype(np.float32)
        bias = rng.standard_normal(shape[1]).astype(np.float32)
        epilogue = kmath.fused_epilogue(np, ("BiasAdd", "Sigmoid"), bias)
        work = np.empty_like(z)
        label = "x".join(str(d) for d in shape)
        rows[f"BiasAdd + Sigmoid epilogue {label}"] = _median_us(
            lambda: epilogue(work), calls, lambda: np.copyto(work, z))
    total = get_kernel("Sum", "CPU").fn
    sctx = _Context({"axis": (0,), "keepdims": False})
    for shape in ((256, 784), (256, 256), (128, 256)):
        x = rng.standard_normal(shape).astype(np.float32)
        label = "x".join(str(d) for d in shape)
        rows[f"Sum over the batch {label}"] = _median_us(lambda: total(sctx, x), calls)
    h, x = (rng.random((256, 784), dtype=np.float32) for _ in range(2))
    mctx = _Context({})
    mctx.prepared = False
    loss, diff = get_kernel("_FusedMeanSquaredError", "CPU").fn(mctx, h, x)
    mse_grad = get_kernel("_FusedMeanSquaredErrorGrad", "CPU").fn
    one = np.asarray(1.0, np.float32)
    try:
        mse_grad(mctx, one, diff, loss)
        args = (one, diff, loss)
    except TypeError:  # a tree whose kernel takes no loss
        args = (one, diff)
    rows["mean squared error gradient 256x784"] = _median_us(lambda: mse_grad(mctx, *args),
                                                             calls)
    grad = rng.standard_normal((128, 256)).astype(np.float32)
    mask = np.floor(rng.random((128, 256), dtype=np.float32) + np.float32(0.75))
    keep = np.asarray(0.75, np.float32)
    gctx = _Context({})
    gctx.prepared = False
    if get_kernel("_FusedDropoutGrad", "CPU") is not None:
        fused = get_kernel("_FusedDropoutGrad", "CPU").fn
        rows["dropout gradient 128x256"] = _median_us(lambda: fused(gctx, grad, mask, keep),
                                                      calls)
    else:
        mul, to_shape, div = (get_kernel(t, "CPU").fn for t in ("Mul", "SumToShape", "RealDiv"))
        shape = np.asarray(mask.shape)
        rows["dropout gradient 128x256"] = _median_us(lambda: div(gctx, to_shape(
            gctx, mul(gctx, grad, mask)[0], shape)[0], keep), calls)
    return rows


def main(argv=None):
    return compare_trees(__file__, measure, argv, calls=200, unit="us", digits=1)

if __name__ == "__main__":
    raise SystemExit(main())
