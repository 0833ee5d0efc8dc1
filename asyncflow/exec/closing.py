"""A session's runs and its close: the cancel scopes of runs in flight, and the close itself.

- ``Parked(scopes)``: ``with`` it, a run is cancellable by the session's close (its scope is
  in ``scopes`` while entered); ``Lent(scopes, cancel)`` puts a cancel of the target's own
  there instead (no trio scope); ``CancelledOnEntry`` stands in for ``scopes`` after the
  close, so a run prepared before the close is cancelled as it parks.
- ``Closing``: a close, begun once, that any other close waits for, from the same trio run
  (a trio Event) or another thread's trio run (woken through that run's trio token: no
  thread waits, no event loop blocks, a cancelled wait leaves nothing behind). The first
  close is shielded and bounded by its target (a cluster's at 2 x ``CLOSE_S``); a waiting one
  is bounded too, at ``WAIT_S``, in case the first's run died under it.
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


class Lent:
    """``with`` it: ``cancel`` (anything with ``cancel()`` and ``cancel_called``: a channel's
    call cancel, which ends the run's one wait without a trio scope) in ``scopes`` while
    entered, where ``Parked`` would enter a trio scope (~5 us of CPU a run)."""

    __slots__ = ("_scopes", "_cancel")

    def __init__(self, scopes, cancel):
        self._scopes, self._cancel = scopes, cancel

    def __enter__(self):
        self._scopes.add(self._cancel)
        return self._cancel

    def __exit__(self, *exc_info):
        self._scopes.discard(self._cancel)


class CancelledOnEntry(set):
    """The run scopes after ``close()``: a run prepared before it is cancelled as it parks."""

    def add(self, scope):
        scope.cancel()
        super().add(scope)


class Closing:
    """One close in progress (made in its trio run); ``finished()`` when it has ended."""

    __slots__ = ("_token", "_here", "_lock", "_done", "_waiters")

    def __init__(self):
        self._token = trio.lowlevel.current_trio_token()
        self._here = trio.Event()  # for the closing run itself
        self._lock = threading.Lock()  # guards _done and _waiters (runs in other threads)
        self._done = False
        self._waiters = set()  # (trio token, trio.Event) of closes waiting in other runs

    def finished(self):
        with self._lock:
            self._done = True
            waiters, self._waiters = self._waiters, set()
        self._here.set()
        for token, event in waiters:  # each woken in its own run
            try:
                token.run_sync_soon(event.set)
            except trio.RunFinishedError:
                pass

    async def wait(self):
        """Return once the close has finished (at most ``WAIT_S``), from any trio run."""
        token = trio.lowlevel.current_trio_token()
        if token is self._token:
            await self._here.wait()
            return
        # Another run: woken through its token, no thread (a cancelled wait leaves nothing).
        waiter = (token, trio.Event())
        with self._lock:
            if self._done:
                return
            self._waiters.add(waiter)
        try:
            with trio.move_on_after(WAIT_S):
                await waiter[1].wait()
        finally:
            with self._lock:
                self._waiters.discard(waiter)
