"""The dense models' transposed GEMMs three ways, alternated in one process (issue 37).

The backward pass's products reach the MatMul kernel with one operand a transposed view: a
weight gradient ``x^T @ dy`` (``TN``: ``a`` a view of the layer's input) and an input gradient
``dy @ W^T`` (``NT``: ``b`` a view of the weight). numpy's OpenBLAS takes the view as it is
(its ``T`` flag). Timed per product, on one thread (threadpoolctl holds numpy's BLAS at one,
as a CPU device does; MKL on its sequential layer): ``view``, numpy on the view (what the
kernel does); ``copy``, the transposed operand copied contiguous first (the copy timed with
the product), then numpy's ``NN`` product; ``mkl``, MKL's GEMM on the view (``kernels/blas.py``,
where the wheel is installed). The forms alternate ``--pairs`` times, each the best of
``--repeats`` loops; printed: each form's best ms and its median ratio to ``view``, with the
range.

    .venv/bin/python bench/bench_gemm_transposed.py [--pairs 7] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_blas import best_ms, operand  # noqa: E402  (one timing loop for the GEMM benches)

# (label, m, k, n, a transposed, b transposed): each model's products with a transposed operand
SHAPES = [
    ("mlp 784-256 dW", 784, 128, 256, True, False),
    ("mlp 256-256 dW", 256, 128, 256, True, False),
    ("mlp 256-256 dx", 128, 256, 256, False, True),
    ("ae 784-256 dW", 784, 256, 256, True, False),
    ("ae 256-128 dW", 256, 256, 128, True, False),
    ("ae 128-256 dW", 128, 256, 256, True, False),
    ("ae 256-784 dW", 256, 256, 784, True, False),
    ("ae 256-128 dx", 256, 128, 256, False, True),
    ("ae 128-256 dx", 256, 256, 128, False, True),
    ("ae 256-784 dx", 256, 784, 256, False, True),
]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    from asyncflow.kernels import blas
    mkl = blas.CHOICE != "numpy" and blas.available()
    rng = np.random.default_rng(0)
    print(f"load average at start: {os.getloadavg()}; MKL {'there' if mkl else 'absent'}")
    print(f"{'product':>16} {'m x k x n':>14}  view ms  copy/view [range]"
          + ("  mkl/view [range]" if mkl else ""))
    with threadpool_limits(1, user_api="blas"):
        for label, m, k, n, ta, tb in SHAPES:
            a, b = operand(rng, m, k, ta, np.float32), operand(rng, k, n, tb, np.float32)
            out = np.empty((m, n), np.float32)

            def copied():
                np.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), out=out)
            forms = {"view": lambda: np.matmul(a, b, out=out), "copy": copied}
            if mkl:
                forms["mkl"] = lambda: blas.mkl_matmul(a, b, out)
            times = {form: [] for form in forms}
            for pair in range(args.pairs):
                order = list(forms) if pair % 2 == 0 else list(forms)[::-1]
                for form in order:
                    times[form].append(best_ms(forms[form], args.repeats, m * k * n))
            cells = []
            for form in list(forms)[1:]:
                ratios = [t / v for t, v in zip(times[form], times["view"])]
                cells.append(f"{statistics.median(ratios):.2f} "
                             f"[{min(ratios):.2f}-{max(ratios):.2f}]")
            shape = f"{m}{'T' if ta else ''}x{k}x{n}{'T' if tb else ''}"
            print(f"{label:>16} {shape:>14}  {min(times['view']):7.3f}  "
                  + "  ".join(f"{cell:>17}" for cell in cells))
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
