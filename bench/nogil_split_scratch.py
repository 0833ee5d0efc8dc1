"""A measuring patch, not a product path: the dense models' float32 GEMM splits with the worker's
chunk run by a thread spinning in compiled code (``bench/nogil_gemm_scratch.py``: no futex
wake, no GIL hand-over), switched by ``ON`` at each call, for ``.venv/bin/python
bench/bench_ab_setting.py --set nogil_split_scratch:ON=True`` (its ``bench/`` folder is on
``sys.path``; importing this module patches ``asyncflow.kernels.math._split_matmul`` and
``asyncflow.kernels.blas.matmul`` through ``bench/matmul_patch.py``; ``ON`` False is the tree
as it is).

A product takes it where ``ON``, the operands are 2-D float32 (SkylakeX's row chunks keep the
whole product's bits wherever they are cut: ``intra_op.KEEPS_BITS``), it splits by rows,
``MIN_MACS`` <= m*k*n (``blas.matmul``'s whole products too: the 8.4 M ones), the device
has a pool of two threads that does not run kernels whole on this thread (a pair, a lane)
and whose worker is idle, and no other thread of this patch holds the spinning worker (a
try-lock): then one compiled call posts rows ``cut:`` to the spinner, computes rows ``:cut``
by the same cblas call and spins for the worker's done word. ``cut``: even halves where
the worker spins, ``for_gemm``'s lead where it sleeps (it is then woken by an Event after
the post). A fused epilogue (``EPILOGUE``: else such products keep today's split) runs on the
caller over both chunks after (``EPILOGUE_SPLIT``: each thread its own rows', the worker
returning to Python for it). After each job the worker spins ``SPIN_US`` (TSC) and then
sleeps; ``SPIN_US = 0``: it sleeps at once (every split cold). ``SMALL_WARM_ONLY``: products
below today's split threshold only where the worker spins. Not safe enough for the
product (no Ctrl-C hold, no fork handling, no close): it only measures the step.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matmul_patch  # noqa: E402
import nogil_gemm_scratch as g  # noqa: E402

from asyncflow.kernels import intra_op, math as kmath  # noqa: E402

ON = False
EPILOGUE = True
MIN_MACS = 8_000_000
SPIN_US = 300.0
# Products below ``SPLIT_MACS`` (today's split threshold, the 8.4 M ones) taken only where the
# worker spins now (a cold hand-off costs ~35 us of its ~80 us half).
SMALL_WARM_ONLY = False
# A fused product's epilogue per chunk: the worker runs its rows' in Python after its GEMM
# (taking the GIL then), the caller its own rows' (else the caller runs it whole after).
EPILOGUE_SPLIT = False
SPLIT_MACS = 16_777_216

_claim = threading.Lock()
taken = {"warm": 0, "cold": 0, "whole": 0}
passed = {"alone": 0, "busy": 0, "claimed": 0}
shapes = {}  # (m, k, n, a transposed, b transposed, form): products taken
served = [0.0]  # seconds the worker spent inside ``serve`` (spinning or computing)


def _hz():
    g.tsc()
    t0, c0 = time.perf_counter(), g.tsc()
    time.sleep(0.05)
    return (g.tsc() - c0) / (time.perf_counter() - t0)


class _Worker:
    def __init__(self):
        self.hz = _hz()
        self.job = g.new_job()
        self.seq = 0
        self.wake = threading.Event()
        self.epilogue = None
        self.error = None
        self.thread = threading.Thread(target=self._loop, daemon=True, name="nogil-gemm")
        self.thread.start()

    def _loop(self):
        job = self.job
        clock = time.thread_time
        while True:
            start = clock()
            budget = int(SPIN_US * 1e-6 * self.hz)
            stop = g.serve(job, budget)
            served[0] += clock() - start
            if stop == 2:  # (its rows' epilogue, here in Python; then done)
                try:
                    self.epilogue()
                except BaseException as exc:  # noqa: BLE001 -- the caller raises it
                    self.error = exc
                self.epilogue = None
                g.done(job, job[g.BELL])
                continue
            if stop:
                return
            if job[g.BELL] != job[g.DONE]:
                continue
            self.wake.wait()
            self.wake.clear()


_worker = None


def _fits(m, k, n):
    return kmath.by_rows(m, n) and m >= 8 and n >= 2


def _eligible(ctx, a, b, fused):
    if not ON or (fused and not EPILOGUE):
        return None
    return matmul_patch.pool_for(ctx, a, b, MIN_MACS, _fits, passed)


def _run(a, b, whole, epilogue=None):
    global _worker
    if not _claim.acquire(blocking=False):
        passed["claimed"] += 1
        return None
    try:
        if _worker is None:
            _worker = _Worker()
        worker = _worker
        job = worker.job
        (m, k), n = a.shape, b.shape[1]
        out = np.empty((m, n), np.float32)
        warm = job[g.STATE] == 1
        if SMALL_WARM_ONLY and not warm and a.shape[0] * a.shape[1] * b.shape[1] < SPLIT_MACS:
            passed["small cold"] = passed.get("small cold", 0) + 1
            return None
        if warm:
            cut = m // 2 + m % 2
        else:
            lead = max(0, min(round(intra_op.GEMM_LEAD_MACS / (k * n)), m - 4))
            cut = intra_op.lead_bounds(m, 2, lead)[0][1]
        worker.seq += 1
        seq = worker.seq
        epi = 0
        if epilogue is not None:
            worker.epilogue = lambda: epilogue(out[cut:])
            epi = 1
        result = g.split(job, seq, a, b, out, cut, 1 << 22, epi)
        if result == -1:
            worker.epilogue = None
            return None
        if result == 2:
            worker.wake.set()
            np.matmul(a[:cut], b, out=out[:cut])
        if epilogue is not None:
            epilogue(out[:cut])
        if result != 1:
            g.wait(job, seq, 1 << 40)
        if worker.error is not None:
            error, worker.error = worker.error, None
            raise error
        form = "whole" if whole else ("warm" if warm else "cold")
        taken[form] += 1
        key = (m, k, n, a.strides[0] < a.strides[1], b.strides[0] < b.strides[1],
               form + ("" if not whole else " (warm)" if warm else " (cold)"))
        shapes[key] = shapes.get(key, 0) + 1
        return out
    finally:
        _claim.release()


def _split_matmul(ctx, a, b, epilogue=None):
    if _eligible(ctx, a, b, epilogue is not None) is not None:
        if epilogue is not None and EPILOGUE_SPLIT:
            out = _run(a, b, False, epilogue)
            if out is not None:
                return out
        out = _run(a, b, False)
        if out is not None:
            if epilogue is not None:
                epilogue(out)
            return out
    return _split(ctx, a, b, epilogue)


def _whole_form(ctx, a, b):
    return _run(a, b, True) if _eligible(ctx, a, b, False) is not None else None


def _report():
    if sum(taken.values()) or sum(passed.values()):
        print(f"nogil_split_scratch: splits taken {taken}, eligible but not taken {passed}; "
              f"the worker's CPU in its spin and jobs {served[0]:.2f} s")
        for key, count in sorted(shapes.items()):
            print(f"  [{key[0]}, {key[1]}] @ [{key[1]}, {key[2]}] "
                  f"{'T' if key[3] else 'N'}{'T' if key[4] else 'N'} {key[5]}: {count}")


_split = matmul_patch.install(_split_matmul, _whole_form, _report)
