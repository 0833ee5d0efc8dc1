"""The convolution's path chooser against measurement (issue 37): direct against FFT forced.

For the convnet's conv1 ([128, 28, 28, 1] 5x5 -> 32, SAME), conv2 ([128, 14, 14, 32] 5x5 ->
64) and neighbouring shapes (channels 1/3/16, 28/32/56 pixels, kernels 3/5), in one process,
alternating the two paths call by call (``nn_conv_fft.FORCE``): the fused forward
(Conv2D + BiasAdd + Relu) and the backprop as a training step needs it (the filter gradient
alone for a first layer, input channels 1 or 3; both, fused, otherwise), on 1 and 2 intra-op
threads. Per shape the median of each path, the ratio FFT / direct, and the path
``choose`` picks by its cost model (``model``) and its predicted ratio.

Run: ``.venv/bin/python bench/bench_conv_choose.py [--calls 5] [--shapes conv1,conv2]``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_model_kernels import KernelContext  # noqa: E402

# name: (batch, size, channels in, kernel, channels out)
SHAPES = {
    "conv1": (128, 28, 1, 5, 32), "conv2": (128, 14, 32, 5, 64),
    "28x1k3": (128, 28, 1, 3, 32), "28x3k5": (128, 28, 3, 5, 32),
    "28x16k5": (128, 28, 16, 5, 32), "28x16k3": (128, 28, 16, 3, 32),
    "32x1k5": (128, 32, 1, 5, 32), "32x3k3": (128, 32, 3, 3, 32),
    "56x1k5": (128, 56, 1, 5, 32), "56x3k3": (128, 56, 3, 3, 32),
    # near the model's boundary (its predicted ratio 0.6-1.6)
    "28x8k5": (128, 28, 8, 5, 32), "14x16k5": (128, 14, 16, 5, 32),
    "14x32k3": (128, 14, 32, 3, 64), "7x64k3": (128, 7, 64, 3, 64),
}


def forms(name, threads):
    """``(forward, backprop, plan)`` callables of one shape on ``threads``."""
    from asyncflow.kernels import nn_conv, nn_conv_fft
    n, size, c, k, o = SHAPES[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, size, size, c)).astype(np.float32)
    f = (rng.standard_normal((k, k, c, o)) * 0.1).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    g = rng.standard_normal((n, size, size, o)).astype(np.float32)
    attrs = {"strides": (1, 1, 1, 1), "dilations": (1, 1, 1, 1), "padding": "SAME"}
    ctx = KernelContext(attrs, threads)
    fused = KernelContext({**attrs, "fused_ops": ("BiasAdd", "Relu")}, threads)
    sizes, f_sizes = np.array(x.shape), np.array(f.shape)

    def forward():
        return nn_conv._fused_conv2d(fused, x, f, bias)

    if c <= 3:
        def backprop():
            return nn_conv._conv2d_backprop_filter(ctx, x, f_sizes, g)
    else:
        def backprop():
            return nn_conv._fused_conv2d_backprop(ctx, sizes, f, g, x, f_sizes)
    rows, cols = nn_conv._spatial(ctx, x.shape, (k, k))
    plan = nn_conv_fft.Plan(x.shape, f.shape, rows, cols)
    return forward, backprop, plan


def alternate(fn, calls):
    """Median seconds of ``fn`` by path: {"direct": s, "fft": s}, the paths alternating."""
    from asyncflow.kernels import nn_conv_fft
    times = {"direct": [], "fft": []}
    for path in times:  # warm both (compiles, DFT matrices, scipy's import)
        nn_conv_fft.FORCE = path
        fn()
    for _ in range(calls):
        for path in times:
            nn_conv_fft.FORCE = path
            start = time.perf_counter()
            fn()
            times[path].append(time.perf_counter() - start)
    nn_conv_fft.FORCE = None
    return {path: sorted(t)[len(t) // 2] for path, t in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args(argv)
    from asyncflow.kernels import dft_gemm
    print(f"load {os.getloadavg()}; calls {args.calls}; "
          f"dft_gemm.MAX_PERIOD {dft_gemm.MAX_PERIOD}")
    print(f"{'shape':<9} {'thr':>3} {'op':<9} {'direct ms':>9} {'fft ms':>8} {'fft/dir':>7} "
          f"{'model':>6} {'period':>6}")
    for name in args.shapes.split(","):
        for threads in (1, 2):
            forward, backprop, plan = forms(name, threads)
            model = plan.fft_s / plan.direct_s
            for op, fn in (("forward", forward), ("backprop", backprop)):
                med = alternate(fn, args.calls)
                print(f"{name:<9} {threads:>3} {op:<9} {1e3 * med['direct']:9.2f} "
                      f"{1e3 * med['fft']:8.2f} {med['fft'] / med['direct']:7.2f} "
                      f"{model:6.2f} {plan.p_h:>6}", flush=True)


if __name__ == "__main__":
    main()
