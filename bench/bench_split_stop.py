"""The intra-op pool's cost per split with the stop of a failed or interrupted split (a flag
read per chunk taken, the thread's split kept per ``drain``, the caller's ``done`` flag and
nested ``try``) against the pool before it: that revision's ``asyncflow/exec/intra_op.py``
(``git show REV:...``) loaded as a module of its own, both pools of 2 threads, alternating in
one process. Splits of two empty chunks (the hand-off's cost alone) and of two numpy chunks
of ~350 us. Prints each form's median per split and the ratio new/old per round. Both
modules' BLAS is claimed first, as a CPU device does: unclaimed, every split limits and
restores BLAS through threadpoolctl (~23 us of a ~27 us empty split here), a cost no
device's split pays and one that hid the pool's own.

    python bench/bench_split_stop.py [REV (default: 293bb0d~1)] [rounds (default: 8)]
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time
import types

import numpy as np

from asyncflow.exec import intra_op


def old_module(rev):
    source = subprocess.run(["git", "show", f"{rev}:asyncflow/exec/intra_op.py"],
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("intra_op_before")
    exec(compile(source, "intra_op_before.py", "exec"), module.__dict__)
    return module


def per_split(pool, fn, splits):
    bounds = [(0, 1), (1, 2)]
    times = []
    for _ in range(splits):
        started = time.perf_counter()
        pool.run(fn, bounds)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else "293bb0d~1"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    before = old_module(rev)
    for module in (before, intra_op):
        module.claim_blas()  # (as a device does: no threadpoolctl call per split)
    pools = {"old": before.IntraOpPool(2), "new": intra_op.IntraOpPool(2)}
    a = np.random.default_rng(0).standard_normal((2, 200_000))
    out = np.empty_like(a)

    def empty(start, stop):
        pass

    def numpy_chunk(start, stop):
        np.exp(a[start], out=out[start])
    for name, fn, splits in (("empty", empty, 2000), ("numpy ~350us", numpy_chunk, 500)):
        for pool in pools.values():
            per_split(pool, fn, splits // 4)  # warm: the workers started, caches
        ratios = []
        for index in range(rounds):
            order = ("old", "new") if index % 2 == 0 else ("new", "old")
            got = {form: per_split(pools[form], fn, splits) for form in order}
            ratios.append(got["new"] / got["old"])
            print(f"{name} round {index}: old {got['old'] * 1e6:.1f} us, new "
                  f"{got['new'] * 1e6:.1f} us, new/old {ratios[-1]:.3f}", flush=True)
        print(f"{name}: new/old median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})", flush=True)
    for pool in pools.values():
        pool.close(10)


if __name__ == "__main__":
    main()
