"""The bare server runs a connection's calls in one cancel scope (``transports.http.call_scope``):
entered once for a run of calls, its deadline set only for a call's window, entered afresh
after a call was cancelled; a RunGraph handler's lent share of it acts only while its call runs
(a step's state keeps what it was lent: cancelling it later cancels nothing)."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import trio
from transport_fakes import FakeWorker

from transports import wire
from transports.http import bare
from transports.http.call_scope import LentScope, only_cancelled
from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server
from transports.messages import RecvTensors, RegisterGraph, RemoteCallError, RunGraph, \
    RunGraphReply, TensorEntry
from transports.service import RPCS, TransportUnavailable

GENEROUS = 20


class _KeepingWorker(FakeWorker):
    """Keeps every scope lent to its RunGraph (as a worker's step state does); a graph
    ``{"cancel": True}`` cancels its own lent scope (as an AbortStep does) and waits."""

    def __init__(self) -> None:
        super().__init__()
        self.lent: list = []
        self.deadlines: list = []

    async def run_graph(self, request: RunGraph) -> object:
        return await self.run_graph_in_scope(request, None)

    async def run_graph_in_scope(self, request: RunGraph, scope) -> object:
        self.lent.append(scope)
        self.deadlines.append(scope.deadline - trio.current_time())  # (seconds left)
        if self.graphs.get(request.graph_handle, {}).get("cancel"):
            scope.cancel()
            await trio.sleep_forever()
        return await FakeWorker.run_graph(self, request)


def _served(server):
    (conn,) = server._bare._open  # the one connection the channel keeps
    return conn


@contextlib.asynccontextmanager
async def _keeping_channel():
    """A ``_KeepingWorker``'s server, a channel to it and a graph registered there:
    (handler, server, channel, the graph's handle), within ``GENEROUS`` seconds."""
    handler = _KeepingWorker()
    async with open_http_server(handler) as server:
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(server.address) as channel:
                handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))
                          ).graph_handle
                yield handler, server, channel, handle


async def _step(channel, handle, step_id, **kwargs):
    value = np.arange(3, dtype=np.float32)
    reply = await channel.run_graph(RunGraph(handle, step_id, [TensorEntry("x", value)], ["x"]),
                                    **kwargs)
    np.testing.assert_array_equal(reply.tensors[0].value, value)


async def test_a_connections_calls_share_one_scope_with_a_deadline_only_in_their_window():
    async with _keeping_channel() as (handler, server, channel, handle):
        scope = _served(server).calls
        for step_id in range(1, 4):
            await _step(channel, handle, step_id, timeout=5.0)
            await channel.health()
            assert _served(server).calls is scope  # no scope entered per call
            assert scope.deadline == math.inf and not scope.cancel_called
        # the window's deadline: the call's timeout and the grace, seen by the handler
        # (bounded by them; what went before the handler is not timed: a loaded machine)
        assert all(1.0 < left <= 5.0 + 1.0 for left in handler.deadlines)
        assert all(type(lent) is LentScope for lent in handler.lent)
        assert channel.bare_calls == 7


async def test_a_kept_lent_scope_cancels_nothing_once_its_call_ended():
    async with _keeping_channel() as (handler, server, channel, handle):
        await _step(channel, handle, 1)
        kept = handler.lent[0]
        kept.cancel()  # (a later AbortStep of a step whose state kept it)
        kept.deadline = trio.current_time() - 1
        assert not kept.cancel_called and kept.deadline == math.inf
        scope = _served(server).calls
        assert not scope.cancel_called and scope.deadline == math.inf
        for step_id in range(2, 5):  # the same connection serves on, uncancelled
            await _step(channel, handle, step_id)
        assert _served(server).calls is scope and len(channel._bare_idle) == 1


async def test_a_cancelled_call_is_answered_and_the_next_runs_in_a_fresh_scope():
    async with _keeping_channel() as (handler, server, channel, handle):
        cancelling = (await channel.register_graph(RegisterGraph(
            {"nodes": [], "cancel": True}, "s"))).graph_handle
        conn = _served(server)
        spent = conn.calls
        with pytest.raises(RemoteCallError, match="CANCELLED") as caught:
            await _step(channel, cancelling, 1)
        assert caught.value.code == "CANCELLED"
        assert spent.cancel_called and _served(server) is conn  # answered, not closed
        await _step(channel, handle, 2)
        await channel.health()
        assert conn.calls is not spent and not conn.calls.cancel_called
        assert len(channel._bare_idle) == 1 and channel.bare_calls == 5


class _LateCancelWorker(FakeWorker):
    """A RunGraph whose lent scope is cancelled as its step ends, after its last wait (an
    AbortStep, a Reset, the server's close or the step's deadline landing in the batch that
    resumes it): it returns its reply all the same, one whose send waits (4 MiB)."""

    async def run_graph(self, request: RunGraph) -> object:
        return await self.run_graph_in_scope(request, None)

    async def run_graph_in_scope(self, request: RunGraph, scope) -> object:
        scope.cancel()
        return RunGraphReply([TensorEntry("x", np.arange(1 << 20, dtype=np.float32))])


@pytest.mark.parametrize("lend", [False, True])
async def test_an_answer_its_handler_returned_in_a_cancelled_scope_is_sent_whole(lend):
    """The scope is spent once cancelled, and the answer's send waits (a large reply, or a lent
    one's verdict): it is sent out of that scope, whole, and the connection serves on (as when
    each call had a scope of its own, left before the send), not cut at the send's first wait."""
    async with open_http_server(_LateCancelWorker()) as server:
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(server.address) as channel:
                await channel.health()
                channel._lend = channel._lend and lend
                conn = _served(server)
                spent = conn.calls
                reply = await channel.run_graph(RunGraph("g", 1, [], ["x"]))
                np.testing.assert_array_equal(reply.tensors[0].value,
                                              np.arange(1 << 20, dtype=np.float32))
                assert spent.cancel_called and _served(server) is conn
                assert (await channel.health()).incarnation == 7  # the same connection
                assert conn.calls is not spent and not conn.active
                assert len(channel._bare_idle) == 1 and channel.bare_calls == 3


def _request(rpc: str, message, call_id: int, flags: int = 0, timeout: float = 5.0) -> bytes:
    frame = b"".join(bytes(b) for b in wire.encode(message))
    index = next(i for i, one in enumerate(RPCS) if one.method == rpc)
    return bare.REQUEST.pack(len(frame), call_id, index, flags, timeout) + frame


async def test_a_cancelled_one_way_call_leaves_its_connection_serving_in_a_fresh_scope(
        autojump_clock):
    """A one-way call past its deadline is cancelled and not answered; the connection's next
    call runs in a fresh scope and is answered."""
    handler = FakeWorker()
    async with open_http_server(handler) as server:
        stream = await trio.open_unix_socket(server.bare_path)
        async with stream:
            await stream.send_all(bare.MAGIC + b"\0\0\0\0")
            assert await stream.receive_some(1) == bare.ACCEPTED
            await stream.send_all(_request("recv_tensors", wire.RecvTensors(3, ["never"]), 1,
                                           bare.ONE_WAY, timeout=0.5))
            await handler.waiter_arrived.wait()
            conn = _served(server)
            spent = conn.calls
            await handler.recv_cancelled.wait()  # (its deadline: the timeout and the grace)
            await stream.send_all(_request("health", wire.Health(), 2))
            answer = b""
            while len(answer) < bare.REPLY.size or len(answer) < bare.REPLY.size + \
                    bare.REPLY.unpack_from(answer)[0]:
                data = await stream.receive_some(1 << 16)
                assert data, "the connection was closed"
                answer += data
            length, call_id, kind, _ = bare.REPLY.unpack_from(answer)
            assert (call_id, kind) == (2, bare.FRAME)
            assert wire.decode(answer[bare.REPLY.size:]).incarnation == 7
            assert spent.cancel_called and conn.calls is not spent
            assert not conn.calls.cancel_called and conn.unsent is None


async def test_only_a_cancel_or_a_group_of_cancels_is_taken_for_the_calls():
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as exc:
            cancelled = exc
            raise
    assert only_cancelled(cancelled)
    assert only_cancelled(BaseExceptionGroup("g", [cancelled, BaseExceptionGroup(
        "h", [cancelled])]))
    assert not only_cancelled(ValueError("x"))
    assert not only_cancelled(BaseExceptionGroup("g", [cancelled, ValueError("x")]))


async def test_an_enclosing_cancel_goes_on_up_through_the_calls_scope():
    """A handler cancelled by a scope around the server (not the call's) is not answered as a
    cancelled call: the Cancelled goes on up and ends the server."""
    handler = FakeWorker()
    with trio.fail_after(GENEROUS):
        with trio.CancelScope() as outer:
            async with open_http_server(handler) as server:
                async with TrioHttpChannel(server.address) as channel:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(channel.recv_tensors, RecvTensors(1, ["never"]))
                        await handler.waiter_arrived.wait()
                        assert not _served(server).calls.cancel_called
                        outer.cancel()
        assert outer.cancelled_caught and handler.recv_cancelled.is_set()


async def _pooled(server):
    """A channel to ``server`` with one pooled bare connection: its next call without a
    timeout takes the path without a cancel scope of its own."""
    channel = TrioHttpChannel(server.address)
    await channel.health()
    assert len(channel._bare_idle) == 1
    return channel


async def test_closing_the_channel_ends_a_call_without_a_scope_and_its_handler():
    handler = FakeWorker()
    async with open_http_server(handler) as server:
        with trio.fail_after(GENEROUS):
            channel = await _pooled(server)
            outcome = []

            async def receive() -> None:
                with pytest.raises(TransportUnavailable,
                                   match="closed during recv_tensors") as caught:
                    await channel.recv_tensors(RecvTensors(9, ["never"]))
                outcome.append(caught.value)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(receive)
                await handler.waiter_arrived.wait()
                assert not channel._in_flight and len(channel._busy) == 1  # no scope: its conn
                await channel.aclose()
            await handler.recv_cancelled.wait()  # its connection closed: the server saw it go
            assert len(outcome) == 1 and not channel._busy
            assert channel.bare_calls == 1 and server.statistics().same_host_calls == 2
            with pytest.raises(TransportUnavailable, match="is closed"):
                await channel.health()


async def test_an_enclosing_scope_cancels_a_call_without_a_scope_and_its_handler():
    handler = FakeWorker()
    async with open_http_server(handler) as server:
        with trio.fail_after(GENEROUS):
            channel = await _pooled(server)
            async with channel:
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(channel.recv_tensors, RecvTensors(9, ["never"]))
                        await handler.waiter_arrived.wait()
                        assert not channel._in_flight
                        scope.cancel()
                await handler.recv_cancelled.wait()
                assert not channel._bare_idle and not channel._busy  # closed, not pooled
                assert (await channel.health()).incarnation == 7  # on a new connection
                assert len(channel._bare_idle) == 1
