"""A split's hand-offs without sleeping: the worker's idle spin and the caller's join spin
(issue 37).

On a VM whose idle vCPU halts at once (this project's 2-core container: the ``haltpoll``
cpuidle driver with ``guest_halt_poll_ns=0``), every futex wake of a sleeping thread, and every
GIL hand-over to a thread asleep on it, is a halted vCPU's wake: tens of microseconds, some of
them paid by the waker with the GIL held. A split (``exec/intra_op.py``) paid it three times:
the hand-off's queue put woke the worker (13-17 us in the poster), the woken worker found the
GIL with the poster and slept on it again (its chunk 17-35 us after the caller's), and a
caller done first slept on a lock the worker released holding the GIL (back 29-40 us after the
worker's chunk ended). Measured on the MLP's three splits a step (bench/RESULTS.md, c49mlp).

Two spins in compiled code (numba ``nogil`` functions, ``exec/join_spin_loops.py``: the GIL
released for the call, the CPU's ``pause`` between reads):
- A split worker between hand-offs (``idle``): its pool's *bell* (an int64 word that every
  hand-off increments after its queue put) is read, and the worker spins until it changes,
  ``IDLE_US`` passed, or the pool's lane thread runs a lane (whose core this is: the spin
  ends at once); then it takes its hand-off from the queue as before (asleep there where
  none came). A put to a worker that spins makes no syscall. Once the bell rang it waits
  ``IDLE_GRACE_US`` more before it takes the GIL: the poster's Python up to its own chunk's
  BLAS call, which frees the GIL, so the worker seldom finds it taken.
- A caller done with its chunks while a worker computes one (``wait``) spins on the split's
  *done word* for at most ``SPIN_US``, then sleeps on the split's lock as before. The last
  worker stores the word as its idle spin begins (``idle``'s first act, the GIL released
  already), so the caller that sees it finds the GIL free.

Both are bounded: a worker that lost its core or a long chunk costs the spinning thread's core
``SPIN_US`` or ``IDLE_US`` at most. On a machine with more running threads than cores (a CPU
hog beside it, another process splitting) a spin takes the core the thread it waits for needs:
always spinning, the MLP's step was 1.4-1.6x slower there than with no spin (bench/RESULTS.md,
r49mlp). So a spin that lost its CPU (two reads of the cycle counter more than ``GAP_US``
apart) ends at once, and it or a caller's spin whose bound passed turns both spins off for
``BACKOFF_S`` (``quiet``). What it must not know: anything of kernels or chunks.
Where it does not apply, ``word()`` answers None and ``idle`` returns at once, and every split
sleeps as before: numba missing or compiled loops off (``kernels/jit``), a CPU other than
x86-64, ``SPIN_US`` 0, the loops not compiled yet, or a back-off in force. They are compiled (or
loaded from numba's disk cache) on a daemon thread that the process's first split handed to a
worker starts (``posted``), once a CPU device claimed BLAS (``arm``), never on the event loop's
thread: a process that never splits a kernel (a worker serving small steps) spends no CPU on
them.
"""
from __future__ import annotations

import dataclasses
import platform
import threading
import time

import numpy as np

from asyncflow.kernels import jit

# The longest a split's caller spins for its workers' last chunk before it sleeps on the lock
# (microseconds); 0: never (every split sleeps, as before). A worker's chunk of the dense
# models' splits ends 10-50 us after the caller's (bench/RESULTS.md, c49mlp).
SPIN_US = 500.0

_functions = None  # (store, spin, ticks a microsecond, idle) once compiled; False: never here
_counts = [0, 0]  # spins that saw the word, spins whose bound passed first


@dataclasses.dataclass(frozen=True)
class Statistics:
    """``statistics()``: the process's split joins that spun, by how they ended."""
    caught: int     # the word was stored within ``SPIN_US``
    timed_out: int  # the bound passed first: the caller slept on the split's lock
    lost_cpu: int = 0  # spins (the caller's or a worker's idle one) that lost their CPU


def statistics():
    """The spins so far (a frozen ``Statistics``)."""
    return Statistics(*_counts, _preempted[0])
_start_lock = threading.Lock()
_started = False


# A spin that lost its CPU (two reads of the cycle counter more than ``GAP_US`` apart: the
# machine has more running threads than cores, a CPU hog beside it or another process
# splitting) ends at once, and no thread of the process spins for ``BACKOFF_S`` after: a spin
# there takes the core the thread it waits for, or another process, needs (the MLP's step
# 1.4-1.6x slower beside a CPU hog with the spins always on; bench/RESULTS.md, r49mlp).
GAP_US = 50.0
BACKOFF_S = 0.2
_quiet_until = 0.0  # (``_monotonic()``) no spin before this
_monotonic = time.monotonic
_preempted = [0]  # spins that lost their CPU (statistics)


def _lost_cpu():
    global _quiet_until
    _preempted[0] += 1
    _quiet_until = _monotonic() + BACKOFF_S


def quiet():
    """Whether the spins are off now, a spin having lost its CPU within ``BACKOFF_S``."""
    return _quiet_until > 0 and _monotonic() < _quiet_until


def word():
    """A fresh done word for one split, or None where the spin does not apply (the split then
    waits on its lock)."""
    if not _functions or SPIN_US <= 0 or quiet():
        return None
    return np.zeros(1, np.int64)


# How long a split worker spins for the next hand-off after one (microseconds; 0: it sleeps
# on its queue at once), and how long it waits on once the bell rang before it takes the GIL.
IDLE_US = 500.0
IDLE_GRACE_US = 6.0
_SCRATCH = np.zeros(1, np.int64)  # ``idle``'s word where no caller spins


def idle(word, bell, seen, lanes):
    """A split worker's wait for the next hand-off (``join_spin_loops.idle``), the GIL
    released: ``word`` (or None) stored first; it ends as ``bell[0]`` changes, after
    ``IDLE_US``, or once ``lanes[0]`` is not 0 (the pool's lane thread runs: it needs the
    core); False at once where the spin does not apply."""
    if not _functions or IDLE_US <= 0 or SPIN_US <= 0 or lanes[0] or quiet():
        if word is not None:
            word[0] = 1
        return False
    ticks = _functions[2]
    code = _functions[3](_SCRATCH if word is None else word, bell, seen, lanes,
                         int(IDLE_US * ticks), int(IDLE_GRACE_US * ticks), int(GAP_US * ticks))
    if code == 2:
        _lost_cpu()
    return code == 1


def done(flag):
    """Store 1 into ``flag`` (a ``word()``), the GIL released first."""
    _functions[0](flag)


def wait(flag):
    """Spin until ``flag`` holds 1 (True) or ``SPIN_US`` passed (False), the GIL released."""
    spin, ticks = _functions[1], _functions[2]
    code = spin(flag, int(SPIN_US * ticks), int(GAP_US * ticks))
    if code != 1:  # (a worker not done within the bound: most likely it waits for a core)
        _lost_cpu()
    _counts[0 if code == 1 else 1] += 1
    return code == 1


_armed: list = []  # ``arm``'s callback: the compile waits for the process's first split


def arm(on_loaded=None):
    """Let the process's first split handed to a worker (``posted``) compile the functions
    with ``start``;
    ``on_loaded`` as there. Called as a process claims BLAS for a CPU device: a process that
    never splits (its steps too small) never compiles, nor spends a thread's CPU on it."""
    if not _armed:
        _armed.append(on_loaded)


def posted():
    """A split handed chunks to a pool worker: the process's first, after ``arm``, starts the
    compile (until it is done, splits wait on their locks)."""
    if _armed and not _started:
        start(_armed[0])


def start(on_loaded=None):
    """Compile the functions on a daemon thread (once a process; nothing where they cannot
    run, or with ``SPIN_US`` 0), then call ``on_loaded()`` there: numba's import loads
    scipy's OpenBLAS, whose threads the intra-op pool's BLAS hold must take in
    (``intra_op.hold_blas_loaded_since``). Called by ``posted`` after ``arm`` (tests call it
    directly)."""
    global _started, _functions
    with _start_lock:
        if _started or SPIN_US <= 0:
            return
        _started = True
    if platform.machine().lower() not in ("x86_64", "amd64") or not jit.ENABLED:
        _functions = False
        return
    threading.Thread(target=_load, args=(on_loaded,), name="asyncflow-join-spin-compile",
                     daemon=True).start()


def ready(timeout=None):
    """Whether the functions are compiled; with ``timeout``, wait that long for them (tests)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not _functions:
        if _functions is False or deadline is None or time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _load(on_loaded):
    global _functions
    try:
        if not jit.available():  # (numba imported here, never on the caller's thread)
            _functions = False
            return
        built = _build()
    except Exception:  # noqa: BLE001 -- an optional speed-up: the lock stays
        _functions = False
        return
    finally:
        if on_loaded is not None:
            on_loaded()
    _functions = built


def _build():
    """The compiled ``store`` and ``spin`` (``exec/join_spin_loops.py``: compiled or loaded
    from numba's disk cache, and checked) and the cycle counter's ticks a microsecond."""
    from asyncflow.exec import join_spin_loops as loops

    flag = np.zeros(1, np.int64)
    if loops.spin(flag, 1000, 1 << 60):  # (an unset word times out)
        raise RuntimeError("join_spin: the spin saw a word never stored")
    loops.store(flag)
    if loops.spin(flag, 1000, 1 << 60) != 1:
        raise RuntimeError("join_spin: the spin missed a stored word")
    start, began = loops.clock(), time.perf_counter()
    time.sleep(0.02)
    ticks = (loops.clock() - start) / ((time.perf_counter() - began) * 1e6)
    if not ticks > 0:
        raise RuntimeError("join_spin: the cycle counter does not advance")
    loops.idle(np.zeros(1, np.int64), flag, 0, np.zeros(1, np.int64), 1000, 0,
               1 << 60)  # (compiled)
    return loops.store, loops.spin, ticks, loops.idle
