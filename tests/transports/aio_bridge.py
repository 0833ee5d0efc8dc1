"""The asyncio thread that hosts aiohttp for a trio process, and the call from trio onto it.

trio owns the process. aiohttp cannot run inside trio, so every aiohttp object of
:mod:`aiohttp_channel` (the tests' aiohttp client) lives on one daemon thread running an ``asyncio.SelectorEventLoop``
(:func:`aio_thread`, started lazily, one per process, with one ``ClientSession`` whose
connector pools connections to every worker). :func:`run_on_loop` is the trio -> asyncio
direction: ``asyncio.run_coroutine_threadsafe`` starts the coroutine, and its done-callback wakes
the trio task through ``TrioToken.run_sync_soon``. If the trio task is cancelled, it cancels the
asyncio task and waits (shielded, bounded) for it to unwind, so no asyncio work outlives its
caller and arrays being sent stay owned until they are sent.

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
from collections.abc import Coroutine
from typing import Any, Final

import aiohttp
import trio

__all__ = ["aio_thread", "run_on_loop"]

_CANCEL_GRACE: Final = 5.0  # seconds a cancelled trio caller waits for its asyncio task to unwind


class _AioThread:
    """The process's asyncio loop for aiohttp, running in a daemon thread."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.SelectorEventLoop()
        self._session: aiohttp.ClientSession | None = None
        threading.Thread(target=self.loop.run_forever, name="asyncflow-aiohttp",
                         daemon=True).start()

    def session(self) -> aiohttp.ClientSession:
        """The shared client session; call on the loop only."""
        if self._session is None:
            # limit=0: a long recv_tensors must never queue other calls behind a pool limit.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), auto_decompress=False,
                read_bufsize=1 << 20)
        return self._session

    def close(self) -> None:
        """Close the session and stop the loop (at interpreter exit)."""
        async def close_session() -> None:
            if self._session is not None:
                await self._session.close()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close_session(), self.loop).result(timeout=2)
            self.loop.call_soon_threadsafe(self.loop.stop)


_aio_lock = threading.Lock()
_aio: _AioThread | None = None


def aio_thread() -> _AioThread:
    global _aio
    with _aio_lock:
        if _aio is None or _aio.pid != os.getpid():  # a forked child needs its own thread
            _aio = _AioThread()
            atexit.register(_aio.close)
        return _aio


async def run_on_loop(coro: Coroutine[Any, Any, Any],
                       loop: asyncio.AbstractEventLoop | None = None) -> Any:
    """Run a coroutine on ``loop`` (default: the asyncio thread's) and wait for it in trio.

    ``loop`` may be the loop hosting this trio run as a guest (same thread): the calls used
    here are thread-safe, not thread-requiring.
    """
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def wake(_: object) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(done.set)

    future = asyncio.run_coroutine_threadsafe(coro, loop or aio_thread().loop)
    future.add_done_callback(wake)
    try:
        await done.wait()
    except trio.Cancelled:
        future.cancel()
        with trio.CancelScope(shield=True, deadline=trio.current_time() + _CANCEL_GRACE):
            await done.wait()
        raise
    return future.result()
