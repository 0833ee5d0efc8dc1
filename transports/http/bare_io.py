"""The bare same-host protocol's socket I/O (:mod:`transports.http.bare`): a read after one
wait, a small message in one ``writev``, and the server side's connection (reads against a
deadline, the bytes received past a request) and request body.

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import math
import os
from typing import Any, Final

import trio

from transports.http.body import BodyTimeout, PeerGone
from transports.http.guard import GuardedConnection
from transports.http.protocol import JOIN_BYTES
from transports.wire import ChecksumTrailer

__all__ = ["RECV", "RequestBody", "ServerConnection", "read_once", "small_pieces", "write_now"]

RECV: Final = 64 * 1024


async def read_once(sock: Any) -> bytes:
    """The next bytes of a trio socket that had none a moment ago (b"" at EOF): one wait, one
    read (trio's ``recv`` would try the read again before waiting)."""
    while True:
        await trio.lowlevel.wait_readable(sock)
        try:
            return os.read(sock.fileno(), RECV)
        except BlockingIOError:
            continue


_MAX_PIECES: Final = 64  # a small message's buffers, at most, written in one writev


def small_pieces(head: bytes, buffers: list) -> list | None:
    """``[head, *buffers]``, their pending checksum trailers filled, for a small message (a
    few buffers, each under :data:`JOIN_BYTES`: what :func:`send_pieces` would join into one
    send); None for any other (sent by ``send_pieces``)."""
    if len(buffers) > _MAX_PIECES:
        return None
    for buffer in buffers:
        if len(buffer) >= JOIN_BYTES:
            return None
    for buffer in buffers:
        if type(buffer) is ChecksumTrailer and buffer.pending:
            buffer.fill()
    return [head, *buffers]


def write_now(sock: Any, pieces: list) -> bytes:
    """Write ``pieces`` with one ``writev`` (no join, no scheduler pass); what the kernel did
    not take, joined (b"" when it took all). Raises OSError as ``writev`` does."""
    try:
        sent = os.writev(sock.fileno(), pieces)  # -1 once closed: EBADF
    except BlockingIOError:
        sent = 0
    if sent == sum(map(len, pieces)):
        return b""
    return b"".join(pieces)[sent:]



class ServerConnection(GuardedConnection):
    __slots__ = ("pending", "waiting")

    def __init__(self, stream: Any, now: float) -> None:
        super().__init__(stream, now)
        self.pending = b""  # received past the last call's request
        self.waiting = False  # waiting for the next call (idle since ``idle_since``)

    async def receive(self, deadline: float) -> bytes:
        """The next bytes; b"" at EOF. Past ``deadline`` the connection's scope ends it."""
        sock = self.stream.socket
        try:  # what is there already costs no deadline and no scheduler pass
            return os.read(sock.fileno(), RECV)
        except BlockingIOError:
            pass
        self.scope.deadline = deadline
        try:
            return await read_once(sock)
        finally:
            self.scope.deadline = math.inf

    async def receive_exactly(self, n: int, deadline: float) -> bytes:
        """``n`` bytes, all by ``deadline`` (one for the whole: a client that trickles a header
        a byte at a time cannot stretch it, as HTTP's header timeout runs from its first byte)."""
        while len(self.pending) < n:
            data = await self.receive(deadline)
            if not data:
                raise PeerGone("the client closed the connection")
            self.pending += data
        data, self.pending = self.pending[:n], self.pending[n:]
        return data


class RequestBody:
    """A request frame of known length: first what came with its header, then the socket."""

    def __init__(self, conn: ServerConnection, length: int, timeout: float) -> None:
        self._conn, self._left, self._timeout = conn, length, timeout
        self.done = length == 0

    async def read_into(self, view: memoryview) -> int:
        conn, want = self._conn, min(len(view), self._left)
        if not want:
            self.done = True
            return 0
        if conn.pending:
            n = min(want, len(conn.pending))
            view[:n] = conn.pending[:n]
            conn.pending = conn.pending[n:]
        else:
            n = await self._receive_into(view[:want])
        self._left -= n
        self.done = not self._left
        return n

    async def _receive_into(self, view: memoryview) -> int:
        with trio.move_on_after(self._timeout):
            n = await self._conn.stream.socket.recv_into(view)
            if not n:
                raise PeerGone("the client closed the connection in the middle of a frame")
            return n
        raise BodyTimeout(f"no frame bytes for {self._timeout} s")
