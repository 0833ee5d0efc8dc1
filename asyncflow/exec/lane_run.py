"""A two-lane step's run (``exec/lanes.py`` plans and generates the lanes): ``LaneRun``, one
step's lane 1 generator, cross-lane flags and who runs lane 1 (the pool's lane thread, or lane
0 where no thread is in it); ``Cores``, whether a plan's lanes found a second core lately.
The lanes and their rules are described in ``exec/lanes.py``'s docstring.
"""
from __future__ import annotations

import threading
import time

from asyncflow import errors
from asyncflow.exec import intra_op, timeslice

_CHECK = "check"


class Cores:
    """Whether a plan's lanes found a second core lately: every ``PROBE_STEPS`` two-lane
    steps, their process CPU over wall time; under ``MIN_CPU_WALL`` (the lane thread ran
    only where lane 0 did not: one core for both) the next ``SKIP_STEPS`` steps run the
    one-lane schedule (the same bits), then the lanes are tried again. On one core the
    lanes' synchronisation (a few percent of a step, measured) is then paid on one step in
    eight. Counts are about timing only; concurrent steps may race on them harmlessly."""

    __slots__ = ("skip", "steps", "cpu", "wall")
    PROBE_STEPS, SKIP_STEPS, MIN_CPU_WALL = 4, 28, 1.1

    def __init__(self):
        self.skip = self.steps = 0
        self.cpu = self.wall = 0.0

    @staticmethod
    def begin():
        return time.perf_counter(), time.process_time()

    def end(self, started):
        self.wall += time.perf_counter() - started[0]
        self.cpu += time.process_time() - started[1]
        self.steps += 1
        if self.steps >= self.PROBE_STEPS:
            if self.cpu < self.wall * self.MIN_CPU_WALL:
                self.skip = self.SKIP_STEPS
            self.steps, self.cpu, self.wall = 0, 0.0, 0.0


class LaneRun:
    """One step's lanes: lane 1's generator, the cross-lane flags, and who runs lane 1.

    Whoever holds ``drive`` runs lane 1's generator: the pool's lane thread, or lane 0 when
    it must wait for lane 1 and finds the generator free (the thread not started yet, or
    not yet awake after a flag it waited for was set): lane 0 then runs lane 1's kernels
    itself up to the one it waits for, instead of waiting for a thread without a core.
    Both lanes follow one topological order, so the generator never waits there for a
    flag lane 0 has still to set."""

    __slots__ = ("flags", "cond", "drive", "gen", "pool", "future", "error", "abort", "done",
                 "waiters", "stolen", "alone", "on_loop", "tailing", "joined")
    steal = True  # lane 0 may run lane 1 (tests switch it off to keep lane 1 on its thread)

    def __init__(self, lane1, slots, flags, pool):
        self.flags = [False] * flags
        self.cond = threading.Condition(threading.Lock())
        self.drive = threading.Lock()
        self.gen = lane1(slots, self, self.flags)
        self.pool = pool
        self.future = None
        self.error = None
        self.abort = self.done = self.stolen = False  # stolen: lane 0 ran some of lane 1
        self.waiters = 0
        self.alone = False  # lane 0's kernels run whole while lane 1 is live
        self.on_loop = False  # lane 0 runs lane 1's generator (its kernels on the loop)
        self.tailing, self.joined = False, None  # lane 0's tail (``tail``); its split's help

    def start(self):
        """Hand lane 1 to the pool's lane thread. From here to the step's end lane 0's
        kernels run whole on the loop's thread (an offloaded one runs on a worker thread,
        which may split it), as lane 1's do on its own: the two lanes
        take the two cores, and a split of lane 0's would make three threads share them
        (measured with ``bench/bench_lanes.py``, load 0.8: the autoencoder's two lanes
        0.96-0.98 of one lane's time with lane 0's GEMMs split, 0.94-0.96 whole). At
        interpreter exit the pool starts no thread (``future`` None): lane 0 runs lane 1.
        ``alone`` is set before the thread's flag: whatever cuts this short, the step's end
        finds what to put back (``_generate``'s final lines)."""
        if not self.done:
            self.future = self.pool.submit(self._work, self.halt)
            self.alone = intra_op.whole.active = True

    def pausing(self, pause):
        """``pause`` (or ``offload``) for lane 0: while the loop runs other tasks their
        kernels split as usual (the thread-local flags are lane 0's only)."""
        async def paused(*args):
            whole, alone, tailing = intra_op.whole, self.alone, self.tailing
            if alone:
                whole.active = False
            if tailing:
                whole.join = None
            try:
                return await pause(*args)
            finally:
                if alone:
                    whole.active = True
                if tailing:
                    whole.join = self
        return paused

    def tail(self):
        """Lane 0 made lane 1's last input: its splits offer chunks to the lane thread."""
        if not self.done and self.alone:
            self.tailing = True  # (first, as ``start``'s ``alone``)
            intra_op.whole.join = self

    def open(self):  # (the lane thread may still join a split: ``joinable``; not of lane 1's)
        return not self.done and self.future is not None and not self.on_loop

    def offer(self, help):  # (lane 0's split's ``help`` for the lane thread; False: ended)
        with self.cond:
            if self.done:
                return False
            self.joined = help
            return True

    def retract(self):  # (the offered split is finishing: the lane thread leaves it)
        with self.cond:
            self.joined = None

    def give(self, k):
        """Flag ``k`` is set: wake a waiter if there is one (the waiter counts itself before
        it reads the flag, the setter sets it before it reads the count)."""
        self.flags[k] = True
        if self.waiters:
            with self.cond:
                self.cond.notify_all()

    def halt(self):
        """Set the stop flag under the condition and wake the thread: its wait for a flag
        ends (it checks ``abort`` under the condition), and it stops at its next kernel
        boundary. ``stop`` calls it first; the pool, when it closes (``IntraOpPool.submit``)."""
        with self.cond:
            self.abort = True
            self.cond.notify_all()

    def _finish(self, error=None):
        with self.cond:
            if error is not None and self.error is None:
                self.error = error
            self.done = True
            self.cond.notify_all()

    def _run(self, until, check, first=None):
        """Run lane 1 (``drive`` held) until flag ``until`` is set (None: to its end), it
        waits for an unset flag (returned), it ends or fails (``done``), or ``check()``
        says to stop at a kernel boundary (returns _CHECK). ``first``: resumes the
        generator first (with a kernel's outputs); where lane 0 drives (``on_loop``) the
        generator hands out a kernel that one lane would offload: ``(node, args)`` is
        returned, and the generator must be resumed with ``first`` before anything else."""
        gen, flags = self.gen, self.flags
        while not self.done and (first is not None or until is None or not flags[until]):
            if self.abort:
                gen.close()
                self._finish()
                return None
            try:
                if first is not None:
                    k, first = first(), None
                else:
                    k = next(gen)
            except StopIteration:
                self._finish()
                return None
            except BaseException as exc:  # noqa: BLE001 -- lane 0 raises it (located)
                self._finish(exc)
                return None
            if k.__class__ is tuple:
                return k
            if k >= 0 and not flags[k]:
                return k
            if check is not None and check():
                return _CHECK
        return None

    def _work(self):
        """Lane 1 on the lane thread, to its end, its failure or lane 0's stop."""
        intra_op.whole.active = True  # every pool thread is taken: kernels run whole
        flags, cond = self.flags, self.cond
        try:
            while not self.done:
                with self.drive:
                    k = self._run(None, None)
                if k is None:
                    continue
                with cond:
                    self.waiters += 1
                    while not flags[k] and not self.abort and not self.done:
                        cond.wait()
                    self.waiters -= 1
            with cond:  # (``done`` was set under it: a later ``offer`` is refused)
                help = self.joined if not self.abort else None
            if help is not None:
                help()  # lane 0's tail split: the chunks left (their errors are lane 0's)
        finally:
            intra_op.whole.active = False

    @staticmethod
    def _slice_over():
        return timeslice.clock() >= timeslice.BUDGET.end and timeslice.due()

    async def need(self, k, pause, offload):
        """Wait (lane 0) until lane 1 set flag ``k``."""
        await self._until(k, pause, offload)

    async def join(self, pause, offload):
        """Wait (lane 0) until lane 1 ended; raise its error."""
        await self._until(None, pause, offload)

    async def _until(self, k, pause, offload):
        flags = self.flags
        while not (self.done if k is None else flags[k] or self.done):
            if self.steal and self.drive.acquire(False):  # lane 1 is nobody's: run it here
                self.stolen = self.on_loop = True
                waits = None
                try:
                    waits = self._run(k, self._slice_over)
                    while waits.__class__ is tuple:  # a kernel one lane would offload
                        node, args = waits
                        try:
                            out = await offload(node, args)
                        except Exception as exc:  # noqa: BLE001 -- located on lane 1's line
                            waits = self._run(k, self._slice_over,
                                              lambda exc=exc: self.gen.throw(exc))
                        else:
                            waits = self._run(k, self._slice_over,
                                              lambda out=out: self.gen.send(out))
                finally:
                    self.on_loop = False
                    if waits.__class__ is tuple:  # (interrupted: none may resume it now)
                        self.abort = True
                    self.drive.release()
                if waits is _CHECK:
                    await pause()
                elif waits is not None:  # (one topological order: never)
                    raise errors.InternalError(None, None, "lane 1 waits for lane 0's future")
                continue
            if not timeslice.BUDGET.end:
                timeslice.due()  # (opens the slice the wait counts against)
            left = timeslice.BUDGET.end - timeslice.clock()
            if left > 0:
                with self.cond:
                    self.waiters += 1
                    try:
                        if not (self.done if k is None else flags[k] or self.done):
                            self.cond.wait(left)
                    finally:
                        self.waiters -= 1
            if not (self.done if k is None else flags[k] or self.done) and self._slice_over():
                await pause()
        if self.error is not None:
            raise self.error
        if k is not None and not flags[k]:
            raise errors.InternalError(None, None, "lane 1 ended without a value lane 0 needs")

    def stop(self):
        """The step ends (lane 0 returned or failed): stop lane 1 at its next kernel
        boundary; nothing of the step runs after this returns. Halted first: a Ctrl-C in
        what follows (a second one, in the lock waits below) leaves the thread no wait that
        never ends (it used to wait for good when one came before the notify).

        The loop thread's flags (``alone``, ``tailing``) are put back before this is called,
        on the step's own final lines (``lanes._generate``): a Ctrl-C here, even on this
        method's first line, no longer leaves every later kernel on that thread whole."""
        if not self.done:
            self.halt()  # (the thread may wait for a flag that never comes)
        if self.done:
            return
        if self.future is not None:
            self.future.cancel()  # (not started yet: it never will)
        with self.drive:  # the thread's kernel ends; it runs no other
            if not self.done:
                self.gen.close()
                self._finish()
