"""Benchmark: what the array fuzz's fixes and the cumprod gradient cost in the hot path.

Kernels called directly (no executor), in microseconds per call, the median of ``--repeats``
loops: Reshape of a (64, 128) float32 to [-1, 128] and to [0, -1] of an empty tensor, Range of
1000, TopKV2 (k=5) and InTopKV2 (k=5) of a (256, 1000) float32. Through a session, in
milliseconds per run: the gradient of ``reduce_sum(cumprod(x, axis=1))`` for a (512, 1024)
float32 variable x with no zeros, and ``gather_nd(params, indices, batch_dims=1)`` (params
a (64, 256, 32) variable, indices (64, 128, 1)) and its gradient, against one GatherNd given
the same tuples with the batch number in place (what a direct kernel would cost).
Every measurement runs in a fresh subprocess; ``--against OTHER_PYTHONPATH`` also measures
another checkout (before the fixes), interleaved with this one, and prints the ratio.

Run: ``python bench/bench_array_fixes.py [--repeats R] [--against PYTHONPATH]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

KERNELS = ("reshape", "reshape_empty", "range", "top_k", "in_top_k")
GRAPHS = ("cumprod_grad", "gather_nd_batch", "gather_nd_batch_grad", "full_tuples_floor")


def _kernel_case(kind):
    import types

    import numpy as np

    import asyncflow  # noqa: F401  (registers the kernels)
    from asyncflow import dtypes
    from asyncflow.kernels.registry import get_kernel
    rng = np.random.default_rng(0)
    ctx = types.SimpleNamespace(xp=np, attrs={}, name=kind, output_dtypes=[np.int32])
    if kind == "reshape":
        return get_kernel("Reshape", "CPU").fn, ctx, (rng.random((64, 128), np.float32),
                                                       np.array([-1, 128], np.int32))
    if kind == "reshape_empty":
        return get_kernel("Reshape", "CPU").fn, ctx, (np.zeros((0, 3), np.float32),
                                                       np.array([0, -1], np.int32))
    if kind == "range":
        ctx.output_dtypes = [dtypes.int32.np]
        return get_kernel("Range", "CPU").fn, ctx, (np.int32(0), np.int32(1000), np.int32(1))
    preds = rng.random((256, 1000)).astype(np.float32)
    ctx.attrs = {"k": 5}
    if kind == "top_k":
        return get_kernel("TopKV2", "CPU").fn, ctx, (preds,)
    targets = rng.integers(0, 1000, 256).astype(np.int32)
    return get_kernel("InTopKV2", "CPU").fn, ctx, (preds, targets)


def _graph_case(kind):
    import numpy as np

    import asyncflow.compat.v1 as af
    rng = np.random.default_rng(0)
    if kind == "cumprod_grad":
        x = af.Variable(rng.uniform(0.5, 1.5, (512, 1024)).astype(np.float32))
        return af.gradients(af.reduce_sum(af.cumprod(x, axis=1)), [x])[0]
    params = af.Variable(rng.random((64, 256, 32)).astype(np.float32))  # not folded
    indices = rng.integers(0, 256, (64, 128, 1)).astype(np.int32)
    if kind == "full_tuples_floor":  # one GatherNd with the batch number already in place
        rows = np.broadcast_to(np.arange(64, dtype=np.int32)[:, None, None], (64, 128, 1))
        return af.gather_nd(params, np.concatenate([rows, indices], axis=2))
    out = af.gather_nd(params, indices, batch_dims=1)
    if kind == "gather_nd_batch":
        return out
    return af.gradients(af.reduce_sum(out), [params])[0]


def _child(kind, loops, repeats):
    if kind in KERNELS:
        fn, ctx, args = _kernel_case(kind)
        fn(ctx, *args)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(loops):
                fn(ctx, *args)
            times.append((time.perf_counter() - start) / loops * 1e6)
        return statistics.median(times)
    import asyncflow as af
    import asyncflow.compat.v1 as tf
    with af.Graph().as_default():
        fetch = _graph_case(kind)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            session.run(fetch)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                for _ in range(max(1, loops // 100)):
                    session.run(fetch)
                times.append((time.perf_counter() - start) / max(1, loops // 100) * 1e3)
    return statistics.median(times)


def _measure(kind, pythonpath, loops, repeats):
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run([sys.executable, __file__, "--child", kind, "--loops", str(loops),
                           "--repeats", str(repeats)], capture_output=True, text=True, env=env,
                          timeout=300)
    if done.returncode:
        return None  # this checkout cannot build it (gather_nd with batch_dims before the fix)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--against", default=None)
    parser.add_argument("--child", default=None)
    parser.add_argument("--only", default=None, help="comma-separated kinds")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.loops, args.repeats)))
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    kinds = args.only.split(",") if args.only else KERNELS + GRAPHS
    for kind in kinds:
        unit = "us/call" if kind in KERNELS else "ms/run"
        ours = _measure(kind, here, args.loops, args.repeats)
        line = f"{kind:22s} this tree {ours:10.2f} {unit}" if ours is not None else kind
        if args.against:
            theirs = _measure(kind, args.against, args.loops, args.repeats)
            if theirs is None:
                line += "   other tree: cannot build it"
            else:
                line += f"   other tree {theirs:10.2f} {unit}   ratio {ours / theirs:.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
