"""Moving a large body in few wake-ups: socket loops for tensor bytes (trio).

Why
---
A trio socket call does one ``send``/``recv`` and then yields to the scheduler, and the next
call usually finds the kernel's buffer full (or empty), gets ``EAGAIN`` and parks in ``epoll``
until the other side has moved some bytes. On loopback both sides keep pace with each other,
so a 64 MiB tensor left the ps in ~150 sends of ~440 KiB and arrived at the worker in ~270
reads of ~240 KiB, each one two passes through trio's scheduler, an ``epoll_ctl`` and a failed
call: Python per few hundred KiB on both sides, where a blocking ``sendall``/``recv_into``
pair spends none.

How
---
:meth:`BulkReader.receive_into` reads with ``os.readv`` on the socket's descriptor
(non-blocking, no scheduler pass when data is there) and, when nothing is queued, parks in
``trio.lowlevel.wait_readable`` with the socket's ``SO_RCVLOWAT`` raised to
``min(LOW_WATER, len(view))``, so ``epoll`` wakes the task once that much has arrived (or the
peer closes) instead of at the first segment; the mark is back to 1 before the wait returns, so
nothing else that waits on the socket (the next response head) is affected. The caller
guarantees that ``len(view)`` bytes are still due on the stream (a declared body), so the mark
never asks for bytes the peer does not owe; it is also kept within half the socket's receive
buffer (Linux >= 4.18 grows the buffer to fit the mark; where it did not, a mark the window
cannot bring in would never fire), and epoll reports a socket under memory pressure readable
anyway. A peer that stalls is a stall as before, bounded by the caller's deadline; a caller
that bounds the gap between bytes instead sets ``patience``, after which the mark is 1 again
(a slow link's bytes are never held back past it). At most
:data:`CALLS_PER_CHECKPOINT` reads in a row go without a trio
checkpoint, so a fast stream cannot starve other tasks or delay cancellation.
:func:`send_all` is the writing half: ``send`` calls in a row while the kernel takes bytes,
``wait_writable`` only when it takes none.

Both are for one task that owns the socket for the transfer (the HTTP client's connections are
checked out per call; a server connection's task reads and answers one request at a time).

Nothing here knows about asyncflow or HTTP.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from typing import Final

import trio

__all__ = ["BULK_BYTES", "LOW_WATER", "CALLS_PER_CHECKPOINT", "BulkReader"]

BULK_BYTES: Final = 256 * 1024  # views smaller than this are read the ordinary way
LOW_WATER: Final = 1 << 20  # bytes queued before a parked reader wakes
CALLS_PER_CHECKPOINT: Final = 16


class BulkReader:
    """Reads of one connection's socket; counts the reads since its last checkpoint."""

    __slots__ = ("_sock", "_reads", "patience")

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self._sock, self._reads = sock, 0
        # Seconds a raised mark may hold back bytes already queued (None: as long as it
        # takes): a caller that times the gaps between bytes (a stall timeout) sets a quarter
        # of it, so a slow link's pieces are seen before the timeout though the mark is not
        # reached (a stall is then declared at most ``patience`` late, never early).
        self.patience: float | None = None

    async def receive_into(self, view: memoryview) -> int:
        """Read into ``view``, all of which the peer still owes; returns the count (0: EOF).

        Raises OSError as ``recv_into`` does; a checkpoint at least every few reads.
        """
        if self._reads >= CALLS_PER_CHECKPOINT:
            self._reads = 0
            await trio.lowlevel.checkpoint()
        while True:
            try:
                n = os.readv(self._sock.fileno(), [view])  # -1 once closed: EBADF
            except BlockingIOError:
                await self._wait(len(view))
                continue
            self._reads += 1
            return n

    async def _wait(self, due: int) -> None:
        self._reads = 0
        mark = min(LOW_WATER, due)
        if mark > 1:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, mark)
            # Linux >= 4.18 grows the receive buffer to hold the mark; where it did not, a mark
            # the window cannot reach would never wake us: keep it well inside the buffer.
            room = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2
            if room < mark:
                mark = max(room, 1)
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, mark)
        try:
            if mark > 1 and self.patience is not None:
                with trio.move_on_after(self.patience):
                    await trio.lowlevel.wait_readable(self._sock)
                    return
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)  # any byte
            await trio.lowlevel.wait_readable(self._sock)
        finally:
            if mark > 1:
                with contextlib.suppress(OSError):  # closed meanwhile: the wait says so
                    self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)


async def send_all(sock: trio.socket.SocketType, view: memoryview,
                   on_wait: Callable[[], None] | None = None) -> None:
    """Send all of ``view``: non-blocking ``send`` calls in a row while the kernel takes bytes,
    parking in ``wait_writable`` only when it takes none (``on_wait`` is called first: e.g. to
    renew a deadline). A checkpoint at least every CALLS_PER_CHECKPOINT sends.

    Raises OSError as ``send`` does (trio.ClosedResourceError when closed while waiting).
    """
    sent, calls = 0, 0
    while sent < len(view):
        if calls >= CALLS_PER_CHECKPOINT:
            calls = 0
            await trio.lowlevel.checkpoint()
        try:
            sent += os.writev(sock.fileno(), [view[sent:]])  # -1 once closed: EBADF
            calls += 1
        except BlockingIOError:
            calls = 0
            if on_wait is not None:
                on_wait()
            await trio.lowlevel.wait_writable(sock)
