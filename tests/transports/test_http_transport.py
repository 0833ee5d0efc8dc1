"""HTTP transport specifics against real servers on 127.0.0.1 (real time, bounded waits).

Raw requests use a minimal HTTP/1.1 client on trio sockets, so the server is tested
independently of our aiohttp client.
"""

from __future__ import annotations

import struct

import msgpack
import numpy as np
import pytest
import trio
from aiohttp_channel import HttpChannel
from transport_fakes import FakeWorker, WrongReplyWorker

from transports import wire
from transports.http.protocol import FRAME_CONTENT_TYPE
from transports.http.server import open_http_server, serve_http
from transports.service import TransportUnavailable
from transports.wire import MAGIC, Limits, RemoteCallError, TensorEntry, decode, encode

GENEROUS = 20


async def raw_http(port: int, method: str, path: str, body: bytes = b"",
                   headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """Send one request; return status, lower-cased headers and the Content-Length body."""
    headers = {"Host": f"127.0.0.1:{port}", "Connection": "close", **(headers or {})}
    if body and "Content-Length" not in headers and "Transfer-Encoding" not in headers:
        headers["Content-Length"] = str(len(body))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(head.encode() + b"\r\n" + body)
        data = bytearray()
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some()
        response_head, _, rest = bytes(data).partition(b"\r\n\r\n")
        lines = response_head.decode().split("\r\n")
        reply_headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        length = int(reply_headers["content-length"])
        while len(rest) < length:
            rest += await stream.receive_some()
    return int(lines[0].split()[1]), reply_headers, rest[:length]


def frame(message) -> bytes:
    return b"".join(encode(message))


@pytest.fixture
async def server():
    worker = FakeWorker()
    async with open_http_server(worker) as running:
        running.worker = worker
        yield running


async def test_every_route_over_raw_http(server):
    port = server.port
    with trio.fail_after(GENEROUS):
        status, headers, body = await raw_http(port, "POST", "/v1/graphs", frame(
            wire.RegisterGraph({"nodes": []}, "s")))
        assert (status, headers["content-type"]) == (200, FRAME_CONTENT_TYPE)
        handle = decode(body).graph_handle
        run = wire.RunGraph(handle, 4, [TensorEntry("k", np.arange(3.0))], ["k"])
        status, _, body = await raw_http(port, "POST", "/v1/steps/4/run", frame(run))
        assert status == 200 and decode(body).tensors == run.feeds
        status, _, body = await raw_http(port, "POST", "/v1/steps/4/recv",
                                         frame(wire.RecvTensors(4, ["k"])))
        assert status == 200 and decode(body) == wire.RecvTensorsReply(run.feeds)
        for method, path, message, reply in [
                ("POST", "/v1/steps/4/abort", wire.AbortStep(4, "ABORTED", "x"), wire.Ack()),
                ("DELETE", "/v1/steps/4", None, wire.Ack()),
                ("DELETE", "/v1/graphs/graph%2F0", None, wire.Ack()),
                ("POST", "/v1/reset", wire.Reset(["c"]), wire.Ack()),
                ("GET", "/v1/devices", None, wire.DevicesReply(["/job:worker/task:0/device:CPU:0"])),
                ("GET", "/v1/health", None, wire.HealthReply(
                    7, "/job:worker/task:0", ["/job:worker/task:0/device:CPU:0"],
                    wire.WorkerStatistics()))]:
            status, _, body = await raw_http(port, method, path,
                                             b"" if message is None else frame(message))
            assert (status, decode(body)) == (200, reply), path
        status, headers, body = await raw_http(port, "GET", "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        assert b"fake_calls_total 8\n" in body
        assert b'asyncflow_transport_requests_total{route="run_graph",status="200"} 1' in body
    assert server.worker.calls[-1] == "health" and server.worker.resets == [["c"]]


GARBAGE = {
    "text": b"hello, world",
    "truncated": frame(wire.RunGraph("g", 1, [TensorEntry("x", np.ones(100))], []))[:-7],
    "bad_header": MAGIC + struct.pack("<I", 3) + b"\xc1\xc1\xc1",
    "object_dtype": MAGIC + struct.pack("<I", 0) + b"",
}


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
async def test_garbage_to_every_route_is_a_4xx_and_the_server_keeps_serving(server, garbage):
    body = GARBAGE[garbage]
    routes = [("POST", "/v1/graphs"), ("POST", "/v1/steps/1/run"), ("POST", "/v1/steps/1/recv"),
              ("POST", "/v1/steps/1/abort"), ("POST", "/v1/reset"), ("DELETE", "/v1/steps/1"),
              ("DELETE", "/v1/graphs/x"), ("GET", "/v1/health"), ("GET", "/v1/devices")]
    with trio.fail_after(GENEROUS):
        for method, path in routes:
            status, _, text = await raw_http(server.port, method, path, body)
            assert status == 400, (method, path, text)
            assert text.startswith(f"{method} {path}".encode()), text
        status, _, body = await raw_http(server.port, "GET", "/v1/health")
    assert status == 200 and decode(body).incarnation == 7
    assert server.worker.calls == ["health"]


@pytest.mark.parametrize("method, path, body, status, text", [
    ("POST", "/v1/steps/1/run", frame(wire.RunGraph("g", 2, [], [])), 400,
     b"the path says step_id=1 but the body says 2"),
    ("POST", "/v1/graphs", frame(wire.Health()), 400, b"takes a RegisterGraph frame, got Health"),
    ("POST", "/v1/graphs", b"", 400, b"empty body"),
    ("POST", "/v1/steps/1/run", frame(wire.Ack()) + frame(wire.Ack()), 400, b"more than one"),
    ("POST", "/v1/steps/1/run", frame(wire.Ack()) + b"!", 400, b"bytes after the frame"),
    ("POST", "/v1/steps/1/run", MAGIC + struct.pack("<I", 2**31), 413, b"frame too large"),
    ("DELETE", "/v1/steps/99999999999999999999999", b"", 400, b"Integer value out of range"),
    ("GET", "/v1/nope", b"", 404, b"Not Found"),
    ("GET", "/v1/steps/abc/run", b"", 404, b"Not Found"),
    ("PUT", "/v1/health", b"", 405, b"Method Not Allowed"),
])
async def test_bad_requests_are_named(server, method, path, body, status, text):
    with trio.fail_after(GENEROUS):
        got_status, _, got_text = await raw_http(server.port, method, path, body)
    assert got_status == status and text in got_text, got_text


async def test_oversized_bodies_are_413_before_reading():
    limits = Limits(max_header_bytes=1024, max_tensor_bytes=4096, max_body_bytes=4096,
                    max_tensors=4)
    huge = {"version": 1, "kind": "run_graph", "tensors": [{
        "key": "t", "dtype": "float64", "shape": [2**30], "nbytes": 2**33, "dead": False,
        "error": None, "strings": None}],
        "payload": {"graph_handle": "g", "step_id": 1, "fetch_keys": []}}
    packed = msgpack.packb(huge)
    async with open_http_server(FakeWorker(), limits=limits) as server:
        with trio.fail_after(GENEROUS):
            status, _, text = await raw_http(server.port, "POST", "/v1/steps/1/run",
                                             MAGIC + struct.pack("<I", len(packed)) + packed)
            assert status == 413 and b"8589934592 bytes, over the limit of 4096" in text
            status, _, text = await raw_http(server.port, "POST", "/v1/steps/1/run", b"x",
                                             {"Content-Length": str(10**12)})
            assert status == 413 and b"body of 1000000000000 bytes exceeds the limit" in text
            async with HttpChannel(server.address) as channel:
                assert (await channel.health()).incarnation == 7


async def test_error_replies_carry_http_statuses(server):
    with trio.fail_after(GENEROUS):
        status, headers, body = await raw_http(server.port, "DELETE", "/v1/graphs/none")
        assert (status, decode(body)) == (404, wire.ErrorReply("NOT_FOUND", "no graph 'none'"))
        assert headers["content-type"] == FRAME_CONTENT_TYPE
        status, _, body = await raw_http(server.port, "POST", "/v1/graphs",
                                         frame(wire.RegisterGraph({}, "s")))
        assert (status, decode(body).code) == (400, "INVALID_ARGUMENT")
    async with open_http_server(WrongReplyWorker()) as broken:
        with trio.fail_after(GENEROUS):
            status, _, body = await raw_http(broken.port, "GET", "/v1/health")
            assert status == 500 and decode(body) == wire.ErrorReply(
                "INTERNAL", "LocalProtocolError: handler health returned Ack, expected HealthReply")


async def test_token_is_required_on_every_route():
    async with open_http_server(FakeWorker(), token="s3cret") as server:
        with trio.fail_after(GENEROUS):
            for path in ("/v1/health", "/metrics", "/v1/nope"):
                status, headers, text = await raw_http(server.port, "GET", path)
                assert status == 401 and b"bearer token" in text
                assert headers["www-authenticate"].startswith("Bearer")
            status, _, _ = await raw_http(server.port, "GET", "/v1/health",
                                          headers={"Authorization": "Bearer wrong"})
            assert status == 401
            for token in (None, "wrong"):
                async with HttpChannel(server.address, token=token) as channel:
                    with pytest.raises(RemoteCallError, match="UNAUTHENTICATED: HTTP 401"):
                        await channel.health()
                    with pytest.raises(RemoteCallError, match="UNAUTHENTICATED"):
                        await channel.metrics_text()
            async with HttpChannel(server.address, token="s3cret") as channel:
                assert (await channel.health()).incarnation == 7
                assert "fake_calls_total" in await channel.metrics_text()


async def test_a_closed_server_is_unavailable_fast():
    # Fast means refused at once, not waited out: with a connect timeout far beyond the hang
    # guard, only the refusal ("cannot connect", never "no connection within") can end the
    # call. No wall-clock bound: a loaded machine only makes the refusal later.
    async with open_http_server(FakeWorker()) as server:
        address = server.address
    with trio.fail_after(GENEROUS):
        async with HttpChannel(address, connect_timeout=100 * GENEROUS) as channel:
            with pytest.raises(TransportUnavailable, match="cannot connect"):
                await channel.health()


async def fake_http_peer(response: bytes, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Answer each connection with ``response`` after the request head, then hang up."""
    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some()
            await stream.send_all(response)

    await trio.serve_tcp(answer, 0, host="127.0.0.1", task_status=task_status)


@pytest.mark.parametrize("response", [
    b"",
    f"HTTP/1.1 200 OK\r\nContent-Type: {FRAME_CONTENT_TYPE}\r\nContent-Length: 5000\r\n\r\n"
    .encode() + frame(wire.Ack())[:10],
], ids=["hang_up", "died_mid_body"])
async def test_a_peer_that_dies_is_unavailable(nursery, response):
    listeners = await nursery.start(fake_http_peer, response)
    port = listeners[0].socket.getsockname()[1]
    with trio.fail_after(GENEROUS):
        async with HttpChannel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(TransportUnavailable, match="connection lost"):
                await channel.health()


async def test_closing_the_server_cancels_handlers_and_answers_unavailable():
    worker = FakeWorker()
    with trio.fail_after(GENEROUS):
        async with trio.open_nursery() as outer:
            async with trio.open_nursery() as serving:
                server = await serving.start(serve_http, worker)

                async def receive() -> None:
                    async with HttpChannel(server.address) as channel:
                        with pytest.raises(RemoteCallError, match="UNAVAILABLE: server is "
                                                                  "shutting down"):
                            await channel.recv_tensors(wire.RecvTensors(1, ["k"]))

                outer.start_soon(receive)
                await worker.waiter_arrived.wait()
                serving.cancel_scope.cancel()
        assert worker.recv_cancelled.is_set() and worker.waiting == 0


async def test_large_tensors_stream_both_ways_and_are_counted(server):
    value = np.random.default_rng(1).standard_normal((1024, 1024))  # 8 MiB
    with trio.fail_after(GENEROUS):
        async with HttpChannel(server.address) as channel:
            handle = (await channel.register_graph(wire.RegisterGraph({"nodes": []}, "s")))
            reply = await channel.run_graph(wire.RunGraph(
                handle.graph_handle, 1, [TensorEntry("big", value)], ["big"]))
    np.testing.assert_array_equal(reply.tensors[0].value, value)
    stats = server.statistics()
    assert (stats.requests, stats.errors, stats.in_flight) == (2, 0, 0)
    assert stats.bytes_received > value.nbytes and stats.bytes_sent > value.nbytes


def test_channel_addresses_are_host_and_port():
    with pytest.raises(ValueError, match="address must be 'host:port', got 'localhost'"):
        HttpChannel("localhost")


async def test_serving_the_network_without_a_token_is_warned_about(caplog):
    async with open_http_server(FakeWorker(), host="0.0.0.0"):
        pass
    assert "without a token" in caplog.text
    caplog.clear()
    async with open_http_server(FakeWorker(), host="0.0.0.0", token="t"):
        pass
    assert "without a token" not in caplog.text


async def test_chunked_request_bodies_are_decoded(server):
    data = frame(wire.RegisterGraph({"nodes": ["x" * 5000]}, "s"))
    pieces = [data[i:i + 777] for i in range(0, len(data), 777)]
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    with trio.fail_after(GENEROUS):
        status, _, reply = await raw_http(server.port, "POST", "/v1/graphs", body,
                                          {"Transfer-Encoding": "chunked"})
    assert (status, decode(reply)) == (200, wire.RegisterGraphReply("graph/0"))
