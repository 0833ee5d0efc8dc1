"""TrioHttpChannel's stall timeout: an answer that has begun must go on.

A peer that sends part of an answer (half the head, or the head and part of the frame) and then
nothing, the connection left open (stuck mid-send, a half-open connection), fails the call with
TransportUnavailable "stalled" once ``stall_timeout`` passes without a byte, though the call
itself has no deadline; a peer that takes longer than that before its first byte (a long step)
and one whose answer trickles in slower than the timeout in total are no stall. Small raw trio
servers on 127.0.0.1; the real clock (bytes cross a socket: trio's mock clock could jump past
them).
"""

from __future__ import annotations

import numpy as np
import pytest
import trio

from transports import wire
from transports.http.client import TrioHttpChannel
from transports.http.protocol import FRAME_CONTENT_TYPE
from transports.messages import RecvTensors, RecvTensorsReply, TensorEntry
from transports.service import TransportUnavailable

GENEROUS = 20
STALL = 0.5
HEALTH = b"".join(wire.encode(wire.HealthReply(9, "/job:w/replica:0/task:0", ["cpu"])))
ANSWER = (f"HTTP/1.1 200 OK\r\nContent-Type: {FRAME_CONTENT_TYPE}\r\n"
          f"Content-Length: {len(HEALTH)}\r\n\r\n").encode() + HEALTH


async def peer(pieces, task_status=trio.TASK_STATUS_IGNORED):
    """Answer each request with ``pieces``: ``(seconds to wait, bytes)`` in turn; then keep the
    connection open until the client leaves."""
    async def answer(stream):
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some()
            for wait, piece in pieces:
                await trio.sleep(wait)
                await stream.send_all(piece)
            while await stream.receive_some():
                pass

    await trio.serve_tcp(answer, 0, host="127.0.0.1", task_status=task_status)


async def _health(nursery, pieces):
    listeners = await nursery.start(peer, pieces)
    port = listeners[0].socket.getsockname()[1]
    async with TrioHttpChannel(f"127.0.0.1:{port}", same_host=False,
                               stall_timeout=STALL) as channel:
        started = trio.current_time()
        with trio.fail_after(GENEROUS):
            try:
                return await channel.health(), trio.current_time() - started
            except TransportUnavailable as exc:
                return exc, trio.current_time() - started


@pytest.mark.parametrize("cut", [20, len(ANSWER) - len(HEALTH) + 10],
                         ids=["half_the_head", "part_of_the_frame"])
async def test_an_answer_cut_then_silent_is_unavailable_after_the_stall_timeout(nursery, cut):
    error, elapsed = await _health(nursery, [(0, ANSWER[:cut])])
    assert isinstance(error, TransportUnavailable), error
    assert "stalled" in str(error) and "127.0.0.1" in str(error), error
    assert STALL - 0.05 <= elapsed < GENEROUS, elapsed


async def test_a_late_first_byte_and_a_trickle_are_no_stall(nursery):
    # The first byte after 3 stall timeouts, the rest in pieces each within one.
    third = len(ANSWER) // 3
    pieces = [(3 * STALL, ANSWER[:third]), (STALL / 2, ANSWER[third:2 * third]),
              (STALL / 2, ANSWER[2 * third:])]
    reply, elapsed = await _health(nursery, pieces)
    assert isinstance(reply, wire.HealthReply) and reply.incarnation == 9, reply
    assert elapsed >= 4 * STALL - 0.05


async def test_a_large_body_that_keeps_coming_in_small_pieces_is_no_stall(nursery):
    """A slow link: a 512 KiB tensor's bytes arrive in 4 KiB pieces, one each third of the
    stall timeout (never a gap of one), 6 s in all. The client reads a tensor that large in few
    wake-ups (it asks the kernel for up to 1 MiB at a time: ``bulk_io``); that must not hide the
    pieces from the stall timeout."""
    value = np.arange(128 << 10, dtype=np.float32)  # 512 KiB
    frame = b"".join(bytes(b) for b in wire.encode(
        RecvTensorsReply([TensorEntry("big:0", value)])))
    answer = (f"HTTP/1.1 200 OK\r\nContent-Type: {FRAME_CONTENT_TYPE}\r\n"
              f"Content-Length: {len(frame)}\r\n\r\n").encode() + frame
    piece, slow = 4096, 1.0
    first = len(answer) - len(frame) + 1024  # the head and the frame's header at once
    pieces = [(0, answer[:first])] + [
        (slow / 3, answer[at:at + piece]) for at in range(first, len(answer), piece)]
    listeners = await nursery.start(peer, pieces)
    port = listeners[0].socket.getsockname()[1]
    async with TrioHttpChannel(f"127.0.0.1:{port}", same_host=False,
                               stall_timeout=slow) as channel:
        with trio.fail_after(GENEROUS + len(pieces) * slow / 3):
            reply = await channel.recv_tensors(RecvTensors(1, ["big:0"]))
    assert np.array_equal(reply.tensors[0].value, value)
