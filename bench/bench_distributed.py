"""Distributed runtime benchmarks: worker processes started through the CLI on loopback.

Measured in one run, each with its baseline:

* **64 MiB between two workers**: a 64 MiB float32 variable on worker 0 is read by a
  ``reduce_sum`` on worker 1 (one Recv pull of 64 MiB). The transfer's share is the step time
  minus the same step with a 4-element variable and minus the local reduce. Baseline: a raw
  loopback TCP socket between two processes moving the same bytes (``sendall`` /
  ``recv_into`` a preallocated buffer), measured here too. Peak RSS rise of both workers
  (from their Health stats) is reported.
* **4 KiB round trip**: a RunGraph whose 4 KiB feed is fetched back by an Identity (one
  worker, one request and reply), next to the bare channel Health round trip.
* **Step overhead** for a trivial graph: local Session baseline; one worker (one RunGraph);
  two workers without a crossing edge (RunGraph fan-out); two workers with one crossing edge
  (fan-out plus one Recv pull); and the first run of a signature (compile + RegisterGraph).

Run: ``.venv/bin/python bench/bench_distributed.py [--quick]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, ".."))
sys.path.insert(0, os.path.join(_HERE, "..", "demos"))

import numpy as np  # noqa: E402
import trio  # noqa: E402

import asyncflow as af  # noqa: E402
from asyncflow.cluster import channels  # noqa: E402
from local_cluster import local_cluster  # noqa: E402  (worker processes, one BLAS thread each)
from raw_socket import raw_socket_mib_s  # noqa: E402  (the loopback baseline)

MIB = 1 << 20


# -- distributed measurements -----------------------------------------------------------
async def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def measure(spec, quick):
    repeats = 20 if quick else 100
    big_rounds = 3 if quick else 7
    out = {}
    cluster = af.ClusterSpec(spec)
    w0, w1 = "/job:worker/task:0", "/job:worker/task:1"
    graph = af.Graph()
    with graph.as_default():
        with af.device(w0):
            big = af.Variable(af.zeros([16 * MIB], af.float32), name="big")
            small = af.Variable(af.zeros([4], af.float32), name="small")
            x = af.placeholder(af.float32, [1024], name="x")
            echo = af.identity(x)
            c0 = af.constant(1.0) + 1.0
        with af.device(w1):
            big_sum = af.reduce_sum(big)
            small_sum = af.reduce_sum(small)
            c1 = af.constant(2.0) + 1.0
            crossed = c0 + 1.0
    local_graph = af.Graph()
    with local_graph.as_default():
        local_c = af.constant(1.0) + 1.0
        local_big = af.Variable(af.zeros([16 * MIB], af.float32))
        local_big_sum = af.reduce_sum(local_big)
    async with af.Session(graph=local_graph) as local:
        await local.run(local_c)
        out["local_step_us"] = await timed(lambda: local.run(local_c), repeats) * 1e6
        await local.run(local_big.initializer)
        local_reduce = await timed(lambda: local.run(local_big_sum), big_rounds)
    async with af.Session(graph=graph, cluster=cluster) as sess:
        start = time.perf_counter()
        await sess.run(c0)
        out["first_run_register_us"] = (time.perf_counter() - start) * 1e6
        out["one_worker_step_us"] = await timed(lambda: sess.run(c0), repeats) * 1e6
        await sess.run([c0, c1])
        out["fanout_step_us"] = await timed(lambda: sess.run([c0, c1]), repeats) * 1e6
        await sess.run(crossed)
        out["crossing_step_us"] = await timed(lambda: sess.run(crossed), repeats) * 1e6
        feed = np.ones(1024, np.float32)
        await sess.run(echo, {x: feed})
        out["rtt_4k_rungraph_us"] = await timed(lambda: sess.run(echo, {x: feed}),
                                                repeats) * 1e6
        probe = channels.connect(spec["worker"][0])
        out["rtt_health_us"] = await timed(lambda: probe.health(), repeats) * 1e6
        await sess.run([big.initializer, small.initializer])
        await sess.run(small_sum)
        small_step = await timed(lambda: sess.run(small_sum), repeats)
        rss0 = [(await channels.connect(a).health()).stats.max_rss_mib
                for a in spec["worker"]]
        await sess.run(big_sum)
        big_step = await timed(lambda: sess.run(big_sum), big_rounds)
        rss1 = [(await channels.connect(a).health()).stats.max_rss_mib
                for a in spec["worker"]]
        transfer = max(big_step - small_step - local_reduce, 1e-9)
        out["big_step_ms"] = big_step * 1e3
        out["big_local_reduce_ms"] = local_reduce * 1e3
        out["big_transfer_mib_s"] = 64 / transfer
        out["rss_rise_mib"] = [None if a is None else b - a for a, b in zip(rss0, rss1)]
        out["worker1_pull_requests"] = (await channels.connect(spec["worker"][1]).health()
                                        ).stats.pull_requests
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with local_cluster({"worker": 2}) as spec:
        results = trio.run(measure, spec, args.quick)
    results["raw_socket_mib_s"] = raw_socket_mib_s(64 * MIB, 3 if args.quick else 7)
    results["transfer_vs_raw"] = results["big_transfer_mib_s"] / results["raw_socket_mib_s"]
    width = max(map(len, results))
    for key, value in results.items():
        text = f"{value:,.1f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {text}")


if __name__ == "__main__":
    main()
