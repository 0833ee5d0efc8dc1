"""The intra-op thread pool of a CPU device (TF1's ``intra_op_parallelism_threads``).

A kernel splits its work with ``kernels/intra_op.py``; the pieces run here. ``run(fn,
bounds)`` puts the chunks in a queue that the calling thread (the executor's thread, or the
worker thread an offloaded kernel runs on) and the pool's workers drain together; the caller
waits only for chunks a worker is computing, never for a worker still to be scheduled (it
withdraws those hand-offs), and the first error of a chunk is raised after every started
chunk finished, so no chunk still writes into an output the kernel gave up. A failed chunk,
or the caller interrupted anywhere in the split (Ctrl-C), stops it: no chunk starts then, and
a chunk waiting for another chunk's result (``IntraOpPool.wait``) returns, so the caller's
wait for the workers ends within a chunk's time and the interrupt goes up. Which thread
computes a chunk does not change its bits: chunks are fixed before the split and BLAS runs
one thread each. Workers never wait on the pool, so kernels splitting at the same time
(independent ops overlapping: inter-op parallelism) cannot deadlock; they share the threads.
The workers are daemon threads started on a pool's first split, the lane thread (``submit``)
one on its first lane: a forked child forgets the parent's (it starts its own), and at
interpreter exit they are stopped (a lane's waits halted) and joined.

BLAS: numpy's BLAS (OpenBLAS) has a thread pool of its own, as large as the cores. Once a
process has an asyncflow CPU device (``claim_blas``, called when one is made), BLAS is held at
one thread per calling thread (``threadpoolctl``) for the life of the process: this pool
splits the large kernels instead, and two pools of ``cores`` threads each would
oversubscribe the cores. Measured here: OpenBLAS's own threads make a skinny GEMM such as
``[25088, 64] @ [64, 32]`` 4x slower than one thread (split by rows over our threads it is
2x faster instead), and on a loaded machine (load average 6-9 on 2 cores) they made whole
training steps 8x slower (an autoencoder step 96 ms against 11 ms with one BLAS thread; TF1
8.5 ms). Every split also counts a hold of its own, so the limit holds even where no device
claimed BLAS (a pool used directly); the last hold to end restores the previous setting. A
process that wants BLAS's threads back for its own numpy work sets them with threadpoolctl
itself. A pool of one thread (``intra_op_parallelism_threads=1``) runs a large kernel inline
as one chunk: one thread means one. The limit
is process-wide, so it is counted: the first split to start sets it and the last to finish
restores the previous setting. A kernel that does not split keeps BLAS's own threads.

One update (``run(..., atomic=True)``: an optimizer's apply writing a variable's stored arrays
in place, chunk by chunk) is never left half done by a Ctrl-C: on the main thread, where
Python runs its signal handlers, SIGINT is held while the split runs (``kernels/sigint_hold.py``:
its handler swapped for one that only notes the signal; the apply kernels hold it the same way
around their whole call, and a split inside one leaves it to them), and a KeyboardInterrupt a
chunk raises itself is kept; every chunk then runs, and the interrupt goes up after the last
one ended (the handler found there called for each noted signal, trio's or Python's,
decides). The hold is bounded by the split's own work. A chunk's error still stops the split
(a kept interrupt still goes up).
"""
from __future__ import annotations

import atexit
import concurrent.futures
import os
import queue as queue_module
import threading
import weakref

import numpy as np

from asyncflow.exec import join_spin
from asyncflow.kernels import sigint_hold

whole = threading.local()  # ``active``: kernels run whole here (``run_alone``, a lane);
#                             ``join``: who may still join a split here (``joinable``)
_current = threading.local()  # ``queue``: the split whose chunk this thread computes
_worker = threading.local()  # ``busy``: a split worker's (pool's busy list, its index)
# A chunk waiting for another chunk (``IntraOpPool.wait``) looks this often whether the split
# stopped (failed or interrupted): a stopped split's waits end within it.
WAIT_SLICE_S = 0.05
_blas_lock = threading.Lock()
_blas_users = 0        # holds: the process's claim and every running split
_blas_restore = None   # threadpoolctl's limiters of the holds, oldest first (``_Limiters``)
_controller = None     # threadpoolctl's ThreadpoolController, made on first use
_claimed = False
_pools = weakref.WeakSet()  # every pool, for the fork and exit hooks below
_exiting = False            # the interpreter is exiting: no new worker threads
def _hold_blas_single_thread():
    global _blas_users, _blas_restore
    with _blas_lock:
        _blas_users += 1
        if _blas_users == 1:
            _blas_restore = _Limiters(_blas_limiter())


def _release_blas():
    global _blas_users, _blas_restore
    with _blas_lock:
        _blas_users -= 1
        if _blas_users == 0 and _blas_restore is not None:
            _blas_restore.restore_original_limits()
            _blas_restore = None


def claim_blas():
    """Hold BLAS at one thread for the rest of the process (see the module docstring); the
    first call does it, later calls do nothing."""
    global _claimed
    with _blas_lock:
        if _claimed:
            return
        _claimed = True
    _hold_blas_single_thread()
    join_spin.arm(hold_blas_loaded_since)  # (compiled by the first split, on a thread)


def hold_blas_loaded_since():
    """Extend a hold in force to the BLAS libraries loaded since it was taken: scipy brings its
    own OpenBLAS, and ``scipy.fft`` is imported when a convolution first takes the FFT path
    (``kernels/nn_conv_fft.py``), long after a device claimed BLAS."""
    global _controller
    with _blas_lock:
        _controller = None  # a new controller finds the libraries loaded now
        if _blas_restore is not None:
            _blas_restore.add(_blas_limiter())


class _Limiters:
    """threadpoolctl limiters taken one after the other; restored newest first, so each
    library gets back the setting it had before the first."""

    def __init__(self, limiter):
        self._limiters = [limiter] if limiter is not None else []

    def add(self, limiter):
        if limiter is not None:
            self._limiters.append(limiter)

    def restore_original_limits(self):
        while self._limiters:
            _as_blas_controller(self._limiters.pop().restore_original_limits)


def _as_blas_controller(action):
    """``action()`` (a threadpoolctl limit or restore) as OpenBLAS's controlling thread.

    threadpoolctl 3.8 lets one live thread set OpenBLAS's process-wide limit; any other
    thread's limits and restores silently do nothing. The hold is taken and given back on
    whichever thread splits, claims or loads scipy (the event loop's, an offloaded kernel's
    worker, a step's thread), always under ``_blas_lock``: each takes control for its call
    and gives it up after, so the next one, or the user's own threadpoolctl calls, can."""
    try:
        from threadpoolctl import OpenBLASController
    except ImportError:
        return action()
    clear = getattr(OpenBLASController, "clear_controlling_thread", None)
    if clear is None:  # (before 3.8 every thread's limits take effect)
        return action()
    clear(force=True)
    try:
        return action()
    finally:
        clear()


def _blas_limiter():
    """Limit BLAS to one thread; returns the limiter that restores it (None: no threadpoolctl
    or no BLAS found, then nothing is limited)."""
    global _controller
    try:
        import threadpoolctl
    except ImportError:  # optional: without it BLAS keeps its threads
        return None
    if _controller is None:
        _controller = threadpoolctl.ThreadpoolController()
    controller = _controller
    return _as_blas_controller(lambda: controller.limit(limits=1, user_api="blas"))


class IntraOpPool:
    """``threads`` threads for one kernel's chunks: the caller's and ``threads - 1`` workers
    (started on the first split)."""

    def __init__(self, threads, name="asyncflow-intra-op"):
        if int(threads) < 1:
            raise ValueError(f"intra_op_parallelism_threads must be >= 1, got {threads}")
        self.threads = int(threads)
        self._name = name
        self._executor = None
        self._lane = None  # the thread that runs lane 1 of static schedules (``submit``)
        self._halts = set()  # ``submit``'s ``halt`` of each lane function not yet ended
        self._lanes = np.zeros(1, np.int64)  # lane functions running (a split worker yields)
        self._lock = threading.Lock()
        self.splits = 0  # kernels split so far (statistics)
        _pools.add(self)

    def run(self, fn, bounds, caller_limit=None, waits=False, atomic=False):
        """Run ``fn(start, stop)`` for every ``(start, stop)`` in ``bounds`` and return when all
        finished, raising the first error (chunks not yet started are then skipped). With
        ``caller_limit``, the calling thread computes at most that many chunks: the chunks
        no worker started by then are withdrawn and returned (run none of them), so a
        caller on the event loop holds it for ``caller_limit`` chunks at most. ``waits``:
        a chunk waits for another's result (``wait``, which only then knows the split).

        The chunks form one queue that the calling thread and up to ``threads - 1`` workers
        take from in order. The caller never waits for a worker that has not started: once
        the queue is empty it withdraws the hand-offs no worker picked up, and waits only for
        chunks being computed. On a loaded machine, where a woken worker may not get a core
        for milliseconds, the caller then does the work itself instead of idling.

        ``atomic``: the chunks are one update (an apply writing a variable in place): a
        Ctrl-C (SIGINT on the main thread, or a KeyboardInterrupt a chunk raises) does not
        stop the split; it goes up once every chunk ran (the module docstring). Chunks
        ``caller_limit`` withdraws are the caller's to run, outside the hold.
        """
        queue = _ChunkQueue(bounds, fn, waits, atomic)
        # Inside a chunk of ``run_alone`` every thread is taken: no helpers (the same chunks,
        # in order, on this thread: the same bits).
        helpers = 0 if getattr(whole, "active", False) else min(self.threads, len(bounds)) - 1
        # Lane 0's tail (``joinable``): the lane thread takes chunks once lane 1 has ended.
        joiner = getattr(whole, "join", None) if helpers == 0 and len(bounds) > 1 else None
        held = sigint_hold.hold() if atomic else None
        try:
            _hold_blas_single_thread()
            done = False
            try:
                if helpers > 0 and (workers := self._workers()) is not None:
                    workers.post(queue.help, helpers)
                    join_spin.posted()
                if joiner is not None and not joiner.offer(queue.help):
                    joiner = None
                queue.drain(fn, caller_limit)
                done = True
            finally:
                if not done:  # interrupted outside a chunk (Ctrl-C): no chunk starts now, and
                    queue.stopped = True  # the chunks' waits end (``wait``); raised after finish
                try:
                    withdrawn = queue.finish()  # waits only for chunks a worker is computing
                finally:
                    try:  # (after ``finish``: a Ctrl-C here leaves no chunk running, the split
                        if joiner is not None:  # closed: the offer's ``help`` does nothing)
                            joiner.retract()
                    finally:
                        _release_blas()
            with self._lock:
                self.splits += 1
        finally:
            if held is not None:  # (every chunk ran: a Ctrl-C noted meanwhile is raised here)
                sigint_hold.give_back(held)
        if queue.interrupt is not None:  # (a Ctrl-C goes up even after an error: not lost to
            if queue.interrupt.__context__ is None:  # the caller's handler of that error)
                queue.interrupt.__context__ = queue.error
            raise queue.interrupt
        if queue.error is not None:
            raise queue.error
        return withdrawn

    def run_alone(self, fn, bounds, caller_limit=None):
        """``run``, where a kernel running inside a chunk does not split again (its own
        ``run`` computes all its chunks on its thread): for whole kernels run at once, one
        per thread (``exec/pairs.py``). The thread's flag is given back as found (a nested
        ``run_alone`` leaves the chunk around it whole)."""
        def alone(start, stop):
            was = getattr(whole, "active", False)
            whole.active = True
            try:
                fn(start, stop)
            finally:
                whole.active = was
        return self.run(alone, bounds, caller_limit)

    @staticmethod
    def wait(event):
        """Wait in a chunk of a split run with ``waits=True`` for ``event``, which another
        chunk of the same split sets: True
        once it is set; False when the split stopped first (a chunk failed, or its caller
        was interrupted: Ctrl-C), seen within ``WAIT_SLICE_S``: the chunk then returns
        without its work and the split raises the error. A chunk's plain ``event.wait()``
        would wait forever for a chunk that never runs, and the split's caller with it."""
        queue = getattr(_current, "queue", None)
        while not event.wait(WAIT_SLICE_S):
            if queue is not None and queue.stopped:
                return False
        return queue is None or not queue.stopped

    @staticmethod
    def alone():
        """Whether kernels run whole on the calling thread now (inside a chunk of
        ``run_alone``, or a lane holding every thread): a split would compute all its chunks
        here, one after the other."""
        return getattr(whole, "active", False)

    @staticmethod
    def joinable():
        """Whether a split started now on this thread may be joined by a thread that is
        still busy but will take chunks once free (lane 0's tail: the lane thread after lane
        1's end, ``exec/lanes.py``): chunks then pay (``kernels/intra_op.for_gemm``)."""
        joiner = getattr(whole, "join", None)
        return joiner is not None and joiner.open()

    def all_busy(self):
        """Whether every worker is running a hand-off now (another kernel's chunks): a split
        started now runs on its caller alone, chunk after chunk (a hint: a worker may be done
        a moment later). False before the workers start."""
        workers = self._executor
        return workers is not None and all(workers.busy)

    def hold_blas_loaded_since(self):
        """The module's ``hold_blas_loaded_since`` (the hold is process-wide), for kernels,
        which reach this module only through their device's pool."""
        hold_blas_loaded_since()

    def submit(self, fn, halt=None):
        """Run ``fn()`` on the pool's lane thread (lane 1 of a static schedule,
        ``exec/lanes.py``); returns its future, which ``cancel()`` withdraws while the thread
        has not started it. The lane thread is not one of the split workers: a lane waiting
        for the other keeps no split of a large kernel from the second core. ``halt()``: what
        ends ``fn``'s waits, called when the pool closes before ``fn`` ended (its owner may
        never stop it: a Ctrl-C inside the step's stop); the thread is a daemon, so an exit
        never joins it before ``close`` halted it (a ``ThreadPoolExecutor``'s is joined
        first, and a lane waiting for good hung the exit). None once the interpreter exits
        (``_stop_at_exit`` ran): no thread is started then that no one halts and joins; the
        lane's owner runs ``fn``'s work itself (``LaneRun``: lane 0 takes lane 1 over)."""
        with self._lock:
            if _exiting:
                return None
            if self._lane is None:
                self._lane = _Workers(1, f"{self._name}-lane", self._lanes, splits=False)
            lane = self._lane
        if halt is None:
            return lane.submit(fn)
        halts = self._halts
        halts.add(halt)
        return lane.submit(fn, lambda: halts.discard(halt))

    def _workers(self):
        """The split workers, started on first use; None once the interpreter exits (the
        caller then computes every chunk)."""
        with self._lock:
            if self._executor is None and not _exiting:
                self._executor = _Workers(max(1, self.threads - 1), self._name, self._lanes)
            return self._executor

    def close(self, timeout=None):
        """Stop the worker threads (idle ones exit; a running chunk finishes first); with
        ``timeout``, wait up to that long for each worker to end."""
        with self._lock:
            executors = (self._executor, self._lane)
            self._executor = self._lane = None
        for halt in list(self._halts):  # (a lane function's waits end, it returns)
            halt()
        workers, lane = executors
        if workers is not None:
            workers.shutdown(timeout)
        if lane is not None:
            lane.shutdown(timeout)

    def _after_fork(self):
        """In a forked child: the parent's threads are not here (a lane future would never
        run, a hand-off never be taken) and its locks may be held by them. Forget both; the
        child starts its own threads on its first split or lane call."""
        self._lock = threading.Lock()
        self._executor = self._lane = None
        self._halts = set()
        self._lanes = np.zeros(1, np.int64)

    def __repr__(self):
        return f"<IntraOpPool threads={self.threads}>"


class _Workers:
    """The pool's split workers: threads that take hand-offs from one queue, in order.

    Not a ``ThreadPoolExecutor``: a split hands off a bound method (``_ChunkQueue.help``) with
    one ``put`` (and a ring of ``bell``), and the caller waits for a worker's chunk on its done
    word or one lock, without a future, its condition and its callbacks. Between hand-offs a
    split worker spins on ``bell`` a while before it sleeps on the queue
    (``exec/join_spin.py``). Measured on this 2-core VM (bench/RESULTS.md): a split of two
    GEMMs of ~170 us each took ~75 us longer than half their time with the executor (the
    caller started its own chunk 23 us after the call, the worker 27 us after that, and the
    caller was back 47 us after the worker's chunk ended).
    """

    def __init__(self, count, name, lanes, splits=True):
        self._queue = queue_module.SimpleQueue()
        self.splits = splits  # the split workers (``all_busy`` reads their ``busy``)
        self.lanes = lanes  # the pool's count of running lane functions (the lane's: counted)
        self.bell = np.zeros(1, np.int64)  # rung at each hand-off: ends a worker's idle spin
        self.busy = [False] * count  # each worker's own entry: running a hand-off
        self._threads = [threading.Thread(target=self._loop, args=(index,),
                                          name=f"{name}_{index}", daemon=True)
                         for index in range(count)]
        for thread in self._threads:
            thread.start()

    def _loop(self, index):
        get, busy, empty, bell = self._queue.get, self.busy, self._queue.empty, self.bell
        lanes = self.lanes
        if self.splits:
            _worker.busy = (busy, index)
        word = None  # the done word of the split just helped, its caller spinning on it
        while True:
            if self.splits:  # (the bell read first: a hand-off after it rings it again)
                seen = int(bell[0])
                if empty():
                    join_spin.idle(word, bell, seen, lanes)
                elif word is not None:
                    join_spin.done(word)
                word = None
            if (item := get()) is None:
                break
            busy[index] = True
            if not self.splits:
                lanes[0] += 1
            try:
                item()
            finally:
                busy[index] = False
                if not self.splits:
                    lanes[0] -= 1
                word, _worker.word = getattr(_worker, "word", None), None

    def post(self, item, count):
        """Hand ``item()`` to ``count`` workers (or to whichever are free first)."""
        for _ in range(count):
            self._queue.put(item)
        self.bell[0] += 1  # (after the puts: a worker the bell wakes finds them)

    def submit(self, fn, after=None):
        """``fn()`` on a worker; returns its ``concurrent.futures.Future`` (tests keep a
        worker busy with it). ``after()`` runs on the worker once ``fn`` ended or was
        cancelled."""
        future = concurrent.futures.Future()

        def run():
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn())
                    except BaseException as exc:  # noqa: BLE001 -- handed to the future
                        future.set_exception(exc)
            finally:
                if after is not None:
                    after()
        self._queue.put(run)
        self.bell[0] += 1
        return future

    def shutdown(self, timeout=None):
        """Idle workers exit; a running hand-off finishes first (with ``timeout``: waited
        for, up to that long a worker)."""
        for _ in self._threads:
            self._queue.put(None)
        self.bell[0] += 1
        if timeout is not None:
            for thread in self._threads:
                if thread is not threading.current_thread():
                    thread.join(timeout)


class _ChunkQueue:
    """The chunks of one split, taken in order by whichever thread asks next: the caller
    (``drain``, then ``finish``) and the workers it handed the split to (``help``)."""

    def __init__(self, bounds, fn=None, waits=False, atomic=False):
        self.waits = waits  # its chunks wait for each other (``IntraOpPool.wait``)
        self.atomic = atomic  # one update: a chunk's KeyboardInterrupt is kept, not an error
        self.interrupt = None  # that KeyboardInterrupt (the first), raised after every chunk
        self._bounds = list(bounds)
        self._next = 0
        self._lock = threading.Lock()
        self._fn = fn
        self._closed = False  # finished: a worker that gets here later does nothing
        self._active = 0      # workers computing chunks of it
        self._waiter = None   # the caller's lock, released by the last active worker
        self.error = None
        self.stopped = False  # failed or interrupted: no chunk starts now, waits end
        self._word = None     # the done word the caller spins on (``finish``), if it does

    def _take(self):
        with self._lock:
            if self.stopped or self._next >= len(self._bounds):
                return None
            self._next += 1
            return self._bounds[self._next - 1]

    def withdraw(self):
        """The chunks nobody took, taken out of the queue (none runs them now)."""
        with self._lock:
            left, self._next = self._bounds[self._next:], len(self._bounds)
            return left

    def help(self):
        """A worker's part: the chunks left, unless the caller finished the split already."""
        with self._lock:
            if self._closed:
                return
            self._active += 1
            fn = self._fn
        try:
            self.drain(fn)
        finally:
            with self._lock:
                self._active -= 1
                last = self._active == 0
                waiter = self._waiter if last else None
                word = self._word if last else None
            if waiter is not None:
                waiter.release()
            elif word is not None:  # (the caller spins on it: stored once a split, at most)
                busy = getattr(_worker, "busy", None)
                if busy is None:  # (not a split worker: the lane thread joining lane 0's)
                    join_spin.done(word)  # (the GIL released first: the caller finds it free)
                else:  # (free before the word: ``all_busy`` after the split), stored by its
                    busy[0][busy[1]] = False  # idle spin, the GIL released (``_loop``)
                    _worker.word = word

    def finish(self):
        """Close the split: withdraw the chunks nobody took (returned, none runs them) and
        wait for the chunks workers are computing: first in a short spin on the split's done
        word, the GIL released (``exec/join_spin.py``), then asleep on a lock."""
        with self._lock:
            self._closed = True
            self._fn = None  # (a hand-off still queued keeps no kernel's arrays alive)
            left, self._next = self._bounds[self._next:], len(self._bounds)
            if not self._active:
                return left
            word = self._word = join_spin.word()
            if word is None:
                waiter = self._waiter = threading.Lock()
                waiter.acquire()
        try:  # (the spin inside: a Ctrl-C noted during it is raised as it returns)
            if word is not None:
                if join_spin.wait(word):
                    return left
                waiter = self._sleeper()  # (the bound passed: the worker releases the lock)
            if waiter is not None:
                waiter.acquire()
        except BaseException as exc:  # a signal's (Ctrl-C): the chunks still write, wait
            self.stopped = True  # (for them only: their waits end, ``IntraOpPool.wait``)
            self._wait_out()
            raise exc
        return left

    def _sleeper(self):
        """The caller's lock, held, that the last worker releases; None once no worker
        computes a chunk."""
        with self._lock:
            if not self._active:
                return None
            if self._waiter is None:
                self._waiter = threading.Lock()
                self._waiter.acquire()
            return self._waiter

    def _wait_out(self):
        """Wait until no worker computes a chunk (the caller's lock is released when the last
        one ends: a chunk's time at most), whatever further signals raise meanwhile; the
        interruption may have come after the lock was acquired, so the count decides."""
        while True:
            try:
                if (waiter := self._sleeper()) is None:
                    return
                waiter.acquire()
            except BaseException:  # noqa: BLE001 -- the first interruption is raised after
                continue

    def drain(self, fn, limit=None):
        """Compute chunks until none is left (``limit`` of them at most); a chunk's error
        stops the split (``stopped``: the other threads start no chunk, their waits end)
        and is kept for the caller to raise. The thread's split is this one meanwhile
        (``_current``, where its chunks wait: a nested split's drain restores the outer)."""
        if not self.waits:
            return self._drain(fn, limit)
        outer = getattr(_current, "queue", None)
        _current.queue = self
        try:
            self._drain(fn, limit)
        finally:
            _current.queue = outer

    def _drain(self, fn, limit):
        taken = 0
        while (limit is None or taken < limit) and (chunk := self._take()) is not None:
            taken += 1
            try:
                fn(*chunk)
            except BaseException as exc:  # noqa: BLE001 -- the caller re-raises the first
                if self.atomic and isinstance(exc, KeyboardInterrupt):
                    self.interrupt = self.interrupt or exc  # (the chunk ran: go on)
                    continue
                self.stopped = True  # (first: no call before it, where a signal raises)
                with self._lock:
                    if self.error is None:
                        self.error = exc


_shared = {}
_shared_lock = threading.Lock()


def shared_pool(threads):
    """The process's pool of ``threads`` threads (devices and sessions asking for the same
    count share it, as TF1's sessions share their intra-op pool). A pool of one thread has
    no workers: large kernels run inline as one chunk, BLAS held at one thread as well."""
    threads = int(threads)
    if threads < 1:
        raise ValueError(f"intra_op_parallelism_threads must be >= 1, got {threads}")
    with _shared_lock:
        pool = _shared.get(threads)
        if pool is None:
            pool = _shared[threads] = IntraOpPool(threads, f"asyncflow-intra-op{threads}")
        return pool


def _reset_after_fork():
    global _blas_lock, _shared_lock
    _blas_lock, _shared_lock = threading.Lock(), threading.Lock()
    for pool in list(_pools):
        pool._after_fork()


# A chunk's hand-off at most ~a kernel; a lane's function ends with its step (lanes stop).
EXIT_JOIN_S = 30


def _stop_at_exit():
    """At interpreter exit (after ``threading`` joined the non-daemon threads): stop the
    daemon workers and wait for a hand-off they are running, so no worker is frozen inside
    numpy while the interpreter finalizes; a split after this runs on its caller."""
    global _exiting
    _exiting = True
    for pool in list(_pools):
        pool.close(EXIT_JOIN_S)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
atexit.register(_stop_at_exit)
