"""The one trio event loop behind the synchronous surface (``asyncflow.compat.v1``).

Theory of operation:
- One loop per process, on a daemon thread, started by the first synchronous call that needs
  it and stopped at interpreter exit (``atexit``). Its main task holds a nursery; each call
  from another thread is one task there.
- ``call(async_fn, *args)`` blocks the calling thread until the task ends and returns or
  raises its outcome (the same ``af.errors`` classes). Any number of threads may call at
  once: their tasks run concurrently on the loop, as TF1's session runs the steps of several
  Python threads concurrently.
- Ctrl-C: SIGINT reaches the main thread while it waits for its call. The wait is
  interrupted, the call's task is cancelled on the loop (a cancelled step leaves its session
  usable), the caller waits for the task to end (bounded) and ``KeyboardInterrupt`` is raised
  in the caller.
- ``hold(async_cm)`` enters an async context manager in a task of its own and keeps the task
  parked until ``release()``, so ``__aenter__`` and ``__aexit__`` run in one task (a session,
  a MonitoredTrainingSession), while their runs come from other tasks.
- After exit began, or when the loop has stopped, every call raises ``RuntimeError`` at once:
  nothing waits for a loop that will never answer.

This module knows nothing of sessions or graphs: it moves coroutines onto the loop.
"""
from __future__ import annotations

import atexit
import threading

import trio

# Bounds of the waits of a thread on the loop: none of them can hang a program.
START_TIMEOUT_S = 60.0
CANCEL_GRACE_S = 30.0
STOP_TIMEOUT_S = 10.0


class LoopClosedError(RuntimeError):
    """The background loop has stopped (the interpreter is exiting)."""


class _Call:
    """One call's task on the loop: its outcome, and a way to cancel it from any thread."""

    __slots__ = ("done", "value", "error", "scope", "cancel_requested", "submitted")

    def __init__(self):
        self.done = threading.Event()
        self.value = None
        self.error = None
        self.scope = None
        self.cancel_requested = False
        self.submitted = False

    def cancel(self):  # on the loop
        self.cancel_requested = True
        if self.scope is not None:
            self.scope.cancel()

    def outcome(self):
        if self.error is not None:
            error, self.error = self.error, None  # no reference cycle through the traceback
            raise error
        return self.value


class BackgroundLoop:
    """A trio run on a daemon thread that runs coroutines for synchronous callers."""

    def __init__(self, name="asyncflow-compat-loop"):
        self._name = name
        self._lock = threading.Lock()
        self._thread = None
        self._token = None
        self._nursery = None
        self._stop = None
        self._closed = False
        self._ready = threading.Event()
        self._start_error = None
        self.calls = 0

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive() and not self._closed

    @property
    def thread(self):
        return self._thread

    @property
    def closed(self):
        """Whether the loop stopped for good (exit began): every call is refused."""
        return self._closed

    def refuse(self):
        raise LoopClosedError(
            "the asyncflow.compat.v1 event loop has stopped because the interpreter is "
            "exiting; no session can run after exit began")

    def _ensure_started(self):
        if self._closed:
            self.refuse()
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._thread_main, name=self._name, daemon=True)
                thread.start()
                if not self._ready.wait(START_TIMEOUT_S) or self._start_error is not None:
                    raise RuntimeError(f"the asyncflow.compat.v1 event loop did not start: "
                                       f"{self._start_error!r}")
                self._thread = thread

    def _thread_main(self):
        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 - reported to the thread that waits
            self._start_error = exc
            self._ready.set()

    async def _main(self):
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def stop(self):
        """Stop the loop (cancelling what runs there) and refuse every later call."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is None:
            return
        try:
            self._token.run_sync_soon(self._stop.set)
        except trio.RunFinishedError:
            return
        thread.join(STOP_TIMEOUT_S)

    # -- calls --------------------------------------------------------------------------
    def in_loop_thread(self):
        return threading.current_thread() is self._thread

    def submit(self, async_fn, *args, call=None):
        """Start ``async_fn(*args)`` as a task on the loop; returns its ``_Call``."""
        self._ensure_started()
        call = call if call is not None else _Call()

        async def task():
            try:
                with trio.CancelScope() as scope:
                    call.scope = scope
                    if call.cancel_requested:
                        scope.cancel()
                    call.value = await async_fn(*args)
                if scope.cancelled_caught and call.error is None:
                    call.error = KeyboardInterrupt() if call.cancel_requested else \
                        LoopClosedError("the asyncflow.compat.v1 event loop stopped during "
                                        "the call (the interpreter is exiting)")
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                call.error = exc
            finally:
                call.done.set()

        # Marked before it is handed over: Ctrl-C may land inside run_sync_soon, after the
        # task was queued, and the interrupted caller must then cancel it.
        call.submitted = True
        try:
            self._token.run_sync_soon(self._start_soon, task)
        except trio.RunFinishedError:
            self._closed = True
            raise LoopClosedError("the asyncflow.compat.v1 event loop has stopped (the "
                                  "interpreter is exiting); no session can run now") from None
        self.calls += 1
        return call

    def _start_soon(self, task):
        self._nursery.start_soon(task)

    def wait(self, call):
        """Wait for ``call`` in this thread; Ctrl-C cancels it and raises KeyboardInterrupt."""
        try:
            call.done.wait()
        except KeyboardInterrupt:
            self.cancel(call)
            raise
        return call.outcome()

    def cancel(self, call):
        """Cancel ``call`` on the loop and wait (bounded) until its task has ended."""
        if not call.submitted:
            return  # interrupted before it reached the loop: nothing runs there
        try:
            self._token.run_sync_soon(call.cancel)
        except trio.RunFinishedError:
            return
        call.done.wait(CANCEL_GRACE_S)

    def cancel_soon(self, call):
        """Cancel ``call`` on the loop without waiting for it."""
        try:
            self._token.run_sync_soon(call.cancel)
        except trio.RunFinishedError:
            pass

    def call(self, async_fn, *args):
        """``await async_fn(*args)`` on the loop; returns or raises its outcome here.

        Raises:
            RuntimeError: when called from the loop's own thread (it would wait for itself),
                or after the loop stopped.
            KeyboardInterrupt: on Ctrl-C while waiting (the call is cancelled first).
        """
        if self.in_loop_thread():
            raise RuntimeError("a synchronous asyncflow.compat.v1 call was made from a task of "
                               "its own event loop; await the async form instead")
        call = _Call()
        try:  # Ctrl-C may land anywhere from here on: the call is cancelled wherever it is
            self.submit(async_fn, *args, call=call)
            call.done.wait()
        except KeyboardInterrupt:
            self.cancel(call)
            raise
        return call.outcome()

    def hold(self, async_cm):
        """Enter ``async_cm`` in a task of its own; returns a ``Held`` (its value, release)."""
        held = Held(self)
        held.enter(async_cm)
        return held


class Held:
    """An async context manager entered by a parked task of the loop (``BackgroundLoop.hold``)."""

    def __init__(self, loop):
        self._loop = loop
        self._entered = _Call()
        self._release = None
        self._exit = None
        self.value = None
        self.released = False

    def enter(self, async_cm):
        entered = self._entered

        async def host():
            self._release = trio.Event()
            try:
                async with async_cm as value:
                    self.value = value
                    entered.value = True
                    entered.done.set()
                    await self._release.wait()
            finally:
                entered.done.set()  # also when entering failed: the caller stops waiting

        self._exit = self._loop.submit(host)
        try:
            entered.done.wait()
        except KeyboardInterrupt:
            self.released = True
            self._loop.cancel(self._exit)
            raise
        if not entered.value:  # __aenter__ failed: raise its error here
            self.released = True
            self._exit.done.wait(CANCEL_GRACE_S)
            self._exit.outcome()
            raise RuntimeError("the context manager ended while it was being entered")
        return self.value

    def release_soon(self):
        """Ask the task to exit the context manager, without waiting (from a finalizer)."""
        if self.released or self._release is None:
            return
        self.released = True
        try:
            self._loop._token.run_sync_soon(self._release.set)
        except (trio.RunFinishedError, AttributeError):
            pass  # the loop stopped (or never ran): nothing is held any more

    def release(self):
        """Exit the context manager (in its task) and wait for it; raises its exit error.
        A release while another is under way (a close from another thread) waits for it.

        Raises:
            RuntimeError: the first release made from a task of the loop itself (its wait
                would keep the manager's task from running); nothing is released then.
        """
        if self.released:
            if self._exit is not None and not self._loop.in_loop_thread():
                self._exit.done.wait(STOP_TIMEOUT_S + CANCEL_GRACE_S)
            return
        if self._loop.in_loop_thread():
            raise RuntimeError("a synchronous asyncflow.compat.v1 close was made from a task of "
                               "its own event loop (it would wait for itself); await the "
                               "async session's close instead")
        self.released = True
        try:
            self._loop._token.run_sync_soon(self._release.set)
        except trio.RunFinishedError:
            return  # the loop stopped: its cancellation already exited the manager
        self._exit.done.wait(STOP_TIMEOUT_S + CANCEL_GRACE_S)
        if self._exit.done.is_set():
            self._exit.outcome()


LOOP = BackgroundLoop()
atexit.register(LOOP.stop)
