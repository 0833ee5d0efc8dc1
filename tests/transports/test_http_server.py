"""The trio HTTP server's connection handling, over raw sockets on 127.0.0.1 (bounded waits).

Routes, statuses, garbage bodies and tokens are in ``test_http_transport.py`` (against this
server, with raw requests and the aiohttp client), the connection guard's timeouts and limits in
``test_hostile_peers.py``; here: keep-alive and pipelining, ``100 Continue``, heads past the
bounds, request smuggling, HTTP/1.0, answers that stay readable when the server refuses a body
it did not read, and the frame answer sent as the encoder's buffers.
"""

from __future__ import annotations

import socket
import struct

import numpy as np
import pytest
import trio
import trio.testing
from transport_fakes import FakeWorker

from transports import checksum, wire
from transports.http.client import TrioHttpChannel, _Connection
from transports.http.framing import MessageReader
from transports.http.protocol import SEND_CHUNK_BYTES
from transports.http.server import MAX_HEAD, ConnectionLimits, HttpServer, open_http_server
from transports.wire import TensorEntry, decode, encode

GENEROUS = 20
HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"


def frame(message) -> bytes:
    return b"".join(encode(message))


class Reader:
    """Reads answers (head and Content-Length body) off one raw connection."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream, self.reader = stream, MessageReader(response=True)

    async def _feed(self) -> None:
        data = await self.stream.receive_some()
        assert data, "connection closed before the end of an answer"
        self.reader.feed(data)

    async def answer(self) -> tuple[int, dict[str, str], bytes]:
        while (head := self.reader.next_head()) is None:
            await self._feed()
        body, view = bytearray(), memoryview(bytearray(1 << 16))
        while (n := self.reader.read_body(view)) != 0:
            if n is None:
                await self._feed()
            else:
                body += view[:n]
        return head.status, head.headers, bytes(body)

    async def closed(self) -> bool:
        try:
            return await self.stream.receive_some() == b"" and not self.reader.pending
        except trio.BrokenResourceError:
            return True


@pytest.fixture
async def server():
    worker = FakeWorker()
    async with open_http_server(worker) as running:
        running.worker = worker
        yield running


async def connect(server) -> Reader:
    return Reader(await trio.open_tcp_stream("127.0.0.1", server.port))


async def test_pipelined_requests_on_one_connection_are_answered_in_order(server):
    register = frame(wire.RegisterGraph({"nodes": []}, "s"))
    with trio.fail_after(GENEROUS):
        reader = await connect(server)
        async with reader.stream:
            await reader.stream.send_all(
                HEALTH + b"POST /v1/graphs HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(register)
                + register + b"\r\n" + HEALTH)  # a stray CRLF between requests is allowed
            statuses = []
            for kind in (wire.HealthReply, wire.RegisterGraphReply, wire.HealthReply):
                status, headers, body = await reader.answer()
                assert isinstance(decode(body), kind) and "connection" not in headers
                statuses.append(status)
            # The server counts an answer once it has sent it: let its task get there.
            await trio.testing.wait_all_tasks_blocked()
    assert statuses == [200, 200, 200]
    assert server.worker.calls == ["health", "register_graph", "health"]
    assert server.statistics().requests == 3


async def test_expect_100_continue_is_answered_before_the_body(server):
    body = frame(wire.RegisterGraph({"nodes": []}, "s"))
    with trio.fail_after(GENEROUS):
        reader = await connect(server)
        async with reader.stream:
            await reader.stream.send_all(b"POST /v1/graphs HTTP/1.1\r\nExpect: 100-continue\r\n"
                                         b"Content-Length: %d\r\n\r\n" % len(body))
            status, _, _ = await reader.answer()
            assert status == 100
            await reader.stream.send_all(body)
            status, _, reply = await reader.answer()
    assert status == 200 and decode(reply) == wire.RegisterGraphReply("graph/0")


@pytest.mark.parametrize("request_bytes, status, text", [
    # (refused once MAX_HEAD bytes came after the first read of it: see transports/http/framing.py)
    (b"GET /v1/health HTTP/1.1\r\nX-Big: " + b"y" * 3 * MAX_HEAD, 431, b"longer than"),
    (b"GET /v1/health HTTP/1.1\r\n" + b"X: 1\r\n" * 200 + b"\r\n", 431, b"header lines"),
    (b"POST /v1/graphs HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", 400, b"Transfer-Encoding can't be present with Content-Length"),
    (b"GET /v1/health HTTP/1.1\r\nHost: x\r\n bad fold\r\n\r\n", 400,
     b"Unexpected whitespace after header value"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, b"Invalid method"),
], ids=["head_too_long", "too_many_headers", "smuggling", "folding", "tls_hello"])
async def test_bad_heads_are_answered_and_closed_and_the_server_keeps_serving(
        server, request_bytes, status, text):
    with trio.fail_after(GENEROUS):
        reader = await connect(server)
        async with reader.stream:
            await reader.stream.send_all(request_bytes)
            got, headers, body = await reader.answer()
            assert (got, headers["connection"]) == (status, "close") and text in body, body
            assert await reader.closed()
        async with TrioHttpChannel(server.address) as channel:
            assert (await channel.health()).incarnation == 7


async def test_a_refused_body_does_not_turn_the_answer_into_a_reset(server):
    """A 413 comes before the body is read; the client still sending must still read it."""
    with trio.fail_after(GENEROUS):
        reader = await connect(server)
        async with reader.stream:
            await reader.stream.send_all(b"POST /v1/steps/1/run HTTP/1.1\r\n"
                                         b"Content-Length: 1000000000000\r\n\r\n")

            async def keep_sending() -> None:
                junk = bytes(1 << 20)
                try:
                    for _ in range(8):
                        await reader.stream.send_all(junk)
                except trio.BrokenResourceError:
                    pass  # the server stopped draining and closed: fine, after answering
            async with trio.open_nursery() as nursery:
                nursery.start_soon(keep_sending)
                status, headers, body = await reader.answer()
    assert (status, headers["connection"]) == (413, "close")
    assert b"body of 1000000000000 bytes exceeds the limit" in body


async def test_http_1_0_gets_its_answer_and_the_connection_closes(server):
    with trio.fail_after(GENEROUS):
        reader = await connect(server)
        async with reader.stream:
            await reader.stream.send_all(b"GET /v1/devices HTTP/1.0\r\n\r\n")
            status, headers, body = await reader.answer()
            assert (status, headers["connection"]) == (200, "close")
            assert decode(body) == wire.DevicesReply(["/job:worker/task:0/device:CPU:0"])
            assert await reader.closed()


async def test_a_request_dripped_in_small_pieces_is_served(server):
    register = frame(wire.RegisterGraph({"nodes": ["n"] * 100}, "s"))
    data = b"POST /v1/graphs HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(register) + register
    with trio.fail_after(GENEROUS):
        reader = await connect(server)
        async with reader.stream:
            for start in range(0, len(data), 7):
                await reader.stream.send_all(data[start:start + 7])
                await trio.sleep(0)
            status, _, body = await reader.answer()
    assert status == 200 and decode(body) == wire.RegisterGraphReply("graph/0")


@pytest.mark.parametrize("checksums", [True, False])
async def test_a_large_answer_goes_out_as_the_encoders_buffers(server, monkeypatch, checksums):
    """One send for the head and small buffers, then the tensor's views in chunks of
    SEND_CHUNK_BYTES (each summed once it is sent when checksums are on) and then the 4-byte
    trailer. No copy, no join of tensor bytes."""
    monkeypatch.setattr(checksum, "_enabled", checksums)
    sends = []  # (side, bytes) per send call of the server and the trio client
    client_send_all, server_send_all = _Connection.send_all, HttpServer._send_all

    async def client_send(conn, data):
        sends.append(("client", len(data)))
        await client_send_all(conn, data)

    async def server_send(self, conn, data):
        sends.append(("server", len(data)))
        await server_send_all(self, conn, data)
    value = np.arange(3 << 20, dtype=np.float32)  # 12 MiB
    with trio.fail_after(GENEROUS):  # over a socket (same-host answers may be lent instead)
        async with TrioHttpChannel(server.address, same_host=False) as channel:
            handle = await channel.register_graph(wire.RegisterGraph({"nodes": []}, "s"))
            request = wire.RunGraph(handle.graph_handle, 1, [TensorEntry("big", value)], ["big"])
            monkeypatch.setattr(_Connection, "send_all", client_send)
            monkeypatch.setattr(HttpServer, "_send_all", server_send)
            reply = await channel.run_graph(request)
    np.testing.assert_array_equal(reply.tensors[0].value, value)
    for side in ("client", "server"):
        sizes = [n for who, n in sends if who == side]
        assert sizes[0] < 1024, sends  # the head and the frame header
        chunks = [SEND_CHUNK_BYTES] * (value.nbytes // SEND_CHUNK_BYTES)
        assert sizes[1:] == chunks + ([4] if checksums else []), sends
    assert [side for side, _ in sends] == sorted(side for side, _ in sends)  # client first


async def test_a_client_that_stops_reading_its_answer_is_dropped():
    """The answer's arrays and the connection slot are not held forever by a slow reader."""
    limits = ConnectionLimits(body_timeout_s=0.5)
    value = np.ones(4 << 20, np.float64)  # 32 MiB: more than the socket buffers hold
    async with open_http_server(FakeWorker(), connection_limits=limits) as server:
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(server.address) as channel:
                handle = await channel.register_graph(wire.RegisterGraph({"nodes": []}, "s"))
            request = frame(wire.RunGraph(handle.graph_handle, 1, [TensorEntry("v", value)],
                                          ["v"]))
            reader = await connect(server)
            async with reader.stream:
                await reader.stream.send_all(b"POST /v1/steps/1/run HTTP/1.1\r\n"
                                             b"Content-Length: %d\r\n\r\n" % len(request)
                                             + request)  # ... and never reads the answer
                while server.statistics().connections_closed == 0:
                    await trio.sleep(0.05)
            async with TrioHttpChannel(server.address) as channel:
                assert (await channel.health()).incarnation == 7
    assert server.statistics().connections == 0


async def test_a_host_with_two_addresses_is_served_on_both_and_stops():
    """``localhost`` may bind 127.0.0.1 and ::1: one accept loop each, all stopped on exit."""
    async with open_http_server(FakeWorker(), host="localhost") as server:
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(f"localhost:{server.port}") as channel:
                assert (await channel.health()).incarnation == 7


async def test_a_client_that_resets_mid_body_is_counted_as_gone_not_as_a_server_error(server):
    with trio.fail_after(GENEROUS):
        reader = await connect(server)
        await reader.stream.send_all(b"POST /v1/graphs HTTP/1.1\r\nContent-Length: 100\r\n\r\nAFWF")
        while server.statistics().in_flight == 0:  # the server is reading the body
            await trio.sleep(0.01)
        reader.stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await reader.stream.aclose()  # with SO_LINGER 0: a reset, not a FIN
        while server.statistics().in_flight:
            await trio.sleep(0.01)
        async with TrioHttpChannel(server.address) as channel:
            text = await channel.metrics_text()
    assert 'asyncflow_transport_requests_total{route="register_graph",status="499"} 1' in text
    assert server.statistics().errors == 1 and server.worker.calls == []


class _WorkerWithoutStatus(FakeWorker):
    status_json = None  # a handler written before GET /v1/status existed


async def test_status_of_a_handler_without_it_is_404_and_pages_need_a_page_handler():
    with trio.fail_after(GENEROUS):
        async with open_http_server(_WorkerWithoutStatus()) as server:
            async with TrioHttpChannel(server.address) as channel:
                with pytest.raises(wire.RemoteCallError) as caught:
                    await channel.status_json()
                assert caught.value.code == "UNIMPLEMENTED"  # HTTP 404
                # No page handler: /status is an unknown route like any other.
                reader = await connect(server)
                async with reader.stream:
                    await reader.stream.send_all(b"GET /status HTTP/1.1\r\n\r\n")
                    status, _, _ = await reader.answer()
                assert status == 404
                assert (await channel.health()).incarnation == 7  # still serving


async def test_large_bodies_go_past_the_parser_into_their_arrays(server, monkeypatch):
    """llhttp sees the heads and the body bytes that came with them; the rest of a 4 MiB
    request and of its 4 MiB answer is received straight into the decoders' arrays."""
    fed = []
    feed = MessageReader.feed

    def counting_feed(self, data):
        fed.append(len(data))
        return feed(self, data)
    monkeypatch.setattr(MessageReader, "feed", counting_feed)
    tensor = np.arange(1 << 20, dtype=np.float32)
    with trio.fail_after(GENEROUS):
        async with TrioHttpChannel(server.address, bare=False) as channel:
            registered = await channel.register_graph(wire.RegisterGraph({"nodes": []}, "s"))
            handle = registered.graph_handle
            fed.clear()
            reply = await channel.run_graph(wire.RunGraph(handle, 1, [TensorEntry("x", tensor)],
                                                          ["x"]))
    assert np.array_equal(reply.tensors[0].value, tensor)
    assert server.worker.received[0] is not tensor and np.array_equal(server.worker.received[0],
                                                                     tensor)
    assert 0 < sum(fed) <= 2 * (64 << 10), fed  # at most one read (64 KiB) with each head
