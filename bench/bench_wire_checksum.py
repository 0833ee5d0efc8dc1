"""What the wire's CRC32C costs: a 64 MiB pull with and without the checksum.

Two server processes answer RecvTensors with the same 64 MiB float32 tensor over HTTP, both
over TCP on loopback and over their same-host Unix sockets; one encodes with checksums
(``transports.checksum`` on, the default), the other without. This process pulls from both
through the trio HTTP channel the workers use, alternating round by round so both see the
same load (shared machines are noisy: compare the columns, not absolute values), and decodes
each reply (summing the bytes as they land when the frame carries checksums). Reported: MiB/s
of the median and best pull of each and their ratio; the CPU time of both ends per pull
(Linux schedstat of the server, process time here), which other programs disturb less; and
the time both ends spent in ``checksum.extend`` per pull, the checksum's own cost, as a
share of the pull without it. First, the rate of each CRC32C implementation installed.

Then the same pull inside the runtime: two clusters of two ``asyncflow worker`` processes, one
started with ``ASYNCFLOW_WIRE_CHECKSUMS=0``; on each, a 64 MiB float32 variable on worker 0 is
read by a ``reduce_sum`` on worker 1 (one RecvTensors pull of 64 MiB per step), and the step
times of the two clusters are measured alternately (medians).

Also, in this process and without sockets, the codec's own cost: encode and decode of the
same 64 MiB message with and without checksums (medians), which is the whole of the work the
checksum adds.

Same-host pulls take the Unix socket, and their 64 MiB tensor is copied from the server's
memory (``transports.http.cross_memory``); this process keeps freed memory as ``asyncflow worker``
does (``transports.allocation``). Each round pulls once from every server on every path, so
the ratio of a round (with / without, the two pulls a moment apart) is paired: the table gives
its median and quartiles over the rounds, which resolve a few percent where the medians of
the two columns, each moved by the load, do not.

``--pace-gbit 10`` paces the servers' sends (Linux TCP pacing, ``SO_MAX_PACING_RATE``) to the
rate of a 10 Gb/s link, still on loopback: what the checksum costs where the link, not the
two ends' CPUs, sets the pull's time (a pull between two hosts; same-host pulls are lent).

``--split`` adds pulls from the checked server whose receiver (this process) does not sum
(``Decoder.trust_segment``): the sender's share of the cost, the rest being the receiver's.

Run: ``.venv/bin/python bench/bench_wire_checksum.py [--quick] [--rounds N] [--pulls-only]
[--paths unix] [--no-google] [--pace-gbit G] [--split]`` (about a minute).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import socket
import statistics
import struct
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, ".."))
sys.path.insert(0, os.path.join(_HERE, "..", "demos"))

import numpy as np  # noqa: E402
import trio  # noqa: E402

import asyncflow as af  # noqa: E402
import local_cluster as clusters  # noqa: E402  (worker processes, one BLAS thread each)
from transports import allocation, checksum, wire  # noqa: E402
from transports.http import bulk_io  # noqa: E402
from transports.http.client import TrioHttpChannel  # noqa: E402  (what workers use)
from transports.http.server import open_http_server  # noqa: E402

MIB = 1 << 20
BIG = 64 * MIB
PATHS = ("tcp", "unix")
GOOGLE = "with google_crc32c"  # checksums on, summed by google_crc32c at both ends
SENDER = "sender's sums only"  # the checked server, this receiver not summing (--split)
_TRUSTING = [False]  # while true, this process's decoders receive tensor bytes unsummed
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # (Linux; not in Python's names)


class PullWorker:
    """Answers every RecvTensors with the one 64 MiB tensor."""

    def __init__(self) -> None:
        self.value = np.random.default_rng(0).random(BIG // 4, dtype=np.float32)

    async def recv_tensors(self, request: wire.RecvTensors) -> wire.RecvTensorsReply:
        return wire.RecvTensorsReply([wire.TensorEntry(request.keys[0], self.value)])

    async def health(self, request: wire.Health) -> wire.HealthReply:
        return wire.HealthReply(os.getpid(), "bench", [], wire.WorkerStatistics())


def _trusting_get_buffer(plain):
    def get_buffer(self):
        view = plain(self)
        if _TRUSTING[0]:
            self.trust_segment()  # (as a lent segment is received: not summed, not checked)
        return view
    return get_buffer


def timed_sums(total) -> None:
    """Count the seconds this process spends in ``checksum.extend`` into ``total.value``."""
    plain = checksum.extend

    def extend(crc, data):
        start = time.perf_counter()
        try:
            return plain(crc, data)
        finally:
            total.value += time.perf_counter() - start
    checksum.extend = extend  # (the codec and the writers look it up at each call)


def pace(gbit: float) -> None:
    """Pace what this process's server sends to ``gbit`` Gb/s per connection (Linux TCP's own
    pacing through ``SO_MAX_PACING_RATE``): a link of that rate, on loopback."""
    plain, rate = bulk_io.send_all, int(gbit * 1e9 / 8)  # bytes/s: an unsigned 32 or 64 bits
    value = struct.pack("=I" if rate <= 0xFFFFFFFF else "=Q", rate)

    async def send_all(sock, view, on_wait=None):
        sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, value)
        await plain(sock, view, on_wait)
    bulk_io.send_all = send_all  # (the server looks it up at each call)


def server(checksums: bool, folding: bool, ports, sums, gbit: float = 0.0) -> None:
    checksum.set_enabled(checksums)
    if gbit:
        pace(gbit)
    if not folding:
        checksum._FOLDING = None  # google_crc32c's sums
    timed_sums(sums)

    async def main() -> None:
        async with open_http_server(PullWorker()) as running:
            ports.put(running.port)
            await trio.sleep_forever()
    trio.run(main)


def cpu_ns(pid: int) -> int:
    """Nanoseconds process ``pid``'s threads have run on a CPU (Linux schedstat of each live
    thread: a helper thread that sums counts too; its threads are the server's own, not ended
    between two readings)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            pass
    return total


async def _pulls(ports: dict, pids: dict, sums: dict, rounds: int,
                 paths=PATHS) -> tuple[dict, dict, dict]:
    """Pull times per (path, checksum kind): TCP on loopback and the same-host Unix socket
    (``transports.http.same_host``) to the same two servers, in alternating order; and the CPU
    time both ends spent per pull (this process's plus the server's), which the other
    programs on a shared machine disturb far less than wall time; and the time both ends
    spent summing (in ``checksum.extend``)."""
    channels = {(path, kind): TrioHttpChannel(f"127.0.0.1:{port}", same_host=path == "unix")
                for path in paths for kind, port in ports.items()}
    times: dict[tuple[str, str], list[float]] = {key: [] for key in channels}
    cpu: dict[tuple[str, str], list[float]] = {key: [] for key in channels}
    summing: dict[tuple[str, str], list[float]] = {key: [] for key in channels}
    mine = multiprocessing.Value("d", 0.0, lock=False)
    timed_sums(mine)
    folding = checksum._FOLDING
    try:
        for kind, channel in channels.items():  # warm up: connections, allocations
            await channel.recv_tensors(wire.RecvTensors(1, ["k"]), timeout=60)
        for step in range(rounds):
            order = list(channels.items())
            if step % 2:
                order.reverse()
            for key, channel in order:
                checksum._FOLDING = None if key[1] == GOOGLE else folding  # both ends alike
                _TRUSTING[0] = key[1] == SENDER
                used = time.process_time_ns() + cpu_ns(pids[key[1]])
                summed = mine.value + sums[key[1]].value
                start = time.perf_counter()
                reply = await channel.recv_tensors(wire.RecvTensors(1, ["k"]), timeout=60)
                times[key].append(time.perf_counter() - start)
                cpu[key].append(time.process_time_ns() + cpu_ns(pids[key[1]]) - used)
                summing[key].append(mine.value + sums[key[1]].value - summed)
                assert reply.tensors[0].value.nbytes == BIG
                del reply
    finally:
        checksum._FOLDING, _TRUSTING[0] = folding, False
        for channel in channels.values():
            await channel.aclose()
    return times, cpu, summing


def crc_rates() -> dict[str, float]:
    """GB/s of each CRC32C this machine has, on a cached 1 MiB buffer (best of 5 runs)."""
    data = memoryview(np.random.default_rng(0).integers(0, 255, MIB, dtype=np.uint8))
    rates, saved = {}, checksum._FOLDING
    try:
        for name, folding in (("crc32c_rs", saved), ("google_crc32c", None)):
            if name == "crc32c_rs" and saved is None:
                continue
            checksum._FOLDING = folding
            best = math.inf
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(50):
                    checksum.extend(0, data)
                best = min(best, time.perf_counter() - start)
            rates[name] = 50 * MIB / best / 1e9
    finally:
        checksum._FOLDING = saved
    return rates


async def _steps(specs: dict, rounds: int) -> dict[str, list[float]]:
    """Step times of ``reduce_sum`` on worker 1 of a 64 MiB variable on worker 0, per cluster."""
    sessions, fetches, times = {}, {}, {kind: [] for kind in specs}
    try:
        for kind, spec in specs.items():
            graph = af.Graph()
            with graph.as_default():
                with af.device("/job:worker/task:0"):
                    big = af.Variable(af.zeros([BIG // 4], af.float32), name="big")
                with af.device("/job:worker/task:1"):
                    fetches[kind] = af.reduce_sum(big)
            sessions[kind] = af.Session(graph=graph, cluster=af.ClusterSpec(spec))
            await sessions[kind].__aenter__()
            await sessions[kind].run(big.initializer)
            await sessions[kind].run(fetches[kind])  # registration, first pull
        for step in range(rounds):
            order = list(specs) if step % 2 == 0 else list(reversed(specs))
            for kind in order:
                start = time.perf_counter()
                await sessions[kind].run(fetches[kind])
                times[kind].append(time.perf_counter() - start)
    finally:
        for session in sessions.values():
            await session.__aexit__(None, None, None)
    return times


def runtime_steps(rounds: int) -> dict[str, list[float]]:
    with clusters.local_cluster({"worker": 2}) as with_sums:
        plain = dict(clusters._ENV)
        clusters._ENV = {**plain, checksum.ENV: "0"}
        try:
            with clusters.local_cluster({"worker": 2}) as without:
                clusters._ENV = plain
                return trio.run(_steps, {"with checksum": with_sums, "without": without},
                                rounds)
        finally:
            clusters._ENV = plain


def codec_times(rounds: int) -> dict[str, float]:
    value = np.random.default_rng(0).random(BIG // 4, dtype=np.float32)
    message = wire.RecvTensorsReply([wire.TensorEntry("k", value)])
    out: dict[str, list[float]] = {"encode on": [], "encode off": [], "decode on": [],
                                   "decode off": []}
    for _ in range(rounds):
        for flag, name in ((True, "on"), (False, "off")):
            start = time.perf_counter()
            buffers = wire.encode(message, checksums=flag)
            out[f"encode {name}"].append(time.perf_counter() - start)
            decoder = wire.Decoder()
            start = time.perf_counter()
            pos, data = 0, b"".join(bytes(b) for b in buffers)
            while pos < len(data):  # as a socket reader does: into the lent buffers
                view = decoder.get_buffer()
                n = min(len(view), 1 << 20, len(data) - pos)
                view[:n] = data[pos:pos + n]
                decoder.buffer_updated(n)
                pos += n
            decoder.next_event()
            out[f"decode {name}"].append(time.perf_counter() - start)
    return {k: 1e3 * statistics.median(v) for k, v in out.items()}


def _paired(without: list[float], with_: list[float]) -> str:
    """Median and quartiles of the per-round throughput ratio (with / without)."""
    ratios = sorted(a / b for a, b in zip(without, with_))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return f"{statistics.median(ratios):.3f} [{q[0]:.3f}-{q[2]:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, default=0, help="pull rounds (default 20)")
    parser.add_argument("--pulls-only", action="store_true",
                        help="only the pulls over HTTP (not the workers, nor the codec)")
    parser.add_argument("--paths", default=",".join(PATHS),
                        help="pull paths, of tcp and unix (default both)")
    parser.add_argument("--no-google", action="store_true",
                        help="no third server summing with google_crc32c")
    parser.add_argument("--pace-gbit", type=float, default=0.0, metavar="G",
                        help="pace the servers' sends to G Gb/s (a link of that rate; TCP)")
    parser.add_argument("--split", action="store_true",
                        help="also pulls whose receiver does not sum: the sender's share")
    args = parser.parse_args()
    paths = tuple(p for p in args.paths.split(",") if p)
    if not paths or set(paths) - set(PATHS):
        parser.error(f"--paths takes {', '.join(PATHS)}")
    print(f"freed memory kept here (as a worker does): {allocation.keep_freed_memory()} bytes")
    quick, rounds = args.quick, args.rounds or (6 if args.quick else 20)
    context = multiprocessing.get_context("spawn")
    processes, ports, pids, sums = [], {}, {}, {}
    try:
        kinds = [("with checksum", True, True), ("without", False, True)]
        if checksum._FOLDING is not None and not args.no_google:  # compare with google_crc32c
            kinds.append((GOOGLE, True, False))
        for kind, flag, folding in kinds:
            queue = context.Queue()
            sums[kind] = context.Value("d", 0.0, lock=False)
            process = context.Process(target=server,
                                      args=(flag, folding, queue, sums[kind], args.pace_gbit),
                                      daemon=True)
            process.start()
            processes.append(process)
            ports[kind], pids[kind] = queue.get(timeout=60), process.pid
        if args.split:  # the same checked server; the receiver's sums left out
            wire.Decoder.get_buffer = _trusting_get_buffer(wire.Decoder.get_buffer)
            ports[SENDER], pids[SENDER] = ports["with checksum"], pids["with checksum"]
            sums[SENDER] = sums["with checksum"]
        times, cpu, summing = trio.run(_pulls, ports, pids, sums, rounds, paths)
    finally:
        for process in processes:
            process.terminate()
            process.join(timeout=5)
    print(f"CRC32C: {checksum.implementation()}; GB/s on cached data: "
          + ", ".join(f"{name} {rate:.1f}" for name, rate in crc_rates().items()))
    print()
    kinds = [kind for kind in ("with checksum", SENDER, GOOGLE) if kind in ports]
    print(f"| 64 MiB pull over HTTP ({rounds} rounds) | without | "
          + " | ".join(f"{kind} | ratio" for kind in kinds) + " |")
    print("|---|---|" + "---|---|" * len(kinds))
    for path in paths:
        name = "TCP loopback" if path == "tcp" else "same-host Unix socket"
        off = times[(path, "without")]
        for label, pick in (("MiB/s, median", statistics.median), ("MiB/s, best", min)):
            b = BIG / MIB / pick(off)
            cells = [f"{BIG / MIB / pick(times[(path, k)]):.0f} | "
                     f"{BIG / MIB / pick(times[(path, k)]) / b:.3f}" for k in kinds]
            print(f"| {name}, {label} | {b:.0f} | " + " | ".join(cells) + " |")
        b = 1e-6 * statistics.median(cpu[(path, "without")])
        cells = [f"{1e-6 * statistics.median(cpu[(path, k)]):.1f} | "
                 f"{1e-6 * statistics.median(cpu[(path, k)]) / b:.3f}" for k in kinds]
        print(f"| {name}, CPU ms of both ends, median | {b:.1f} | " + " | ".join(cells) + " |")
        cells = [f"{1e3 * statistics.median(summing[(path, k)]):.2f} | "
                 f"{statistics.median(summing[(path, k)]) / statistics.median(off):.1%} of the "
                 "pull" for k in kinds]
        print(f"| {name}, ms summing (both ends), median | 0 | " + " | ".join(cells) + " |")
        cells = [_paired(times[(path, "without")], times[(path, k)]) for k in kinds]
        print(f"| {name}, MiB/s ratio per round, median [quartiles] | 1 | | "
              + " | | ".join(cells) + " |")
    if args.pulls_only:
        return
    steps = runtime_steps(rounds)
    codec = codec_times(3 if quick else 9)
    print()
    print("| 64 MiB pull between two worker processes | with checksum | without | ratio |")
    print("|---|---|---|---|")
    for label, pick in (("step ms, median", statistics.median), ("step ms, best", min)):
        a, b = 1e3 * pick(steps["with checksum"]), 1e3 * pick(steps["without"])
        print(f"| {label} | {a:.1f} | {b:.1f} | {a / b:.3f} |")
    print()
    print("| codec alone, 64 MiB (ms, median) | with checksum | without | added |")
    print("|---|---|---|---|")
    for step in ("encode", "decode"):
        a, b = codec[f"{step} on"], codec[f"{step} off"]
        print(f"| {step} | {a:.2f} | {b:.2f} | {a - b:+.2f} |")


if __name__ == "__main__":
    main()
