"""The threads blocking IO kernels run on (``register_kernel(..., blocking_io=True)``).

One pool per process of long-lived daemon threads. Each hop is two doorbells, file
descriptors (an eventfd where the platform has one, else a pipe) rung with one ``write``:

- a job goes to an idle thread (the one idle the shortest time), which waits in a blocking
  ``read`` of its own bell; the kernel's task rings it (a new thread starts only when none is
  idle);
- the thread runs the kernel, stores its outcome in the job and rings the job's bell, one of
  a pool of non-blocking bells; the kernel's task waits on it with
  ``trio.lowlevel.wait_readable``, so trio's IO wait wakes that task directly.

That is about half the cost of trio's own hop (``trio.to_thread.run_sync``: a limiter, a
thread-cache hand-off through a lock, and a ``run_sync_soon`` that wakes trio's entry-queue
task, which then wakes the waiting one): ``bench/bench_small_io.py``, bench/RESULTS.md. It also
keeps IO off trio's default thread limiter:

- a read (``abandon=True``) cancelled while its thread runs (``timeout_in_ms``, a closing
  session) stops waiting at once; the thread goes on until the read returns (a FIFO nobody
  writes: until someone does), drops its result and gives the job's bell back. Such threads
  are counted: past ``MAX_ABANDONED`` of them still running, a new blocking IO kernel fails at
  once with a ``ResourceExhaustedError`` naming it, instead of waiting for a thread that
  never comes back (trio's limiter held its token until the thread ended: 40 stuck FIFO
  reads left every later IO kernel, and trio's own threads, waiting forever);
- a write is never abandoned: a cancelled step waits for it to finish or fail (one still in
  the backlog, which no thread took, is dropped: it has nothing half done).

The threads are daemons: a read stuck on a FIFO never holds up the interpreter's exit. At
most ``MAX_THREADS`` run at once (later jobs wait in a backlog the threads take from); a
thread idle for more than ``IDLE_S`` is ended by the next job handed to another one.
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import time

import outcome
import trio

from asyncflow import errors

MAX_THREADS = 64
MAX_ABANDONED = 32
IDLE_S = 10.0
MAX_SPARE_BELLS = 64  # job bells kept for reuse; more are closed


class _Bell:
    """A doorbell: ``ring()`` from one thread, ``wait()`` (a blocking read) or trio's
    ``wait_readable(bell.fd)`` then ``clear()`` on the other. Rung at most once between
    clears."""

    __slots__ = ("fd", "_write_fd")

    def __init__(self, blocking):
        if _EVENTFD:
            flags = os.EFD_CLOEXEC | (0 if blocking else os.EFD_NONBLOCK)
            self.fd = self._write_fd = os.eventfd(0, flags)
        else:  # (no eventfd: a pipe, read end non-blocking for the loop's bells)
            self.fd, self._write_fd = os.pipe()
            os.set_blocking(self.fd, blocking)

    def ring(self):
        os.write(self._write_fd, _ONE)

    def wait(self):
        os.read(self.fd, 8)

    def clear(self):
        try:
            os.read(self.fd, 8)
        except BlockingIOError:  # (not rung)
            pass

    def close(self):
        os.close(self.fd)
        if self._write_fd != self.fd:
            os.close(self._write_fd)


_EVENTFD = hasattr(os, "eventfd")
_ONE = (1).to_bytes(8, sys.byteorder)  # (an eventfd's counter takes 8 bytes; a pipe any)


class _Job:
    __slots__ = ("fn", "args", "bell", "result", "done", "dropped", "started")

    def __init__(self, fn, args, bell):
        self.fn, self.args, self.bell = fn, args, bell
        self.result = None
        self.done = self.dropped = self.started = False


class _Worker:
    __slots__ = ("bell", "job", "idle_since")

    def __init__(self, job):
        self.bell = _Bell(blocking=True)
        self.job = job  # (None when it is told to end)
        self.idle_since = 0.0


class IoThreads:
    """The process's pool (``IO_THREADS``); ``await run(op, fn, *args, abandon=...)``."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle = []  # idle workers, the most recently idle last
        self._backlog = collections.deque()  # jobs no thread has taken (all MAX_THREADS busy)
        self._bells = []  # spare job bells, none rung
        self._workers = set()  # every thread's worker (their bells: closed in a forked child)
        self._threads = 0
        self.abandoned = 0  # dropped jobs their thread began and has not finished yet

    async def run(self, op, fn, *args, abandon=False):
        """``fn(*args)`` on one of the pool's threads; its value, or its exception raised."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.abandoned >= MAX_ABANDONED:
            raise errors.ResourceExhaustedError(
                None, op, f"{op.type} {op.name!r}: {self.abandoned} abandoned blocking reads "
                "(timed out or cancelled, e.g. of FIFOs nobody writes) still hold their IO "
                f"threads (at most {MAX_ABANDONED}); no new blocking IO kernel starts until "
                "some of them end")
        try:
            bell = self._bells.pop()
        except IndexError:
            bell = _Bell(blocking=False)
        job = _Job(fn, args, bell)
        try:
            self._submit(job)
        except BaseException:  # (no thread could start: out of threads or descriptors)
            self._spare(bell)
            raise
        try:
            await trio.lowlevel.wait_readable(bell.fd)
        except BaseException as exc:
            if abandon or not isinstance(exc, trio.Cancelled):
                self._drop(job)
            elif not self._drop(job, started=False):  # a write a thread took: the cancelled
                # step waits for it to end (one still in the backlog is not run)
                with trio.CancelScope(shield=True):
                    await trio.lowlevel.wait_readable(bell.fd)
                self._collect(job)
            raise
        return self._collect(job).unwrap()

    def _collect(self, job):
        """The finished ``job``'s outcome; its (rung) bell cleared and kept for reuse."""
        result, job.result = job.result, None
        self._spare(job.bell)
        return result

    def _spare(self, bell):
        bell.clear()
        if len(self._bells) < MAX_SPARE_BELLS:
            self._bells.append(bell)
        else:
            bell.close()  # (no trio run still waits on it: a bell is waited for once)

    def _drop(self, job, started=True):
        """Stop waiting for ``job``: its thread (if one took it) finishes it alone. Not
        ``started``: only if no thread took it yet (else False, and nothing changed)."""
        with self._lock:
            if job.done:  # (finished, its bell rung: nothing runs it any more)
                job.dropped = True
            elif job in self._backlog:  # (never started: nothing to abandon)
                job.dropped = True
                self._backlog.remove(job)
            elif not started:
                return False
            else:  # (a thread took it: abandoned once that thread began it; one that has not
                job.dropped = True  # begun it yet skips it and holds nothing: not counted)
                self.abandoned += job.started
                return True
        self._spare(job.bell)
        return True

    def _submit(self, job):
        quit_worker = None
        with self._lock:
            if self._idle:
                worker = self._idle.pop()
                worker.job = job
                if self._idle and time.monotonic() - self._idle[0].idle_since > IDLE_S:
                    quit_worker = self._idle.pop(0)  # (idle too long: ended)
                    self._threads -= 1
            elif self._threads < MAX_THREADS:
                self._threads += 1
                worker = None
            else:
                self._backlog.append(job)
                return
        if worker is None:
            bell = None
            try:
                worker = _Worker(job)
                bell = worker.bell
                self._workers.add(worker)
                threading.Thread(target=self._serve, args=(worker,), name="asyncflow-io",
                                 daemon=True).start()
            except BaseException:  # (a thread never started is not counted: it would fill
                with self._lock:   # MAX_THREADS and leave later jobs in the backlog for ever)
                    self._threads -= 1
                self._workers.discard(worker)
                if bell is not None:
                    bell.close()
                raise
        else:
            worker.bell.ring()
        if quit_worker is not None:
            quit_worker.bell.ring()

    def _serve(self, worker):
        job = worker.job
        while job is not None:
            with self._lock:
                skipped = job.dropped
                job.started = True
            if not skipped:
                result = outcome.capture(job.fn, *job.args)
            with self._lock:
                job.done = True
                if job.dropped:
                    self.abandoned -= not skipped
                    unused = job.bell  # (nobody waits on a dropped job's bell)
                else:
                    job.result = result
                    job.bell.ring()  # (under the lock: a drop that sees ``done`` sees it rung)
                    unused = None
                if self._backlog:
                    job = self._backlog.popleft()
                else:
                    job = worker.job = None
                    worker.idle_since = time.monotonic()
                    self._idle.append(worker)
            if unused is not None:
                self._spare(unused)
            result = None
            if job is None:
                worker.bell.wait()
                job = worker.job  # (None: this thread is to end)
        self._workers.discard(worker)  # (before the close: a fork between closes nothing twice)
        worker.bell.close()

    def _forked(self):
        """In a forked child: the parent's threads are gone; start afresh, and close their
        bells and the spare job bells (inherited descriptors nothing in the child uses)."""
        bells = [worker.bell for worker in list(self._workers)] + list(self._bells)
        self.__init__()
        for bell in bells:
            bell.close()


IO_THREADS = IoThreads()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=IO_THREADS._forked)
