"""The bare same-host client (``transports.http.bare.BareConnection``) against a server that
answers wrongly: a reply header of a kind the protocol does not have, or a kind that does not
match its frame, is refused however the frame is decoded, the one-pass decode of a repeated
frame (``transports.repeat_frames``) included. A real Unix socket pair; the "server" end is
written by hand."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import trio
import trio.testing

from transports import wire
from transports.http import bare
from transports.messages import ErrorReply, RunGraphReply, TensorEntry
from transports.service import RPCS

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


@pytest.mark.parametrize("cut", [5, bare.REPLY.size, bare.REPLY.size + 7])
@pytest.mark.parametrize("known", [False, True], ids=["new-header", "validated-header"])
async def test_answers_in_pieces_and_with_the_next_ones_first_bytes(cut, known):
    """An answer whose head or frame arrives in pieces, and the next answer's first bytes
    arriving with the end of this one: both calls get their replies, nothing is left over."""
    replies = [RunGraphReply([TensorEntry(f"pieces_{cut}_{known}:0",
                                          np.full(3, n, dtype=np.float32))]) for n in (1, 2)]
    frames = [_frame(reply) for reply in replies]
    if known:
        wire.decode(frames[0])
    first, second = (bare.REPLY.pack(len(frame), call_id, bare.FRAME, 0) + frame
                     for call_id, frame in ((1, frames[0]), (2, frames[1])))
    ours, theirs = socket.socketpair()
    with ours, theirs, trio.fail_after(GENEROUS):
        connection = bare.BareConnection(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
        theirs.sendall(first[:cut])

        async def the_rest():
            await trio.testing.wait_all_tasks_blocked()
            theirs.sendall(first[cut:] + second[:3])
            await trio.testing.wait_all_tasks_blocked()
            theirs.sendall(second[3:])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(the_rest)
            got = [(await connection.call(_HEALTH, None, 5.0, False, wire.DEFAULT_LIMITS))[0]
                   for _ in replies]
    assert got == replies and connection.pending == b""
