"""A request body on a server connection, read straight into the decoder's arrays (trio).

:class:`BufferedConnection` is a server connection with the bytes read past the last head;
:class:`RequestBody` reads a ``Content-Length`` or chunked body from it, each wait bounded by a
timeout (:class:`BodyTimeout`); :func:`read_frame` hands the decoder's buffers
(:meth:`~transports.wire.Decoder.get_buffer`) to ``recv_into``, so tensor bytes go from the
socket into their arrays with no copy in between, and checks that the body holds exactly one
frame. Used by :mod:`transports.http.server`. Nothing here knows about asyncflow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import trio

from transports.http.guard import GuardedConnection
from transports.http.framing import MessageReader
from transports.http.protocol import take_one_frame
from transports.messages import Message
from transports.wire import (
    SMALL_HEADER_BYTES, Decoder, Limits, LocalProtocolError,
    RemoteProtocolError,
)

__all__ = ["BodyTimeout", "BufferedConnection", "PeerGone", "RequestBody", "read_frame"]

_RECV: Final = 64 * 1024


class BodyTimeout(Exception):
    """The client stopped sending a body it announced (the server answers 408)."""


class PeerGone(Exception):
    """The client closed or reset the connection in the middle of a request."""


class BufferedConnection(GuardedConnection):
    """A connection with its reader (what was received past the last request is fed to it)."""

    __slots__ = ("reader",)

    def __init__(self, stream: trio.SocketStream, now: float) -> None:
        super().__init__(stream, now)
        self.reader = MessageReader()

    async def receive_into(self, view: memoryview, timeout: float) -> int:
        """Receive into the start of ``view`` from the socket (one read; the reader holds
        nothing of the body)."""
        with trio.move_on_after(timeout):
            n = await self.stream.socket.recv_into(view)
            if not n:
                raise PeerGone("the client closed the connection in the middle of the body")
            return n
        raise BodyTimeout(f"no body bytes for {timeout} s")

    async def receive_some(self, timeout: float) -> bytes:
        """The next bytes from the socket past the reader; b"" at EOF or after ``timeout``."""
        with trio.move_on_after(timeout):
            return await self.stream.receive_some(_RECV)
        return b""

    async def fill(self, timeout: float) -> None:
        """Feed the reader at least one more byte from the socket."""
        with trio.move_on_after(timeout):
            data = await self.stream.receive_some(_RECV)
            if not data:
                raise PeerGone("the client closed the connection in the middle of the body")
            self.reader.feed(data)
            return
        raise BodyTimeout(f"no body bytes for {timeout} s")


class RequestBody:
    """The body of the request whose head the connection's reader handed out last."""

    def __init__(self, conn: BufferedConnection, timeout: float) -> None:
        self._conn, self._timeout = conn, timeout
        self.done = False  # every byte of the body was read

    async def read_into(self, view: memoryview) -> int:
        """Up to ``len(view)`` body bytes into ``view``; 0 at the end of the body.

        Raises:
            RemoteProtocolError: the body breaks the framing (a bad chunk).
            BodyTimeout, PeerGone: as :meth:`BufferedConnection.fill`.
        """
        conn, reader = self._conn, self._conn.reader
        while not self.done:
            n = reader.read_body(view)
            if n is not None:
                self.done = n == 0
                return n
            left = reader.body_left
            if left:  # a Content-Length body not yet received: straight into place
                n = await conn.receive_into(view[:left], self._timeout)
                reader.skipped(n)
                return n
            await conn.fill(self._timeout)  # a chunked body goes through the parser
        return 0


async def read_frame(body: RequestBody, limits: Limits, decoders: trio.CapacityLimiter,
                     received: Callable[[int], None]) -> Message:
    """Receive a body that must hold exactly one frame, straight into its arrays.

    A header over ``SMALL_HEADER_BYTES`` is fed to the decoder on a worker thread (at most
    ``decoders`` at once): decoding it takes long, and Health must keep being answered.
    ``received`` is told each byte count as it arrives.

    Raises:
        RemoteProtocolError: the body is not exactly one valid frame (FrameTooLarge: limits).
        BodyTimeout: the body stalled; PeerGone: the client closed the connection.
    """
    decoder = Decoder(limits)
    while True:
        try:
            view = decoder.get_buffer()
        except LocalProtocolError:
            break  # the body broke the protocol: next_event raises it below
        n = await body.read_into(view)
        if not n:
            break
        received(n)
        if decoder.header_bytes_pending > SMALL_HEADER_BYTES:  # long to decode: off the loop
            await trio.to_thread.run_sync(decoder.buffer_updated, n, limiter=decoders)
        else:
            decoder.buffer_updated(n)
    if body.done:
        decoder.receive_data(b"")
    message = take_one_frame(decoder, None)
    if message is None:
        raise RemoteProtocolError("empty body: expected one frame")
    return message


async def read_small_body(body: RequestBody, length: int) -> bytes:
    """A short body (a login form) whole: ``length`` bytes, fewer if the client stops."""
    data = bytearray(length)
    view, got = memoryview(data), 0
    while got < length and (n := await body.read_into(view[got:])):
        got += n
    return bytes(data[:got])
