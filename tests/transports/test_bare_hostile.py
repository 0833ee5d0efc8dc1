"""A bare same-host server (``transports.http.bare``) against hostile clients.

Random bytes, cut handshakes and headers, wrong and huge declared lengths, garbage after a good
handshake, unknown rpc indexes, NaN, negative and zero timeouts, with the connection left open
or half-closed: every answer is well formed (the handshake byte, then whole REPLY headers with
frames that decode, ErrorReply exactly where the kind says ERROR), every bad connection ends
within the server's own timeouts, and a valid call on a new connection is still answered.
Real sockets and real time, each exchange bounded by ``trio.fail_after``; the slow-client tests
use trio's autojump clock (client and server both wait inside this trio run).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transport_fakes import FakeWorker

from transports import wire
from transports.http import bare
from transports.http.guard import ConnectionLimits
from transports.http.server import open_http_server
from transports.messages import ErrorReply, HealthReply
from transports.service import RPCS
from transports.wire import Decoder, encode

EXAMPLES = settings.default.max_examples
BOUND = 20  # s: every exchange ends well within this (the server's timeouts are far shorter)
SHORT = ConnectionLimits(header_timeout_s=0.2, body_timeout_s=0.2, idle_timeout_s=0.4)
HELLO = bare.MAGIC + struct.pack("<I", 0)
INDEX = {rpc.method: index for index, rpc in enumerate(RPCS)}
CODES = {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "NOT_FOUND",
         "DEADLINE_EXCEEDED", "DATA_LOSS"}  # (DATA_LOSS: a frame its checksums find damaged)

# Valid request frames of calls the fake worker answers at once (never shutdown: it would).
REQUESTS = {
    "register_graph": wire.RegisterGraph({"nodes": []}, "s"),
    "deregister_graph": wire.DeregisterGraph("graph/none"),
    "run_graph": wire.RunGraph("graph/none", 1, [wire.TensorEntry(
        "x", np.arange(40, dtype=np.float32))], ["x"]),
    "recv_tensors": wire.RecvTensors(1, []),
    "abort_step": wire.AbortStep(2, "ABORTED", "stop"),
    "cleanup_step": wire.CleanupStep(2),
    "health": wire.Health(),
    "reset": wire.Reset(None),
}


async def _exchange(path: str, data: bytes, half_close: bool) -> bytes:
    """Send ``data`` on a new connection (then EOF when ``half_close``) and read what comes back
    until the server closes; the server must close within :data:`BOUND` seconds."""
    out = b""
    with trio.fail_after(BOUND):
        stream = await trio.open_unix_socket(path)
        async with stream:
            try:
                await stream.send_all(data)
                if half_close:
                    await stream.send_eof()
            except trio.BrokenResourceError:
                pass  # the server closed before taking it all
            while True:
                try:
                    chunk = await stream.receive_some(1 << 16)
                except trio.BrokenResourceError:
                    break  # reset: it closed with our bytes unread
                if not chunk:
                    break
                out += chunk
    return out


def _answers(out: bytes) -> list:
    """The messages of a well-formed answer stream (after the handshake byte)."""
    if not out:
        return []  # closed without a word (no handshake, or before an answer)
    assert out[:1] in (bare.ACCEPTED, bare.REFUSED), out[:16]
    if out[:1] == bare.REFUSED:
        assert out == bare.REFUSED
        return []
    messages, pos = [], 1
    while pos < len(out):
        assert len(out) - pos >= bare.REPLY.size, f"a cut answer header: {out[pos:]!r}"
        length, _, kind, flags = bare.REPLY.unpack_from(out, pos)
        assert kind in (bare.FRAME, bare.ERROR) and flags == 0
        pos += bare.REPLY.size
        assert len(out) - pos >= length, f"an answer cut at {len(out) - pos} of {length} bytes"
        message = wire.decode(out[pos:pos + length])
        pos += length
        assert (kind == bare.ERROR) == isinstance(message, ErrorReply), message
        if isinstance(message, ErrorReply):
            assert message.code in CODES, message
            assert message.message, message
        messages.append(message)
    return messages


def _call(rpc: str, frame: bytes | None = None, *, call_id: int = 1, timeout: float = 5.0,
          length: int | None = None) -> bytes:
    if frame is None:
        frame = b"".join(encode(REQUESTS[rpc]))
    return bare.REQUEST.pack(len(frame) if length is None else length, call_id, INDEX[rpc], 0,
                             timeout) + frame


async def _still_serves(path: str) -> None:
    (reply,) = _answers(await _exchange(path, HELLO + _call("health"), half_close=True))
    assert isinstance(reply, HealthReply) and reply.incarnation == 7


def _against_a_server(probes: list[tuple[bytes, bool]]) -> list[list]:
    """Run each probe on its own connection to a fresh server; after each, a valid call."""

    async def main() -> list[list]:
        answers = []
        async with open_http_server(FakeWorker(), connection_limits=SHORT) as server:
            for data, half_close in probes:
                answers.append(_answers(await _exchange(server.bare_path, data, half_close)))
                await _still_serves(server.bare_path)
            with trio.fail_after(BOUND):
                while server._guard.connections:  # every connection ended
                    await trio.sleep(0.01)
        return answers

    return trio.run(main)


timeouts = st.sampled_from([math.nan, -math.inf, -1.0, -0.0, 0.0, 1e-300, 0.5, 5.0, math.inf,
                            1e308])
lengths = st.one_of(st.integers(0, 300), st.sampled_from([2**31, 2**40, 2**63, 2**64 - 1]))


@st.composite
def requests(draw) -> bytes:
    """One call header and what follows it: any index, length, timeout and flags; a valid
    frame (whole, cut or padded) or random bytes."""
    rpc = draw(st.sampled_from(sorted(REQUESTS)))
    frame = b"".join(encode(REQUESTS[rpc], checksums=draw(st.booleans())))
    body = draw(st.sampled_from(["frame", "cut", "padded", "random"]))
    if body == "cut":
        frame = frame[:draw(st.integers(0, len(frame) - 1))]
    elif body == "padded":
        frame += draw(st.binary(min_size=1, max_size=40))
    elif body == "random":
        frame = draw(st.binary(max_size=200))
    length = draw(st.sampled_from([len(frame), None])) or draw(lengths)
    index = draw(st.sampled_from([INDEX[rpc], INDEX[rpc], len(RPCS), 0xFFFF,
                                  INDEX["devices"]]))
    head = bare.REQUEST.pack(length, draw(st.integers(0, 2**32 - 1)), index,
                             draw(st.integers(0, 0xFFFF)), draw(timeouts))
    return head[:draw(st.sampled_from([len(head), draw(st.integers(0, len(head)))]))] + frame


probes = st.one_of(
    st.binary(max_size=300),  # not the protocol at all
    st.binary(max_size=12).map(lambda b: (HELLO + b)[:len(b)]),  # a cut handshake
    st.builds(lambda n, rest: bare.MAGIC + struct.pack("<I", n) + rest,  # wrong token lengths
              st.integers(0, 2**32 - 1), st.binary(max_size=64)),
    st.binary(max_size=300).map(lambda b: HELLO + b),  # a good handshake, then garbage
    st.lists(requests(), min_size=1, max_size=3).map(lambda calls: HELLO + b"".join(calls)),
    st.lists(requests(), max_size=2).map(  # good calls, then a bad one
        lambda calls: HELLO + _call("health") + b"".join(calls)),
)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(probes, st.booleans()), min_size=1, max_size=3))
def test_hostile_clients_get_clean_answers_and_the_server_serves_on(probe_list):
    # (_answers checks each answer stream; _against_a_server that the server serves on.)
    for answers in _against_a_server(probe_list):
        broken = [i for i, m in enumerate(answers) if isinstance(m, ErrorReply) and m.code in (
            "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "UNAVAILABLE")]
        assert broken in ([], [len(answers) - 1]), answers  # a broken call is the last one


def test_bad_call_headers_are_answered_with_what_was_wrong():
    health = b"".join(encode(wire.Health()))
    cases = [
        (_call("health", health, timeout=math.nan), "INVALID_ARGUMENT", "timeout nan"),
        (_call("health", health, timeout=-1.0), "INVALID_ARGUMENT", "timeout -1.0"),
        (_call("health", health, timeout=0.0), "INVALID_ARGUMENT", "not positive"),
        (_call("health", health, timeout=-math.inf), "INVALID_ARGUMENT", "not positive"),
        (bare.REQUEST.pack(len(health), 1, len(RPCS), 0, 5.0) + health, "INVALID_ARGUMENT",
         f"unknown rpc index {len(RPCS)}"),
        (bare.REQUEST.pack(len(health), 1, 0xFFFF, 0, 5.0) + health, "INVALID_ARGUMENT",
         "unknown rpc index 65535"),
        (_call("health", b"", length=2**64 - 1), "RESOURCE_EXHAUSTED", "exceeds the limit"),
        (_call("run_graph", b"", length=2**40), "RESOURCE_EXHAUSTED", "run_graph: frame of"),
        (_call("health", health, length=len(health) - 1), "INVALID_ARGUMENT", "health"),
        (_call("health", health + b"\0" * 8, length=len(health) + 8), "INVALID_ARGUMENT",
         "health"),
        (_call("health", bare.REQUEST.pack(0, 0, 0, 0, 0) + health[:3]), "INVALID_ARGUMENT",
         "bad magic"),
        (_call("devices", health), "INVALID_ARGUMENT", "devices takes no frame"),
        (_call("health", health + health), "INVALID_ARGUMENT", "more than one frame"),
        # a flipped bit its checksum catches: damaged in transit, DATA_LOSS (as over HTTP)
        (_call("health", health[:-1] + bytes([health[-1] ^ 4])), "DATA_LOSS",
         "same-host call health: "),
    ]
    # Half-closed: the answer comes at once. Left open: a frame over the limits is refused
    # before its bytes come (none do), the others as they are.
    probes = [(HELLO + data, half) for data, _, _ in cases for half in (True, False)]
    answers = _against_a_server(probes)
    for (data, code, words), got in zip([c for c in cases for _ in (0, 1)], answers):
        assert len(got) == 1 and isinstance(got[0], ErrorReply), (data, got)
        assert got[0].code == code and words in got[0].message, (data, got[0])


def test_a_call_header_cut_short_or_a_frame_left_unsent_ends_the_connection():
    frame = b"".join(encode(REQUESTS["run_graph"]))
    answers = _against_a_server([
        (HELLO[:5], False),  # a cut handshake: closed by the header timeout, no answer
        (HELLO + _call("health")[:10], False),  # a cut call header: the same
        (HELLO + _call("run_graph", frame[:50], length=len(frame)), False),  # a stalled frame
    ])
    assert answers[:2] == [[], []]
    (error,) = answers[2]
    assert error.code == "UNAVAILABLE" and "no frame bytes for 0.2 s" in error.message


@pytest.mark.parametrize("part", ["handshake", "call header"])
async def test_a_client_that_trickles_a_header_is_cut_off_at_the_header_timeout(
        part, autojump_clock):
    # One byte every 0.9 header timeouts: each wait is short, the whole far too long.
    limits = ConnectionLimits(header_timeout_s=1.0, body_timeout_s=1.0, idle_timeout_s=5.0)
    data = HELLO if part == "handshake" else _call("health")
    async with open_http_server(FakeWorker(), connection_limits=limits) as server:
        stream = await trio.open_unix_socket(server.bare_path)
        async with stream:
            if part == "call header":
                await stream.send_all(HELLO)
                assert await stream.receive_some(1) == bare.ACCEPTED
            start, sent = trio.current_time(), 0
            with trio.fail_after(BOUND):
                try:
                    for byte in data:
                        await stream.send_all(bytes([byte]))
                        sent += 1
                        await trio.sleep(0.9)
                    answer = await stream.receive_some(1 << 16)
                except trio.BrokenResourceError:
                    answer = b""
            assert answer == b"" and sent < len(data)
            assert trio.current_time() - start <= limits.header_timeout_s + 0.9
        assert server._guard.timed_out == 1
        await _still_serves(server.bare_path)


def test_wrong_or_broken_tokens_are_refused_and_the_right_one_is_served():
    async def main() -> None:
        async with open_http_server(FakeWorker(), token="s3cret",
                                    connection_limits=SHORT) as server:
            path = server.bare_path
            for offered in (b"", b"s3cre", b"s3cret\0", b"\xff\xfe" * 10, b"x" * bare.MAX_TOKEN):
                hello = bare.MAGIC + struct.pack("<I", len(offered)) + offered
                for half_close in (True, False):
                    assert await _exchange(path, hello + _call("health"), half_close) \
                        == bare.REFUSED, offered
            too_long = bare.MAX_TOKEN + 1  # refused before a byte of it is read: closed
            assert await _exchange(path, bare.MAGIC + struct.pack("<I", too_long), False) == b""
            good = bare.MAGIC + struct.pack("<I", 6) + b"s3cret" + _call("health")
            (reply,) = _answers(await _exchange(path, good, half_close=True))
            assert isinstance(reply, HealthReply)

    trio.run(main)


def test_a_lent_answer_without_a_verdict_or_with_a_wrong_one_ends_the_connection():
    value = np.arange(1 << 18, dtype=np.float32)  # 1 MiB: a reply that fetches it is lent

    async def exactly(stream: trio.SocketStream, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = await stream.receive_some(n - len(data))
            assert chunk, f"closed after {len(data)} of {n} bytes"
            data += chunk
        return data

    async def main() -> None:
        async with open_http_server(FakeWorker(), connection_limits=SHORT) as server:
            path = server.bare_path
            (handle,) = _answers(await _exchange(path, HELLO + _call("register_graph"), True))
            frame = b"".join(encode(wire.RunGraph(handle.graph_handle, 1, [wire.TensorEntry(
                "x", value)], ["x"])))
            call = bare.REQUEST.pack(len(frame), 5, INDEX["run_graph"], bare.LEND, 5.0) + frame
            for verdict in (None, b"?", b"", b"\0\0\0"):
                with trio.fail_after(BOUND):
                    stream = await trio.open_unix_socket(path)
                    async with stream:
                        await stream.send_all(HELLO + call)
                        assert await exactly(stream, 1) == bare.ACCEPTED
                        length, call_id, kind, _ = bare.REPLY.unpack(
                            await exactly(stream, bare.REPLY.size))
                        assert (call_id, kind) == (5, bare.LENT)
                        await exactly(stream, length)  # the records (the server's addresses)
                        if verdict == b"":
                            await stream.send_eof()
                        elif verdict is not None:
                            await stream.send_all(verdict)
                        try:  # then the server closes: no answer, no waiting past its timeout
                            assert await stream.receive_some(1 << 16) == b""
                        except trio.BrokenResourceError:
                            pass
                await _still_serves(path)
            with trio.fail_after(BOUND):
                while server._guard.connections:
                    await trio.sleep(0.01)
            assert server._guard.timed_out >= 1  # the one that gave no verdict

    trio.run(main)


def test_a_flood_of_silent_connections_cannot_lock_out_a_caller():
    limits = ConnectionLimits(header_timeout_s=5.0, body_timeout_s=5.0, idle_timeout_s=5.0,
                              max_connections=4)

    async def main() -> None:
        async with open_http_server(FakeWorker(), connection_limits=limits) as server:
            path = server.bare_path
            with trio.fail_after(BOUND):
                silent = [await trio.open_unix_socket(path) for _ in range(4)]
                cut = await trio.open_unix_socket(path)  # a handshake cut short
                await cut.send_all(HELLO[:6])
                while len(server._guard.connections) < 4 or not server._guard.evicted:
                    await trio.sleep(0.01)
                await _still_serves(path)  # (well within the 5 s the silent ones may wait)
                assert server._guard.evicted >= 2
                for stream in (*silent, cut):
                    await stream.aclose()

    trio.run(main)


def test_damaged_frames_over_16_kib_are_refused_where_their_template_would_read_them():
    # A RunGraph of a 40 KB feed (over ``frame_templates.COPIED``: read whole into a buffer of
    # its own and decoded where it lies by its frame template once learnt): every damaged copy
    # (the prefix, the header, the padding, the segment, its trailer, cut or padded) is
    # answered DATA_LOSS or INVALID_ARGUMENT, never run; the good frames around them are run
    # with their own values, by the template, and the server serves on.
    from transports import frame_templates

    rng = np.random.default_rng(5)

    def request(handle: str, step_id: int) -> tuple[bytes, np.ndarray]:
        value = rng.standard_normal(10_000).astype(np.float32)
        frame = b"".join(bytes(b) for b in encode(wire.RunGraph(
            handle, step_id, [wire.TensorEntry("x:0", value)], ["x:0"], request_id=step_id)))
        assert frame_templates.COPIED < len(frame) <= frame_templates.MAX_FRAME
        return frame, value

    async def main() -> None:
        worker = FakeWorker()
        handle = (await worker.register_graph(wire.RegisterGraph({"nodes": []}, "s"))).graph_handle
        async with open_http_server(worker, connection_limits=SHORT) as server:

            async def good(step_id: int) -> None:
                frame, value = request(handle, step_id)
                (reply,) = _answers(await _exchange(
                    server.bare_path, HELLO + _call("run_graph", frame, call_id=step_id & 0xFFFF), True))
                assert reply.tensors[0].value.tobytes() == value.tobytes(), step_id

            for step_id in (2**33, 2**33 + 1, 2**33 + 2):  # the last by the template
                await good(step_id)
            frame = request(handle, 2**34)[0]
            assert frame_templates.known(len(frame))
            header_end = frame.index(b"x:0", frame.index(b"x:0") + 1) + 64
            ran = len(worker.calls)
            for at in [*range(0, header_end), *range(header_end, len(frame), 997),
                       len(frame) - 1]:
                damaged = bytearray(frame)
                damaged[at] ^= 1 << (at % 8)
                (reply,) = _answers(await _exchange(
                    server.bare_path, HELLO + _call("run_graph", bytes(damaged)), True))
                assert isinstance(reply, ErrorReply) and reply.code in (
                    "DATA_LOSS", "INVALID_ARGUMENT"), (at, reply)
            for other in (frame[:-1], frame + b"\0"):
                (reply,) = _answers(await _exchange(
                    server.bare_path, HELLO + _call("run_graph", other), True))
                assert isinstance(reply, ErrorReply) and reply.code == "INVALID_ARGUMENT"
            assert len(worker.calls) == ran  # none of them ran
            taken = frame_templates.statistics()["decoded"]
            await good(2**34 + 1)
            assert frame_templates.statistics()["decoded"] == taken + 1
            await _still_serves(server.bare_path)

    trio.run(main)
