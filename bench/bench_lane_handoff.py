"""The hand-off of lane 1 to the pool's lane thread (``IntraOpPool.submit``), once per
two-lane step: the pool's own daemon thread with the halt registered (``_Workers``, since the
lane stop fix) against the ``concurrent.futures.ThreadPoolExecutor`` it replaced (the
baseline), in one process, alternating, several pairs. Each hand-off: submit, the thread runs
an empty function, the caller waits for its future (one wake-up each way).

    python bench/bench_lane_handoff.py --pairs 6 --calls 3000
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from asyncflow.exec import intra_op  # noqa: E402


def per_call_us(submit, calls):
    started = time.perf_counter()
    for _ in range(calls):
        submit().result()
    return (time.perf_counter() - started) / calls * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="baseline-lane")
    pool = intra_op.IntraOpPool(2, "bench-lane")

    def empty():
        return None

    def halt():
        return None
    before = lambda: executor.submit(empty)  # noqa: E731
    after = lambda: pool.submit(empty, halt)  # noqa: E731
    per_call_us(before, 200), per_call_us(after, 200)  # (threads started, warm)
    ratios = []
    for pair in range(args.pairs):
        order = (before, after) if pair % 2 == 0 else (after, before)
        times = {id(fn): per_call_us(fn, args.calls) for fn in order}
        ratio = times[id(after)] / times[id(before)]
        ratios.append(ratio)
        print(f"pair {pair}: executor {times[id(before)]:.1f} us, pool lane "
              f"{times[id(after)]:.1f} us, new/old {ratio:.3f}")
    print(f"new/old median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    executor.shutdown()
    pool.close(10)


if __name__ == "__main__":
    main()
