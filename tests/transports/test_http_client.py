"""TrioHttpChannel specifics: keep-alive, stale connections, cancellation, broken peers.

The conformance suite (``test_transport_conformance.py``) runs every call through this channel
against the aiohttp server too; here are the connection-level behaviours, against the real
server on 127.0.0.1 or small raw trio servers that misbehave on purpose (bounded waits).
"""

from __future__ import annotations

import socket

import numpy as np
import pytest
import trio
from loopback_ports import bindable, free_ports
from transport_fakes import FakeWorker

from transports import wire
from transports.http.client import TrioHttpChannel
from transports.http.protocol import FRAME_CONTENT_TYPE
from transports.http.server import open_http_server
from transports.service import TransportUnavailable
from transports.wire import RemoteCallError, RemoteProtocolError, TensorEntry, encode

GENEROUS = 20


def frame(message) -> bytes:
    return b"".join(encode(message))


async def test_sequential_calls_share_one_keep_alive_connection():
    async with open_http_server(FakeWorker()) as server:
        async with TrioHttpChannel(server.address, bare=False) as channel:
            with trio.fail_after(GENEROUS):
                await channel.health()
                (first,) = channel._idle
                for _ in range(5):
                    await channel.health()
                assert channel._idle == [first]
        assert channel._idle == []
        assert server.statistics().requests == 6


async def test_concurrent_calls_use_concurrent_connections():
    # A recv_tensors that waits must not hold up a health call on the same channel.
    worker = FakeWorker()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address, bare=False) as channel:
            with trio.fail_after(GENEROUS):
                async with trio.open_nursery() as nursery:
                    replies = []

                    async def receive():
                        replies.append(await channel.recv_tensors(wire.RecvTensors(3, ["k"])))

                    nursery.start_soon(receive)
                    await worker.waiter_arrived.wait()
                    assert (await channel.health()).incarnation == 7
                    handle = await channel.register_graph(wire.RegisterGraph({"nodes": []}, "s"))
                    await channel.run_graph(wire.RunGraph(
                        handle.graph_handle, 3, [TensorEntry("k", np.arange(3.0))], []))
                np.testing.assert_array_equal(replies[0].tensors[0].value, np.arange(3.0))
                assert len(channel._idle) == 2


async def test_a_connection_the_server_closed_while_idle_is_replaced():
    # The worker restarts on the same port: the pooled connection is dead, the call is not.
    # (A reserved port: one the kernel picked could meanwhile become another process's.)
    worker = FakeWorker()
    (port,) = free_ports(1)
    async with open_http_server(worker, port=port) as server:
        channel = TrioHttpChannel(server.address, bare=False)
        with trio.fail_after(GENEROUS):
            await channel.health()
    assert len(channel._idle) == 1
    async with open_http_server(FakeWorker(), port=port):
        with trio.fail_after(GENEROUS):
            assert (await channel.health()).incarnation == 7
            assert len(channel._idle) == 1
    await channel.aclose()


async def test_a_server_restarts_on_its_port_while_a_tcp_connection_it_closed_lingers():
    # Closing its idle connection leaves the server's end holding the port (FIN_WAIT2, then
    # TIME_WAIT) for up to a minute: a plain bind fails there, the restart's bind
    # (SO_REUSEADDR on the listener) does not.
    (port,) = free_ports(1)
    async with open_http_server(FakeWorker(), port=port, same_host=False) as server:
        channel = TrioHttpChannel(server.address, same_host=False)
        with trio.fail_after(GENEROUS):
            await channel.health()
    assert len(channel._idle) == 1 and channel._idle[0].stream.socket.family == socket.AF_INET
    assert not bindable(port)
    async with open_http_server(FakeWorker(), port=port, same_host=False):
        with trio.fail_after(GENEROUS):
            assert (await channel.health()).incarnation == 7
    await channel.aclose()


async def test_a_cancelled_call_closes_its_connection_and_the_handler_is_cancelled():
    worker = FakeWorker()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                with trio.move_on_after(0.2):
                    await channel.recv_tensors(wire.RecvTensors(1, ["never"]))
                await worker.recv_cancelled.wait()
                assert channel._idle == []
                assert (await channel.health()).incarnation == 7


async def test_a_call_past_its_timeout_is_deadline_exceeded():
    from transports.service import TransportDeadlineExceeded
    async with open_http_server(FakeWorker()) as server:
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                with pytest.raises(TransportDeadlineExceeded, match="recv_tensors"):
                    await channel.recv_tensors(wire.RecvTensors(1, ["never"]), timeout=0.2)


async def test_tokens_and_text_errors_become_remote_call_errors():
    async with open_http_server(FakeWorker(), token="s3cret") as server:
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(server.address, bare=False) as channel:
                with pytest.raises(RemoteCallError, match="UNAUTHENTICATED: HTTP 401"):
                    await channel.health()
                with pytest.raises(RemoteCallError, match="UNAUTHENTICATED"):
                    await channel.metrics_text()
            async with TrioHttpChannel(server.address, token="s3cret") as channel:
                assert (await channel.health()).incarnation == 7
                assert "fake_calls_total" in await channel.metrics_text()


async def test_large_tensors_go_both_ways_intact():
    value = np.random.default_rng(1).standard_normal((1024, 1024 + 3))  # ~8 MiB, odd size
    async with open_http_server(FakeWorker()) as server:
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                handle = await channel.register_graph(wire.RegisterGraph({"nodes": []}, "s"))
                reply = await channel.run_graph(wire.RunGraph(
                    handle.graph_handle, 1, [TensorEntry("big", value)], ["big"]))
    np.testing.assert_array_equal(reply.tensors[0].value, value)


async def fake_http_peer(response: bytes, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Answer each connection with ``response`` after the request head, then hang up."""
    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some()
            await stream.send_all(response)

    await trio.serve_tcp(answer, 0, host="127.0.0.1", task_status=task_status)


def _head(extra: str) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: {FRAME_CONTENT_TYPE}\r\n{extra}\r\n".encode()


def _chunked(body: bytes, size: int) -> bytes:
    pieces = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


HEALTH = frame(wire.HealthReply(9, "/job:w/replica:0/task:0", ["cpu"]))


@pytest.mark.parametrize("response, error, match", [
    (b"", TransportUnavailable, "connection closed before the response head"),
    (_head("Content-Length: 5000\r\n") + HEALTH[:10], TransportUnavailable,
     "in the middle of the response body"),
    (b"SMTP ready\r\n\r\n", RemoteProtocolError, "Expected HTTP/"),
    (_head("") + HEALTH, RemoteProtocolError, "neither Content-Length nor chunked"),
    (_head(f"Content-Length: {len(HEALTH) + 3}\r\n") + HEALTH + b"AFW", RemoteProtocolError,
     "more than one frame|truncated|stream ended"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * (200 << 10), RemoteProtocolError,
     "response head longer"),
    (_head("Content-Length: 70000\r\n") + b"NOPE" * 17500, RemoteProtocolError, "bad magic"),
], ids=["hang_up", "died_mid_body", "not_http", "no_length", "trailing_bytes", "huge_head",
        "not_a_frame"])
async def test_a_broken_peer_is_named(nursery, response, error, match):
    listeners = await nursery.start(fake_http_peer, response)
    port = listeners[0].socket.getsockname()[1]
    with trio.fail_after(GENEROUS):
        async with TrioHttpChannel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(error, match=match):
                await channel.health()


async def test_a_text_408_is_unavailable_as_for_the_aiohttp_channel(nursery):
    """The server's connection guard answers a stalled request body with a text 408."""
    text = b"request body timed out"
    listeners = await nursery.start(fake_http_peer, (
        f"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(text)}\r\nConnection: close\r\n\r\n").encode() + text)
    port = listeners[0].socket.getsockname()[1]
    with trio.fail_after(GENEROUS):
        async with TrioHttpChannel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(RemoteCallError,
                               match="UNAVAILABLE: HTTP 408 from .*: request body timed out"):
                await channel.health()


@pytest.mark.parametrize("size", [1, 7, 4096])
async def test_chunked_replies_are_decoded(nursery, size):
    listeners = await nursery.start(
        fake_http_peer, _head("Transfer-Encoding: chunked\r\n") + _chunked(HEALTH, size))
    port = listeners[0].socket.getsockname()[1]
    with trio.fail_after(GENEROUS):
        async with TrioHttpChannel(f"127.0.0.1:{port}") as channel:
            assert (await channel.health()).incarnation == 9


async def test_a_closed_server_is_unavailable_fast():
    async with open_http_server(FakeWorker()) as server:
        address = server.address
    with trio.fail_after(GENEROUS):
        async with TrioHttpChannel(address) as channel:
            with pytest.raises(TransportUnavailable, match="cannot connect"):
                await channel.health()


def test_channel_addresses_are_host_and_port():
    with pytest.raises(ValueError, match="address must be 'host:port', got 'localhost'"):
        TrioHttpChannel("localhost")


@pytest.mark.parametrize("token", ["", "two words", "line\r\nX-Injected: 1", "caf\xe9"])
def test_a_token_that_could_break_the_head_is_refused(token):
    with pytest.raises(ValueError, match="token must be printable ASCII"):
        TrioHttpChannel("127.0.0.1:1", token=token)
