"""A bare same-host connection's idle timeout, kept by one sweep task for all connections
(``BareService._sweep_idle``): a connection that waits for its next call is closed between the
idle timeout and a quarter past it, counted as timed out; a call that runs longer than the idle
timeout is answered, its connection kept; each connection's idle time counts from its own last
answer; a call whose bytes arrive as the sweep closes its connection is answered whole or never
run; the sweep sets no deadline while no connection waits for a call. Real Unix sockets, trio's
autojump clock.
"""

from __future__ import annotations

import math
import os
import struct

import numpy as np
import trio
import trio.testing
from transport_fakes import FakeWorker

from transports import wire
from transports.http import bare
from transports.http.guard import ConnectionLimits
from transports.http.server import open_http_server
from transports.messages import HealthReply, RecvTensorsReply, RunGraphReply
from transports.service import RPCS

IDLE = 5.0
LIMITS = ConnectionLimits(header_timeout_s=1.0, body_timeout_s=1.0, idle_timeout_s=IDLE)
HELLO = bare.MAGIC + struct.pack("<I", 0)
INDEX = {rpc.method: index for index, rpc in enumerate(RPCS)}


def _call(rpc: str, message, call_id: int = 1) -> bytes:
    frame = b"".join(bytes(b) for b in wire.encode(message))
    return bare.REQUEST.pack(len(frame), call_id, INDEX[rpc], 0, 3600.0) + frame


async def _answer(stream, pending: bytes = b""):
    """The next answer's message on ``stream``, and the bytes read past it."""
    while len(pending) < bare.REPLY.size:
        pending += await stream.receive_some(1 << 16)
    length, _, kind, _ = bare.REPLY.unpack_from(pending)
    pending = pending[bare.REPLY.size:]
    while len(pending) < length:
        pending += await stream.receive_some(1 << 16)
    assert kind == bare.FRAME
    return wire.decode(pending[:length]), pending[length:]


async def _connect(path: str):
    stream = await trio.open_unix_socket(path)
    await stream.send_all(HELLO)
    assert await stream.receive_some(1) == bare.ACCEPTED
    return stream


async def _closed_at(stream) -> float:
    """When the server closes ``stream`` (EOF or reset)."""
    try:
        while await stream.receive_some(1 << 16):
            pass
    except trio.BrokenResourceError:
        pass
    return trio.current_time()


async def test_an_idle_connection_is_closed_after_the_idle_timeout(autojump_clock):
    async with open_http_server(FakeWorker(), connection_limits=LIMITS) as server:
        stream = await _connect(server.bare_path)
        async with stream:
            await stream.send_all(_call("health", wire.Health()))
            reply, _ = await _answer(stream)
            assert isinstance(reply, HealthReply)
            answered = trio.current_time()
            with trio.fail_after(4 * IDLE):
                closed = await _closed_at(stream)
        assert IDLE <= closed - answered <= 1.25 * IDLE + 0.01
        assert server._guard.timed_out == 1
        stream = await _connect(server.bare_path)  # and it serves on
        async with stream:
            await stream.send_all(_call("health", wire.Health()))
            assert isinstance((await _answer(stream))[0], HealthReply)


async def test_a_call_longer_than_the_idle_timeout_is_answered_and_its_connection_kept(
        autojump_clock):
    worker = FakeWorker()
    async with open_http_server(worker, connection_limits=LIMITS) as server:
        waiting = await _connect(server.bare_path)
        async with waiting:
            await waiting.send_all(_call("recv_tensors", wire.RecvTensors(1, ["x"])))
            await trio.sleep(3 * IDLE)  # the call waits three idle timeouts
            feeder = await _connect(server.bare_path)
            async with feeder:
                handle = (await _answer_of(feeder, "register_graph",
                                           wire.RegisterGraph({"nodes": []}, "s"))).graph_handle
                value = np.arange(3, dtype=np.float32)
                reply = await _answer_of(feeder, "run_graph", wire.RunGraph(
                    handle, 1, [wire.TensorEntry("x", value)], ["x"], request_id=1))
                assert isinstance(reply, RunGraphReply)
            reply, _ = await _answer(waiting)
            assert isinstance(reply, RecvTensorsReply)
            np.testing.assert_array_equal(reply.tensors[0].value, value)
            answered = trio.current_time()
            await trio.sleep(0.5 * IDLE)  # idle for less than the timeout: still served
            await waiting.send_all(_call("health", wire.Health(), call_id=2))
            assert isinstance((await _answer(waiting))[0], HealthReply)
            answered = trio.current_time()
            with trio.fail_after(4 * IDLE):
                closed = await _closed_at(waiting)
            assert IDLE <= closed - answered <= 1.25 * IDLE + 0.01
        assert server._guard.timed_out >= 1


async def _answer_of(stream, rpc: str, message):
    await stream.send_all(_call(rpc, message))
    return (await _answer(stream))[0]


async def test_an_idle_timeout_of_zero_closes_a_connection_once_it_waits(autojump_clock):
    limits = ConnectionLimits(header_timeout_s=1.0, body_timeout_s=1.0, idle_timeout_s=0.0)
    async with open_http_server(FakeWorker(), connection_limits=limits) as server:
        stream = await _connect(server.bare_path)
        async with stream:
            answered = trio.current_time()
            with trio.fail_after(1.0):
                closed = await _closed_at(stream)
            assert closed - answered <= bare._MIN_SWEEP_S + 0.001
        assert server._guard.timed_out == 1


async def _answer_or_closed(stream):
    """The next answer's message on ``stream``, or None when the server closes it first."""
    pending = b""
    try:
        while len(pending) < bare.REPLY.size or len(pending) < bare.REPLY.size + \
                bare.REPLY.unpack_from(pending)[0]:
            data = await stream.receive_some(1 << 16)
            if not data:
                return None
            pending += data
    except trio.BrokenResourceError:
        return None
    return wire.decode(pending[bare.REPLY.size:])


class _Checkpointing(FakeWorker):
    """Health that records its start and its end, with a checkpoint between."""

    def __init__(self) -> None:
        super().__init__()
        self.started = self.finished = 0

    async def health(self, request):
        self.started += 1
        await trio.lowlevel.checkpoint()
        self.finished += 1
        return await super().health(request)


async def test_a_call_arriving_as_the_sweep_closes_is_served_whole_or_not_at_all(autojump_clock):
    # The call's bytes and the sweep's expiry wake the server's task and the sweep in one
    # batch (trio runs a batch in either order): the call is read, so it must be answered;
    # a connection that the sweep closed before its task read the call must not run it.
    worker = _Checkpointing()
    async with open_http_server(worker, connection_limits=LIMITS) as server:
        for attempt in range(16):
            stream = await _connect(server.bare_path)
            async with stream:
                await stream.send_all(_call("health", wire.Health()))
                assert isinstance(await _answer_or_closed(stream), HealthReply)
                await trio.testing.wait_all_tasks_blocked()  # the server waits for a call
                started, timed_out = worker.started, server._guard.timed_out
                os.write(stream.socket.fileno(), _call("health", wire.Health(), call_id=2))
                autojump_clock.jump(2 * IDLE)  # past the idle timeout, the call's bytes there
                reply = await _answer_or_closed(stream)
            if reply is None:  # refused whole: never run, counted as timed out
                assert worker.started == started, f"attempt {attempt}: run, not answered"
                assert server._guard.timed_out == timed_out + 1
            else:
                assert isinstance(reply, HealthReply)
                assert worker.finished == worker.started == started + 1
                await trio.testing.wait_all_tasks_blocked()
                assert server._guard.timed_out == timed_out  # (closed by its client)


async def test_the_sweep_sleeps_while_no_connection_waits_for_a_call(autojump_clock):
    worker = FakeWorker()
    async with open_http_server(worker, connection_limits=LIMITS) as server:
        stream = await trio.open_unix_socket(server.bare_path)  # the first connection fails
        async with stream:                                       # its handshake
            await stream.send_all(b"NOTBARE!" + struct.pack("<I", 0))
            assert await _closed_at(stream) >= 0
        await trio.testing.wait_all_tasks_blocked()
        assert trio.lowlevel.current_statistics().seconds_to_next_deadline == math.inf
        sweeps = server._bare.sweeps
        await trio.sleep(100 * IDLE)  # an idle server does not wake
        assert server._bare.sweeps == sweeps
        busy = await _connect(server.bare_path)
        async with busy:  # a connection whose call waits (its deadline, 3600 s + grace, alone)
            await busy.send_all(_call("recv_tensors", wire.RecvTensors(1, ["x"])))
            await trio.testing.wait_all_tasks_blocked()
            assert worker.waiting == 1
            # (it waited for its call a moment after its handshake: the sweep looks once more)
            await trio.sleep(1.5 * IDLE)
            assert trio.lowlevel.current_statistics().seconds_to_next_deadline > 100 * IDLE
            sweeps = server._bare.sweeps
            await trio.sleep(100 * IDLE)  # no sweep while every connection is busy
            assert server._bare.sweeps == sweeps
            idle = await _connect(server.bare_path)  # and one waiting: closed on time
            async with idle:
                await idle.send_all(_call("health", wire.Health()))
                await _answer(idle)
                answered = trio.current_time()
                with trio.fail_after(4 * IDLE):
                    closed = await _closed_at(idle)
                assert IDLE <= closed - answered <= 1.25 * IDLE + 0.01
            await trio.testing.wait_all_tasks_blocked()
            assert server._bare.sweeps - sweeps <= 3
            assert trio.lowlevel.current_statistics().seconds_to_next_deadline > 100 * IDLE


async def test_many_idle_connections_are_each_closed_on_time(autojump_clock):
    count = 200
    async with open_http_server(FakeWorker(), connection_limits=LIMITS) as server:
        streams = [await _connect(server.bare_path) for _ in range(count)]
        answered, closed = [0.0] * count, [0.0] * count
        for index, stream in enumerate(streams):  # answered over one idle timeout, in turn
            await stream.send_all(_call("health", wire.Health()))
            await _answer(stream)
            answered[index] = trio.current_time()
            await trio.sleep(IDLE / count)
        sweeps = server._bare.sweeps

        async def watch(index: int) -> None:
            closed[index] = await _closed_at(streams[index])

        with trio.fail_after(4 * IDLE):
            async with trio.open_nursery() as nursery:
                for index in range(count):
                    nursery.start_soon(watch, index)
        for stream in streams:
            await stream.aclose()
        late = [closed[i] - answered[i] for i in range(count)]
        assert IDLE <= min(late) and max(late) <= 1.25 * IDLE + 0.01
        assert server._guard.timed_out == count
        assert server._bare.sweeps - sweeps <= 12  # about one a quarter timeout, not one each


async def test_silent_clients_are_closed_by_the_header_or_the_idle_timeout(autojump_clock):
    async with open_http_server(FakeWorker(), connection_limits=LIMITS) as server:
        silent = await trio.open_unix_socket(server.bare_path)  # not even a handshake
        async with silent:
            start = trio.current_time()
            with trio.fail_after(4 * IDLE):
                assert await _closed_at(silent) - start <= LIMITS.header_timeout_s + 0.01
        greeted = await _connect(server.bare_path)  # a handshake, then no call
        async with greeted:
            start = trio.current_time()
            with trio.fail_after(4 * IDLE):
                closed = await _closed_at(greeted)
            assert IDLE <= closed - start <= 1.25 * IDLE + 0.01
        assert server._guard.timed_out == 2
