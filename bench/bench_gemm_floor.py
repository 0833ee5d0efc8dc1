"""The GEMM floor of the dense models of ``bench_models.py`` (issue 37): every GEMM of one
training step at its shape, timed with numpy's BLAS on one thread and on two.

For each model (``mlp``: 784-256-256-10, batch 128; ``autoencoder``: 784-256-128-256-784,
batch 256) a step runs, per dense layer of ``n_in -> n_out``, the forward GEMM
``[B, n_in] @ [n_in, n_out]``, the weight gradient ``x^T @ dy`` (``[n_in, B] @ [B, n_out]``,
x transposed as a view, as the MatMul kernel receives it) and, for every layer but the first,
the input gradient ``dy @ W^T``. The bench prints each GEMM's multiply-adds and best time
(median of ``--repeat`` calls, best of ``--rounds``), the model's total, and the rate
(G multiply-adds a second): the step time a framework cannot beat with these GEMMs on one
core, and on two when BLAS splits each GEMM itself.

Then the backward pass's independent pairs (a layer's weight gradient and its input gradient
read the same ``dy`` and nothing of each other), run three ways on asyncflow's intra-op pool
of two threads (BLAS held at one thread, as a CPU device holds it): one after the other on
the calling thread; each split by rows over the pool (what the MatMul kernel does from 16M
multiply-adds); and the two as one split of two chunks, a GEMM each (one hand-off for the
pair). ``--steps`` pairs are timed back to back per sample.

Run: ``.venv/bin/python bench/bench_gemm_floor.py [--rounds 5] [--repeat 50]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

LAYERS = {"mlp": (128, [784, 256, 256, 10]), "autoencoder": (256, [784, 256, 128, 256, 784])}


def gemms(model):
    """``(label, a, b)`` of every GEMM in one training step of ``model``."""
    batch, sizes = LAYERS[model]
    rng = np.random.default_rng(0)
    out = []
    for index, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        x = rng.random((batch, n_in), dtype=np.float32)
        w = rng.random((n_in, n_out), dtype=np.float32)
        dy = rng.random((batch, n_out), dtype=np.float32)
        out.append((f"fwd {batch}x{n_in}x{n_out}", x, w))
        out.append((f"dW  {n_in}x{batch}x{n_out}", x.T, dy))
        if index:
            out.append((f"dx  {batch}x{n_out}x{n_in}", dy, w.T))
    return out


def best_ms(fn, rounds, repeat):
    """The best of ``rounds`` medians of ``repeat`` timed calls, ms."""
    best = float("inf")
    for _ in range(rounds):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        best = min(best, statistics.median(times))
    return 1e3 * best


def best_time(a, b, rounds, repeat):
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    return best_ms(lambda: np.matmul(a, b, out=out), rounds, repeat) / 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    import threadpoolctl  # (here: bench_ae_bound.py imports gemms() under TF's interpreter)
    print(f"load average at start: {os.getloadavg()}")
    controller = threadpoolctl.ThreadpoolController()
    for info in controller.info():
        print(f"BLAS: {info.get('internal_api')} {info.get('version')} "
              f"core type {info.get('architecture')}")
    for model in LAYERS:
        print(f"\n{model}: GEMM, M multiply-adds, ms on 1 BLAS thread, ms on 2")
        totals = [0.0, 0.0, 0.0]
        for label, a, b in gemms(model):
            macs = a.shape[0] * a.shape[1] * b.shape[1]
            row = [macs / 1e6]
            for threads in (1, 2):
                with controller.limit(limits=threads, user_api="blas"):
                    row.append(1e3 * best_time(a, b, args.rounds, args.repeat))
            totals = [t + r for t, r in zip(totals, row)]
            print(f"  {label:22s} {row[0]:7.1f} {row[1]:8.3f} {row[2]:8.3f}")
        print(f"  {'total':22s} {totals[0]:7.1f} {totals[1]:8.3f} {totals[2]:8.3f}   "
              f"rate {totals[0] / totals[1]:.1f} / {totals[0] / totals[2]:.1f} G MAC/s")
    pairs(args.rounds, args.repeat)
    print(f"\nload average at end: {os.getloadavg()}")


def pairs(rounds, repeat):
    from asyncflow.exec.intra_op import claim_blas, shared_pool
    from asyncflow.kernels.intra_op import chunk_bounds
    claim_blas()
    pool = shared_pool(2)
    print("\nbackward pairs (dW, dx) on the intra-op pool of 2: ms per pair, "
          "sequential / each split / paired")
    for model in LAYERS:
        steps = gemms(model)
        for (label_w, a_w, b_w), (label_x, a_x, b_x) in zip(steps, steps[1:]):
            if not (label_w.startswith("dW") and label_x.startswith("dx")):
                continue
            out_w = np.empty((a_w.shape[0], b_w.shape[1]), np.float32)
            out_x = np.empty((a_x.shape[0], b_x.shape[1]), np.float32)

            def sequential():
                np.matmul(a_w, b_w, out=out_w)
                np.matmul(a_x, b_x, out=out_x)

            def split_each():
                for a, b, out in ((a_w, b_w, out_w), (a_x, b_x, out_x)):
                    pool.run(lambda s, e, a=a, b=b, out=out: np.matmul(a[s:e], b, out=out[s:e]),
                             chunk_bounds(a.shape[0], 2))

            def paired():
                pool.run(lambda i, _: np.matmul(a_w, b_w, out=out_w) if i == 0
                         else np.matmul(a_x, b_x, out=out_x), [(0, 1), (1, 2)])
            row = [best_ms(fn, rounds, repeat) for fn in (sequential, split_each, paired)]
            print(f"  {model:12s} {label_w:20s} + {label_x:20s} "
                  + " ".join(f"{ms:7.3f}" for ms in row))


if __name__ == "__main__":
    main()
