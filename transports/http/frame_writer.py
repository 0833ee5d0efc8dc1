"""Sending a frame with its large tensors' checksums summed on a helper thread (trio).

Why
---
Over TCP on loopback the sender is the slower end of a 64 MiB pull: its ``send`` calls copy
the tensor into the kernel and run the loopback stack, back to back, while the receiver spends
about half the pull waiting for bytes (bench/RESULTS.md, "the wire checksum off the sender's
path"). Summing each chunk on the sending task after the kernel took it put the whole sum on
that path: about 1.1 ms per 64 MiB, 6-7% of a quiet pull. A :class:`~transports.checksum.
TrailingSums` thread sums the chunks instead, just behind the sends, while the task sends the
next ones (the sums release the GIL), on a core the pull leaves partly idle.

How
---
:func:`send_frame` sends ``head`` and a frame's buffers with the same pieces as
:func:`~transports.http.protocol.send_pieces`. When a pending trailer belongs to a segment of
:data:`THREAD_BYTES` or more, a thread (``trio.to_thread``, inside a nursery) runs the sums and
the task waits for them only where a trailer is about to be sent (the thread wakes it through
the trio token); smaller frames are summed in the task as before (a thread's start costs more
than summing them). The thread is told to stop when the send ends, however it ends, and the
nursery returns only after it has: a cancelled or failed send leaves no sum running and no
view of the frame's arrays held.

Nothing here knows about asyncflow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import trio

from transports.checksum import ChecksumTrailer, TrailingSums
from transports.http.protocol import SUMS_PENDING, send_pieces

__all__ = ["THREAD_BYTES", "send_frame"]

THREAD_BYTES: Final = 4 << 20  # segments from this size have their sums on a helper thread


async def send_frame(head: bytes, buffers: list[bytes | memoryview],
                     send_all: Callable[[bytes | memoryview], Awaitable[None]]) -> None:
    """Send ``head`` then the frame's ``buffers`` through ``send_all``, filling pending
    checksum trailers on the way (see the module docstring)."""
    if not any(isinstance(b, ChecksumTrailer) and b.pending and len(b.segment) >= THREAD_BYTES
               for b in buffers):
        for piece in send_pieces(head, buffers):
            await send_all(piece)
        return
    sums = TrailingSums()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_run, sums)
        try:
            await trio.lowlevel.checkpoint()  # the thread starts before the first chunk
            for piece in send_pieces(head, buffers, sums):
                if piece is SUMS_PENDING:
                    await _summed(sums)
                else:
                    await send_all(piece)
        finally:
            sums.stop()


async def _run(sums: TrailingSums) -> None:
    await trio.to_thread.run_sync(sums.run)  # not abandoned on cancel: waits for stop()


async def _summed(sums: TrailingSums) -> None:
    """Wait until the thread has set every trailer begun (it calls ``on_done`` after each)."""
    token = trio.lowlevel.current_trio_token()
    try:
        while sums.pending():
            event = trio.Event()
            sums.on_done = lambda event=event: token.run_sync_soon(event.set)
            if sums.pending():  # looked at after on_done is set: no completion is missed
                await event.wait()
    finally:
        sums.on_done = None
