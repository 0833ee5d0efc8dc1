"""Where a 64 MiB pull between two processes on one host spends its time, path by path.

A server process answers RecvTensors with one 64 MiB float32 tensor (the same array every
time, as a ps answers with a variable); this process pulls it through the trio HTTP channel
the workers use, over:

* ``tcp``: loopback TCP;
* ``unix``: the same-host Unix socket, the tensor sent through it (lending off);
* ``lent``: the Unix socket, the tensor copied from the server's memory
  (``transports.http.cross_memory``, what a worker does by default: a segment of 8 MiB or
  more copied off the event loop, in two halves on two threads);
* ``lent-loop``: the same, the copy made on the event loop 1 MiB per call, in one thread
  (``cross_memory.THREAD_BYTES`` raised past the tensor: the path before r34pull);

each with the received array in fresh pages (``fresh``: glibc's default, a 64 MiB array is a
new ``mmap``) or in freed memory kept by ``transports.allocation`` (``kept``, what
``asyncflow worker`` sets). Rounds are interleaved (every variant once per round, the order
reversed every other round), so all see the same load. Reported per variant: MiB/s median
[quartiles], and the CPU milliseconds of each side per pull (this process's
``process_time``, the server's ``/proc`` schedstat), which show where the time goes and which
other programs on a shared machine disturb less than wall time. Checksums are on (the
default): the ``tcp`` and ``unix`` pulls sum both ends, the lent one sums the frame's header.

Run: ``.venv/bin/python bench/bench_pull_paths.py [--rounds N]`` (Linux; about 25 s).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, ".."))

import trio  # noqa: E402

from transports import allocation, wire  # noqa: E402
from transports.http import cross_memory  # noqa: E402
from transports.http.client import TrioHttpChannel  # noqa: E402
from transports.http.server import open_http_server  # noqa: E402

from bench_wire_checksum import BIG, MIB, PullWorker, cpu_ns  # noqa: E402  (the same server)

_DEFAULT_THRESHOLD = 128 * 1024  # glibc's initial mmap and trim thresholds


def server(ports) -> None:
    async def main() -> None:
        async with open_http_server(PullWorker()) as running:
            ports.put(running.port)
            await trio.sleep_forever()
    trio.run(main)


def _memory(kind: str) -> None:
    """Received arrays in fresh pages (glibc's defaults) or in kept freed memory."""
    mallopt = allocation._mallopt()
    if kind == "kept":
        allocation.keep_freed_memory(256 * MIB)
    else:  # back to an mmap per large array, freed memory trimmed
        mallopt(-1, _DEFAULT_THRESHOLD)
        mallopt(-3, _DEFAULT_THRESHOLD)


async def _pulls(port: int, pid: int, rounds: int) -> dict:
    channels = {"tcp": TrioHttpChannel(f"127.0.0.1:{port}", same_host=False),
                "unix": TrioHttpChannel(f"127.0.0.1:{port}"),
                "lent": TrioHttpChannel(f"127.0.0.1:{port}"),
                "lent-loop": TrioHttpChannel(f"127.0.0.1:{port}")}
    threads_from = cross_memory.THREAD_BYTES
    channels["unix"]._lend = False  # the tensor through the socket
    variants = [(path, memory) for path in channels for memory in ("fresh", "kept")]
    out = {v: {"wall": [], "client": [], "server": []} for v in variants}
    try:
        for path, channel in channels.items():  # connections, first allocations
            await channel.recv_tensors(wire.RecvTensors(1, ["k"]), timeout=60)
        for step in range(rounds):
            for path, memory in variants if step % 2 == 0 else variants[::-1]:
                _memory(memory)
                cross_memory.THREAD_BYTES = 2 * BIG if path == "lent-loop" else threads_from
                reply = await channels[path].recv_tensors(wire.RecvTensors(1, ["k"]),
                                                          timeout=60)
                del reply  # freed: what the next pull of this variant finds
                mine, theirs = time.process_time_ns(), cpu_ns(pid)
                start = time.perf_counter()
                reply = await channels[path].recv_tensors(wire.RecvTensors(1, ["k"]),
                                                          timeout=60)
                out[path, memory]["wall"].append(time.perf_counter() - start)
                out[path, memory]["client"].append(time.process_time_ns() - mine)
                out[path, memory]["server"].append(cpu_ns(pid) - theirs)
                assert reply.tensors[0].value.nbytes == BIG
                del reply
        assert channels["lent"].lent_replies >= rounds and channels["unix"].lent_replies == 0
        assert channels["lent-loop"].lent_replies >= rounds
    finally:
        cross_memory.THREAD_BYTES = threads_from
        for channel in channels.values():
            await channel.aclose()
    return out


def _spread(values: list[float]) -> str:
    """Median [quartiles]; with one round the one value three times (quantiles needs two)."""
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return f"{statistics.median(values):,.0f} [{q[0]:,.0f}-{q[2]:,.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if allocation._mallopt() is None:
        sys.exit("needs glibc (mallopt) on Linux")
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    process = context.Process(target=server, args=(ports,), daemon=True)
    process.start()
    try:
        out = trio.run(_pulls, ports.get(timeout=60), process.pid, args.rounds)
    finally:
        process.terminate()
        process.join(timeout=5)
    print(f"| 64 MiB pull, {args.rounds} interleaved rounds | MiB/s median [quartiles] | "
          "ms CPU here (receiver), median | ms CPU of the server (sender), median |")
    print("|---|---|---|---|")
    for (path, memory), figures in out.items():
        rates = [BIG / MIB / t for t in figures["wall"]]
        print(f"| {path}, {memory} pages | {_spread(rates)} | "
              f"{statistics.median(figures['client']) / 1e6:.1f} | "
              f"{statistics.median(figures['server']) / 1e6:.1f} |")


if __name__ == "__main__":
    main()
