"""The HTTP client's keep-alive connection and response body reader
(:class:`transports.http.client.TrioHttpChannel`'s HTTP path; see that module's docstring).

Nothing here knows about asyncflow.
"""

from __future__ import annotations

from typing import Final

import trio

from transports.http import bulk_io, cross_memory
from transports.http.bulk_io import BULK_BYTES, BulkReader
from transports.http.framing import MessageReader
from transports.service import TransportUnavailable

__all__ = ["MAX_HEAD", "RECV", "Body", "Connection", "StaleConnection"]

MAX_HEAD: Final = 64 * 1024  # the most of a response head this client reads
RECV: Final = 64 * 1024


class StaleConnection(Exception):
    """A reused connection was found closed before any byte of the answer arrived."""


class Connection:
    """One keep-alive connection with its reader."""

    __slots__ = ("stream", "reader", "reused", "answered", "bulk", "peer", "watch", "stall")

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.peer = cross_memory.peer_pid(stream.socket)  # a same-host server's pid, or None
        self.bulk = BulkReader(stream.socket)
        self.reader = MessageReader(response=True, max_head=MAX_HEAD)
        self.reused = False    # it carried a complete call before this one
        self.answered = False  # a byte of this call's answer has arrived
        self.watch = None      # the scope its answer's next byte is due in (``stall`` s)
        self.stall = 0.0

    async def send_all(self, data: bytes | memoryview) -> None:
        # Sent in a row while the kernel takes it; a small request taken whole costs no pass
        # of trio's scheduler (trio's ``send_all`` yields after it): the reply's read waits.
        await bulk_io.send_all(self.stream.socket, memoryview(data))

    async def receive_head(self) -> tuple[int, dict[str, str]]:
        """Read the status line and headers; returns (status, lowercase headers)."""
        while (head := self.reader.next_head()) is None:
            await self.feed("before the response head ended")
        return head.status, head.headers

    async def feed(self, where: str) -> None:
        """Feed the reader what the socket has next (at least one byte); an EOF is an error
        naming ``where`` the response was."""
        data = await self.stream.receive_some(RECV)
        if not data:
            if not self.answered and self.reused:
                raise StaleConnection
            raise TransportUnavailable(f"connection closed {where}")
        self.answered = True
        self.watch.deadline = trio.current_time() + self.stall  # the next byte's due
        self.reader.feed(data)

    async def receive_into(self, view: memoryview) -> int:
        """Receive body bytes still due straight into ``view``; returns the count."""
        if len(view) >= BULK_BYTES:  # a large tensor: woken per LOW_WATER bytes, not per segment
            n = await self.bulk.receive_into(view)
        else:
            n = await self.stream.socket.recv_into(view)
        if not n:
            raise TransportUnavailable("connection closed in the middle of the response body")
        self.watch.deadline = trio.current_time() + self.stall
        return n


class Body:
    """The body of one response: ``Content-Length`` or chunked, read piece by piece."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._done = False

    async def read_into(self, view: memoryview) -> int:
        """Up to ``len(view)`` body bytes into ``view``; 0 at the end of the body."""
        conn, reader = self._conn, self._conn.reader
        while not self._done:
            n = reader.read_body(view)
            if n is not None:
                self._done = n == 0
                return n
            left = reader.body_left
            if left:  # not yet received: straight into place, past the parser
                n = await conn.receive_into(view[:left])
                reader.skipped(n)
                return n
            await conn.feed("in the middle of the response body")  # chunked: through llhttp
        return 0

    async def read_text(self, limit: int) -> bytes:
        out = bytearray()
        scratch = memoryview(bytearray(RECV))
        while len(out) < limit:
            n = await self.read_into(scratch[:limit - len(out)])
            if not n:
                break
            out += scratch[:n]
        return bytes(out)
