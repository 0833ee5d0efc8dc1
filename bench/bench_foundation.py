"""Foundation benchmarks: per-op executor overhead and the cost of a trivial run.

(a) chain: 1000 dependent ``x = x + 1`` on a 1-element float32 fed from a placeholder
(nothing can be constant-folded); (b) wide: 1000 independent tiny ops summed by add_n;
(c) trivial: ``Session.run`` of a one-op fetch. (a) and (b) are compared with the same work
as a plain Python loop of numpy calls, measured in the same process and run.
(d) size sweep: the chain of (a) at 2,500 and 25,000 ops, runs of the two sizes interleaved
(both sessions open), per-op cost of each and the ratio 25k / 2.5k (issue 18's target: within
1.2x), next to the same ratio for the plain numpy loop (flat by construction: the noise floor).

Run: ``.venv/bin/python bench/bench_foundation.py [--sweep-only]``.
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import time

import numpy as np
import trio

import asyncflow as af

N = 1000
REPEATS = 30


def _best(samples):
    return min(samples), statistics.median(samples)


ONE = np.ones([], np.float32)
CONSTANTS = [np.asarray(i, np.float32) for i in range(N)]


def numpy_chain(x, n=N):
    # The fair baseline: constants made once, outside the loop, as the graph's are.
    for _ in range(n):
        x = np.add(x, ONE)
    return x


def numpy_wide(x):
    parts = [np.add(x, c) for c in CONSTANTS]
    total = parts[0]
    for part in parts[1:]:
        total = np.add(total, part)
    return total


async def time_run(sess, fetch, feed, repeats=REPEATS):
    await sess.run(fetch, feed)  # compile and warm
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        await sess.run(fetch, feed)
        samples.append(time.perf_counter() - start)
    return _best(samples)


def time_numpy(fn, x, repeats=REPEATS):
    fn(x)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x)
        samples.append(time.perf_counter() - start)
    return _best(samples)


SWEEP = (2500, 25000)
# CPU time of this thread: a 25,000-op run (tens of ms) is preempted on a loaded machine far
# more often than a 2,500-op one, so wall-clock ratios would measure the load, not the runtime.
CLOCK = time.thread_time
SWEEP_ROUNDS = 7
SWEEP_OPS_PER_ROUND = 50000  # per size and round: 20 runs of 2,500 ops, 2 of 25,000


async def chain_sweep(sizes=SWEEP, rounds=SWEEP_ROUNDS):
    """Per-op cost of a dependent chain at each of ``sizes``, runs of the sizes interleaved.

    Returns:
        ``{size: (asyncflow per-op samples, numpy per-op samples)}`` in CPU seconds per op,
        one sample per run.
    """
    x_value = np.zeros([1], np.float32)
    samples = {n: ([], []) for n in sizes}
    async with contextlib.AsyncExitStack() as stack:
        runs = {}
        for n in sizes:
            graph = af.Graph()
            with graph.as_default():
                x = af.placeholder(af.float32, [1])
                y = x
                for _ in range(n):
                    y = y + 1.0
            sess = await stack.enter_async_context(af.Session(graph=graph))
            assert (await sess.run(y, {x: x_value}))[0] == n  # compile and warm
            runs[n] = (sess, y, {x: x_value})
        for _ in range(rounds):
            for n in sizes:
                sess, y, feed = runs[n]
                ours, theirs = samples[n]
                for _ in range(max(1, SWEEP_OPS_PER_ROUND // n)):
                    start = CLOCK()
                    await sess.run(y, feed)
                    ours.append((CLOCK() - start) / n)
                for _ in range(max(1, SWEEP_OPS_PER_ROUND // n)):
                    start = CLOCK()
                    numpy_chain(x_value, n)
                    theirs.append((CLOCK() - start) / n)
    return samples


def print_sweep(samples):
    small, large = min(samples), max(samples)
    print(f"\n{'chain ops':<10} {'asyncflow us/op':>16} {'numpy us/op':>12} {'ratio':>7}"
          "   (CPU time; median; best)")
    for n, (ours, theirs) in sorted(samples.items()):
        ours_median, theirs_median = statistics.median(ours), statistics.median(theirs)
        print(f"{n:<10} {ours_median * 1e6:>16.3f} {theirs_median * 1e6:>12.3f} "
              f"{ours_median / theirs_median:>7.2f}   "
              f"(best: {min(ours) * 1e6:.3f} vs {min(theirs) * 1e6:.3f})")
    for label, pick in (("median", statistics.median), ("best", min)):
        ours = pick(samples[large][0]) / pick(samples[small][0])
        theirs = pick(samples[large][1]) / pick(samples[small][1])
        print(f"per-op cost {large} / {small} ops ({label}): asyncflow {ours:.2f}x, "
              f"numpy {theirs:.2f}x   (target: asyncflow <= 1.2x)")


async def measure():
    """``{"chain": (asyncflow, numpy), "wide": (asyncflow, numpy), "trivial": asyncflow}``,
    each a ``(best, median)`` of seconds per run (per 1000-op run for chain and wide)."""
    x_value = np.zeros([1], np.float32)
    results = {}
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [1])
        y = x
        for _ in range(N):
            y = y + 1.0
        async with af.Session() as sess:
            chain = await time_run(sess, y, {x: x_value})
            assert (await sess.run(y, {x: x_value}))[0] == N
    np_chain = time_numpy(numpy_chain, x_value)
    results["chain"] = (chain, np_chain)

    with af.Graph().as_default():
        x = af.placeholder(af.float32, [1])
        total = af.add_n([x + float(i) for i in range(N)])
        async with af.Session() as sess:
            wide = await time_run(sess, total, {x: x_value})
    np_wide = time_numpy(numpy_wide, x_value)
    results["wide"] = (wide, np_wide)

    with af.Graph().as_default():
        c = af.constant(1.0)
        t = af.identity(c)
        async with af.Session() as sess:
            results["trivial"] = await time_run(sess, t, None, repeats=2000)
    return results


async def main():
    if "--sweep-only" in sys.argv[1:]:
        print_sweep(await chain_sweep())
        return
    results = await measure()
    trivial = results.pop("trivial")
    print(f"{'benchmark':<10} {'asyncflow us/op':>16} {'numpy us/op':>12} {'ratio':>7}")
    for name, ((af_best, af_med), (np_best, np_med)) in results.items():
        print(f"{name:<10} {af_med / N * 1e6:>16.2f} {np_med / N * 1e6:>12.2f} "
              f"{af_med / np_med:>7.2f}   (best: {af_best / N * 1e6:.2f} vs {np_best / N * 1e6:.2f})")
    print(f"{'trivial':<10} {trivial[1] * 1e6:>16.1f} us per Session.run (best {trivial[0] * 1e6:.1f} us)")
    print_sweep(await chain_sweep())


if __name__ == "__main__":
    trio.run(main)
