"""A bare same-host connection's idle timeout, kept by one sweep task for all connections
(``BareService._sweep_idle``): a connection that waits for its next call is closed between the
idle timeout and a quarter past it, counted as timed out; a call that runs longer than the idle
timeout is answered, its connection kept; each connection's idle time counts from its own last
answer. Real Unix sockets, trio's autojump clock.
"""

from __future__ import annotations

import struct

import numpy as np
import trio
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
