"""A session's runs and its close: the cancel scopes of runs in flight, and the close itself.

- ``Parked(scopes)``: ``with`` it, a run is cancellable by the session's close (its scope is
  in ``scopes`` while entered); ``CancelledOnEntry`` stands in for ``scopes`` after the close,
  so a run prepared before the close is cancelled as it parks.
- ``Closing``: a close, begun once, that any other close waits for, from the same trio run
  (a trio Event) or another thread's trio run (a worker thread waits, abandoned if that
  caller is cancelled: no event loop blocks). The first close is shielded and bounded by its
  target (a cluster's at 2 x ``CLOSE_S``); a waiting one is bounded too, at ``WAIT_S``, in
  case the first's run died under it.
"""
from __future__ import annotations

import threading

import trio

WAIT_S = 10.0  # a second close's wait for the first (bounded itself at ~4 s)


class Parked:
    """``with`` it: a fresh cancel scope, in ``scopes`` while entered (for ``close()``)."""

    __slots__ = ("_scopes", "_scope")

    def __init__(self, scopes):
        self._scopes = scopes

    def __enter__(self):
        self._scope = trio.CancelScope()
        self._scopes.add(self._scope)
        return self._scope.__enter__()

    def __exit__(self, *exc_info):
        try:
            return self._scope.__exit__(*exc_info)
        finally:
            self._scopes.discard(self._scope)


class CancelledOnEntry(set):
    """The run scopes after ``close()``: a run prepared before it is cancelled as it parks."""

    def add(self, scope):
        scope.cancel()
        super().add(scope)


class Closing:
    """One close in progress (made in its trio run); ``finished()`` when it has ended."""

    __slots__ = ("_token", "_here", "_done")

    def __init__(self):
        self._token = trio.lowlevel.current_trio_token()
        self._here = trio.Event()  # for the closing run itself (no thread needed)
        self._done = threading.Event()  # for any other run or thread

    def finished(self):
        self._done.set()
        self._here.set()

    async def wait(self):
        """Return once the close has finished (at most ``WAIT_S``), from any trio run."""
        if trio.lowlevel.current_trio_token() is self._token:
            await self._here.wait()
        elif not self._done.is_set():
            await trio.to_thread.run_sync(self._done.wait, WAIT_S, abandon_on_cancel=True)
