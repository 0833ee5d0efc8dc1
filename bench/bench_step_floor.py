"""Where a trivial remote step's time goes, layer by layer, with each process's CPU per call.

One worker process (``asyncflow worker``, on loopback; the channel takes its same-host Unix
socket) and this client process. Each figure is measured over ``--calls`` calls, client CPU
from ``time.process_time`` and the worker's from ``/proc/<pid>/stat`` (utime + stime, Linux):

* ``floor``: a bare trio ping-pong between two processes over a Unix socket (260 bytes out,
  200 back: a trivial RunGraph's and its reply's sizes), no HTTP, no codec: what any trio
  request/reply costs on this machine (a second helper process, not the worker);
* ``health``: ``channel.health()``, the smallest worker call (HTTP head, a small frame each
  way, a handler that reads counters);
* ``run_graph``: ``channel.run_graph`` of the trivial step's registered partition
  (``p * 2.0``), the RunGraph built by hand: the wire codec and the worker's step on top of
  ``health``;
* ``session``: ``await sess.run(doubled, {p: 1.0})``, the whole client path (session, master,
  step driver) on top of ``run_graph``.

These three go over the bare-frame same-host protocol (``transports.http.bare``), what a
channel takes by default; the ``/http`` rows repeat them over HTTP on the same-host Unix
socket (the path before it, and the fallback).

The differences between rows are the layers' costs; the ``floor`` row is what no change to
asyncflow's Python can remove while both ends are trio processes.

``--inprocess`` measures instead a trivial step with the worker (an ``af.Server``) and the
session in this one trio run, over the bare same-host protocol on loopback: CPU per step of
both sides together (``time.process_time``), without another process's scheduling in the
figure, the probe the codec and the worker's step bookkeeping are tuned against;
``--profile FILE`` writes that run's cProfile stats. Each round then times a trivial step's
pieces alone in the same process: the worker's RunGraph handler called directly (the step
bookkeeping and the runner, no transport), the codec's four calls (encode and decode of the
RunGraph, its ids changing as a step's, and of its reply) and one cancel scope with a
deadline (a step enters two: the session's, without a deadline, and the worker's call).

Usage: ``.venv/bin/python bench/bench_step_floor.py [--calls 4000] [--rounds 3] [--inprocess
[--profile FILE]]``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from reserved_ports import free_ports  # same folder: ports no test or other benchmark draws

HERE = os.path.dirname(os.path.abspath(__file__))
_REPLY, _REQUEST = 200, 260

_ECHO = """
import os, socket, sys, trio
async def serve(path):
    listener = trio.socket.socket(socket.AF_UNIX)
    await listener.bind(path)
    listener.listen()
    print("ready", flush=True)
    conn, _ = await listener.accept()
    reply = b"r" * {reply}
    while await conn.recv(65536):
        os.write(conn.fileno(), reply)
trio.run(serve, sys.argv[1])
""".format(reply=_REPLY)


def _cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _timed(call, calls, pid):
    """(wall, client CPU, peer CPU) per call in microseconds."""
    start_cpu, start_peer, start = time.process_time(), _cpu_s(pid), time.perf_counter()
    for _ in range(calls):
        await call()
    wall = time.perf_counter() - start
    return (wall / calls * 1e6, (time.process_time() - start_cpu) / calls * 1e6,
            (_cpu_s(pid) - start_peer) / calls * 1e6)


async def _floor(calls, path, pid):
    import trio
    sock = trio.socket.socket(socket.AF_UNIX)
    await sock.connect(path)
    request = b"q" * _REQUEST

    async def ping():
        os.write(sock.fileno(), request)
        await sock.recv(65536)

    with sock:
        for _ in range(200):
            await ping()
        return await _timed(ping, calls, pid)


async def _layers(calls, spec, pid):
    import numpy as np

    import asyncflow as af
    from bench_vs_tf1 import _trivial_and_pull
    from transports.wire import RunGraph, TensorEntry
    graph, p, doubled = _trivial_and_pull(af)[:3]
    out = {}
    async with af.Session(graph=graph, cluster=spec) as sess:
        for _ in range(200):
            await sess.run(doubled, {p: 1.0})
        run = next(iter(sess._target.cache.values()))  # the one compiled signature
        tg = run.task_graphs[0]
        channel = sess._target.master.tasks[tg.task].channel
        feed = np.asarray(np.float32(1.0))
        step_ids = iter(range(1 << 40, 1 << 41, 2))

        async def run_graph():
            await channel.run_graph(RunGraph(
                tg.handle, next(step_ids), [TensorEntry(tg.options.feeds[0], feed)],
                list(tg.options.fetches), request_id=next(tg.request_ids)))

        for suffix in ("", "/http"):  # the bare same-host protocol, then HTTP on its socket
            if suffix and channel.bare_calls == 0:
                raise RuntimeError("the calls did not take the bare same-host protocol")
            channel._bare = not suffix
            if suffix:  # (an idle bare connection would still be taken)
                channel._bare_idle = []
            out["health" + suffix] = await _timed(channel.health, calls, pid)
            out["run_graph" + suffix] = await _timed(run_graph, calls, pid)
            out["session" + suffix] = await _timed(lambda: sess.run(doubled, {p: 1.0}), calls,
                                                   pid)
    return out


def measure(calls):
    import trio
    sys.path.insert(0, HERE)
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "echo.sock")
        echo = subprocess.Popen([sys.executable, "-c", _ECHO, path], stdout=subprocess.PIPE,
                                text=True)
        try:
            if echo.stdout.readline().strip() != "ready":
                raise RuntimeError("the echo process did not start")
            out["floor"] = trio.run(_floor, calls, path, echo.pid)
        finally:
            echo.kill()
            echo.wait()
    spec = {"worker": [f"127.0.0.1:{port}" for port in free_ports(1)]}
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    worker = subprocess.Popen([sys.executable, "-m", "asyncflow", "worker", "--cluster",
                               json.dumps(spec), "--job", "worker", "--task", "0",
                               "--log-level", "WARNING"], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        deadline = time.monotonic() + 60
        while "listening on" not in worker.stdout.readline():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the worker did not start")
        out.update(trio.run(_layers, calls, spec, worker.pid))
    finally:
        worker.kill()
        worker.wait()
    return out


@contextlib.asynccontextmanager
async def inprocess_session(warm_up):
    """``(sess, server, p, doubled)``: the trivial step (``bench_vs_tf1``'s ``p * 2.0``) on an
    ``af.Server`` on loopback in this trio run, its session warmed up by ``warm_up`` steps;
    the server is stopped once the session closed."""
    import trio

    import asyncflow as af
    from bench_vs_tf1 import _trivial_and_pull
    graph, p, doubled = _trivial_and_pull(af)[:3]
    spec = {"worker": [f"127.0.0.1:{port}" for port in free_ports(1)]}
    async with trio.open_nursery() as nursery:
        server = await nursery.start(af.Server(spec, "worker", 0).serve)
        async with af.Session(graph=graph, cluster=spec) as sess:
            for _ in range(warm_up):
                await sess.run(doubled, {p: 1.0})
            yield sess, server, p, doubled
        await server.stop()


async def _inprocess(calls, profile):
    async with inprocess_session(300) as (sess, server, p, doubled):
        if sess._target.master.tasks[
                next(iter(sess._target.cache.values())).task_graphs[0].task
        ].channel.bare_calls == 0:
            raise RuntimeError("the steps did not take the bare same-host protocol")
        if profile:
            import cProfile
            profiler = cProfile.Profile()
            profiler.enable()
        start_cpu, start = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await sess.run(doubled, {p: 1.0})
        cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start
        if profile:
            profiler.disable()
            profiler.dump_stats(profile)
        parts = await _parts(server.service, sess, doubled, p, calls)
    return wall / calls * 1e6, cpu / calls * 1e6, parts


async def _parts(service, sess, doubled, p, calls):
    """CPU per call of a trivial step's pieces, each alone in this process: the worker's
    RunGraph handler (no transport), the four codec calls (encode and decode of the RunGraph
    and of its reply), and one cancel scope with a deadline (two scopes a step: the
    session's, without one, and the worker's call)."""
    import dataclasses

    import trio

    from transports import wire
    captured = []
    handler = service.run_graph
    in_scope = getattr(service, "run_graph_in_scope", None)  # (the bare server calls it)

    async def capture(request, *scope):
        captured.append(request)
        return await (in_scope(request, *scope) if scope else handler(request))

    name = "run_graph" if in_scope is None else "run_graph_in_scope"
    setattr(service, name, capture)
    await sess.run(doubled, {p: 1.0})
    delattr(service, name)
    request = captured[0]
    step_ids = iter(range(request.step_id + 2, request.step_id + 2 + 4 * calls, 2))
    request_ids = iter(range(request.request_id + 1, request.request_id + 1 + calls))
    requests = [dataclasses.replace(request, step_id=next(step_ids), request_id=next(
        request_ids)) for _ in range(calls)]
    start = time.process_time()
    for one in requests:
        reply = await handler(one)
    worker_us = (time.process_time() - start) / calls * 1e6
    limits = wire.DEFAULT_LIMITS
    codec = _codec_parts(wire, requests, reply, limits)
    start = time.process_time()
    for _ in range(calls):
        with trio.CancelScope(deadline=trio.current_time() + 60):
            pass
    scope_us = (time.process_time() - start) / calls * 1e6
    return {"worker RunGraph handler": worker_us,
            "codec (4 calls)": sum(v for k, v in codec.items() if "(short)" not in k),
            **codec, "one cancel scope": scope_us}


def _codec_parts(wire, requests, reply, limits):
    """CPU per call of the four codec calls of a step as the bare protocol makes them: the
    client's RunGraph encoded from its kept prepared signature (``encode_prepared``, as the
    channel's ``run_graph``), the worker's decode of it (``decode_repeated``: its header from a
    template, the ids changing), the reply encoded as the bare server encodes it
    (``bare_io.prepared_reply`` from the connection's kept signature, then ``small_pieces``,
    which fills any pending trailer before the ``writev``) and the client's decode of it."""
    import types

    from transports.http import bare_io
    def frame(buffers):
        for buffer in buffers:  # (a deferred trailer: the writer fills it, as bare_io does)
            if type(buffer) is wire.ChecksumTrailer and buffer.pending:
                buffer.fill()
        return memoryview(b"".join(bytes(b) for b in buffers))

    half = len(requests) // 2
    prepared, warm = None, requests[:half]
    for one in warm[:3]:  # learnt: its template kept, its signature prepared
        buffers, prepared = wire.encode_prepared(prepared, one, limits)
        data = frame(buffers)
        wire.decode_repeated(data, limits) or wire.decode(bytes(data), limits)
    start = time.process_time()
    encoded = []
    for one in requests[half:]:
        buffers, prepared = wire.encode_prepared(prepared, one, limits)
        encoded.append(buffers)
    parts = {"RunGraph encode": time.process_time() - start}
    frames = [frame(buffers) for buffers in encoded]
    start = time.process_time()
    for data in frames:
        wire.decode_repeated(data, limits) or wire.decode(bytes(data), limits)
    parts["RunGraph decode"] = time.process_time() - start
    from transports import frame_templates
    if hasattr(frame_templates, "decode_step"):  # the worker's short path (bare_calls.py)
        whole = [bytes(data) for data in frames]
        start = time.process_time()
        for data in whole:
            frame_templates.decode_step(data, limits)
        parts["RunGraph decode_step (short)"] = time.process_time() - start
    conn = types.SimpleNamespace(prepared=None)  # (the bare server's connection keeps it)
    for _ in range(3):
        buffers = bare_io.prepared_reply(conn, reply, limits)
        data = frame(buffers)
        wire.decode_repeated(data, limits) or wire.decode(bytes(data), limits)
    start = time.process_time()
    for _ in frames:
        buffers = bare_io.small_pieces(b"", bare_io.prepared_reply(conn, reply, limits))
    parts["reply encode"] = time.process_time() - start
    if hasattr(conn.prepared, "encode_values"):  # the short path's reply from its values
        from transports.checksum import enabled
        values, summed = [entry.value for entry in reply.tensors], enabled()
        start = time.process_time()
        for _ in frames:
            bare_io.small_pieces(b"", conn.prepared.encode_values(values, summed))
        parts["reply encode_values (short)"] = time.process_time() - start
    data = frame(buffers)
    start = time.process_time()
    for _ in frames:
        wire.decode_repeated(data, limits) or wire.decode(bytes(data), limits)
    parts["reply decode"] = time.process_time() - start
    return {name: seconds / len(frames) * 1e6 for name, seconds in parts.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000, help="calls per figure and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are printed)")
    parser.add_argument("--inprocess", action="store_true",
                        help="the worker and the session in this process: CPU per step")
    parser.add_argument("--profile", metavar="FILE", help="with --inprocess: cProfile stats")
    args = parser.parse_args()
    if args.inprocess:
        import trio
        sys.path.insert(0, HERE)
        figures = []
        for index in range(args.rounds):
            figures.append(trio.run(_inprocess, args.calls,
                                    args.profile if index == 0 else None))
            print(f"round {index + 1}/{args.rounds}: {figures[-1][0]:.1f} us wall, "
                  f"{figures[-1][1]:.1f} us CPU per step (load average "
                  f"{os.getloadavg()[0]:.1f}); alone: " + ", ".join(
                      f"{name} {value:.1f} us" for name, value in figures[-1][2].items()),
                  flush=True)
        print(f"in-process trivial step, median of {args.rounds} rounds of {args.calls}: "
              f"{statistics.median(f[0] for f in figures):.1f} us wall, "
              f"{statistics.median(f[1] for f in figures):.1f} us CPU (both sides)")
        return
    rounds = []
    for index in range(args.rounds):
        rounds.append(measure(args.calls))
        print(f"round {index + 1}/{args.rounds} done (load average {os.getloadavg()[0]:.1f})",
              flush=True)
    print(f"\n{'figure':<15} {'wall us':>9} {'client CPU us':>14} {'peer CPU us':>12}   "
          f"medians of {args.rounds} rounds of {args.calls} calls")
    for name in rounds[0]:
        medians = [statistics.median(r[name][i] for r in rounds) for i in range(3)]
        print(f"{name:<15} {medians[0]:>9.1f} {medians[1]:>14.1f} {medians[2]:>12.1f}")


if __name__ == "__main__":
    main()
