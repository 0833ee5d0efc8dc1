"""The synchronous surface (``asyncflow.compat.v1``) against the async one, same run.

* **sync / async**: ``tf.Session().run(t)`` from a plain thread over ``await sess.run(t)`` in
  trio, for a trivial one-op fetch (``identity`` of a constant) and for a fed 1000-op chain.
  Target: sync <= 1.3x async for the trivial run.
* **RunHandle**: ``await sess.run(t)`` (which returns a ``RunHandle`` that warns when dropped
  unawaited) over awaiting the bare coroutine underneath (``Session._run``), the cost of
  catching an un-awaited run.
* **loop step**: a sync run that needs the background loop (a dequeue from a queue that holds
  an element) over the same run awaited in trio: the cost of the thread hop.

Each figure is the median (and best) of ``ROUNDS`` rounds of ``REPEATS`` runs, in CPU time of
the process per run (the machine is shared: wall time would measure the neighbours); the forms alternate order from round to round, so load on the machine hits them alike.

Usage: ``python bench/bench_compat.py``
"""
import statistics
import sys
import time

import numpy as np
import trio

import asyncflow as af
import asyncflow.compat.v1 as tf

CLOCK = time.process_time  # CPU time of the whole process: both threads of a sync step count
ROUNDS = 15
REPEATS = 400
CHAIN = 1000


def _per_run(fn, repeats):
    start = CLOCK()
    for _ in range(repeats):
        fn()
    return (CLOCK() - start) / repeats


async def _per_run_async(fn, repeats):
    start = CLOCK()
    for _ in range(repeats):
        await fn()
    return (CLOCK() - start) / repeats


def build():
    graph = af.Graph()
    with graph.as_default():
        trivial = af.identity(af.constant(1.0))
        x = af.placeholder(af.float32, [1])
        chain = x
        for _ in range(CHAIN):
            chain = chain + 1.0
        queue = af.FIFOQueue(REPEATS * 4, af.float32)
        enqueue_many = queue.enqueue_many([np.zeros(REPEATS, np.float32)])
        dequeue = queue.dequeue()
    return graph, trivial, x, chain, enqueue_many, dequeue


def measure():
    graph, trivial, x, chain, enqueue_many, dequeue = build()
    feed = {x: np.zeros([1], np.float32)}
    samples = {key: [] for key in ("sync", "async", "bare", "sync_chain", "async_chain",
                                   "sync_loop", "async_loop")}
    sync_sess = tf.Session(graph=graph)

    async def async_round(sess, flip):
        forms = [("async", lambda: sess.run(trivial)),
                 ("bare", lambda: sess._run(trivial, None, None, None))]
        for key, form in (forms[::-1] if flip else forms):
            samples[key].append(await _per_run_async(form, REPEATS))
        samples["async_chain"].append(await _per_run_async(
            lambda: sess.run(chain, feed), REPEATS // 10))
        await sess.run(enqueue_many)
        samples["async_loop"].append(await _per_run_async(lambda: sess.run(dequeue), REPEATS))

    async def async_main():
        async with af.Session(graph=graph) as sess:
            for _ in range(3):  # warm: compile every signature once
                await sess.run(trivial), await sess.run(chain, feed)
            for index in range(ROUNDS):
                if index % 2:
                    await trio.to_thread.run_sync(sync_round)
                await async_round(sess, index % 2)
                if not index % 2:
                    await trio.to_thread.run_sync(sync_round)

    def sync_round():
        samples["sync"].append(_per_run(lambda: sync_sess.run(trivial), REPEATS))
        samples["sync_chain"].append(_per_run(lambda: sync_sess.run(chain, feed), REPEATS // 10))
        sync_sess.run(enqueue_many)
        samples["sync_loop"].append(_per_run(lambda: sync_sess.run(dequeue), REPEATS))

    for _ in range(3):
        sync_sess.run(trivial), sync_sess.run(chain, feed)
    trio.run(async_main)
    sync_sess.close()
    return ({key: statistics.median(values) for key, values in samples.items()},
            {key: min(values) for key, values in samples.items()})


def main():
    med, best = measure()
    print(f"{'form':<40} {'us/run':>9} {'best':>9}   (process CPU time)")
    for key, label in (("async", "await sess.run (trivial)"), ("bare", "await bare coroutine (trivial)"),
                       ("sync", "compat sess.run (trivial)"),
                       ("async_chain", f"await sess.run ({CHAIN}-op chain)"),
                       ("sync_chain", f"compat sess.run ({CHAIN}-op chain)"),
                       ("async_loop", "await sess.run (dequeue)"),
                       ("sync_loop", "compat sess.run (dequeue, on the loop)")):
        print(f"{label:<40} {med[key] * 1e6:>9.2f} {best[key] * 1e6:>9.2f}")
    print(f"\nsync / async, trivial run:   {med['sync'] / med['async']:.2f}x median, "
          f"{best['sync'] / best['async']:.2f}x best   (target <= 1.3x)")
    print(f"sync / async, {CHAIN}-op chain: {med['sync_chain'] / med['async_chain']:.2f}x")
    print(f"sync / async, loop step:     {med['sync_loop'] / med['async_loop']:.2f}x")
    print(f"RunHandle / bare coroutine:  {med['async'] / med['bare']:.2f}x median, "
          f"{best['async'] / best['bare']:.2f}x best")
    return 0


if __name__ == "__main__":
    sys.exit(main())
