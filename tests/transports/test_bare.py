"""The same-host bare-frame protocol (``transports.http.bare``): what the HTTP server enforces
holds on it too (token, limits, deadlines, a client leaving, garbage), and a channel falls back
to HTTP where a server does not speak it. The conformance suite runs over it as "bare"."""

from __future__ import annotations

import os
import socket
import struct

import numpy as np
import pytest
import trio
from loopback_ports import free_ports
from transport_fakes import FakeWorker

from transports.http import bare, cross_memory, same_host
from transports.http.client import TrioHttpChannel
from transports.http.guard import ConnectionLimits
from transports.http.server import open_http_server
from transports.messages import ErrorReply, RecvTensors, RegisterGraph, RemoteCallError, \
    RunGraph, TensorEntry
from transports.service import RPCS, TransportDeadlineExceeded, TransportUnavailable
from transports.wire import Decoder, Limits, encode

GENEROUS = 20
_INDEX = {rpc.method: index for index, rpc in enumerate(RPCS)}


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(GENEROUS)
    sock.connect(path)
    return sock


def _receive_all(sock: socket.socket) -> bytes:
    out = b""
    while data := sock.recv(65536):
        out += data
    return out


def _error_of(answer: bytes) -> ErrorReply:
    length, _, kind, _ = bare.REPLY.unpack_from(answer)
    assert kind == bare.ERROR
    decoder = Decoder()
    decoder.receive_data(answer[bare.REPLY.size:bare.REPLY.size + length])
    return decoder.next_event()


async def test_calls_take_it_with_the_token_and_the_server_counts_them():
    async with open_http_server(FakeWorker(), token="s3cret") as server:
        path = server.bare_path
        assert path == same_host.socket_path(server.port, "bare") and os.path.exists(path)
        assert os.stat(path).st_mode & 0o077 == 0
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(server.address, token="s3cret") as channel:
                for _ in range(3):
                    assert (await channel.health()).incarnation == 7
                assert channel.bare_calls == 3 and len(channel._bare_idle) == 1
                assert not channel._idle  # no HTTP connection was made
                assert "asyncflow_transport_same_host_calls_total 3" in \
                    await channel.metrics_text()  # (text calls take HTTP)
            assert server.statistics().same_host_calls == 3
            for token in ("wrong", None):
                async with TrioHttpChannel(server.address, token=token) as channel:
                    with pytest.raises(RemoteCallError, match="UNAUTHENTICATED.*401"):
                        await channel.health()
    assert not os.path.exists(path)  # removed when the server stops


async def test_garbage_is_refused_and_the_server_keeps_serving():
    async with open_http_server(FakeWorker()) as server:
        hello = bare.MAGIC + struct.pack("<I", 0)

        def probes() -> list:
            answers = []
            with _connect(server.bare_path) as sock:  # not the protocol at all
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                answers.append(_receive_all(sock))
            with _connect(server.bare_path) as sock:  # an rpc that does not exist
                sock.sendall(hello + bare.REQUEST.pack(0, 1, 999, 0, 5.0))
                answers.append(_receive_all(sock))
            with _connect(server.bare_path) as sock:  # a frame over the limits
                sock.sendall(hello + bare.REQUEST.pack(1 << 40, 2, _INDEX["run_graph"], 0, 5.0))
                answers.append(_receive_all(sock))
            with _connect(server.bare_path) as sock:  # bytes that are no frame
                sock.sendall(hello + bare.REQUEST.pack(24, 3, _INDEX["health"], 0, 5.0)
                             + b"\xff" * 24)
                answers.append(_receive_all(sock))
            with _connect(server.bare_path) as sock:  # a frame of another message
                frame = b"".join(encode(RecvTensors(1, ["k"])))
                sock.sendall(hello + bare.REQUEST.pack(len(frame), 4, _INDEX["health"], 0, 5.0)
                             + frame)
                answers.append(_receive_all(sock))
            with _connect(server.bare_path) as sock:  # a frame damaged in transit: DATA_LOSS
                frame = bytearray(b"".join(encode(RecvTensors(1, ["k"] * 40))))
                frame[40] ^= 0x20  # in its header, which its checksum covers
                sock.sendall(hello + bare.REQUEST.pack(len(frame), 5, _INDEX["recv_tensors"],
                                                       0, 5.0) + frame)
                answers.append(_receive_all(sock))
            return answers

        with trio.fail_after(GENEROUS):
            answers = await trio.to_thread.run_sync(probes)
            assert answers[0] == b""  # closed without an answer
            assert all(a[:1] == bare.ACCEPTED for a in answers[1:])
            errors = [_error_of(a[1:]) for a in answers[1:]]
            assert [e.code for e in errors] == ["INVALID_ARGUMENT", "RESOURCE_EXHAUSTED",
                                                "INVALID_ARGUMENT", "INVALID_ARGUMENT",
                                                "DATA_LOSS"]
            assert "Checksum does not match" in errors[4].message, errors[4].message
            assert "unknown rpc index 999" in errors[0].message
            assert "health takes a Health frame, got RecvTensors" in errors[3].message
            async with TrioHttpChannel(server.address) as channel:
                assert (await channel.health()).incarnation == 7
                assert channel.bare_calls == 1


async def test_a_silent_server_is_a_deadline_not_a_hang(autojump_clock):
    async with open_http_server(FakeWorker(), same_host=False) as server:
        listener, path = same_host.listen(server.port, "bare")
        accepted = []

        async def silent(stream):  # accepts, reads the handshake, never answers
            accepted.append(stream)
            await trio.sleep_forever()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, silent, [listener])
            async with TrioHttpChannel(server.address) as channel:
                start = trio.current_time()
                with pytest.raises(TransportDeadlineExceeded, match="health"):
                    await channel.health(timeout=3)
                assert trio.current_time() - start == pytest.approx(3)
            nursery.cancel_scope.cancel()
        same_host.unlink(path)
        assert accepted


async def test_a_server_that_answers_nothing_after_the_handshake(autojump_clock):
    async with open_http_server(FakeWorker(), same_host=False) as server:
        listener, path = same_host.listen(server.port, "bare")

        async def accept_then_silent(stream):
            # (Only a handshake is answered: a connection that ends before one, a probe of the
            # socket, is let go, not answered into a broken pipe.)
            if (await stream.receive_some(1 << 16))[:len(bare.MAGIC)] != bare.MAGIC:
                return
            await stream.send_all(bare.ACCEPTED)
            await trio.sleep_forever()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, accept_then_silent, [listener])
            async with TrioHttpChannel(server.address) as channel:
                with pytest.raises(TransportDeadlineExceeded, match="run_graph"):
                    await channel.run_graph(RunGraph("g", 1, [], []), timeout=2)
            nursery.cancel_scope.cancel()
        same_host.unlink(path)


async def test_the_calls_deadline_reaches_the_handler(autojump_clock):
    worker = FakeWorker()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            with pytest.raises(TransportDeadlineExceeded):
                await channel.recv_tensors(RecvTensors(1, ["never"]), timeout=5)
            await worker.recv_cancelled.wait()  # (cancelled: client gone, or its own deadline)
            assert channel.bare_calls == 0 and channel._bare


async def test_the_server_answers_a_handler_past_its_deadline():
    # Real time (a thread speaks to the server): the call's 0.05 s plus the server's grace.
    worker = FakeWorker()
    async with open_http_server(worker) as server:

        def call() -> bytes:
            with _connect(server.bare_path) as sock:
                frame = b"".join(encode(RecvTensors(1, ["never"])))
                sock.sendall(bare.MAGIC + struct.pack("<I", 0) + bare.REQUEST.pack(
                    len(frame), 9, _INDEX["recv_tensors"], 0, 0.05) + frame)
                answer = b""
                while len(answer) < 1 + bare.REPLY.size or len(answer) < 1 + bare.REPLY.size \
                        + bare.REPLY.unpack_from(answer, 1)[0]:
                    data = sock.recv(65536)
                    assert data, f"closed after {answer!r}"
                    answer += data
                return answer

        with trio.fail_after(GENEROUS):
            answer = await trio.to_thread.run_sync(call)
        error = _error_of(answer[1:])
        assert error.code == "DEADLINE_EXCEEDED" and "recv_tensors" in error.message
        assert worker.recv_cancelled.is_set()


async def test_a_client_that_leaves_cancels_its_handler():
    worker = FakeWorker()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                with trio.move_on_after(0.2):
                    await channel.recv_tensors(RecvTensors(1, ["never"]))
                await worker.recv_cancelled.wait()
                assert channel._bare_idle == []  # the connection was closed, not pooled
                assert (await channel.health()).incarnation == 7
                assert channel.bare_calls == 1


async def test_a_pooled_connection_whose_call_is_cancelled_is_closed_not_pooled_again():
    """The usual call takes the idle connection inline: cancelled midway (its answer unread),
    that connection is closed, never handed to the next call, which answers its own reply."""
    worker = FakeWorker()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                assert (await channel.health()).incarnation == 7
                [pooled] = channel._bare_idle
                with trio.move_on_after(0.2):
                    await channel.recv_tensors(RecvTensors(1, ["never"]))
                await worker.recv_cancelled.wait()
                assert channel._bare_idle == [] and pooled.sock.fileno() == -1
                assert (await channel.health()).incarnation == 7
                assert channel.bare_calls == 2 and pooled not in channel._bare_idle


async def test_concurrent_calls_take_concurrent_connections_and_reuse_them():
    worker = FakeWorker()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                async with trio.open_nursery() as nursery:
                    replies = []

                    async def receive():
                        replies.append(await channel.recv_tensors(RecvTensors(3, ["k"])))

                    nursery.start_soon(receive)
                    await worker.waiter_arrived.wait()
                    assert (await channel.health()).incarnation == 7
                    handle = await channel.register_graph(RegisterGraph({"nodes": []}, "s"))
                    await channel.run_graph(RunGraph(
                        handle.graph_handle, 3, [TensorEntry("k", np.arange(3.0))], []))
                np.testing.assert_array_equal(replies[0].tensors[0].value, np.arange(3.0))
                assert len(channel._bare_idle) == 2 and channel.bare_calls == 4


async def test_a_connection_the_server_closed_while_idle_is_replaced():
    (port,) = free_ports(1)  # (reserved: the restart below binds it again)
    async with open_http_server(FakeWorker(), port=port) as server:
        channel = TrioHttpChannel(server.address)
        with trio.fail_after(GENEROUS):
            await channel.health()
    assert len(channel._bare_idle) == 1
    async with open_http_server(FakeWorker(), port=port):
        with trio.fail_after(GENEROUS):
            assert (await channel.health()).incarnation == 7
    assert channel.bare_calls == 2 and len(channel._bare_idle) == 1
    await channel.aclose()


async def test_tensors_cross_intact_and_large_replies_are_lent():
    worker = FakeWorker()
    value = np.random.default_rng(3).standard_normal((1024, 300))  # 2.3 MiB: lent
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))
                          ).graph_handle
                reply = await channel.run_graph(RunGraph(handle, 1, [TensorEntry("x", value)],
                                                         ["x"]))
                small = await channel.run_graph(RunGraph(handle, 2, [TensorEntry("y", np.asarray(2.0))],
                                                         ["y"]))
            assert channel.bare_calls == 3
            assert channel.lent_replies == (1 if cross_memory.available() else 0)
    np.testing.assert_array_equal(reply.tensors[0].value, value)
    assert small.tensors[0].value == 2.0


async def test_a_server_without_it_is_spoken_to_over_http(monkeypatch):
    # An older server: the HTTP Unix socket only.
    async with open_http_server(FakeWorker()) as server:
        same_host.unlink(server.bare_path)
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                await channel.health()
                await channel.health()
            assert not channel._bare and channel.bare_calls == 0
            (conn,) = channel._idle
            assert conn.stream.socket.family == socket.AF_UNIX
    # Switched off on the server: no socket; the client goes to TCP.
    monkeypatch.setenv(same_host.ENV, "0")
    async with open_http_server(FakeWorker()) as server:
        assert server.bare_path is None
        monkeypatch.delenv(same_host.ENV)
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                await channel.health()
            assert not channel._bare and channel._idle[0].stream.socket.family == socket.AF_INET
    # Switched off on the client: HTTP on the same-host socket.
    async with open_http_server(FakeWorker()) as server:
        monkeypatch.setenv(same_host.ENV, "0")
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                await channel.health()
            assert not channel._bare and server.statistics().same_host_calls == 0


async def test_a_peer_that_does_not_speak_it_is_left_for_http():
    async with open_http_server(FakeWorker()) as server:
        same_host.unlink(server.bare_path)
        listener, path = same_host.listen(server.port, "bare")

        async def hang_up(stream):
            await stream.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, hang_up, [listener])
            async with TrioHttpChannel(server.address) as channel:
                with trio.fail_after(GENEROUS):
                    assert (await channel.health()).incarnation == 7
                assert not channel._bare and len(channel._idle) == 1
            nursery.cancel_scope.cancel()
        same_host.unlink(path)


async def test_hung_up_on_at_the_connection_limit_it_speaks_http_then_goes_back(autojump_clock):
    # Two connections at most; a busy channel's two waiting calls hold both.
    worker = FakeWorker()
    async with open_http_server(worker, connection_limits=ConnectionLimits(max_connections=2)) \
            as server, TrioHttpChannel(server.address) as busy, \
            TrioHttpChannel(server.address) as channel, trio.open_nursery() as nursery:
        scopes = [trio.CancelScope() for _ in range(2)]
        replies = []

        async def receive(scope):
            with scope:
                replies.append(await busy.recv_tensors(RecvTensors(1, ["k"])))

        for scope in scopes:
            nursery.start_soon(receive, scope)
        with trio.fail_after(GENEROUS):
            while worker.waiting < 2:
                await worker.waiter_arrived.wait()
                worker.waiter_arrived = trio.Event()
            # Every connection is busy: the bare handshake is hung up on, and so is HTTP.
            with pytest.raises(TransportUnavailable):
                await channel.health()
            assert not channel._bare and channel._bare_again is not None
            assert server._guard.refused == 2 and channel.bare_calls == 0
            scopes[0].cancel()  # one busy call leaves: room for one connection
            while len(server._guard.connections) > 1:
                await trio.sleep(0.01)
            # Within the back-off the channel speaks HTTP without trying the bare socket.
            assert (await channel.health()).incarnation == 7
            assert channel.bare_calls == 0 and len(channel._idle) == 1
            assert server._guard.refused == 2
            # After it, the next call takes the bare socket again (the server evicts the idle
            # HTTP connection to make room), and the calls after it stay there.
            await trio.sleep(0.5)
            for calls in (1, 2):
                assert (await channel.health()).incarnation == 7
                assert channel._bare and channel.bare_calls == calls
            assert channel._bare_again is None and server._guard.evicted == 1
            handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))).graph_handle
            await channel.run_graph(RunGraph(handle, 1, [TensorEntry("k", np.arange(2.0))], []))
    np.testing.assert_array_equal(replies[0].tensors[0].value, np.arange(2.0))
    assert scopes[0].cancelled_caught and len(replies) == 1


async def test_while_it_backs_off_the_bare_connections_it_has_serve_on(autojump_clock):
    async with open_http_server(FakeWorker()) as server, \
            TrioHttpChannel(server.address) as channel:
        with trio.fail_after(GENEROUS):
            await channel.health()  # one bare connection, pooled
            channel._bare, channel._bare_again = False, trio.current_time() + 10  # (hung up on)
            await channel.health()
            assert channel.bare_calls == 2 and not channel._idle
            async with trio.open_nursery() as nursery:  # two at once: one needs a new connection
                nursery.start_soon(channel.health)
                nursery.start_soon(channel.health)
            assert channel.bare_calls == 3 and len(channel._idle) == 1  # ... over HTTP
            assert len(channel._bare_idle) == 1 and not channel._bare
            await trio.sleep(10)
            async with trio.open_nursery() as nursery:  # after the back-off: a new bare one
                nursery.start_soon(channel.health)
                nursery.start_soon(channel.health)
            assert channel.bare_calls == 5 and len(channel._bare_idle) == 2 and channel._bare


async def test_the_back_off_doubles_while_the_server_hangs_up(autojump_clock):
    async with open_http_server(FakeWorker()) as server:
        same_host.unlink(server.bare_path)
        listener, path = same_host.listen(server.port, "bare")

        async def hang_up(stream):
            await stream.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, hang_up, [listener])
            async with TrioHttpChannel(server.address) as channel:
                waits = []
                for _ in range(8):
                    with trio.fail_after(GENEROUS):
                        assert (await channel.health()).incarnation == 7  # over HTTP
                    waits.append(channel._bare_again - trio.current_time())
                    await trio.sleep(waits[-1])
                assert waits == pytest.approx([0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0])
                assert channel.bare_calls == 0 and len(channel._idle) == 1
            nursery.cancel_scope.cancel()
        same_host.unlink(path)


def test_request_and_reply_headers_are_fixed_and_small():
    assert bare.REQUEST.size == 24 and bare.REPLY.size == 16
    assert not any(bare.MAGIC.startswith(m.encode()) for m in ("GET", "POST", "PUT", "DELETE"))
    assert Limits().max_frame_bytes < 1 << 64


class _LendingWorker(FakeWorker):
    """A handler that runs RunGraph in the call's scope when a transport lends it (its
    run_graph is run_graph_in_scope without one, as the worker's is)."""

    async def run_graph(self, request: RunGraph) -> object:
        return await self.run_graph_in_scope(request, None)

    async def run_graph_in_scope(self, request: RunGraph, scope) -> object:
        if scope is not None:
            self.calls.append("run_graph_in_scope")
        return await FakeWorker.run_graph(self, request)


class _OverridingWorker(_LendingWorker):
    """A subclass that overrides run_graph alone (what a handler's RunGraph does)."""

    async def run_graph(self, request: RunGraph) -> object:
        self.calls.append("override")
        return await super().run_graph(request)


@pytest.mark.parametrize("handler_class, instance_patch, lent", [
    (_LendingWorker, False, True), (_OverridingWorker, False, False),
    (_LendingWorker, True, False)])
async def test_a_run_graph_overridden_below_run_graph_in_scope_is_the_one_called(
        handler_class, instance_patch, lent):
    """The bare server lends its call's scope to ``run_graph_in_scope`` only where that is
    the handler's RunGraph: a subclass (or an instance) overriding ``run_graph`` alone is
    served by its override, as over HTTP, never bypassed."""
    handler = handler_class()
    if instance_patch:
        original = handler.run_graph

        async def patched(request):
            handler.calls.append("override")
            return await original(request)
        handler.run_graph = patched
    async with open_http_server(handler) as server:
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(server.address) as channel:
                handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))
                          ).graph_handle
                value = np.arange(3, dtype=np.float32)
                reply = await channel.run_graph(RunGraph(handle, 1, [TensorEntry("x", value)],
                                                         ["x"]))
                assert channel.bare_calls == 2
    np.testing.assert_array_equal(reply.tensors[0].value, value)
    assert ("run_graph_in_scope" in handler.calls) == lent
    assert ("override" in handler.calls) == (not lent)
