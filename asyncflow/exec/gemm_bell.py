"""A GEMM split's worker that needs no GIL to start its chunk (issue 37).

On this 2-core VM a split worker woken from a sleep, or spinning in Python, starts its chunk
25-60 us after the caller (bench/RESULTS.md, r38models): its first act is to take the GIL,
which the caller holds until its own chunk enters BLAS, and the caller then waits for the
later chunk. Here the pool's first split worker, after each hand-off, waits for
``SPIN_S`` in compiled ``nogil`` code (``exec/gemm_bell_loop.py``: ``pause`` and an atomic
read of a bell word); a GEMM split (``IntraOpPool.run_gemm``) that finds it there claims it
(an atomic compare-and-swap), writes its chunk's ``cblas_?gemm`` call into the control
array (``kernels/blas.py``'s ``cblas_job``: the call numpy's matmul, or MKL's form, makes for
that chunk, so the same bits) and rings; the worker calls BLAS at once, GIL-free, while the
caller computes its own chunk. A chunk with an epilogue (a fused bias and activation) runs
it in Python after its GEMM (the GIL is then wanted while both threads are busy anyway).
The caller waits for the worker's chunk spinning in ``nogil`` code (a chunk's time at most).

Where the worker is not there (asleep after ``SPIN_S`` without a GEMM, running a Python
hand-off, or another split has claimed it), the split takes the pool's queue as before. A
Python hand-off (``post``) nudges a spinning worker back to the queue. The worker never
spins longer than ``SPIN_S`` after its last job: an idle pool sleeps.

Loaded (``load``: numba's compile or disk cache, the BLAS symbols, a check that a job gives
numpy's bits) by a MatMul's prepare hook on a worker thread, never on the event loop; where
numba or the symbols are missing, off x86, or with ``ASYNCFLOW_JIT=0``/``ASYNCFLOW_GEMM_BELL=0``,
it never becomes ready and splits take the queue as before.
"""
from __future__ import annotations

import os
import platform
import sys
import threading
import time

import numpy as np

ENABLED = os.environ.get("ASYNCFLOW_GEMM_BELL", "1") != "0"
# How long the worker spins after its last job before it sleeps on a futex (read at each
# wait), and how long a split's caller spins for the worker's chunk before it sleeps.
SPIN_S = 0.0
WAIT_SPIN_S = 0.0

_loop = None      # exec/gemm_bell_loop.py, once loaded
_per_read = 1e-7  # seconds a read of the bell takes in ``serve`` (measured at load)
_tried = False
_lock = threading.Lock()
_numpy_blas = []  # [numpy's GEMM form, its sgemm and dgemm addresses, their int bits]


def ready():
    """Whether the compiled bell is loaded (and enabled)."""
    return _loop is not None and ENABLED


def load():
    """Compile (or load from numba's disk cache) the bell's functions and check one job
    against numpy's matmul; True where the bell can run. Slow once (a worker thread's)."""
    global _loop, _per_read, _tried
    if _tried or not ENABLED:
        return ready()
    with _lock:
        if _tried:
            return ready()
        _tried = True
        from asyncflow.kernels import blas, jit
        if (not jit.available() or platform.machine().lower() not in ("x86_64", "amd64")
                or blas.numpy_cblas() is None):
            return False
        import numba

        from asyncflow.exec import gemm_bell_loop as loop
        ctl = np.zeros(loop.WORDS, np.int64)
        loop.spin(ctl, 10)
        start = time.perf_counter()
        loop.spin(ctl, 20_000)
        _per_read = max(1e-10, (time.perf_counter() - start) / 20_000)
        ctl[loop.SYSCALL] = _syscall_address()
        ctl[loop.NUDGE] = 1
        loop.serve(ctl, 0, 0)  # (compiles; returns at once: nudged)
        loop.claim(ctl)
        loop.leave(ctl)
        loop.nudge(ctl)
        loop.wait_done(ctl, 0, 0)
        loop.finish(ctl, 0)
        for dtype in (np.float32, np.float64):
            a = np.arange(12, dtype=dtype).reshape(3, 4) / 7
            b = np.arange(20, dtype=dtype).reshape(4, 5) / 3
            out, want = np.empty((3, 5), dtype), a @ b
            job = blas.cblas_job(blas.numpy_matmul, a, b, out)
            ctl[loop.JOB:loop.JOB + len(job)] = job
            loop.gemm(ctl, loop.JOB)
            if not np.array_equal(out, want):
                return False
        loop.ring(ctl, 0)
        sgemm, dgemm, bits = blas.numpy_cblas()
        for dtype in (numba.float32, numba.float64):  # (operands typed read-only: writable
            loop.post_job.compile((                     # arrays convert to that)
                numba.int64[:], _typed(dtype, True), _typed(dtype, True), _typed(dtype, False),
                numba.int64, numba.int64, numba.int64, numba.int64))
        loop.post_job.disable_compile()  # (never compiles on a kernel's thread)
        _numpy_blas[:] = [blas.numpy_matmul, sgemm, dgemm, bits]
        _loop = loop
    return True


def _typed(dtype, readonly):
    import numba
    return numba.types.Array(dtype, 2, "A", readonly=readonly)


def _syscall_address():
    import ctypes
    return ctypes.cast(ctypes.CDLL(None).syscall, ctypes.c_void_p).value


class GemmBell:
    """One worker's control array and the Python half of its protocol."""

    def __init__(self):
        self.ctl = np.zeros(80, np.int64)  # (``gemm_bell_loop.WORDS``, without numba)
        self.ctl[48] = _syscall_address()  # (``gemm_bell_loop.SYSCALL``: the futex calls)
        self._seen = 0
        self._epilogue = None  # the claimed job's epilogue, run by the worker
        self._error = None     # the epilogue's exception, raised by the caller
        self.jobs = 0          # GEMM chunks handed over the bell (statistics)
        self.compiled = 0      # of them, posted by ``start_numpy``

    def nudge(self):
        """Ask a waiting worker back to the Python queue (after a ``put``)."""
        if _loop is not None:
            _loop.nudge(self.ctl)

    def serve(self, queue):
        """The worker's wait between hand-offs: the bell's jobs until the queue has work, or
        ``SPIN_S`` passed with none (then the caller sleeps on the queue)."""
        loop, ctl = _loop, self.ctl
        if loop is None or not ENABLED:
            return
        while True:
            ctl[loop.NUDGE] = 0
            if not queue.empty() and loop.leave(ctl):
                return
            code = loop.serve(ctl, self._seen, int(SPIN_S / _per_read))
            self._seen = int(ctl[loop.BELL])
            if code != 2:
                return
            epilogue, self._epilogue = self._epilogue, None
            try:
                epilogue()
            except BaseException as exc:  # noqa: BLE001 -- raised by the split's caller
                self._error = exc
            loop.finish(ctl, self._seen)

    def start_numpy(self, mm, a, b, out, epilogue=None):
        """``start`` for ``mm(a, b, out)`` where ``mm`` is numpy's matmul form (the job written
        by compiled code, a few microseconds less on the caller's path than ``cblas_job``); a
        ``(job number or None, done)``: done False where ``mm`` is not numpy's form, or the
        product not one plain call (``cblas_job``'s None)."""
        loop = _loop
        if loop is None or not ENABLED or not _numpy_blas or mm is not _numpy_blas[0]:
            return None, False
        self._error, self._epilogue = None, epilogue
        try:
            seq = loop.post_job(self.ctl, a, b, out, _numpy_blas[1], _numpy_blas[2],
                                _numpy_blas[3], 0 if epilogue is None else 1)
        except TypeError:  # (no signature compiled for these operands)
            seq = -1
        if seq <= 0:
            self._epilogue = None
            return None, seq == 0
        self.jobs += 1
        self.compiled += 1
        return seq, True

    def start(self, job, epilogue=None):
        """Hand ``job`` (``blas.cblas_job``'s words) and ``epilogue`` (a callable or None) to
        the worker where it waits on the bell: the job's number, or None (not handed)."""
        loop = _loop
        if loop is None or not ENABLED:
            return None
        ctl = self.ctl
        claimed = loop.claim(ctl)
        if not claimed:
            return None
        self._error, self._epilogue = None, epilogue
        try:
            ctl[loop.EPILOGUE] = epilogue is not None
            ctl[loop.JOB:loop.JOB + len(job)] = job
        except BaseException:
            ctl[loop.EPILOGUE], ctl[loop.JOB] = 0, -1  # (a job of no work: the claim ends)
            self.wait(loop.ring(ctl, claimed == 2), raises=False)
            raise
        self.jobs += 1
        return loop.ring(ctl, claimed == 2)

    def wait(self, seq, raises=True):
        """Wait (GIL-free) for job ``seq``; raise its epilogue's error (``raises``)."""
        _loop.wait_done(self.ctl, seq, int(WAIT_SPIN_S / _per_read))
        error, self._error = self._error, None
        if error is not None and raises:
            raise error


def ensure_loaded():
    """``load`` where numba is importable (a prepare hook's work, on a worker thread)."""
    if not _tried and ENABLED and "numba" not in sys.modules:
        from asyncflow.kernels import jit
        if not jit.available():
            return False
    return load()
