"""The transport's defences against hostile peers, one at a time (issue 13, items 3, 5, 8).

* the decoder: large headers are unpacked value by value under ``Limits.max_header_values``
  and give the same result as msgpack's one-call unpack; arrays are allocated only when their
  bytes arrive; an allocation that fails is ``FrameTooLarge``;
* the HTTP server's connection guard (real sockets on 127.0.0.1, real time, small limits):
  idle connections are evicted at the limit so a whole request still gets in, a request whose
  headers drip in is closed after ``header_timeout_s``, a body that stops is a 408;
* the rate limit on log records.
"""

from __future__ import annotations

import logging
import struct
import subprocess
import sys
import textwrap
import tracemalloc

import msgpack
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from transport_fakes import FakeWorker

from transports import wire
from transports.counted_unpack import unpack_counted
from transports.http.server import ConnectionLimits, open_http_server
from transports.http.guard import _RateLimit
from transports.wire import (
    MAGIC, SMALL_HEADER_BYTES, Decoder, FrameTooLarge, GraphOptions, Limits, RegisterGraph,
    RemoteProtocolError, decode, encode,
)

GENEROUS = 20


def frame(message) -> bytes:
    return b"".join(bytes(b) for b in encode(message))


# -- decoding --------------------------------------------------------------------------------
def test_large_headers_decode_value_by_value_to_the_same_message():
    nodes = [{"name": f"n{i}", "op": "Const", "input": [f"m{i}:0", "^c"], "device": "",
              "attr": {"value": {"f": i / 3}, "b": {"b": bool(i % 2)}, "s": {"s": b"\x00" * 3},
                       "none": None, "neg": -i}} for i in range(2000)]
    message = RegisterGraph({"node": nodes, "versions": {}}, "s", GraphOptions(feeds=["n0:0"]))
    data = frame(message)
    assert len(data) > SMALL_HEADER_BYTES  # takes the counted path
    assert decode(data) == message


def test_header_values_past_the_budget_are_frame_too_large():
    count = 200_000
    header = (b"\x84" + msgpack.packb("version") + msgpack.packb(1) + msgpack.packb("kind")
              + msgpack.packb("register_graph") + msgpack.packb("tensors") + b"\x90"
              + msgpack.packb("payload") + b"\x82" + msgpack.packb("session_handle")
              + msgpack.packb("s") + msgpack.packb("graph") + b"\x81" + msgpack.packb("node")
              + b"\xdd" + struct.pack(">I", count) + b"\x90" * count)
    data = MAGIC + struct.pack("<I", len(header)) + header
    with pytest.raises(FrameTooLarge, match="more than 100000 msgpack values"):
        decode(data, Limits(max_header_values=100_000))
    assert isinstance(decode(data), RegisterGraph)  # the default budget admits it


def test_non_string_map_keys_are_refused_in_large_headers_too():
    payload = {"graph": {"node": [{"pad": "x" * SMALL_HEADER_BYTES}], 1: 2}, "session_handle": "s"}
    header = msgpack.packb({"version": 1, "kind": "register_graph", "payload": payload,
                            "tensors": []})
    with pytest.raises(RemoteProtocolError, match="map keys must be strings"):
        decode(MAGIC + struct.pack("<I", len(header)) + header)


@pytest.mark.parametrize("tail", [b"\x91", b"\x82\xa1a", b"\xdd\xff\xff\xff\xff\x90",
                                  b"\xdf\x00\x00\x00\x02\xa1a\x90\xa1b"])
def test_large_headers_cut_inside_a_container_are_rejected(tail):
    header = (b"\x82" + msgpack.packb("pad") + msgpack.packb("x" * SMALL_HEADER_BYTES)
              + msgpack.packb("cut") + tail)  # a map of two whose second value is cut short
    with pytest.raises(RemoteProtocolError):
        decode(MAGIC + struct.pack("<I", len(header)) + header)


def _run_header(nbytes):
    header = msgpack.packb({"version": 1, "kind": "run_graph", "tensors": [{
        "key": "t", "dtype": "uint8", "shape": [nbytes], "nbytes": nbytes, "dead": False,
        "error": None, "strings": None}],
        "payload": {"graph_handle": "g", "step_id": 1, "fetch_keys": [], "request_id": 1}})
    return MAGIC + struct.pack("<I", len(header)) + header


def test_arrays_are_allocated_when_their_bytes_arrive():
    start = _run_header(1 << 30)
    tracemalloc.start()
    try:
        decoder = Decoder()
        decoder.receive_data(start)  # the header of a 1 GiB tensor, and no byte of it
        assert decoder.next_event() is wire.NEED_DATA
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated before any tensor byte arrived"


def test_an_allocation_that_fails_is_frame_too_large():
    """In a child under RLIMIT_AS, a 2 GiB tensor (within Limits) cannot be allocated."""
    script = textwrap.dedent(f"""
        import resource, sys
        from transports.wire import Decoder, FrameTooLarge
        sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r})
        from test_hostile_peers import _run_header
        start = _run_header(2 << 30)
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        decoder = Decoder()
        decoder.receive_data(start + bytes(64))
        try:
            decoder.next_event()
        except FrameTooLarge as exc:
            print("refused:", exc)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert "refused:" in result.stdout and "cannot be allocated" in result.stdout, result.stderr


# -- the connection guard --------------------------------------------------------------------
async def _health_status(port):
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return None
            data += chunk
    return int(data.split(b" ", 2)[1])


async def _closed_by_peer(stream):
    """True once the server closed ``stream`` (reads EOF or a reset)."""
    try:
        return await stream.receive_some() == b""
    except trio.BrokenResourceError:
        return True


async def test_idle_connections_are_evicted_at_the_limit_and_requests_still_get_in():
    limits = ConnectionLimits(max_connections=8, header_timeout_s=60, idle_timeout_s=60)
    async with open_http_server(FakeWorker(), connection_limits=limits) as server:
        idle = []
        try:
            with trio.fail_after(GENEROUS):
                for _ in range(20):
                    idle.append(await trio.open_tcp_stream("127.0.0.1", server.port))
                for _ in range(3):
                    assert await _health_status(server.port) == 200
                while server.statistics().connections > 8:
                    await trio.sleep(0.01)
            stats = server.statistics()
            assert stats.connections <= 8 and stats.connections_closed >= 12
        finally:
            for stream in idle:
                await stream.aclose()


async def test_slow_headers_are_closed_and_a_stalled_body_is_408():
    limits = ConnectionLimits(header_timeout_s=0.5, body_timeout_s=0.5, idle_timeout_s=60)
    async with open_http_server(FakeWorker(), connection_limits=limits) as server:
        with trio.fail_after(GENEROUS):
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as drip:
                await drip.send_all(b"POST /v1/graphs HTTP/1.1\r\nHost: x\r\n")
                assert await _closed_by_peer(drip)
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as stall:
                await stall.send_all(b"POST /v1/graphs HTTP/1.1\r\nHost: x\r\n"
                                     b"Content-Length: 100\r\n\r\nAFWF")
                reply = b""
                while b"\r\n" not in reply:
                    reply += await stall.receive_some()
                assert reply.split(b" ", 2)[1] == b"408", reply
            assert await _health_status(server.port) == 200


# -- logs ------------------------------------------------------------------------------------
def test_a_flood_of_log_records_is_rate_limited(caplog):
    logger = logging.getLogger("tests.flood")
    logger.addFilter(_RateLimit())
    try:
        with caplog.at_level(logging.ERROR, logger="tests.flood"):
            for index in range(10_000):
                logger.error("socket.accept() out of system resource %d", index)
            logger.error("another event")
    finally:
        logger.filters.clear()
    flood = [r for r in caplog.records if r.msg.startswith("socket.accept()")]
    assert _RateLimit.BURST <= len(flood) < _RateLimit.BURST + 10
    assert [r.getMessage() for r in caplog.records][-1] == "another event"


_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=6),
    max_leaves=40)


# Multiples of the profile's count (30 by default, 300 with HYPOTHESIS_PROFILE=thorough): a
# damaged-bytes example costs ~12 ms, so the default run keeps to a second or so each.
EXAMPLES = settings.default.max_examples


@settings(max_examples=3 * EXAMPLES)
@given(value=_values)
def test_counted_unpacking_agrees_with_msgpack(value):
    data = msgpack.packb(value, use_bin_type=True)
    assert unpack_counted(memoryview(data), Limits()) == msgpack.unpackb(data, raw=False)


@settings(max_examples=4 * EXAMPLES)
@given(value=_values, data=st.data())
def test_counted_unpacking_of_damaged_bytes_fails_cleanly(value, data):
    raw = bytearray(msgpack.packb(value, use_bin_type=True))
    index = data.draw(st.integers(0, len(raw) - 1))
    raw[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(raw)))
    try:
        unpack_counted(memoryview(bytes(raw[:cut])), Limits(max_header_values=1000))
    except (wire.WireError, ValueError, TypeError, msgpack.UnpackException):
        pass  # what _unpack_header turns into RemoteProtocolError; anything else is a bug
