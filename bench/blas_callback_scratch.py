"""A measuring patch, not a product path: the dense models' float32 GEMMs on OpenBLAS's two-thread
driver through numpy's OpenBLAS threads callback, job 1 on the device pool's worker
(bench/bench_blas_callback.py's ``cbkw`` form), switched by ``ON`` at each call, for
``.venv/bin/python bench/bench_ab_setting.py --set blas_callback_scratch:ON=True`` (its
``bench/`` folder is on ``sys.path``) (importing this module patches
``asyncflow.kernels.math`` and ``asyncflow.kernels.blas`` through ``bench/matmul_patch.py``;
``ON`` False is the tree as it is).

A product takes it where ``ON``, the operands are 2-D float32, ``MIN_MACS`` <= m*k*n, K <=
``MAX_K`` (OpenBLAS's threaded driver blocks K otherwise above it: other bits), the device
has a pool of two threads whose worker is idle and that no other thread of this patch holds:
then it wakes the worker first (it spins on ``os.sched_yield`` until the callback hands it job
1, ``SPIN_S`` at most), raises OpenBLAS's count to 2 around the one call and lowers it after.
Any other thread whose GEMM starts while the count is 2 gets a thread of its own for job 1
(level-3 jobs wait for each other: they must run at once). Not safe enough for the product
(no Ctrl-C hold, no fork handling, the count is process-wide): it only measures the step.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
import time

import numpy as np
import threadpoolctl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matmul_patch  # noqa: E402

from asyncflow.kernels import math as kmath  # noqa: E402

ON = False
WHOLE_ONLY = False  # only the products the kernel runs whole today (the 8.4 M ones)
MIN_MACS = 8_000_000
MAX_K = 640
SPIN_S = 0.005

DOJOB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                            ctypes.c_void_p, ctypes.c_int)
_claim = threading.Lock()
_owner = threading.local()  # ``box``: the pre-woken worker's box, on the thread that claimed it
_set_threads = None
taken = [0, 0]  # GEMMs through the callback, GEMMs of other threads caught in a window
passed = {"alone": 0, "busy": 0, "claimed": 0}  # eligible by size, not taken: why


def _callback(sync, dojob, numjobs, elsize, jobdata, data):
    job = DOJOB(dojob)
    box = getattr(_owner, "box", None)
    done = []
    threads = []
    for index in range(1, numjobs):
        finished = threading.Lock()
        finished.acquire()
        done.append(finished)

        def run(index=index, finished=finished):
            try:
                job(index, jobdata + index * elsize, data)
            finally:
                finished.release()
        if box is not None and index == 1:
            box.append(run)
            _owner.box = None
        else:
            taken[1] += 1
            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            threads.append(thread)
    job(0, jobdata, data)
    for finished in done:
        finished.acquire()


_function = CALLBACK(_callback)


def _install():
    global _set_threads
    for lib in threadpoolctl.ThreadpoolController().lib_controllers:
        if lib.internal_api == "openblas" and "numpy" in lib.filepath:
            dll = ctypes.CDLL(lib.filepath)
            dll.scipy_openblas_set_threads_callback_function64_(_function)
            _set_threads = lib._get_symbol("openblas_set_num_threads")
            return
    raise SystemExit("numpy's BLAS is not OpenBLAS with a threads callback")


def _eligible(ctx, a, b):
    if not ON:
        return None
    return matmul_patch.pool_for(ctx, a, b, MIN_MACS, lambda m, k, n: k <= MAX_K, passed)


def _threaded(pool, a, b, out):
    """``a @ b`` into ``out`` on two threads, or None where the worker is not ours now."""
    if not _claim.acquire(blocking=False):
        passed["claimed"] += 1
        return None
    try:
        workers = pool._workers()
        if workers is None or all(workers.busy):
            return None
        box = []
        clock = time.perf_counter

        def spin():
            deadline = clock() + SPIN_S
            while not box and clock() < deadline:
                os.sched_yield()
            if box:
                box[0]()
        workers.post(spin, 1)
        _owner.box = box
        _set_threads(2)
        try:
            np.matmul(a, b, out=out)
        finally:
            _set_threads(1)
            if _owner.box is not None:  # (the callback never came: the spinner gives up)
                _owner.box = None
                box.append(lambda: None)
        taken[0] += 1
        return out
    finally:
        _claim.release()


def _split_matmul(ctx, a, b, epilogue=None):
    pool = None if WHOLE_ONLY else _eligible(ctx, a, b)
    if pool is not None and kmath.by_rows(a.shape[0], b.shape[1]):
        out = np.empty((a.shape[0], b.shape[1]), np.float32)
        if _threaded(pool, a, b, out) is not None:
            if epilogue is not None:
                epilogue(out)
            return out
    return _split(ctx, a, b, epilogue)


def _whole_form(ctx, a, b):
    pool = _eligible(ctx, a, b)
    if pool is None:
        return None
    return _threaded(pool, a, b, np.empty((a.shape[0], b.shape[1]), np.float32))


def _report():
    if sum(taken) or sum(passed.values()):
        print(f"blas_callback_scratch: GEMMs through the callback {taken[0]}, other threads' GEMMs "
              f"caught in a window {taken[1]}; eligible but not taken: {passed}")


_install()
_split = matmul_patch.install(_split_matmul, _whole_form, _report)
