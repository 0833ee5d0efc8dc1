"""Spin-waits: a thread that waits for another's hand-off spins a little (the GIL released)
before it sleeps (issue 37).

On this 2-core VM a thread woken from a futex sleep (a ``SimpleQueue.get``, a lock, a
condition) starts 20-60 us after the wake-up call; one that spins on a memory word sees the
store within a few microseconds (bench/RESULTS.md). A step of the dense models hands work
between threads several times (a GEMM split's worker, its caller waiting for the worker's
chunk, lane 1 waiting for lane 0's flag and lane 0 for lane 1's): each waiting thread first
calls ``wait(bell, seen)``, which spins on ``bell[0]`` (an int64 numpy array that the
waking thread bumps with ``ring``) for up to ``SPIN_S``, and only then sleeps as before.
As TF1's thread pool (Eigen's) does, the spin spends a core only where the thread would
otherwise sleep, and never longer than ``SPIN_S`` a wait.

The spin is a loop compiled by numba (``exec/spin_loop.py``: the CPU's ``pause`` and an
atomic load, ``nogil``, disk-cached). It is loaded (``load``) by a pool thread, never the
event loop, and only once numba is imported anyway (a kernel's compiled loops,
``kernels/jit.py``): until then, where numba is missing, with ``ASYNCFLOW_JIT=0`` or
``ASYNCFLOW_SPIN=0``, or off x86, ``wait`` returns False at once and threads sleep as they
did. Spinning changes when a thread wakes, never what it computes.
"""
from __future__ import annotations

import os
import platform
import sys
import threading
import time

import numpy as np

ENABLED = os.environ.get("ASYNCFLOW_SPIN", "1") != "0"
# How long a waiting thread spins before it sleeps (read at each wait).
SPIN_S = 300e-6

_spin = None     # the compiled loop, once loaded
_per_iteration = 1e-8  # seconds an iteration of it takes here, measured at load
_tried = False
_lock = threading.Lock()


def bell():
    """A new bell: an int64 word that ``ring`` bumps and ``wait`` watches."""
    return np.zeros(1, np.int64)


def ring(word):
    """Bump ``word`` (the GIL held: the bumps of several threads do not race)."""
    word[0] += 1


def ready():
    return _spin is not None


def load():
    """Load the compiled spin where numba is already imported and compiled loops are on (a
    pool thread calls this before it waits; the first load compiles or reads numba's disk
    cache on that thread). Cheap once done or where it cannot be."""
    global _spin, _per_iteration, _tried
    if _tried or not ENABLED or "numba" not in sys.modules:
        return _spin is not None
    with _lock:
        if _tried:
            return _spin is not None
        _tried = True
        from asyncflow.kernels import jit
        if not jit.available() or platform.machine().lower() not in ("x86_64", "amd64"):
            return False
        from asyncflow.exec import spin_loop
        word = bell()
        spin_loop.spin(word, 0, 10)  # (compiles, or loads the disk cache)
        start = time.perf_counter()
        spin_loop.spin(word, 0, 20_000)
        _per_iteration = max(1e-10, (time.perf_counter() - start) / 20_000)
        _spin = spin_loop.spin
    return True


def wait(word, seen, seconds=None):
    """Spin (the GIL released) until ``word[0] != seen``, for at most ``seconds`` (default
    ``SPIN_S``): True when it changed; False at once where the spin is not loaded."""
    fn = _spin
    if fn is None or not ENABLED:
        return False
    limit = SPIN_S if seconds is None else seconds
    return fn(word, seen, int(limit / _per_iteration)) >= 0
