"""The dense models' GEMMs at OpenBLAS's two-thread rate on our own pool's threads (issue 37):
numpy's OpenBLAS handing its jobs to a callback of ours instead of its server threads.

numpy's bundled OpenBLAS (0.3.27 and later, scipy-openblas builds) exports
``scipy_openblas_set_threads_callback_function64_``: with a callback set, ``exec_blas`` calls
``callback(sync, dojob, numjobs, jobdata_elsize, jobdata, dojob_data)`` instead of waking its
server threads, and each job is ``dojob(thread_num, jobdata + i * elsize, dojob_data)``. A
level-3 job waits for the others' packed panels (``level3_thread.c``), so the jobs must run
at once, on distinct threads: here job 0 runs on the calling thread and job 1 on the pool's
worker (a hand-off as the pool's splits make, ``_Workers.post``). The thread count a GEMM
uses is the process-wide ``blas_cpu_number`` (threadpoolctl's hold keeps it at 1): the
``cbk`` form raises it to 2 around the one call, as ``bench_blas_threads.py``'s ``obt`` did,
but no OpenBLAS thread runs (none is woken, none spins after).

Forms alternated in one process, per shape:

- ``one``: the product on one BLAS thread; ``one2``: the same again (A/A);
- ``today``: the MatMul kernel's path (``kernels/math._split_matmul`` where ``splits`` says,
  its row halves on the pool, else whole on one thread: the 8.4 M products);
- ``halves``: our row halves whatever the size (``for_gemm``'s bounds for two threads);
- ``cbk``: count 2, the product through the callback, count 1.

Also the callback's pieces, per ``cbk`` call (medians, us): the callback entered after the
call began (numpy, OpenBLAS's interface and the ctypes callback taking the GIL), job 1
started on the worker after the post, the caller's wait for job 1 after its own job 0
ended; and whether ``today`` and ``cbk`` have ``one``'s bits (OpenBLAS's threaded driver
blocks K otherwise once K passes its block: K = 784 differs).

Run: ``.venv/bin/python bench/bench_blas_callback.py [--repeat 200] [--shapes mlp,ae]``.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import threading
import sys
import time

import numpy as np
import threadpoolctl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dense_gemms  # noqa: E402

from asyncflow.exec.intra_op import IntraOpPool, claim_blas  # noqa: E402

DOJOB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                            ctypes.c_void_p, ctypes.c_int)


def numpy_openblas():
    """numpy's OpenBLAS as a ctypes library, its ``set_num_threads`` and the callback setter."""
    for lib in threadpoolctl.ThreadpoolController().lib_controllers:
        if lib.internal_api == "openblas" and "numpy" in lib.filepath:
            dll = ctypes.CDLL(lib.filepath)
            setter = getattr(dll, "scipy_openblas_set_threads_callback_function64_", None)
            if setter is None:
                raise SystemExit("numpy's OpenBLAS has no threads callback")
            return dll, lib._get_symbol("openblas_set_num_threads"), setter
    raise SystemExit("numpy's BLAS is not OpenBLAS")


class Handoff:
    """The callback: job 0 here, job 1 on the pool's worker; timings of its pieces."""

    def __init__(self, pool):
        self.workers = pool._workers()
        self.pieces = {"cbk": ([], [], []), "cbkw": ([], [], [])}  # entry, lag, tail
        self.form = "cbk"
        self.call_start = 0.0
        self.slot = None  # ``prewake``'s box: the worker, spinning, takes job 1 from it
        self.fn = CALLBACK(self._callback)

    def prewake(self, limit_s=0.005):
        """Wake the worker before the product: it spins (``os.sched_yield``, which lets the
        GIL go) until the callback puts job 1 in its box, for ``limit_s`` at most."""
        box = self.slot = []
        clock = time.perf_counter

        def spin():
            deadline = clock() + limit_s
            while not box and clock() < deadline:
                os.sched_yield()
            if box:
                box[0]()
        self.workers.post(spin, 1)

    def _callback(self, sync, dojob, numjobs, elsize, jobdata, data):
        clock = time.perf_counter
        entry, lag, tail = self.pieces[self.form]
        entry.append(clock() - self.call_start)
        job = DOJOB(dojob)
        if numjobs != 2:  # (this bench raises the count to 2 only)
            raise SystemExit(f"numjobs {numjobs}")
        done = threading.Lock()
        done.acquire()
        started = []

        def second():
            started.append(clock())
            try:
                job(1, jobdata + elsize, data)
            finally:
                done.release()
        posted = clock()
        if self.slot is not None:
            self.slot.append(second)
            self.slot = None
        else:
            self.workers.post(second, 1)
        job(0, jobdata, data)
        ended = clock()
        done.acquire()
        tail.append(clock() - ended)
        lag.append(started[0] - posted)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--shapes", default="")
    args = parser.parse_args()
    claim_blas()  # BLAS at one thread, as a CPU device holds it
    _, set_threads, set_callback = numpy_openblas()
    pool = IntraOpPool(2, "bench-intra-op")
    handoff = Handoff(pool)
    set_callback(handoff.fn)
    ctx = dense_gemms.kernel_context(pool)
    rng = np.random.default_rng(0)
    print(f"{'product':32s} {'one us':>8s} {'one2':>6s} {'today':>6s} {'halves':>6s} "
          f"{'cbk':>6s} {'cbkw':>6s}  entry/lag/tail us cbk, cbkw  bits today,cbk,cbkw")
    for name in dense_gemms.picked(args.shapes):
        a, b = dense_gemms.operands(rng, name)
        out = np.empty((a.shape[0], b.shape[1]), np.float32)
        kept = {}
        one, today, halves = dense_gemms.baseline_forms(ctx, pool, a, b, out)

        def through_callback(form, prewake):
            handoff.form = form
            handoff.call_start = time.perf_counter()
            if prewake:
                handoff.prewake()
            set_threads(2)
            try:
                np.matmul(a, b, out=out)
            finally:
                set_threads(1)
            return out

        def cbk():
            return through_callback("cbk", False)

        def cbkw():
            return through_callback("cbkw", True)

        for form_fn in (one, today, cbk, cbkw):
            kept[form_fn.__name__] = form_fn().copy()
        for lists in handoff.pieces.values():
            for values in lists:
                del values[:]
        times = {key: [] for key in ("one", "today", "halves", "cbk", "cbkw", "one2")}
        clock = time.perf_counter
        for _ in range(args.repeat):
            for key, form_fn in (("one", one), ("today", today), ("halves", halves),
                                 ("cbk", cbk), ("cbkw", cbkw), ("one2", one)):
                start = clock()
                form_fn()
                times[key].append(clock() - start)
        base = statistics.median(times["one"])
        ratios = {key: statistics.median(v) / base for key, v in times.items()}
        pieces = " ".join("/".join(f"{statistics.median(v) * 1e6:.0f}" for v in lists)
                          for lists in handoff.pieces.values())
        bits = []
        for key in ("today", "cbk", "cbkw"):
            same = np.array_equal(kept[key].view(np.uint32), kept["one"].view(np.uint32))
            diff = float(np.max(np.abs(kept[key] - kept["one"])))
            bits.append("same" if same else f"{diff:.1e}")
        print(f"{name:32s} {base * 1e6:8.1f} {ratios['one2']:6.3f} {ratios['today']:6.3f} "
              f"{ratios['halves']:6.3f} {ratios['cbk']:6.3f} {ratios['cbkw']:6.3f}  {pieces:>19s}  "
              f"{','.join(bits)}", flush=True)
    set_threads(1)
    pool.close(5)


if __name__ == "__main__":
    main()
