"""Foundation benchmarks: per-op executor overhead and the cost of a trivial run.

(a) chain: 1000 dependent ``x = x + 1`` on a 1-element float32 fed from a placeholder
(nothing can be constant-folded); (b) wide: 1000 independent tiny ops summed by add_n;
(c) trivial: ``Session.run`` of a one-op fetch. (a) and (b) are compared with the same work
as a plain Python loop of numpy calls, measured in the same process and run.
"""
from __future__ import annotations

import statistics
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


def numpy_chain(x):
    # The fair baseline: constants made once, outside the loop, as the graph's are.
    for _ in range(N):
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


async def main():
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
            trivial = await time_run(sess, t, None, repeats=2000)

    print(f"{'benchmark':<10} {'asyncflow us/op':>16} {'numpy us/op':>12} {'ratio':>7}")
    for name, ((af_best, af_med), (np_best, np_med)) in results.items():
        print(f"{name:<10} {af_med / N * 1e6:>16.2f} {np_med / N * 1e6:>12.2f} "
              f"{af_med / np_med:>7.2f}   (best: {af_best / N * 1e6:.2f} vs {np_best / N * 1e6:.2f})")
    print(f"{'trivial':<10} {trivial[1] * 1e6:>16.1f} us per Session.run (best {trivial[0] * 1e6:.1f} us)")


if __name__ == "__main__":
    trio.run(main)
