"""How long a MatMul holds the event loop inline, and what an offload costs instead (issue 37).

A GEMM whose cost (multiply-adds) is under its offload threshold (``plan.OFFLOAD_COST`` times
its kernel's ``offload_scale``) runs on the event loop's thread, splitting over the intra-op
pool from there; above it, on a worker thread while the loop is free. A synchronous step
holds its loop for its whole duration, so an inline GEMM holds it for at least its kernel
time. For GEMM sizes around the threshold, in one process, this measures (median of
``--steps`` steps, best of ``--rounds``):

* ``kernel``: the MatMul's own time (the tracer's), inline, split over the device's intra-op
  threads (the cores), and on one intra-op thread (what it costs when the other cores are
  taken: the split's caller then computes every chunk itself);
* ``step``: a step feeding the left operand and fetching a sum of the product, with the
  GEMM forced inline and forced onto a worker thread (``plan.OFFLOAD_COST`` set for that
  session), so their difference is what one offload round trip costs at that size.

The executor's time slice (``exec/timeslice.py``, 1 ms) bounds the kernels run between two
checkpoints; one kernel longer than a slice holds the loop for its whole duration.

Run: ``.venv/bin/python bench/bench_inline_gemm.py [--steps 100] [--rounds 3]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import trio

import asyncflow as af
from asyncflow.kernels import intra_op
from asyncflow.exec import plan

# (rows, inner, cols): the MLP's and the autoencoder's GEMMs and a sweep past the threshold.
SHAPES = [(128, 256, 256), (128, 784, 256), (256, 784, 256), (384, 784, 256),
          (512, 784, 256), (768, 784, 256)]
FORMS = ("inline", "inline-1-thread", "offload")


async def measure(shape, steps, form):
    rows, inner, cols = shape
    rng = np.random.default_rng(0)
    a_value = rng.random((rows, inner), dtype=np.float32)
    b_value = rng.random((inner, cols), dtype=np.float32)
    graph = af.Graph()
    with graph.as_default():
        a = af.placeholder(af.float32, [None, inner])
        out = af.reduce_sum(af.matmul(a, af.constant(b_value)))
    config = af.ConfigProto(intra_op_parallelism_threads=1 if form == "inline-1-thread" else 0)
    saved = plan.OFFLOAD_COST
    plan.OFFLOAD_COST = 0 if form == "offload" else 1 << 62
    try:
        async with af.Session(graph=graph, config=config) as session:
            feed = {a: a_value}
            for _ in range(5):
                await session.run(out, feed)
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                await session.run(out, feed)
                times.append(time.perf_counter() - start)
            kernel = []
            for _ in range(20):
                metadata = af.RunMetadata()
                await session.run(out, feed, options=af.RunOptions(
                    trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
                kernel += [(n.end_us - n.start_us) / 1e3 for n in metadata.step_stats
                           if n.op_type == "MatMul"]
    finally:
        plan.OFFLOAD_COST = saved
    return {"step_ms": 1e3 * statistics.median(times), "kernel_ms": statistics.median(kernel)}


async def main(args):
    threshold = plan.OFFLOAD_COST * intra_op.MACS_PER_WORK
    print(f"load average at start: {os.getloadavg()}; GEMM offload threshold "
          f"{threshold / 1e6:.1f} M multiply-adds; intra-op threads {os.cpu_count()}")
    best = {}
    for _ in range(args.rounds):
        for shape in SHAPES:
            for form in FORMS:
                result = await measure(shape, args.steps, form)
                for key, value in result.items():
                    cell = (shape, form, key)
                    best[cell] = min(best.get(cell, value), value)
    print(f"load average at end: {os.getloadavg()}")
    print("| GEMM (rows x inner x cols) | M MACs | shipped | kernel ms, split | kernel ms, "
          "1 thread | step ms inline | step ms offloaded | offload's cost ms |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in SHAPES:
        macs = shape[0] * shape[1] * shape[2]
        inline, offload = best[(shape, "inline", "step_ms")], best[(shape, "offload", "step_ms")]
        print(f"| {shape[0]} x {shape[1]} x {shape[2]} | {macs / 1e6:.1f} | "
              f"{'offloaded' if macs >= threshold else 'inline'} | "
              f"{best[(shape, 'inline', 'kernel_ms')]:.3f} | "
              f"{best[(shape, 'inline-1-thread', 'kernel_ms')]:.3f} | {inline:.3f} | "
              f"{offload:.3f} | {offload - inline:+.3f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    trio.run(main, parser.parse_args())
