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
``SPIN_US`` or ``IDLE_US`` at most. What it must not know: anything of kernels or chunks.
Where it does not apply, ``word()`` answers None and ``idle`` returns at once, and every split
sleeps as before: numba missing or compiled loops off (``kernels/jit``), a CPU other than
x86-64, ``SPIN_US`` 0, or the loops not compiled yet. They are compiled (or loaded from
numba's disk cache) on a daemon thread started as a process claims BLAS for a CPU device
(``start``), never on the event loop's thread.
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


def statistics():
    """The spins so far (a frozen ``Statistics``)."""
    return Statistics(*_counts)
_start_lock = threading.Lock()
_started = False


def word():
    """A fresh done word for one split, or None where the spin does not apply (the split then
    waits on its lock)."""
    if not _functions or SPIN_US <= 0:
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
    if not _functions or IDLE_US <= 0 or SPIN_US <= 0 or lanes[0]:
        if word is not None:
            word[0] = 1
        return False
    ticks = _functions[2]
    return _functions[3](_SCRATCH if word is None else word, bell, seen, lanes,
                         int(IDLE_US * ticks), int(IDLE_GRACE_US * ticks))


def done(flag):
    """Store 1 into ``flag`` (a ``word()``), the GIL released first."""
    _functions[0](flag)


def wait(flag):
    """Spin until ``flag`` holds 1 (True) or ``SPIN_US`` passed (False), the GIL released."""
    spin, ticks = _functions[1], _functions[2]
    caught = spin(flag, int(SPIN_US * ticks))
    _counts[0 if caught else 1] += 1
    return caught


def start(on_loaded=None):
    """Compile the functions on a daemon thread (once a process; nothing where they cannot
    run, or with ``SPIN_US`` 0), then call ``on_loaded()`` there: numba's import loads
    scipy's OpenBLAS, whose threads the intra-op pool's BLAS hold must take in
    (``intra_op.hold_blas_loaded_since``). Called as a process claims BLAS for a CPU device."""
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
    if loops.spin(flag, 1000):  # (an unset word times out)
        raise RuntimeError("join_spin: the spin saw a word never stored")
    loops.store(flag)
    if not loops.spin(flag, 1000):
        raise RuntimeError("join_spin: the spin missed a stored word")
    start, began = loops.clock(), time.perf_counter()
    time.sleep(0.02)
    ticks = (loops.clock() - start) / ((time.perf_counter() - began) * 1e6)
    if not ticks > 0:
        raise RuntimeError("join_spin: the cycle counter does not advance")
    loops.idle(np.zeros(1, np.int64), flag, 0, np.zeros(1, np.int64), 1000, 0)  # (compiled)
    return loops.store, loops.spin, ticks, loops.idle
