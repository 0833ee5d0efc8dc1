"""Tensors of 64 KiB-4 MiB cost their wire time, not a fixed stall (issue 15's guard, as a bench).

The signature this looks for: a step whose feed, fetch or worker-to-worker pull crosses a size
threshold (one loopback segment, a socket or stream buffer, a write-drain limit) waits for a
delayed ACK or a timer, ~40 ms, on top of moving the bytes. One ps and one worker process on
loopback (``asyncflow worker``); one graph with three paths, each timed for a 1 KiB tensor and
for 64 KiB, 256 KiB, 1 MiB and 4 MiB:

* **feed**: the client's array rides in the worker's RunGraph (client -> worker);
* **fetch**: the worker returns an array of the same size (worker -> client);
* **pull**: the array is fed to the ps and read by the worker (ps -> worker RecvTensors).

Every figure is the minimum over several steps (a stall on the path shows in every step; load
does not), the big-tensor step is reported as its excess over the same path's 1 KiB step, and
that excess is set against a raw loopback socket moving the same bytes between two processes,
measured in the same run. A stall shows as an excess of 40 ms or more at every size, however
small the tensor; the ``stall?`` column flags an excess above 35 ms.

This was a timed assertion in the test suite; the suite keeps the check that the values
arrive whole (``tests/cluster/test_transfer_size.py``), and the timing lives here.

Run: ``.venv/bin/python bench/bench_transfer_sizes.py [--steps 7]``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, ".."))
sys.path.insert(0, os.path.join(_HERE, "..", "demos"))

import numpy as np  # noqa: E402
import trio  # noqa: E402

import asyncflow as af  # noqa: E402
from local_cluster import local_cluster  # noqa: E402
from raw_socket import raw_socket_mib_s  # noqa: E402

SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20]
SMALL = 1 << 10
STALL_S = 0.035
TIMEOUT = af.RunOptions(timeout_in_ms=60000)


def _graph():
    graph = af.Graph()
    with graph.as_default():
        x = af.placeholder(af.float32, [None], name="x")
        with af.device("/job:ps/task:0"):
            on_ps = af.identity(x, name="on_ps")
        with af.device("/job:worker/task:0"):
            fed = af.reduce_sum(x, name="fed")
            echoed = af.identity(x * 1.0, name="echo")
            pulled = af.reduce_sum(on_ps, name="pulled")
    return graph, x, {"feed": fed, "fetch": echoed, "pull": pulled}


async def _best_step(sess, fetch, x, value, steps):
    await sess.run(fetch, {x: value}, options=TIMEOUT)  # compile, register, warm the path
    best = float("inf")
    for _ in range(steps):
        start = time.perf_counter()
        await sess.run(fetch, {x: value}, options=TIMEOUT)
        best = min(best, time.perf_counter() - start)
    return best


async def measure(spec, steps):
    graph, x, paths = _graph()
    rows = []
    async with af.Session(graph=graph, cluster=spec) as sess:
        for path, fetch in paths.items():
            small = await _best_step(sess, fetch, x, np.ones(SMALL // 4, np.float32), steps)
            for size in SIZES:
                big = await _best_step(sess, fetch, x, np.ones(size // 4, np.float32), steps)
                rows.append((path, size, small, big))
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=7)
    args = parser.parse_args()
    wire_s = {size: size / (raw_socket_mib_s(size, 5) * (1 << 20)) for size in SIZES}
    with local_cluster({"ps": 1, "worker": 1}) as spec:
        rows = trio.run(measure, spec, args.steps)
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'path':<6} {'size':>8} {'1 KiB step ms':>14} {'step ms':>9} {'excess ms':>10} "
          f"{'raw wire ms':>12} {'excess / wire':>14}  stall?")
    for path, size, small, big in rows:
        excess = big - small
        print(f"{path:<6} {size >> 10:>6}Ki {small * 1e3:>14.2f} {big * 1e3:>9.2f} "
              f"{excess * 1e3:>10.2f} {wire_s[size] * 1e3:>12.2f} "
              f"{excess / wire_s[size]:>14.1f}  {'STALL' if excess > STALL_S else 'no'}")


if __name__ == "__main__":
    main()
