"""An awaitable that a call hands back and that must be awaited (``Session.run``;
``Variable.load`` on an async session).

It is a coroutine by protocol (``send``/``throw``/``close``/``__await__``), so
``nursery.start_soon(...)`` and ``asyncio.create_task`` take it. Dropped without being awaited,
it closes what it wraps and warns with the line that made the call: Python's own warning would
name neither that line nor the fix. Subclasses say what to write (``never_awaited``).
"""
from __future__ import annotations

import warnings


class PendingCall:
    __slots__ = ("_coro", "_filename", "_lineno", "_awaited")

    def __init__(self, coro, filename, lineno):
        self._coro = coro
        self._filename = filename
        self._lineno = lineno
        self._awaited = False

    def never_awaited(self):
        """The warning's text when the call is dropped without being awaited."""
        raise NotImplementedError

    def __await__(self):
        self._awaited = True
        return self._coro.__await__()

    def send(self, value):
        self._awaited = True
        return self._coro.send(value)

    def throw(self, *exc_info):
        self._awaited = True
        return self._coro.throw(*exc_info)

    def close(self):
        self._awaited = True
        self._coro.close()

    def __del__(self):
        if not self._awaited:
            self._coro.close()  # (no second, line-less warning from what it wraps)
            warnings.warn_explicit(self.never_awaited(), RuntimeWarning, self._filename,
                                   self._lineno)
