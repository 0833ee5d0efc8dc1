"""What watching a cluster costs a training step: the status page's polls against none.

A ps and a worker as ``asyncflow worker`` processes on loopback; the client runs a ps training
step (a 256x256 dense layer and its SGD update on the ps, forward/backward on the worker,
batch 64) in rounds of ``--steps`` steps. Rounds alternate, in one run:

* **nobody looks** (the baseline): no status request at all, so no step is traced;
* **page**: a viewer polls ``GET /status/api/cluster`` on the worker every 2 s (what the page
  does): the worker gathers both tasks' status, and both trace every 8th step;
* **page x8**: the same every 0.25 s (eight open pages; the view is cached for 1 s, so
  at most one gather a second per worker).

Printed per kind, with its ratio to the baseline of the same run: the median step time
(median of each round's median) and the best round's median (other processes only ever slow
a round down), and the CPU time per step of both worker processes together (from
``/proc/PID/stat``; what serving the status costs them, less disturbed than wall time by other
processes on a loaded machine). The viewer runs in the client's process, so its own cost (HTTP,
JSON parsing) is counted in the wall time too.

Then, with no step running, the workers' CPU per status request: ``--polls`` requests of
``GET /v1/status`` to each task (what a gather asks of every task), and as many of
``GET /status/api/cluster`` to the worker spaced past the view's one-second cache (what one
gather costs the task that serves the page, with its own requests to the others).

Last, in this process, what tracing a step costs (a traced step is one in ``trace_every``
while someone watches): the same training graph on a local Session, steps with
``RunOptions(trace_level=FULL_TRACE)`` against steps without, alternating.

Run: ``.venv/bin/python bench/bench_status.py [--rounds 7] [--steps 150] [--polls 40]``.
"""
from __future__ import annotations

import argparse
import json
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
from asyncflow.cluster.status import VIEW_TTL_S  # noqa: E402
from local_cluster import local_cluster  # noqa: E402


def build():
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            w = af.Variable(af.random_normal([256, 256], stddev=0.05, seed=1), name="w")
            b = af.Variable(af.zeros([256]), name="b")
        with af.device("/job:worker/task:0"):
            x = af.placeholder(af.float32, [64, 256], name="x")
            y = af.nn.relu(af.matmul(x, w) + b)
            loss = af.reduce_mean(af.square(y))
            train = af.train.GradientDescentOptimizer(0.01).minimize(loss)
    return graph, [w.initializer, b.initializer], x, train


async def _get(address, path):
    host, port = address.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close"
                              "\r\n\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(1 << 16):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:100]
    return json.loads(body)


async def viewer(address, period, polls):
    while True:
        view = await _get(address, "/status/api/cluster")
        polls.append(view)
        await trio.sleep(period)


def cpu_seconds(pids):
    """User + system CPU seconds of processes ``pids`` so far (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


async def measure(spec, rounds, steps):
    graph, inits, x, train = build()
    batch = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    kinds = {"nobody looks": None, "page (2 s)": 2.0, "page x8 (0.25 s)": 0.25}
    results = {kind: [] for kind in kinds}
    cpu = {kind: [] for kind in kinds}
    polls = [await _get(spec["worker"][0], "/status/api/cluster")]
    pids = [row["status"]["pid"] for row in polls[0]["tasks"]]
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(inits)
        for _ in range(20):
            await sess.run(train, feed_dict={x: batch})
        for _ in range(rounds):
            for kind, period in kinds.items():
                if period is None and polls:
                    # A look keeps the workers tracing for VIEW_TTL_S: let it run out, so the
                    # baseline traces nothing.
                    await trio.sleep(VIEW_TTL_S + 0.5)
                async with trio.open_nursery() as nursery:
                    if period is not None:
                        nursery.start_soon(viewer, spec["worker"][0], period, polls)
                        await trio.sleep(0.3)  # the first gather has marked both tasks viewed
                    for _ in range(10):  # warm up again after the pause
                        await sess.run(train, feed_dict={x: batch})
                    times = []
                    cpu_before = cpu_seconds(pids)
                    for _ in range(steps):
                        start = time.perf_counter()
                        await sess.run(train, feed_dict={x: batch})
                        times.append(time.perf_counter() - start)
                    cpu[kind].append((cpu_seconds(pids) - cpu_before) / steps)
                    nursery.cancel_scope.cancel()
                results[kind].append(statistics.median(times))
    traced = polls[-1]["timeline"] if polls else None
    return results, cpu, len(polls), traced


async def request_costs(spec, polls):
    """Workers' CPU seconds per status request, no step running."""
    view = await _get(spec["worker"][0], "/status/api/cluster")
    pids = [row["status"]["pid"] for row in view["tasks"]]
    addresses = [row["address"] for row in view["tasks"]]
    before = cpu_seconds(pids)
    for _ in range(polls):
        for address in addresses:
            await _get(address, "/v1/status")
    per_status = (cpu_seconds(pids) - before) / (polls * len(addresses))
    before = cpu_seconds(pids)
    for _ in range(polls // 4):
        await trio.sleep(1.05)  # past the one-second cache: every request gathers
        await _get(spec["worker"][0], "/status/api/cluster")
    per_gather = (cpu_seconds(pids) - before) / (polls // 4)
    return {"GET /v1/status": per_status, "cluster gather (GET /status/api/cluster)":
            per_gather}


async def trace_cost(rounds=7, steps=100):
    """Median step seconds of a local session, untraced and traced (FULL_TRACE)."""
    graph, inits, x, train = build()
    graph_local = af.Graph()
    with graph_local.as_default():
        af.import_graph_def(graph.as_graph_def(), name="")
    batch = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    full = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE)
    medians = {"untraced": [], "traced": []}
    async with af.Session(graph=graph_local, config=af.SessionConfig(
            allow_soft_placement=True)) as sess:
        await sess.run([init.name for init in inits])
        feed = {"x:0": batch}
        for options in (None, full) * 10:  # warm up both signatures
            await sess.run(train.name, feed_dict=feed, options=options,
                           run_metadata=af.RunMetadata() if options else None)
        for _ in range(rounds):
            for kind, options in (("untraced", None), ("traced", full)):
                times = []
                for _ in range(steps):
                    start = time.perf_counter()
                    await sess.run(train.name, feed_dict=feed, options=options,
                                   run_metadata=af.RunMetadata() if options else None)
                    times.append(time.perf_counter() - start)
                medians[kind].append(statistics.median(times))
    return {kind: statistics.median(values) for kind, values in medians.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--polls", type=int, default=40)
    args = parser.parse_args()
    with local_cluster({"ps": 1, "worker": 1}) as spec:
        results, cpu, polls, traced = trio.run(measure, spec, args.rounds, args.steps)
        requests = trio.run(request_costs, spec, args.polls)
    base = statistics.median(results["nobody looks"])
    cpu_base = statistics.median(cpu["nobody looks"])
    print(f"{args.rounds} alternating rounds of {args.steps} ps training steps; {polls} polls")
    best_base = min(results["nobody looks"])
    print(f"{'kind':<18} {'step ms':>8} {'ratio':>6} {'best ms':>8} {'ratio':>6} "
          f"{'workers CPU ms/step':>20} {'ratio':>6}   per round: step ms / CPU ms")
    for kind, values in results.items():
        median, cpu_median = statistics.median(values), statistics.median(cpu[kind])
        rounds = " ".join(f"{v * 1e3:.2f}/{c * 1e3:.2f}" for v, c in zip(values, cpu[kind]))
        print(f"{kind:<18} {median * 1e3:>8.3f} {median / base:>6.3f} {min(values) * 1e3:>8.3f} "
              f"{min(values) / best_base:>6.3f} {cpu_median * 1e3:>20.3f} "
              f"{cpu_median / cpu_base:>6.3f}   {rounds}")
    for what, value in requests.items():
        print(f"workers' CPU per {what}: {value * 1e3:.2f} ms")
    traced_cost = trio.run(trace_cost)
    print(f"local session, median step: untraced {traced_cost['untraced'] * 1e3:.3f} ms, "
          f"traced {traced_cost['traced'] * 1e3:.3f} ms, ratio "
          f"{traced_cost['traced'] / traced_cost['untraced']:.3f}")
    if traced:
        print(f"the last poll's timeline: step {traced['step_id']}, {len(traced['ops'])} ops on "
              f"{len(traced['devices'])} devices, {len(traced['edges'])} Send->Recv edges")


if __name__ == "__main__":
    main()
