"""Benchmark: per-iteration cost of a trivial while loop vs one op of the static chain.

Builds ``i = i + 1`` looped 10,000 times (``af.while_loop``) and the foundation chain (1000
``x = x + 1`` ops on a 1-element float32 placeholder), runs both in this process, and prints
the per-iteration cost of the loop, the per-op cost of the chain and their ratio (target:
<= 15x); the same loop on the general (dynamic) frame path is shown for comparison. CPU time (``time.process_time``) is reported next to wall time because a loaded
machine steals wall time unevenly. Memory: the loop's executor statistics (live iterations)
and tracemalloc's peak for 1,000 vs 10,000 iterations (flat means independent of the count).

Run: ``python bench/bench_while.py [--iterations N] [--repeats R]``.
"""
from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
import trio

import asyncflow as af
from asyncflow.exec import dispatch


def build_loop(iterations):
    graph = af.Graph()
    with graph.as_default():
        result = af.while_loop(lambda i: i < iterations, lambda i: i + 1, [af.constant(0)])
    return graph, result


def build_chain(length=1000):
    graph = af.Graph()
    with graph.as_default():
        x0 = af.placeholder(af.float32, [1])
        x = x0
        for _ in range(length):
            x = x + 1
    return graph, x0, x


async def best_of(run, repeats):
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        await run()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu


async def loop_peak_bytes(iterations):
    graph, result = build_loop(iterations)
    async with af.Session(graph=graph) as sess:
        await sess.run(result)
        tracemalloc.start()
        try:
            await sess.run(result)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()


async def main(iterations, repeats):
    # (imported here: ``bench_issue18`` imports this module against older trees, which lack it)
    from asyncflow.exec.step import Step
    loop_graph, loop_result = build_loop(iterations)
    chain_graph, x0, chain = build_chain()
    feed = {x0: np.zeros(1, np.float32)}
    dynamic = af.SessionConfig(compile_loops=False)  # the general frame path, for comparison
    async with af.Session(graph=loop_graph) as loop_sess, \
            af.Session(graph=loop_graph, config=dynamic) as dyn_sess, \
            af.Session(graph=chain_graph) as chain_sess:
        assert await loop_sess.run(loop_result) == iterations
        assert await dyn_sess.run(loop_result) == iterations
        await chain_sess.run(chain, feed)
        chain_wall, chain_cpu = await best_of(lambda: chain_sess.run(chain, feed), repeats * 10)
        loop_wall, loop_cpu = await best_of(lambda: loop_sess.run(loop_result), repeats)
        dyn_wall, dyn_cpu = await best_of(lambda: dyn_sess.run(loop_result), repeats)
        compiled = loop_sess.prepare(loop_result).compiled
        step = Step(1)
        await dispatch.run_plan(compiled.plans[0], [], step)
    stats = step.extras["frame_statistics"]
    per_op = chain_cpu / 1000 * 1e6
    per_iter = loop_cpu / iterations * 1e6
    print(f"chain op:       {chain_wall / 1000 * 1e6:7.2f} us wall  {per_op:7.2f} us cpu")
    print(f"loop iteration: {loop_wall / iterations * 1e6:7.2f} us wall  {per_iter:7.2f} us cpu"
          f"  ({stats.nodes_run + stats.nodes_dead} nodes, {iterations} iterations)")
    print(f"ratio (cpu):    {per_iter / per_op:7.1f}x   (target <= 15x)")
    print(f"ratio (wall):   {(loop_wall / iterations) / (chain_wall / 1000):7.1f}x")
    print(f"dynamic frame path (loops with conds, async kernels or nested loops): "
          f"{dyn_cpu / iterations * 1e6:.2f} us cpu per iteration, "
          f"{dyn_cpu / iterations * 1e6 / per_op:.1f}x")
    print(f"live iterations at most: {stats.max_live_iterations} (root included)")
    small, large = await loop_peak_bytes(iterations // 10), await loop_peak_bytes(iterations)
    print(f"tracemalloc peak: {small / 1024:.0f} KiB for {iterations // 10} iterations, "
          f"{large / 1024:.0f} KiB for {iterations}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    trio.run(main, args.iterations, args.repeats)
