"""Benchmark the HTTP transport against a raw trio TCP baseline that uses the same framing.

The HTTP side is the worker's server and the trio client asyncflow uses (``TrioHttpChannel``;
before 2026-12-04 it was the aiohttp client that now lives with the tests).

Each transport gets a fresh server process and a fresh client process (so peak-RSS rises are its
own). The parent drives both clients round by round, alternating raw and HTTP, so the two see the
same machine load (shared CI machines are noisy; compare the columns, not absolute values).
Measured over loopback:

* push: a 64 MiB float32 tensor sent as a RunGraph feed, answered by an empty RunGraphReply;
  MiB/s from the median push, and the peak-RSS rise on both sides during the pushes (the server
  reports its ``ru_maxrss`` through Health). The server must hold one 64 MiB destination array;
  anything above that is an extra copy. Targets: HTTP >= 70% of raw; client rise <= 1 tensor,
  server rise <= 2 tensors (the destination plus at most one copy).
* rtt: one request with a 4 KiB tensor and its empty reply (target: HTTP median <= 2 ms).
* batch: 10 tensors of 4 KiB in one request vs 10 sequential requests of one tensor.

The raw baseline is what the codec allows at best: ``send_all`` of the encoder's buffers and
``recv_into`` straight into the decoder's destination arrays (``Decoder.get_buffer``).

Run: ``.venv/bin/python bench/bench_transport.py [--quick]`` (well under a minute).
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import trio  # noqa: E402

from transports import wire  # noqa: E402
from transports.http.client import TrioHttpChannel  # noqa: E402
from transports.http.server import open_http_server  # noqa: E402
from transports.wire import NEED_DATA, Decoder, TensorEntry, encode  # noqa: E402

MIB = 1 << 20
BIG = 64 * MIB


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class BenchWorker:
    """Acknowledges every RunGraph and drops its feeds; reports peak RSS in Health."""

    async def run_graph(self, request: wire.RunGraph) -> wire.RunGraphReply:
        return wire.RunGraphReply([])

    async def health(self, request: wire.Health) -> wire.HealthReply:
        return wire.HealthReply(os.getpid(), "bench", [],
                                wire.WorkerStatistics(max_rss_mib=_maxrss_mib()))


# ----------------------------------------------------------------------------- servers


def http_server(ports: multiprocessing.Queue) -> None:
    async def main() -> None:
        async with open_http_server(BenchWorker()) as server:
            ports.put(server.port)
            await trio.sleep_forever()
    trio.run(main)


async def _raw_receive(stream: trio.SocketStream, decoder: Decoder) -> wire.Message | None:
    """Next message from the stream, read with recv_into into the decoder's buffers."""
    while (event := decoder.next_event()) is NEED_DATA:
        buffer = decoder.get_buffer()
        count = await stream.socket.recv_into(buffer)
        decoder.buffer_updated(count)
        if count == 0:
            decoder.receive_data(b"")
    return None if event is wire.CLOSED else event


async def _raw_send(stream: trio.SocketStream, message: wire.Message) -> None:
    for buffer in encode(message):
        await stream.send_all(buffer)


def raw_server(ports: multiprocessing.Queue) -> None:
    worker = BenchWorker()

    async def answer(stream: trio.SocketStream, decoder: Decoder) -> bool:
        # A function of its own, so a request's arrays are freed before the next one arrives.
        request = await _raw_receive(stream, decoder)
        if request is None:
            return False
        handler = worker.health if isinstance(request, wire.Health) else worker.run_graph
        await _raw_send(stream, await handler(request))
        return True

    async def serve(stream: trio.SocketStream) -> None:
        decoder = Decoder()
        while await answer(stream, decoder):
            pass

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(functools.partial(trio.serve_tcp, serve, 0,
                                                              host="127.0.0.1"))
            ports.put(listeners[0].socket.getsockname()[1])
    trio.run(main)


# ----------------------------------------------------------------------------- clients


class RawClient:
    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream, self._decoder = stream, Decoder()

    async def call(self, message: wire.Message) -> wire.Message:
        await _raw_send(self._stream, message)
        return await _raw_receive(self._stream, self._decoder)

    async def run_graph(self, request: wire.RunGraph) -> wire.Message:
        return await self.call(request)

    async def health(self) -> wire.HealthReply:
        return await self.call(wire.Health())


async def _timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return times


class Workload:
    """The measurements one client process can be asked for, one round at a time."""

    def __init__(self, client) -> None:
        self._client = client
        self._small = np.ones(1024, np.float32)  # 4 KiB
        self._big = np.ones(BIG // 4, np.float32)  # allocated and touched before any baseline
        self._rss: tuple[float, float] | None = None

    @staticmethod
    def _run(*arrays: np.ndarray) -> wire.RunGraph:
        return wire.RunGraph("bench", 1, [TensorEntry(f"t{i}", a) for i, a in enumerate(arrays)],
                             [])

    async def warm_up(self) -> list[float]:
        times = await _timed(lambda: self._client.run_graph(self._run(self._small)), 20)
        self._rss = ((await self._client.health()).stats.max_rss_mib, _maxrss_mib())
        return times

    async def push(self) -> list[float]:
        return await _timed(lambda: self._client.run_graph(self._run(self._big)), 1)

    async def rss(self) -> tuple[float, float]:
        """Peak-RSS rise since warm_up: (client, server), in MiB."""
        server = (await self._client.health()).stats.max_rss_mib
        return _maxrss_mib() - self._rss[1], server - self._rss[0]

    async def rtt(self) -> list[float]:
        return await _timed(lambda: self._client.run_graph(self._run(self._small)), 10)

    async def batch_one(self) -> list[float]:
        return await _timed(lambda: self._client.run_graph(self._run(*[self._small] * 10)), 2)

    async def batch_ten(self) -> list[float]:
        async def ten_requests() -> None:
            for _ in range(10):
                await self._client.run_graph(self._run(self._small))
        return await _timed(ten_requests, 2)


def client(kind: str, port: int, control) -> None:
    """Serve measurement commands from the parent, over ``control``, until it says stop."""
    async def serve(workload: Workload) -> None:
        while (command := await trio.to_thread.run_sync(control.recv)) != "stop":
            control.send(await getattr(workload, command)())

    async def main() -> None:
        if kind == "http":
            async with TrioHttpChannel(f"127.0.0.1:{port}") as channel:
                await serve(Workload(channel))
        else:
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                await serve(Workload(RawClient(stream)))
    trio.run(main)


def start_pair(context, kind: str, processes: list):
    """Start a server and a client process for ``kind``; return the control pipe."""
    ports = context.Queue()
    server = context.Process(target=http_server if kind == "http" else raw_server,
                             args=(ports,), daemon=True)
    server.start()
    processes.append(server)
    parent, child = context.Pipe()
    process = context.Process(target=client, args=(kind, ports.get(timeout=30), child),
                              daemon=True)
    process.start()
    processes.append(process)
    return parent


def interleave(pipes: dict, command: str, rounds: int) -> dict[str, list]:
    """Ask every client for ``command`` once per round, alternating, so both see the same load."""
    results: dict[str, list] = {kind: [] for kind in pipes}
    for _ in range(rounds):
        for kind, pipe in pipes.items():
            pipe.send(command)
            if not pipe.poll(120):
                raise RuntimeError(f"the {kind} client did not answer {command}")
            results[kind].extend(pipe.recv())
    return results


def measure(quick: bool) -> dict[str, dict[str, float]]:
    context = multiprocessing.get_context("spawn")
    processes: list = []
    try:
        pipes = {kind: start_pair(context, kind, processes) for kind in ("raw", "http")}
        interleave(pipes, "warm_up", 1)
        pushes = interleave(pipes, "push", 4 if quick else 12)
        rss = interleave(pipes, "rss", 1)
        rounds = 5 if quick else 20
        rtt, one, ten = (interleave(pipes, c, rounds) for c in ("rtt", "batch_one", "batch_ten"))
        for pipe in pipes.values():
            pipe.send("stop")
        return {kind: {
            "push_mib_s": BIG / MIB / statistics.median(pushes[kind]),
            "push_best_mib_s": BIG / MIB / min(pushes[kind]),
            "client_rss_mib": rss[kind][0], "server_rss_mib": rss[kind][1],
            "rtt_ms": 1e3 * statistics.median(rtt[kind]),
            "rtt_best_ms": 1e3 * min(rtt[kind]),
            "batch_one_ms": 1e3 * statistics.median(one[kind]),
            "batch_ten_ms": 1e3 * statistics.median(ten[kind]),
        } for kind in pipes}
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    quick = parser.parse_args().quick
    started = time.perf_counter()
    results = measure(quick)
    raw, http = results["raw"], results["http"]
    tensor = BIG / MIB
    rows = [
        ("64 MiB push, MiB/s (median)", "push_mib_s", ".0f"),
        ("64 MiB push, MiB/s (best)", "push_best_mib_s", ".0f"),
        ("client peak RSS rise, MiB", "client_rss_mib", ".0f"),
        ("server peak RSS rise, MiB", "server_rss_mib", ".0f"),
        ("4 KiB round trip, ms (median)", "rtt_ms", ".3f"),
        ("4 KiB round trip, ms (best)", "rtt_best_ms", ".3f"),
        ("10 x 4 KiB in one request, ms", "batch_one_ms", ".3f"),
        ("10 x 4 KiB in 10 requests, ms", "batch_ten_ms", ".3f"),
    ]
    print(f"{'':32} {'raw trio TCP':>14} {'HTTP':>14}")
    for label, key, fmt in rows:
        print(f"{label:32} {raw[key]:>14{fmt}} {http[key]:>14{fmt}}")
    ratio = http["push_mib_s"] / raw["push_mib_s"]
    checks = [
        (f"HTTP push throughput {ratio:.0%} of raw (target >= 70%)", ratio >= 0.7),
        (f"HTTP client RSS rise {http['client_rss_mib']:.0f} MiB (target <= {tensor:.0f})",
         http["client_rss_mib"] <= tensor),
        (f"HTTP server RSS rise {http['server_rss_mib']:.0f} MiB (target <= {2 * tensor:.0f}: "
         "the destination plus one copy)", http["server_rss_mib"] <= 2 * tensor),
        (f"HTTP 4 KiB round trip {http['rtt_ms']:.2f} ms (target <= 2 ms)", http["rtt_ms"] <= 2),
    ]
    for text, ok in checks:
        print(f"[{'ok' if ok else 'MISSED'}] {text}")
    print(f"batching 10 tensors per request: {http['batch_ten_ms'] / http['batch_one_ms']:.1f}x "
          f"faster than 10 requests; total runtime {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
