"""The threads blocking IO kernels run on (``register_kernel(..., blocking_io=True)``).

One pool per process of long-lived daemon threads, fed through a queue: a kernel's task hands
its job over and parks (``trio.lowlevel.wait_task_rescheduled``); the thread runs the kernel
and wakes that task with one ``run_sync_soon`` on its run's token. That is cheaper than
``trio.to_thread.run_sync`` (no limiter, no thread-cache hand-off, one wake-up) and keeps
IO off trio's default thread limiter:

- a read (``abandon=True``) cancelled while its thread runs (``timeout_in_ms``, a closing
  session) stops waiting at once; the thread goes on until the read returns (a FIFO nobody
  writes: until someone does) and its result is dropped. Such threads are counted: past
  ``MAX_ABANDONED`` of them still running, a new blocking IO kernel fails at once with a
  ``ResourceExhaustedError`` naming it, instead of waiting for a thread that never comes
  back (trio's limiter held its token until the thread ended: 40 stuck FIFO reads left every
  later IO kernel, and trio's own threads, waiting forever);
- a write is never abandoned: a cancelled step waits for it to finish or fail.

The threads are daemons: a read stuck on a FIFO never holds up the interpreter's exit. An
idle thread ends after ``IDLE_S``; at most ``MAX_THREADS`` run at once (later jobs queue).
"""
from __future__ import annotations

import queue
import threading

import outcome
import trio

from asyncflow import errors

MAX_THREADS = 64
MAX_ABANDONED = 32
IDLE_S = 10.0


class _Job:
    __slots__ = ("fn", "args", "task", "token", "done", "dropped")

    def __init__(self, fn, args):
        self.fn, self.args = fn, args
        self.task = trio.lowlevel.current_task()
        self.token = trio.lowlevel.current_trio_token()
        self.done = self.dropped = False


class IoThreads:
    """The process's pool (``IO_THREADS``); ``await run(op, fn, *args, abandon=...)``."""

    def __init__(self):
        self._jobs = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self.abandoned = 0  # dropped jobs whose thread has not finished them yet

    async def run(self, op, fn, *args, abandon=False):
        """``fn(*args)`` on one of the pool's threads; its value, or its exception raised."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.abandoned >= MAX_ABANDONED:
            raise errors.ResourceExhaustedError(
                None, op, f"{op.type} {op.name!r}: {self.abandoned} abandoned blocking reads "
                "(timed out or cancelled, e.g. of FIFOs nobody writes) still hold their IO "
                f"threads (at most {MAX_ABANDONED}); no new blocking IO kernel starts until "
                "some of them end")
        job = _Job(fn, args)
        self._submit(job)

        def abort(_raise_cancel):
            if not abandon:
                return trio.lowlevel.Abort.FAILED  # (the thread's result reschedules us)
            with self._lock:
                job.dropped = True
                if not job.done:
                    self.abandoned += 1
            return trio.lowlevel.Abort.SUCCEEDED
        return await trio.lowlevel.wait_task_rescheduled(abort)

    def _submit(self, job):
        with self._lock:
            if self._idle:
                self._idle -= 1  # (one idle thread takes it)
                spawn = False
            else:
                spawn = self._threads < MAX_THREADS
                self._threads += spawn
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._serve, name="asyncflow-io", daemon=True).start()

    def _serve(self):
        while True:
            try:
                job = self._jobs.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._idle:  # nobody handed this thread a job: end it
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            if not job.dropped:
                result = outcome.capture(job.fn, *job.args)
            with self._lock:
                job.done = True
                dropped = job.dropped
                if dropped:
                    self.abandoned -= 1
                self._idle += 1
            if not dropped:
                try:
                    job.token.run_sync_soon(_deliver, job, result)
                except trio.RunFinishedError:
                    pass
            job = result = None


def _deliver(job, result):
    if not job.dropped:  # (an abort after the thread finished: nothing to wake)
        trio.lowlevel.reschedule(job.task, result)


IO_THREADS = IoThreads()
