"""numpy's GEMM (its OpenBLAS) against MKL's (kernels/blas.py) on the GEMMs the models' steps run.

Each product is one the convnet, the autoencoder or the MLP of bench/bench_models.py calls
(forward and both gradients, their operands' layouts as the kernels get them: ``T`` a
transposed view, passed to BLAS as it is). One thread (threadpoolctl holds numpy's BLAS at
one, as the intra-op pool does; MKL runs on its sequential layer), hot operands, float32; the
two forms alternate in one process, ``--pairs`` times, each timing the best of ``--repeats``
loops; the figure is MKL's time over numpy's per pair, its median and range.

``--models convnet,autoencoder,mlp`` times the models' training steps instead (one session
each, bench_models.py's graphs, the intra-op pool at the cores): rounds of ``--steps`` steps
with ``ASYNCFLOW_BLAS``'s choice (``blas.CHOICE``) auto and numpy alternating in this one
process, ``--pairs`` pairs; per pair the ratio of the two rounds' median steps, wall and
CPU (the process's, both cores).

Run: ``.venv/bin/python bench/bench_blas.py [--pairs 5] [--repeats 5] [--dtype float32]
[--models convnet,autoencoder,mlp --steps 20]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

# (model, m, k, n, a transposed, b transposed): the products of one training step each
SHAPES = [
    ("convnet dense", 128, 3136, 1024, False, False),
    ("convnet dense dx", 128, 1024, 3136, False, True),
    ("convnet dense dW", 3136, 128, 1024, True, False),
    ("convnet conv1 patches", 25088, 25, 32, True, False),
    ("convnet conv1 dW", 25, 25088, 32, False, False),
    ("convnet logits dx", 128, 10, 1024, False, True),
    ("convnet logits", 128, 1024, 10, False, False),
    ("convnet logits dW", 1024, 128, 10, True, False),
    ("ae 784-256", 256, 784, 256, False, False),
    ("ae 784-256 dW", 784, 256, 256, True, False),
    ("ae 256-784", 256, 256, 784, False, False),
    ("ae 256-784 dx", 256, 784, 256, False, True),
    ("ae 256-784 dW", 256, 256, 784, True, False),
    ("ae 256-128", 256, 256, 128, False, False),
    ("ae 256-128 dx", 256, 128, 256, False, True),
    ("ae 256-128 dW", 256, 256, 128, True, False),
    ("mlp 784-256", 128, 784, 256, False, False),
    ("mlp 784-256 dW", 784, 128, 256, True, False),
    ("mlp 256-256", 128, 256, 256, False, False),
    ("mlp 256-256 dx", 128, 256, 256, False, True),
    ("mlp 256-256 dW", 256, 128, 256, True, False),
    ("mlp 256-10", 128, 256, 10, False, False),
    ("mlp 256-10 dx", 128, 10, 256, False, True),
    ("small 64x64x64", 64, 64, 64, False, False),
]


def operand(rng, rows, cols, transposed, dtype):
    if transposed:
        return rng.standard_normal((cols, rows)).astype(dtype).T
    return rng.standard_normal((rows, cols)).astype(dtype)


def best_ms(fn, repeats, macs):
    loops = max(3, min(200, int(2e8 // max(macs, 1))))
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - start) / loops)
    return best * 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--models", default="", help="time these models' steps instead")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_info, threadpool_limits

    from asyncflow.kernels import blas
    if blas.CHOICE == "numpy" or not blas.available():
        print("MKL is not available (pip install '.[mkl]', ASYNCFLOW_BLAS not numpy): nothing "
              "to compare")
        return 1
    if args.models:
        return steps(args, blas)
    rng = np.random.default_rng(0)
    dtype = np.dtype(args.dtype)
    print(f"load average at start: {os.getloadavg()}")
    for info in threadpool_info():
        if info.get("user_api") == "blas":
            print(f"  {info.get('internal_api')} {info.get('version')} "
                  f"{info.get('architecture') or info.get('threading_layer')}")
    print(f"{'product':>22} {'m x k x n':>18}  numpy ms  mkl ms  mkl/numpy median [range]")
    with threadpool_limits(1, user_api="blas"):
        for label, m, k, n, ta, tb in SHAPES:
            a, b = operand(rng, m, k, ta, dtype), operand(rng, k, n, tb, dtype)
            out = np.empty((m, n), dtype)
            ratios, numpy_ms, mkl_ms = [], [], []
            for _ in range(args.pairs):
                numpy_ms.append(best_ms(lambda: np.matmul(a, b, out=out), args.repeats, m * k * n))
                mkl_ms.append(best_ms(lambda: blas.mkl_matmul(a, b, out), args.repeats, m * k * n))
                ratios.append(mkl_ms[-1] / numpy_ms[-1])
            shape = f"{m}{'T' if ta else ''}x{k}x{n}{'T' if tb else ''}"
            print(f"{label:>22} {shape:>18}  {min(numpy_ms):8.3f} {min(mkl_ms):7.3f}  "
                  f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
    print(f"load average at end: {os.getloadavg()}")
    return 0


def steps(args, blas):
    """The models' steps, ``blas.CHOICE`` auto and numpy alternating (see the docstring)."""
    import trio

    import asyncflow as af
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_models

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        if not blas.vendor_measured():  # (auto is numpy's form there: this run is an A/A)
            print(f"  this CPU ({blas.cpu_vendor()}) is outside blas.MKL_VENDORS: auto takes "
                  "numpy's GEMMs here, so auto against numpy is an A/A; to time MKL's table, "
                  "use bench_ab_setting.py --set \"asyncflow.kernels.blas:MKL_VENDORS=(...)\"")
        for model in args.models.split(","):
            graph = af.Graph()
            rng = np.random.default_rng(0)
            with graph.as_default():
                feeds, loss, train = bench_models.build(af, model,
                                                        bench_models.weights(model, rng))
                init = af.global_variables_initializer()
            async with af.Session(graph=graph) as session:
                await session.run(init)
                feed = dict(zip(feeds, bench_models.data(model, rng)))
                medians = {"auto": [], "numpy": []}
                cpus = {"auto": [], "numpy": []}
                for pair in range(args.pairs):
                    for choice in (("auto", "numpy") if pair % 2 == 0 else ("numpy", "auto")):
                        blas.CHOICE = choice
                        for _ in range(2):
                            await session.run([loss, train], feed)
                        walls, cpu = [], []
                        for _ in range(args.steps):
                            start, used = time.perf_counter(), time.process_time()
                            await session.run([loss, train], feed)
                            walls.append(time.perf_counter() - start)
                            cpu.append(time.process_time() - used)
                        medians[choice].append(statistics.median(walls) * 1e3)
                        cpus[choice].append(statistics.median(cpu) * 1e3)
                ratios = [a / b for a, b in zip(medians["auto"], medians["numpy"])]
                print(f"{model:>12}: auto ({blas.name()}) {min(medians['auto']):7.2f} ms, numpy "
                      f"{min(medians['numpy']):7.2f} ms (best medians); auto/numpy per pair "
                      + " ".join(f"{r:.3f}" for r in ratios)
                      + f"; median {statistics.median(ratios):.3f}")
                cpu_ratios = [a / b for a, b in zip(cpus["auto"], cpus["numpy"])]
                print(f"{'':>12}  CPU a step: auto {statistics.median(cpus['auto']):7.2f} ms, "
                      f"numpy {statistics.median(cpus['numpy']):7.2f} ms (medians); auto/numpy "
                      "per pair " + " ".join(f"{r:.3f}" for r in cpu_ratios)
                      + f"; median {statistics.median(cpu_ratios):.3f}")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
