"""A GEMM in two halves on two threads, by rows of ``a`` or by columns of ``b`` (issue 37):
the autoencoder's two forward GEMMs that split (51 M multiply-adds each), without their
sigmoid epilogue; with ``--model mlp`` the MLP's GEMMs (its first layer's forward and weight
gradient, which split, and the second layer's 8.4 M forward and weight gradient, which do
not), the forward's bias and Relu applied to each half where ``--relu`` asks.

Split by rows each thread's BLAS call packs all of ``b``; by columns it packs half of ``b``
and all of ``a``. This times, alternating the forms in one process (the machine's slow and
fast phases hit them alike), the product whole on one thread (the baseline), in two row
halves and in two column halves run at once on two threads (each one BLAS thread, as a CPU
device holds BLAS; the two start together on a barrier), and the column halves written into
outputs of their own (contiguous) rather than the product's strided columns; and one row half
with the other thread idle (what a half costs where it has the machine to itself). Per shape: each
form's median over ``--repeat`` rounds, its ratio to the whole product, and whether the
halves have the whole product's bits.

Run: ``.venv/bin/python bench/bench_gemm_halves.py [--repeat 200] [--model mlp [--relu]]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import numpy as np
import threadpoolctl

SHAPES = {"Sigmoid": ((256, 784), (784, 256)), "Sigmoid_3": ((256, 256), (256, 784))}
MLP_SHAPES = {"Relu": ((128, 784), (784, 256)), "MatMul_grad/MatMul_1": ((784, 128), (128, 256)),
              "Relu_1": ((128, 256), (256, 256)), "MatMul_1_grad/MatMul_1": ((256, 128), (128, 256))}


def at_once(first, second, barrier):
    """``first()`` here and ``second()`` on a thread of its own, started together: seconds
    until both ended."""
    def other():
        barrier.wait()
        second()
    thread = threading.Thread(target=other)
    thread.start()
    barrier.wait()
    start = time.perf_counter()
    first()
    thread.join()
    return time.perf_counter() - start


def forms(a, b, bias=None):
    """``{form: (first, second)}``: the halves each thread computes, and the product (or the
    two outputs) they write; with ``bias``, each part's bias and Relu after its product."""
    rows, cols = a.shape[0] // 2, b.shape[1] // 2
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    left = np.empty((a.shape[0], cols), np.float32)
    right = np.empty((a.shape[0], b.shape[1] - cols), np.float32)

    def mm(x, y, into, columns=slice(None)):
        def part():
            np.matmul(x, y, out=into)
            if bias is not None:
                np.add(into, bias[columns], out=into)
                np.maximum(into, 0, out=into)
        return part
    low, high = slice(None, cols), slice(cols, None)
    return out, {
        "whole": (mm(a, b, out), lambda: None),
        "rows": (mm(a[:rows], b, out[:rows]), mm(a[rows:], b, out[rows:])),
        "columns": (mm(a, b[:, low], out[:, low], low), mm(a, b[:, high], out[:, high], high)),
        "columns, own outputs": (mm(a, b[:, low], left, low), mm(a, b[:, high], right, high)),
        "a row half alone": (mm(a[:rows], b, out[:rows]), lambda: None),
        "a column half alone": (mm(a, b[:, low], out[:, low], low), lambda: None),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--model", default="autoencoder", choices=("autoencoder", "mlp"))
    parser.add_argument("--relu", action="store_true",
                        help="the MLP's forward GEMMs with their bias and Relu on each part")
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}")
    controller = threadpoolctl.ThreadpoolController()
    rng = np.random.default_rng(0)
    barrier = threading.Barrier(2)
    with controller.limit(limits=1, user_api="blas"):
        for name, (a_shape, b_shape) in (SHAPES if args.model == "autoencoder"
                                         else MLP_SHAPES).items():
            a = rng.random(a_shape, dtype=np.float32) - 0.5
            b = rng.random(b_shape, dtype=np.float32) - 0.5
            bias = None
            if args.relu and name.startswith("Relu"):
                bias = rng.random(b_shape[1], dtype=np.float32) - 0.5
            out, ways = forms(a, b, bias)
            times = {form: [] for form in ways}
            for _ in range(args.repeat):
                for form, (first, second) in ways.items():
                    times[form].append(at_once(first, second, barrier))
            whole = statistics.median(times["whole"])
            print(f"\n{name} {list(a_shape)} @ {list(b_shape)}: median us (/ whole on one "
                  f"thread), {args.repeat} rounds")
            for form, samples in times.items():
                median = statistics.median(samples)
                print(f"  {form:22s} {1e6 * median:8.0f}  ({median / whole:.3f})")
            reference = a @ b
            if bias is not None:
                reference = np.maximum(reference + bias, 0)
            for form in ("rows", "columns"):
                first, second = ways[form]
                out.fill(np.nan)
                first()
                second()
                print(f"  {form} halves: the whole product's bits: "
                      f"{np.array_equal(out, reference)}")
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
