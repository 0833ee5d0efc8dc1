"""The convolutions' compiled loops against their numpy forms, in one process, on one and
two intra-op threads (issue 37).

The convnet's first layer ([128, 28, 28, 1] 5x5 -> 32, SAME, float32: kernels/
nn_conv_loops.py): ``_FusedConv2D`` (BiasAdd + Relu), Conv2D and Conv2DBackpropFilter; its
second layer's ``_FusedConv2D`` ([128, 14, 14, 32] 5x5 -> 64, the FFT path: its read-out,
bias and Relu as one loop, kernels/nn_conv_fft.py); each with the loops (``jit.ENABLED``)
and without, the two forms alternating call by call so that load phases hit both alike;
per kernel the median call of each form and their ratio (loop / numpy), for ``--pairs``
rounds of ``--calls`` calls, then the rounds' median ratio and its range.

Run: ``.venv/bin/python bench/bench_conv_loops.py [--calls 7] [--pairs 4]``.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from bench_model_kernels import KernelContext
from bench_pool_loops import alternating_medians


def kernels(ctx, fused):
    """``fused``: a context as ``ctx`` whose attrs name the fused ops."""
    from asyncflow.kernels import nn_conv
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 28, 28, 1)).astype(np.float32)
    filters = (rng.standard_normal((5, 5, 1, 32)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    grad = rng.standard_normal((128, 28, 28, 32)).astype(np.float32)
    sizes = np.array(filters.shape, np.int32)
    x2 = np.maximum(rng.standard_normal((128, 14, 14, 32)), 0).astype(np.float32)
    filters2 = (rng.standard_normal((5, 5, 32, 64)) * 0.05).astype(np.float32)
    bias2 = rng.standard_normal(64).astype(np.float32)
    return {
        "conv1 _FusedConv2D (BiasAdd, Relu)": lambda: nn_conv._fused_conv2d(fused, x, filters,
                                                                             bias),
        "conv1 Conv2D": lambda: nn_conv._conv2d(ctx, x, filters),
        "conv1 Conv2DBackpropFilter": lambda: nn_conv._conv2d_backprop_filter(ctx, x, sizes,
                                                                              grad),
        "conv2 _FusedConv2D (FFT)": lambda: nn_conv._fused_conv2d(fused, x2, filters2, bias2),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=7)
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args(argv)
    from asyncflow.kernels import jit
    if not jit.available():
        raise SystemExit("numba is not installed (or ASYNCFLOW_JIT=0): no loops to time")
    attrs = {"strides": (1, 1, 1, 1), "dilations": (1, 1, 1, 1), "padding": "SAME",
             "data_format": "NHWC"}
    print(f"load average at start: {os.getloadavg()}")
    print("| kernel | threads | loop, ms | numpy, ms | loop / numpy, median (range) |")
    print("|---|---|---|---|---|")
    for threads in (1, 2):
        ctx = KernelContext(attrs, threads)
        fused = KernelContext({**attrs, "fused_ops": ("BiasAdd", "Relu")}, threads)
        for name, fn in kernels(ctx, fused).items():
            fn()  # the loops' compile or disk cache load, and the pool's threads, untimed

            def numpy_form(fn=fn):
                jit.ENABLED = False
                try:
                    fn()
                finally:
                    jit.ENABLED = True
            rounds = [alternating_medians(fn, numpy_form, args.calls)
                      for _ in range(args.pairs)]
            ratios = sorted(loop / numpy for loop, numpy in rounds)
            loop_ms = sorted(r[0] for r in rounds)[len(rounds) // 2]
            numpy_ms = sorted(r[1] for r in rounds)[len(rounds) // 2]
            print(f"| {name} | {threads} | {loop_ms:.3f} | {numpy_ms:.3f} | "
                  f"{ratios[len(ratios) // 2]:.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f}) |")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
