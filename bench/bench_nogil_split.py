"""A GEMM split whose worker needs no GIL to start, against today's split (issue 37, step 1).

Today a split GEMM (``kernels/math._split_matmul`` -> ``for_gemm`` -> ``IntraOpPool.run``)
wakes the pool's worker with a ``queue.Queue.put`` (a futex wake) and the woken worker takes
the GIL before its chunk's numpy call. Here the worker's chunk is posted to a thread spinning
in compiled code (``bench/nogil_gemm_scratch.py``: a numba ``nogil`` loop on a bell word,
calling numpy's OpenBLAS ``scipy_cblas_?gemm64_`` itself): no syscall, no GIL hand-over.

Forms alternated in one process, per product (float32):

- ``one``: ``np.matmul`` whole on one thread; ``one2``: the same again (A/A);
- ``today``: the MatMul kernel's path (``_split_matmul`` where ``splits`` says, its output
  allocated each call; else whole: the 8.4 M products);
- ``halves``: today's row chunks on the pool (``for_gemm``'s lead bounds), output kept;
- ``nogil``: the same bounds, chunk 1 posted to the spinning worker, chunk 0 by the same
  cblas call here, then a ``nogil`` spin for the done word, all in one compiled call
  (output kept);
- ``nogil0``: the same with even halves (no lead);
- ``cold``: ``nogil`` with the worker asleep (its spin's budget spent): posted, then woken by
  a ``threading.Event``, the caller's chunk by numpy (the fallback's cost).

Pieces (medians, us, TSC): ``post``: the caller's entry to after its bell store (one compiled
call, ``split``, builds the job from the views, posts it, runs the caller's chunk through the
same cblas call and spins for the worker's done word); ``lag``: the bell to the worker's
GEMM start; ``own``: the bell to the caller's own chunk ended; ``tail``: the caller's wait
after its chunk (0 when the worker was done first). Bits: each split form against ``one``.

Run: ``.venv/bin/python bench/bench_nogil_split.py [--repeat 200] [--shapes mlp,ae]
[--budget-us 2000]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nogil_gemm_scratch as g  # noqa: E402

from asyncflow.exec.intra_op import IntraOpPool, claim_blas  # noqa: E402
import dense_gemms  # noqa: E402

def tsc_hz():
    g.tsc()  # (compiled first)
    t0, c0 = time.perf_counter(), g.tsc()
    time.sleep(0.2)
    return (g.tsc() - c0) / (time.perf_counter() - t0)


class Worker:
    """The spinning thread: ``serve`` with a budget, then asleep on an Event."""

    def __init__(self, budget_cycles):
        self.job = g.new_job()
        self.seq = 0
        self.budget = budget_cycles
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        job = self.job
        while True:
            if g.serve(job, self.budget):
                return
            if job[g.BELL] != job[g.DONE]:  # (posted as the spin ended)
                continue
            self.wake.wait()
            self.wake.clear()

    def spinning(self):
        """Wake it and wait until it spins."""
        while self.job[g.STATE] != 1:
            self.wake.set()
            time.sleep(0)

    def asleep(self):
        while self.job[g.STATE] != 0:
            time.sleep(20e-6)

    def close(self):
        self.seq += 1
        g.stop(self.job, self.seq)
        self.wake.set()
        self.thread.join(5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--shapes", default="")
    parser.add_argument("--budget-us", type=float, default=2000)
    args = parser.parse_args()
    claim_blas()
    hz = tsc_hz()
    us = 1e6 / hz
    pool = IntraOpPool(2, "bench-intra-op")
    ctx = dense_gemms.kernel_context(pool)
    worker = Worker(int(args.budget_us * 1e-6 * hz))
    rng = np.random.default_rng(0)
    print(f"TSC {hz / 1e9:.3f} GHz; budget {args.budget_us:.0f} us")
    print(f"{'product':31s} {'one us':>7s} {'one2':>6s} {'today':>6s} {'halves':>6s} "
          f"{'nogil':>6s} {'nogil0':>6s} {'cold':>6s}  post/lag/own/tail nogil | cold  bits")
    for name in dense_gemms.picked(args.shapes):
        a, b = dense_gemms.operands(rng, name)
        out = np.empty((a.shape[0], b.shape[1]), np.float32)
        bounds = dense_gemms.lead_bounds(a, b)
        even = dense_gemms.lead_bounds(a, b, lead=False)
        pieces = {"nogil": [], "nogil0": [], "cold": []}
        job = worker.job
        one, today, halves = dense_gemms.baseline_forms(ctx, pool, a, b, out)

        def nogil_split(chunks, key):
            t0 = g.tsc()
            cut = chunks[0][1]
            worker.seq += 1
            seq = worker.seq
            result = g.split(job, seq, a, b, out, cut, 1 << 22)
            if result == 2:
                worker.wake.set()
                np.matmul(a[:cut], b, out=out[:cut])
                job[g.T_OWN] = g.tsc()
            if result != 1:
                g.wait(job, seq, 1 << 40)
            t3 = g.tsc()
            t1, t2 = job[g.T_POSTED], job[g.T_OWN]
            pieces[key].append(((t1 - t0) * us, (job[g.T_START] - t1) * us, (t2 - t1) * us,
                                (t3 - t2) * us))
            return out

        def nogil():
            return nogil_split(bounds, "nogil")

        def nogil0():
            return nogil_split(even, "nogil0")

        def cold():
            return nogil_split(bounds, "cold")

        kept = {}
        for key, fn in (("one", one), ("today", today), ("halves", halves)):
            kept[key] = fn().copy()
        worker.spinning()
        kept["nogil"] = nogil().copy()
        kept["nogil0"] = nogil0().copy()
        worker.asleep()
        kept["cold"] = cold().copy()
        for values in pieces.values():
            del values[:]
        times = {key: [] for key in ("one", "today", "halves", "nogil", "nogil0", "cold",
                                     "one2")}
        clock = time.perf_counter
        for _ in range(args.repeat):
            for key, fn in (("one", one), ("today", today), ("halves", halves), ("one2", one)):
                start = clock()
                fn()
                times[key].append(clock() - start)
            worker.spinning()
            for key, fn in (("nogil", nogil), ("nogil0", nogil0)):
                start = clock()
                fn()
                times[key].append(clock() - start)
            worker.asleep()
            start = clock()
            cold()
            times["cold"].append(clock() - start)
            worker.asleep()
        base = statistics.median(times["one"])
        ratios = {key: statistics.median(v) / base for key, v in times.items()}
        text = " | ".join("/".join(f"{statistics.median(p[i] for p in pieces[key]):.0f}"
                                   for i in range(4)) for key in ("nogil", "cold"))
        bits = []
        for key in ("today", "halves", "nogil", "nogil0", "cold"):
            same = np.array_equal(kept[key].view(np.uint32), kept["one"].view(np.uint32))
            bits.append("=" if same else f"{float(np.max(np.abs(kept[key] - kept['one']))):.0e}")
        print(f"{name:31s} {base * 1e6:7.1f} {ratios['one2']:6.3f} {ratios['today']:6.3f} "
              f"{ratios['halves']:6.3f} {ratios['nogil']:6.3f} {ratios['nogil0']:6.3f} "
              f"{ratios['cold']:6.3f}  {text}  {','.join(bits)}", flush=True)
    worker.close()
    pool.close(5)


if __name__ == "__main__":
    main()
