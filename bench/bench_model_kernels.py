"""Single kernels of the models in ``bench_models.py``, one source tree against another (issue 37).

Times, called directly on one and two intra-op threads (the convnet's and the autoencoder's
shapes, float32): the convnet's first Conv2D ([128, 28, 28, 1] 5x5 -> 32, SAME), alone and
fused with its BiasAdd and Relu (``_FusedConv2D``), and its filter gradient, its second
(also fused) ([128, 14, 14, 32] 5x5 -> 64) and both gradients (in a tree with
the FFT algorithm, also with the direct kernels forced), its two MaxPoolGrads ([128, 28, 28, 32] and [128, 14, 14, 64], 2x2; with each pool's
forward and the Relu's gradient, routed by the forward's taps where the tree has them), and
Sigmoid on [256, 784] (and [32, 128]); the autoencoder's mean squared error with its gradient
and its RMSProp applies; the convnet's dense layer's three GEMMs on two threads, wall and CPU.
Each tree is imported in a process of its own
(``PYTHONPATH=TREE``); rounds alternate the trees, so load phases hit both alike; the figure
is the best round's median call time.

Run: ``.venv/bin/python bench/bench_model_kernels.py --tree OLD --tree . [--rounds 3]``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


class KernelContext:
    """What a kernel reads of its node context: attrs, xp and a CPU device of ``threads``."""

    def __init__(self, attrs, threads):
        from asyncflow.exec.devices import Device
        self.attrs, self.name, self.type, self.xp = attrs, "bench", "bench", np
        self.device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, threads,
                             intra_op_threads=threads)



def median_seconds(fn, calls, before=None):
    """The median of ``calls`` timed calls of ``fn`` (``before()`` untimed ahead of each)."""
    times = []
    for _ in range(calls):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def _median_ms(fn, calls):
    return 1e3 * median_seconds(fn, calls)


def measure(calls):
    from asyncflow.kernels import math as kmath
    from asyncflow.kernels import nn_conv
    rng = np.random.default_rng(0)
    conv = {"strides": (1, 1, 1, 1), "dilations": (1, 1, 1, 1), "padding": "SAME"}
    pool = {"ksize": (1, 2, 2, 1), "strides": (1, 2, 2, 1), "padding": "SAME"}
    x = rng.standard_normal((128, 28, 28, 1)).astype(np.float32)
    f = rng.standard_normal((5, 5, 1, 32)).astype(np.float32)
    g = rng.standard_normal((128, 28, 28, 32)).astype(np.float32)
    results = {}
    for threads in (1, 2):
        ctx = KernelContext(conv, threads)
        results[f"Conv2D 28x28x1 5x5x32, {threads} thr"] = _median_ms(
            lambda: nn_conv._conv2d(ctx, x, f), calls)
        fused = KernelContext({**conv, "fused_ops": ("BiasAdd", "Relu")}, threads)
        bias = rng.standard_normal(32).astype(np.float32)
        results[f"Conv2D+BiasAdd+Relu fused 28x28x1 5x5x32, {threads} thr"] = _median_ms(
            lambda: nn_conv._fused_conv2d(fused, x, f, bias), calls)
        results[f"BackpropFilter 28x28x1 5x5x32, {threads} thr"] = _median_ms(
            lambda: nn_conv._conv2d_backprop_filter(ctx, x, np.array(f.shape), g), calls)
        for shape in ((128, 28, 28, 32), (128, 14, 14, 64)):
            pctx = KernelContext(pool, threads)
            value = np.maximum(rng.standard_normal(shape).astype(np.float32), 0)  # ReLU'd
            pooled = nn_conv._max_pool(pctx, value)[0]
            grad = rng.standard_normal(pooled.shape).astype(np.float32)
            results[f"MaxPoolGrad {shape[1]}x{shape[2]}x{shape[3]}, {threads} thr"] = _median_ms(
                lambda: nn_conv._max_pool_grad(pctx, value, pooled, grad), calls)
            results.update(_pool_pair_rows(pctx, value, pooled, grad, shape, threads, calls))
        results.update(_conv2_rows(ctx, threads, calls))
    for shape in ((256, 784), (32, 128)):
        value = rng.standard_normal(shape).astype(np.float32) * 4
        out = np.empty_like(value)
        results[f"Sigmoid {shape[0]}x{shape[1]}"] = _median_ms(
            lambda: kmath.sigmoid_into(np, value, out), calls * 10)
    results.update(_dense_rows(calls * 10))
    results.update(_dense_layer_rows(calls))
    return results


def _median_cpu_ms(fn, calls):
    """The median call's process CPU time (every thread's: a split's helpers included)."""
    times = []
    for _ in range(calls):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    times.sort()
    return 1e3 * times[len(times) // 2]


def _dense_layer_rows(calls):
    """The convnet's dense layer at batch 128 on two intra-op threads, wall and CPU: its
    forward (MatMul + BiasAdd + Relu, ``_FusedMatMul`` where the tree has it), input gradient
    ``dy @ W^T`` and weight gradient ``x^T @ dy``, as the MatMul kernel gets them."""
    from asyncflow.kernels import math as kmath
    rng = np.random.default_rng(2)
    x = rng.standard_normal((128, 3136)).astype(np.float32)
    w = rng.standard_normal((3136, 1024)).astype(np.float32)
    dy = rng.standard_normal((128, 1024)).astype(np.float32)
    bias = rng.standard_normal(1024).astype(np.float32)
    plain = {"transpose_a": False, "transpose_b": False}
    cases = {"dense forward 128x3136x1024": (plain, (x, w)),
             "dense input gradient 128x1024x3136": ({**plain, "transpose_b": True}, (dy, w)),
             "dense weight gradient 3136x128x1024": ({**plain, "transpose_a": True}, (x, dy))}
    rows = {}
    for name, (attrs, args) in cases.items():
        ctx = KernelContext(attrs, 2)
        if name.startswith("dense forward") and hasattr(kmath, "_fused_matmul"):
            ctx.attrs = {**attrs, "fused_ops": ("BiasAdd", "Relu")}
            call = (lambda c=ctx, a=args: kmath._fused_matmul(c, *a, bias))
        else:
            call = (lambda c=ctx, a=args: kmath._matmul(c, *a))
        rows[f"{name}, 2 thr"] = _median_ms(call, calls)
        rows[f"{name}, 2 thr, CPU"] = _median_cpu_ms(call, calls)
    return rows


def _dense_rows(calls):
    """The autoencoder's non-GEMM kernels: its mean squared error's chain ([256, 784]
    float32; fused where the tree has the fused kernels, else its six kernels) and RMSProp on
    its largest variable ([784, 256], in place) and on a bias (256 values)."""
    from asyncflow import dtypes
    from asyncflow.exec.resources import VariableResource
    from asyncflow.kernels.registry import get_kernel
    rng = np.random.default_rng(1)
    h, x = (rng.random((256, 784), dtype=np.float32) for _ in range(2))
    one = np.asarray(1.0, np.float32)
    ctx = KernelContext({"axis": None, "keepdims": False, "mean": True}, 1)
    ctx.prepared, ctx.output_dtypes = False, (np.dtype(np.float32),)

    def kernel(op_type):
        return get_kernel(op_type, "CPU").fn

    if get_kernel("_FusedMeanSquaredError", "CPU") is not None:
        def chain():
            diff = kernel("_FusedMeanSquaredError")(ctx, h, x)[1]
            kernel("_FusedMeanSquaredErrorGrad")(ctx, one, diff)
    else:
        def chain():
            diff = kernel("Sub")(ctx, h, x)[0]
            squares = kernel("Square")(ctx, diff)[0]
            kernel("Mean")(ctx, squares)
            spread = kernel("BroadcastToLike")(ctx, one, squares)[0]
            kernel("Mul")(ctx, spread, kernel("Mul")(ctx, diff, np.float32(2))[0])
    rows = {"mean squared error and its gradient 256x784": _median_ms(chain, calls)}
    rms = kernel("ApplyRMSProp")
    scalars = [np.float32(v) for v in (0.01, 0.9, 0.0, 1e-10)]  # lr, rho, momentum, epsilon
    for shape in ((784, 256), (256,)):
        refs = []
        for index, value in enumerate((rng.standard_normal(shape), np.ones(shape),
                                       np.zeros(shape))):
            ref = VariableResource(f"v{index}", dtypes.float32, shape)
            ref.assign(value.astype(np.float32))
            refs.append(ref)
        grad = rng.standard_normal(shape).astype(np.float32)
        label = "x".join(str(d) for d in shape)
        rows[f"ApplyRMSProp {label}"] = _median_ms(
            lambda: rms(ctx, *refs, *scalars, grad), calls)
    # The convnet's largest variable ([3136, 1024]) under Adam, on one and two threads.
    adam = kernel("ApplyAdam")
    shape = (3136, 1024)
    refs = []
    for index, value in enumerate((rng.standard_normal(shape), np.zeros(shape),
                                   np.ones(shape))):
        ref = VariableResource(f"a{index}", dtypes.float32, shape)
        ref.assign(value.astype(np.float32))
        refs.append(ref)
    grad = rng.standard_normal(shape).astype(np.float32)
    scalars = [np.float32(v) for v in (0.9 ** 3, 0.999 ** 3, 1e-4, 0.9, 0.999, 1e-8)]
    for threads in (1, 2):
        actx = KernelContext({"use_nesterov": False}, threads)
        rows[f"ApplyAdam 3136x1024, {threads} thr"] = _median_ms(
            lambda: adam(actx, *refs, *scalars, grad), max(3, calls // 10))
    return rows


def _pool_pair_rows(ctx, value, pooled, grad, shape, threads, calls):
    """A MaxPool of a Relu's output and its gradient as the convnet's step runs them: MaxPool,
    MaxPoolGrad and ReluGrad (``grad * (x > 0)``), or, in a tree with
    ``kernels/nn_pool_taps.py`` (compile/pool_taps.py), ``_MaxPoolWithTaps`` and
    ``_MaxPoolReluGradByTaps``."""
    from asyncflow.kernels import nn_conv
    try:
        from asyncflow.kernels import nn_pool_taps
    except ImportError:
        nn_pool_taps = None
    name = f"{shape[1]}x{shape[2]}x{shape[3]}, {threads} thr"
    results = {f"MaxPool {name}": _median_ms(lambda: nn_conv._max_pool(ctx, value), calls)}
    if nn_pool_taps is None:
        def pair():
            routed = nn_conv._max_pool_grad(ctx, value, nn_conv._max_pool(ctx, value)[0], grad)
            return routed[0] * (value > 0)
    else:
        pooled, taps = nn_pool_taps._max_pool_with_taps(ctx, value)
        results[f"MaxPool with taps {name}"] = _median_ms(
            lambda: nn_pool_taps._max_pool_with_taps(ctx, value), calls)
        results[f"MaxPoolGrad by taps {name}"] = _median_ms(
            lambda: nn_pool_taps._max_pool_grad_by_taps(ctx, value, taps, grad), calls)
        results[f"MaxPoolGrad + ReluGrad by taps {name}"] = _median_ms(
            lambda: nn_pool_taps._max_pool_relu_grad_by_taps(ctx, value, taps, grad, pooled),
            calls)

        def pair():
            pooled, taps = nn_pool_taps._max_pool_with_taps(ctx, value)
            return nn_pool_taps._max_pool_relu_grad_by_taps(ctx, value, taps, grad, pooled)
    results[f"pool, its gradient and ReluGrad as the step runs them {name}"] = _median_ms(
        pair, calls)
    return results


def _conv2_rows(ctx, threads, calls):
    """The convnet's second convolution ([128, 14, 14, 32] 5x5 -> 64, SAME) and its gradients
    as the tree runs them, and, in a tree with the FFT algorithm (``kernels/nn_conv_fft.py``),
    again with the direct kernels forced."""
    from asyncflow.kernels import nn_conv
    try:
        from asyncflow.kernels import nn_conv_fft
    except ImportError:
        nn_conv_fft = None
    rng = np.random.default_rng(1)
    x = rng.standard_normal((128, 14, 14, 32)).astype(np.float32)
    f = rng.standard_normal((5, 5, 32, 64)).astype(np.float32)
    g = rng.standard_normal((128, 14, 14, 64)).astype(np.float32)
    fused = KernelContext({**ctx.attrs, "fused_ops": ("BiasAdd", "Relu")},
                          threads)
    bias = rng.standard_normal(64).astype(np.float32)
    calls_of = {
        "Conv2D": lambda: nn_conv._conv2d(ctx, x, f),
        "Conv2D+BiasAdd+Relu fused": lambda: nn_conv._fused_conv2d(fused, x, f, bias),
        "BackpropInput": lambda: nn_conv._conv2d_backprop_input(ctx, np.array(x.shape), f, g),
        "BackpropFilter": lambda: nn_conv._conv2d_backprop_filter(ctx, x, np.array(f.shape), g),
    }
    if hasattr(nn_conv, "_fused_conv2d_backprop"):  # both gradients as one node
        calls_of["both gradients fused"] = lambda: nn_conv._fused_conv2d_backprop(
            ctx, np.array(x.shape), f, g, x, np.array(f.shape))
    results = {}
    for force in (None, "direct") if nn_conv_fft is not None else (None,):
        if nn_conv_fft is not None:
            nn_conv_fft.FORCE = force
        suffix = ", direct forced" if force else ""
        try:
            for name, call in calls_of.items():
                results[f"{name} 14x14x32 5x5x64, {threads} thr{suffix}"] = _median_ms(call, calls)
        finally:
            if nn_conv_fft is not None:
                nn_conv_fft.FORCE = None
    return results


def compare_trees(script, measure, argv, calls, unit, digits):
    """The ``main`` of a kernel benchmark run tree against tree: ``--serve`` prints
    ``measure(calls)`` as JSON in a process importing one tree (``PYTHONPATH=TREE``); otherwise
    each round runs every ``--tree`` so, and a table gives each kernel's best figure per tree."""
    parser = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], metavar="PATH")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=calls)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        print(json.dumps(measure(args.calls)))
        return 0
    trees = args.tree or ["."]
    print(f"load average at start: {os.getloadavg()}")
    best = {}
    for _ in range(args.rounds):
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            out = subprocess.run([sys.executable, os.path.abspath(script), "--serve",
                                  "--calls", str(args.calls)], env=env, check=True,
                                 capture_output=True, text=True, timeout=600).stdout
            for key, value in json.loads(out).items():
                cell = (tree, key)
                best[cell] = min(best.get(cell, value), value)
    print(f"load average at end: {os.getloadavg()}")
    keys = list(dict.fromkeys(key for (_, key) in best))
    print(f"| kernel ({unit}) | " + " | ".join(trees)
          + (" | last / first |" if len(trees) > 1 else " |"))
    print("|---" * (len(trees) + 1 + (len(trees) > 1)) + "|")
    for key in keys:
        cells = [best.get((tree, key)) for tree in trees]
        ratio = (f" | {cells[-1] / cells[0]:.2f}" if None not in cells else " | -") \
            if len(trees) > 1 else ""
        print(f"| {key} | " + " | ".join("-" if c is None else f"{c:.{digits}f}" for c in cells)
              + ratio + " |")
    return 0


def main(argv=None):
    return compare_trees(__file__, measure, argv, calls=9, unit="ms", digits=3)

if __name__ == "__main__":
    raise SystemExit(main())
