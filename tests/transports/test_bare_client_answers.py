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
