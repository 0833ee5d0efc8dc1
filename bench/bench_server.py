"""The worker's HTTP server alone: Health round trip, trivial step, 64 MiB fetch, CPU per request.

One ``asyncflow worker`` process on loopback; this process is the client (the trio client,
``TrioHttpChannel``, as asyncflow's master uses it). Measured per round:

* **health**: ``GET /v1/health`` round trips, one at a time on a keep-alive connection:
  median wall time, and the worker's CPU time per request (user + system from
  ``/proc/<pid>/stat`` over the whole batch: robust to a loaded machine, where wall time is
  mostly waiting for a core).
* **trivial**: ``Session.run`` of ``p * 2.0`` on the worker from a fed scalar (one RunGraph):
  median wall time and worker CPU per step.
* **fetch**: ``Session.run`` of a 64 MiB float32 variable living on the worker: the server
  sends it as the RunGraph reply and the client ``recv_into``s it. MiB/s = 64 MiB / (median
  fetch step - median trivial step), next to a raw loopback socket moving 64 MiB between two
  processes (``sendall``/``recv_into``, ``raw_socket.py``) in the same round; and the worker's
  CPU per fetch (reading the variable, encoding, the kernel's copy into the socket).

``--tree DIR`` (repeatable) runs the worker from another checkout of the project (its
``asyncflow`` and ``transports`` on ``PYTHONPATH``; the client stays this one), so an older
server and this one can be measured alternately, round by round, on the same machine load.

Run: ``.venv/bin/python bench/bench_server.py [--rounds 3] [--tree OLD_CHECKOUT --tree .]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402
import trio  # noqa: E402

import asyncflow as af  # noqa: E402
from raw_socket import raw_socket_mib_s  # noqa: E402
from transports.http.client import TrioHttpChannel  # noqa: E402

MIB = 1 << 20
BIG = 64 * MIB
TASK = "/job:worker/replica:0/task:0"
_TICK = os.sysconf("SC_CLK_TCK")


def start_worker(tree):
    """An ``asyncflow worker`` from checkout ``tree``; returns (process, address)."""
    env = dict(os.environ, PYTHONPATH=tree, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "asyncflow", "worker", "--cluster",
         json.dumps({"worker": ["127.0.0.1:0"]}), "--job", "worker", "--task", "0",
         "--port", "0", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=tree)
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if " listening on " in line:
            return proc, line.rsplit(" ", 1)[1].strip()
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"the worker from {tree} did not start")


def cpu_seconds(pid):
    """User + system CPU seconds of process ``pid`` (all its threads)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


async def measure(pid, address, health_calls, steps):
    """One round against the worker at ``address``: a dict of figures."""
    out = {}
    async with TrioHttpChannel(address) as channel:
        for _ in range(20):
            await channel.health()
        times, cpu = [], cpu_seconds(pid)
        for _ in range(health_calls):
            start = time.perf_counter()
            await channel.health()
            times.append(time.perf_counter() - start)
        out["health_ms"] = statistics.median(times) * 1e3
        out["health_server_cpu_ms"] = (cpu_seconds(pid) - cpu) / health_calls * 1e3

    graph = af.Graph()
    with graph.as_default(), af.device(TASK):
        p = af.placeholder(af.float32, [])
        doubled = p * 2.0
        big = af.Variable(af.zeros([BIG // 4], af.float32), name="big")
    async with af.Session(graph=graph, cluster={"worker": [address]}) as sess:
        await sess.run(big.initializer)
        for _ in range(10):
            await sess.run(doubled, {p: 1.0})
        times, cpu = [], cpu_seconds(pid)
        for _ in range(steps):
            start = time.perf_counter()
            await sess.run(doubled, {p: 1.0})
            times.append(time.perf_counter() - start)
        out["trivial_ms"] = statistics.median(times) * 1e3
        out["trivial_server_cpu_ms"] = (cpu_seconds(pid) - cpu) / steps * 1e3
        await sess.run(big)
        fetches, cpu = [], cpu_seconds(pid)
        for _ in range(5):
            start = time.perf_counter()
            value = await sess.run(big)
            fetches.append(time.perf_counter() - start)
            del value
        out["fetch_server_cpu_ms"] = (cpu_seconds(pid) - cpu) / len(fetches) * 1e3
        out["fetch_ms"] = statistics.median(fetches) * 1e3
        out["fetch_mib_s"] = 64 / max(1e-6, (out["fetch_ms"] - out["trivial_ms"]) / 1e3)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", default=None,
                        help="checkout whose worker to measure (repeatable; default: this one)")
    parser.add_argument("--health-calls", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    trees = [os.path.abspath(tree) for tree in (args.tree or [_ROOT])]
    results = {tree: [] for tree in trees}
    for round_index in range(args.rounds):
        raw = raw_socket_mib_s(BIG, 5)
        for tree in trees:
            proc, address = start_worker(tree)
            try:
                figures = trio.run(measure, proc.pid, address, args.health_calls, args.steps)
            finally:
                proc.kill()
                proc.wait()
            figures["raw_mib_s"] = raw
            figures["fetch_over_raw"] = figures["fetch_mib_s"] / raw
            results[tree].append(figures)
            print(json.dumps({"round": round_index, "tree": tree,
                              **{k: round(v, 3) for k, v in figures.items()}}), flush=True)
    print("\nmedian [min-max] over rounds")
    for tree, rounds in results.items():
        print(tree)
        for key in rounds[0]:
            values = [r[key] for r in rounds]
            print(f"  {key:24s} {statistics.median(values):9.3f} "
                  f"[{min(values):.3f}-{max(values):.3f}]")


if __name__ == "__main__":
    main()
