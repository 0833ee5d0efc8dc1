"""The same-host fast path against loopback TCP: one server process, one client, same run.

The server (``transports.http.server``, a minimal handler) listens on 127.0.0.1 and, as every
loopback worker server does, on its same-host Unix socket (``transports.http.same_host``). The
client alternates, round by round, a channel forced onto TCP (``same_host=False``) and the
default one (which takes the Unix socket), so both see the same machine load, and measures:

* rtt: one Health call, median us;
* pull: a 64 MiB float32 tensor fetched in a RunGraph reply (server -> client), MiB/s;
* push: the same tensor sent as a RunGraph feed (client -> server), MiB/s.

Ratios are Unix / TCP (above 1 is faster for MiB/s, below 1 for rtt).

Run: ``.venv/bin/python bench/bench_same_host.py [--rounds 3] [--quick]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import trio  # noqa: E402

from transports.http.client import TrioHttpChannel  # noqa: E402
from transports.http.server import open_http_server  # noqa: E402
from transports.messages import HealthReply, RunGraph, RunGraphReply, TensorEntry  # noqa: E402

MIB = 1 << 20
BIG = np.ones(16 * MIB, np.float32)  # 64 MiB


class _Service:
    async def health(self, request):
        return HealthReply(1, "/job:bench/replica:0/task:0", [])

    async def run_graph(self, request):
        return RunGraphReply([TensorEntry("big", BIG)] if request.fetch_keys else [])


def _serve(port_queue):
    async def main():
        async with open_http_server(_Service()) as server:
            port_queue.put(server.port)
            await trio.sleep_forever()
    trio.run(main)


async def _measure(address, same_host, repeats):
    async with TrioHttpChannel(address, same_host=same_host) as channel:
        await channel.health()
        rtts = []
        for _ in range(repeats * 20):
            start = time.perf_counter()
            await channel.health()
            rtts.append(time.perf_counter() - start)
        pulls, pushes = [], []
        for request_id in range(repeats):
            start = time.perf_counter()
            reply = await channel.run_graph(RunGraph("g", 1, [], ["big"], request_id=1))
            pulls.append(time.perf_counter() - start)
            assert reply.tensors[0].value.nbytes == BIG.nbytes
            start = time.perf_counter()
            await channel.run_graph(RunGraph("g", 1, [TensorEntry("x", BIG)], [], request_id=1))
            pushes.append(time.perf_counter() - start)
        family = channel._idle[0].stream.socket.family.name
    mib = BIG.nbytes / MIB
    return {"rtt_us": statistics.median(rtts) * 1e6, "pull_mib_s": mib / statistics.median(pulls),
            "push_mib_s": mib / statistics.median(pushes), "socket": family}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer repeats per round")
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    server = context.Process(target=_serve, args=(queue,), daemon=True)
    server.start()
    try:
        address = f"127.0.0.1:{queue.get(timeout=60)}"
        repeats = 3 if args.quick else 7
        rows = []
        for round_index in range(args.rounds):
            tcp = trio.run(_measure, address, False, repeats)
            unix = trio.run(_measure, address, None, repeats)
            rows.append((tcp, unix))
            print(f"round {round_index + 1}: " + "  ".join(
                f"{key} tcp {tcp[key]:,.1f} unix {unix[key]:,.1f} ({unix[key] / tcp[key]:.2f}x)"
                for key in ("rtt_us", "pull_mib_s", "push_mib_s"))
                + f"  [{tcp['socket']} / {unix['socket']}]", flush=True)
        print("summary (median over rounds; ratio unix/tcp [min-max]):")
        for key in ("rtt_us", "pull_mib_s", "push_mib_s"):
            ratios = [u[key] / t[key] for t, u in rows]
            print(f"  {key:<11} tcp {statistics.median(t[key] for t, _ in rows):>10,.1f}  "
                  f"unix {statistics.median(u[key] for _, u in rows):>10,.1f}  ratio "
                  f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
    finally:
        server.kill()
        server.join(5)


if __name__ == "__main__":
    main()
