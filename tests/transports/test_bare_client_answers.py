"""The bare same-host client (``transports.http.bare.BareConnection``) against a server that
answers wrongly: a reply header of a kind the protocol does not have, or a kind that does not
match its frame, is refused however the frame is decoded, the one-pass decode of a repeated
frame (``transports.repeat_frames``) included; an answer cut anywhere, cut short, of no or too
many bytes, or followed by bytes no call asked for (never taken for the next call's answer); a
call cancelled with half an answer read. A real Unix socket pair, or a real channel whose bare
socket is served by hand; the "server" end is written by hand."""

from __future__ import annotations

import contextlib
import socket

import numpy as np
import pytest
import trio
import trio.testing
from transport_fakes import FakeWorker

from transports import wire
from transports.http import bare, same_host
from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server
from transports.messages import ErrorReply, HealthReply, RunGraphReply, TensorEntry
from transports.service import RPCS, TransportUnavailable

GENEROUS = 20
_HEALTH = next(index for index, rpc in enumerate(RPCS) if rpc.method == "health")


def _frame(message) -> bytes:
    return b"".join(bytes(b) for b in wire.encode(message, wire.DEFAULT_LIMITS, checksums=True))


async def _answer(kind: int, frame: bytes):
    """What the client makes of one answer of ``kind`` carrying ``frame`` to its first call."""
    ours, theirs = socket.socketpair()
    with ours, theirs, trio.fail_after(GENEROUS):
        theirs.sendall(bare.REPLY.pack(len(frame), 1, kind, 0) + frame)  # to call id 1
        connection = bare.BareConnection(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
        return await connection.call(_HEALTH, None, 5.0, False, wire.DEFAULT_LIMITS)


@pytest.mark.parametrize("known", [False, True], ids=["new-header", "validated-header"])
@pytest.mark.parametrize("kind", [3, 7, 0xFFFF])
async def test_an_answer_of_an_unknown_kind_is_refused(kind, known):
    key = f"unknown_{kind}_{known}:0"  # a header of its own (validated headers are kept)
    frame = _frame(RunGraphReply([TensorEntry(key, np.arange(4, dtype=np.float32))]))
    if known:  # its header validated before: the frame would decode in one pass
        wire.decode(frame)
        assert wire.decode_repeated(memoryview(frame)) is not None
    with pytest.raises(wire.RemoteProtocolError, match=f"unknown answer kind {kind}"):
        await _answer(kind, frame)


@pytest.mark.parametrize("known", [False, True], ids=["new-header", "validated-header"])
async def test_an_answer_whose_kind_belies_its_frame_is_refused(known):
    reply = _frame(RunGraphReply([TensorEntry(f"belied_{known}:0",
                                              np.arange(4, dtype=np.float32))]))
    error = _frame(ErrorReply("ABORTED", f"step 3 was aborted ({known})"))
    if known:
        wire.decode(reply)
        wire.decode(error)
    with pytest.raises(wire.RemoteProtocolError, match="answer of kind 1 holds a RunGraphReply"):
        await _answer(bare.ERROR, reply)
    with pytest.raises(wire.RemoteProtocolError, match="answer of kind 0 holds a ErrorReply"):
        await _answer(bare.FRAME, error)
    message, lent = await _answer(bare.FRAME, reply)  # the well-formed answers, both ways
    assert lent is None and np.array_equal(message.tensors[0].value, np.arange(4))
    message, _ = await _answer(bare.ERROR, error)
    assert message == ErrorReply("ABORTED", f"step 3 was aborted ({known})")


def _connection(ours: socket.socket) -> bare.BareConnection:
    return bare.BareConnection(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))


async def _fed(pieces: list, calls: int = 1, end: bool = False) -> tuple[list, bytes]:
    """What the client's ``calls`` make of ``pieces`` sent one by one, each once the client
    waits (then the end of the stream when ``end``): replies or the errors raised, and the
    bytes the peer received (the requests)."""
    ours, theirs = socket.socketpair()
    with ours, theirs, trio.fail_after(GENEROUS):
        connection, got = _connection(ours), []

        async def feed():
            for piece in pieces:
                await trio.testing.wait_all_tasks_blocked()
                theirs.sendall(piece)
            if end:
                await trio.testing.wait_all_tasks_blocked()
                theirs.shutdown(socket.SHUT_WR)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed)
            for _ in range(calls):
                try:
                    got.append((await connection.call(_HEALTH, None, 5.0, False,
                                                      wire.DEFAULT_LIMITS))[0])
                except (wire.RemoteProtocolError, TransportUnavailable) as exc:
                    got.append(exc)
                    break
        theirs.setblocking(False)
        try:
            received = theirs.recv(1 << 16)
        except BlockingIOError:
            received = b""
        return got, received


@pytest.mark.parametrize("known", [False, True], ids=["new-header", "validated-header"])
async def test_an_answer_cut_at_every_byte_boundary_is_read_whole(known):
    """The head read in place or gathered, the frame decoded in one pass or by the decoder:
    an answer in two pieces cut anywhere, or byte by byte, gives the reply, nothing left."""
    reply = RunGraphReply([TensorEntry(f"every_cut_{known}:0", np.arange(5, dtype=np.float32))])
    frame = _frame(reply)
    if known:
        wire.decode(frame)
    answer = bare.REPLY.pack(len(frame), 1, bare.FRAME, 0) + frame
    for cut in range(1, len(answer)):
        got, _ = await _fed([answer[:cut], answer[cut:]])
        assert got == [reply], cut
    got, _ = await _fed([answer[i:i + 1] for i in range(len(answer))])
    assert got == [reply]


async def test_an_answer_cut_short_by_the_end_of_the_stream_is_transport_unavailable():
    frame = _frame(RunGraphReply([TensorEntry("short:0", np.arange(5, dtype=np.float32))]))
    answer = bare.REPLY.pack(len(frame), 1, bare.FRAME, 0) + frame
    for cut in (1, bare.REPLY.size - 1, bare.REPLY.size, bare.REPLY.size + 9, len(answer) - 1):
        got, _ = await _fed([answer[:cut]], end=True)
        assert isinstance(got[0], TransportUnavailable), (cut, got)


@pytest.mark.parametrize("kind", [bare.FRAME, bare.ERROR])
@pytest.mark.parametrize("length", [0, 2**40, 2**64 - 1])
async def test_an_empty_or_oversized_answer_length_is_the_peers_fault(kind, length):
    """A head announcing no frame at all, or one past the frame limit, is refused as the
    peer's protocol error before anything is read or allocated for it."""
    got, _ = await _fed([bare.REPLY.pack(length, 1, kind, 0) + bytes(40)], end=True)
    assert isinstance(got[0], wire.RemoteProtocolError), got
    assert "answer of" in str(got[0]) and str(length) in str(got[0])


@pytest.mark.parametrize("extra", [3, bare.REPLY.size, None], ids=["head", "whole-head", "all"])
@pytest.mark.parametrize("known", [False, True], ids=["new-header", "validated-header"])
async def test_bytes_after_an_answer_are_never_taken_for_the_next_calls_answer(extra, known):
    """The next answer's bytes arriving with this one (a pipelined or stale answer: nothing
    the one-call-at-a-time protocol sends): this call gets its reply; the next call on the
    connection is refused before its request goes out (the channel does not pool it)."""
    replies = [RunGraphReply([TensorEntry(f"pipelined_{extra}_{known}:0",
                                          np.full(3, n, dtype=np.float32))]) for n in (1, 2)]
    frames = [_frame(reply) for reply in replies]
    if known:
        wire.decode(frames[0])
    first, second = (bare.REPLY.pack(len(frame), call_id, bare.FRAME, 0) + frame
                     for call_id, frame in ((1, frames[0]), (2, frames[1])))
    got, received = await _fed([first + second[:extra]], calls=2)
    assert got[0] == replies[0]
    assert isinstance(got[1], wire.RemoteProtocolError) and "before" in str(got[1])
    assert len(received) == bare.REQUEST.size  # the first call's request, not the second's


async def _serve_scripted(stream: trio.SocketStream, answer) -> None:
    """A bare server written by hand: the handshake, then for each call's request whatever
    ``answer(call_id)`` sends (an awaitable that writes to the stream)."""
    async def exactly(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            more = await stream.receive_some(n - len(data))
            if not more:
                return None
            data += more
        return data

    async with stream:
        hello = await exactly(len(bare.MAGIC) + 4)
        if hello is None or await exactly(int.from_bytes(hello[-4:], "little")) is None:
            return
        await stream.send_all(bare.ACCEPTED)
        while (head := await exactly(bare.REQUEST.size)) is not None:
            length, call_id = bare.REQUEST.unpack(head)[:2]
            if length and await exactly(length) is None:
                return
            await answer(stream, call_id)


def _health_answer(call_id: int, incarnation: int) -> bytes:
    frame = _frame(HealthReply(incarnation, "/job:w/task:0", ["/job:w/task:0/cpu:0"]))
    return bare.REPLY.pack(len(frame), call_id, bare.FRAME, 0) + frame


@contextlib.asynccontextmanager
async def _scripted_channel(answer, **channel_args):
    """A channel whose same-host bare socket is served by ``_serve_scripted``."""
    async with open_http_server(FakeWorker()) as server:
        same_host.unlink(server.bare_path)
        listener, path = same_host.listen(server.port, "bare")
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.serve_listeners,
                                   lambda stream: _serve_scripted(stream, answer), [listener])
                async with TrioHttpChannel(server.address, **channel_args) as channel:
                    yield channel
                nursery.cancel_scope.cancel()
        finally:
            same_host.unlink(path)


async def test_a_channel_does_not_pool_a_connection_that_sent_more_than_its_answer():
    """A real channel against a server that sends a whole answer to call 2 right after its
    answer to call 1: the second call goes out on a new connection and gets the answer to the
    request it sent, not the one that was waiting."""
    answered = []

    async def answer(stream, call_id):
        answered.append(call_id)
        if len(answered) == 1:  # call 1, then an answer to no request yet
            await stream.send_all(_health_answer(call_id, 1) + _health_answer(call_id + 1, 99))
        else:
            await stream.send_all(_health_answer(call_id, 100 + len(answered)))

    with trio.fail_after(GENEROUS):
        async with _scripted_channel(answer) as channel:
            assert (await channel.health()).incarnation == 1
            assert channel._bare_idle == []  # not pooled: it held bytes no call asked for
            assert (await channel.health()).incarnation == 102
            assert len(channel._bare_idle) == 1 and channel.bare_calls == 2


async def test_a_call_cancelled_with_half_an_answer_read_closes_its_connection():
    """Half an answer arrives, then the call is cancelled: that connection is closed, never
    pooled; the next call gets a whole answer on a new one."""
    half_sent, answered = trio.Event(), []

    async def answer(stream, call_id):
        answered.append(call_id)
        whole = _health_answer(call_id, 5 + len(answered))
        if len(answered) == 1:
            await stream.send_all(whole[:bare.REPLY.size + 10])
            half_sent.set()
            await trio.sleep_forever()  # (until the channel closes it)
        await stream.send_all(whole)

    with trio.fail_after(GENEROUS):
        async with _scripted_channel(answer) as channel:
            async with trio.open_nursery() as nursery:
                async def call():
                    with trio.CancelScope() as scope:
                        calls.append(scope)
                        await channel.health()
                    cancelled.append(scope.cancelled_caught)

                calls, cancelled = [], []
                nursery.start_soon(call)
                await half_sent.wait()
                await trio.testing.wait_all_tasks_blocked()
                calls[0].cancel()
            assert cancelled == [True] and channel._bare_idle == []
            assert (await channel.health()).incarnation == 7
            assert len(channel._bare_idle) == 1


@pytest.mark.parametrize("cut", [bare.REPLY.size - 3, bare.REPLY.size + 20])
async def test_a_connection_whose_call_was_cancelled_midway_carries_no_other(cut):
    """Cancelled with part of its answer read (the head still gathering, or the frame in the
    decoder), a connection refuses the next call before its request goes out, even once the
    rest of the old answer has arrived; the client closes such a connection anyway."""
    frame = _frame(RunGraphReply([TensorEntry(f"midway_{cut}:0", np.arange(64.0))]))
    answer = bare.REPLY.pack(len(frame), 1, bare.FRAME, 0) + frame
    ours, theirs = socket.socketpair()
    with ours, theirs, trio.fail_after(GENEROUS):
        connection = _connection(ours)
        theirs.sendall(answer[:cut])
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.call, _HEALTH, None, 5.0, False,
                                   wire.DEFAULT_LIMITS)
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        assert scope.cancelled_caught and connection.answered
        theirs.sendall(answer[cut:])
        with pytest.raises(wire.LocalProtocolError, match="ended midway"):
            await connection.call(_HEALTH, None, 5.0, False, wire.DEFAULT_LIMITS)
        theirs.setblocking(False)
        assert len(theirs.recv(1 << 16)) == bare.REQUEST.size  # the first request alone


@pytest.mark.parametrize("cut", [bare.REPLY.size - 3, bare.REPLY.size + 10],
                         ids=["half_the_head", "part_of_the_frame"])
async def test_an_answer_cut_then_silent_ends_at_the_stall_timeout(cut):
    """Part of an answer, then nothing on a connection that stays open, and the call has no
    deadline: TransportUnavailable "stalled" once the channel's stall timeout passed without a
    byte (as over HTTP), not a hang; the next call gets a whole answer on a new connection."""
    answered, stall = [], 0.5

    async def answer(stream, call_id):
        answered.append(call_id)
        whole = _health_answer(call_id, 5 + len(answered))
        if len(answered) == 1:
            await stream.send_all(whole[:cut])
            await trio.sleep_forever()  # (until the channel closes it)
        await stream.send_all(whole)

    with trio.fail_after(GENEROUS):
        async with _scripted_channel(answer, stall_timeout=stall) as channel:
            started = trio.current_time()
            with pytest.raises(TransportUnavailable, match="stalled"):
                await channel.health()
            assert trio.current_time() - started >= stall - 0.05
            assert channel.bare_calls == 0 and channel._bare_idle == []
            assert (await channel.health()).incarnation == 7 and channel.bare_calls == 1


async def test_a_late_first_byte_and_a_trickle_are_no_stall():
    """The stall timeout counts from an answer's last byte, never before its first: an answer
    that starts later than the timeout (a long step), then comes a piece at a time, each
    within the timeout but all of them together past it, is the reply, and the connection is
    pooled (the scope that watched its pieces left nothing behind on it)."""
    stall = 0.5

    async def answer(stream, call_id):
        whole = _health_answer(call_id, 40 + call_id)
        await trio.sleep(2 * stall)  # the first byte, after the timeout
        for start in range(0, len(whole), len(whole) // 4):
            await stream.send_all(whole[start:start + len(whole) // 4])
            await trio.sleep(stall / 3)  # each piece within it, all four past it

    with trio.fail_after(GENEROUS):
        async with _scripted_channel(answer, stall_timeout=stall) as channel:
            started = trio.current_time()
            assert (await channel.health()).incarnation == 41
            assert trio.current_time() - started >= 2 * stall
            assert channel.bare_calls == 1 and len(channel._bare_idle) == 1
            assert channel._bare_idle[0].watch is None
            assert (await channel.health()).incarnation == 42 and channel.bare_calls == 2
