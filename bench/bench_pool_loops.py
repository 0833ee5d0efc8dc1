"""The max pools' compiled loops (kernels/pool_loops.py) against their numpy forms, in one
process, on one and two intra-op threads (issue 37).

Per window geometry (the convnet's 2x2 pools and the 3x3 ones of larger image models,
overlapping, padded or not) and kernel (MaxPool, MaxPoolGrad, ``_MaxPoolWithTaps``,
``_MaxPoolReluGradByTaps``), float32, a Relu's output as input: the median call time with the
loops (``jit.ENABLED``) and without, the two forms alternating call by call so that load
phases hit both alike, and their ratio (loop / numpy).

Run: ``.venv/bin/python bench/bench_pool_loops.py [--calls 15]``.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from bench_model_kernels import KernelContext

# (name, input shape, (kh, kw), (sh, sw), padding)
GEOMETRIES = [
    ("convnet pool 1", (128, 28, 28, 32), (2, 2), (2, 2), "SAME"),
    ("convnet pool 2", (128, 14, 14, 64), (2, 2), (2, 2), "SAME"),
    ("2x2 odd, padded", (64, 15, 15, 48), (2, 2), (2, 2), "SAME"),
    ("3x3/2 overlapping", (32, 56, 56, 64), (3, 3), (2, 2), "SAME"),
    ("3x3/1 overlapping", (32, 28, 28, 64), (3, 3), (1, 1), "SAME"),
    ("3x3/3 tiled", (32, 27, 27, 64), (3, 3), (3, 3), "VALID"),
]


def kernels(ctx, x, grad):
    from asyncflow.kernels import nn_conv, nn_pool_taps
    pooled = nn_conv._max_pool(ctx, x)[0]
    _, taps = nn_pool_taps._max_pool_with_taps(ctx, x)
    return {
        "MaxPool": lambda: nn_conv._max_pool(ctx, x),
        "MaxPoolGrad": lambda: nn_conv._max_pool_grad(ctx, x, pooled, grad),
        "MaxPool with taps": lambda: nn_pool_taps._max_pool_with_taps(ctx, x),
        "MaxPoolGrad + ReluGrad by taps": lambda: nn_pool_taps._max_pool_relu_grad_by_taps(
            ctx, x, taps, grad, pooled),
    }


def alternating_medians(first, second, calls):
    times = ([], [])
    for _ in range(calls):
        for index, fn in enumerate((first, second)):
            start = time.perf_counter()
            fn()
            times[index].append(time.perf_counter() - start)
    return [1e3 * sorted(t)[len(t) // 2] for t in times]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=15)
    args = parser.parse_args(argv)
    from asyncflow.kernels import jit, pool_loops
    if not jit.available():
        raise SystemExit("numba is not installed (or ASYNCFLOW_JIT=0): no loops to time")
    pool_loops.warm()
    print(f"load average at start: {os.getloadavg()}")
    print("| geometry | kernel | threads | loop, ms | numpy, ms | loop / numpy |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for name, shape, window, strides, padding in GEOMETRIES:
        x = np.maximum(rng.standard_normal(shape).astype(np.float32), 0)
        attrs = {"ksize": (1, *window, 1), "strides": (1, *strides, 1), "padding": padding}
        for threads in (1, 2):
            ctx = KernelContext(attrs, threads)
            from asyncflow.kernels import nn_conv
            grad = rng.standard_normal(nn_conv._max_pool(ctx, x)[0].shape).astype(np.float32)
            calls = kernels(ctx, x, grad)

            def numpy_form(fn):
                def run():
                    jit.ENABLED = False
                    try:
                        fn()
                    finally:
                        jit.ENABLED = True
                return run
            for kernel, fn in calls.items():
                loop_ms, numpy_ms = alternating_medians(fn, numpy_form(fn), args.calls)
                print(f"| {name} {list(shape)} {window[0]}x{window[1]}/{strides[0]} {padding} "
                      f"| {kernel} | {threads} | {loop_ms:.3f} | {numpy_ms:.3f} "
                      f"| {loop_ms / numpy_ms:.2f} |")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
