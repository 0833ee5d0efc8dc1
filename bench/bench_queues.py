"""Queue benchmarks, all in one process and one trio run.

(a) trivial: sequential ``Session.run`` of a one-op fetch (the baseline rate);
(b) one item per run: a producer task (``enqueue`` of one scalar per run) and a consumer
    task (``dequeue`` per run) running concurrently on one session; the rate counted is
    queue runs per second (two per item), compared with (a);
(c) batched: the same with ``enqueue_many``/``dequeue_many`` of 100 items per run; the rate
    counted is items per second.

Usage: ``python bench/bench_queues.py [--items N]``.
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import trio

import asyncflow as af

BATCH = 100


async def trivial_rate(runs):
    with af.Graph().as_default():
        x = af.constant(1.0)
        async with af.Session() as sess:
            for _ in range(200):
                await sess.run(x)
            start = time.perf_counter()
            for _ in range(runs):
                await sess.run(x)
            return runs / (time.perf_counter() - start)


async def exchange_rate(items, batch):
    """Producer and consumer tasks move ``items`` through a queue, ``batch`` per run."""
    with af.Graph().as_default():
        queue = af.FIFOQueue(max(1000, 4 * batch), af.float32, shapes=[[]])
        if batch == 1:
            enqueue, dequeue = queue.enqueue(af.constant(1.0)), queue.dequeue()
        else:
            enqueue = queue.enqueue_many(af.constant(np.ones(batch, np.float32)))
            dequeue = queue.dequeue_many(batch)
        runs = items // batch
        async with af.Session() as sess:
            async def produce(n):
                for _ in range(n):
                    await sess.run(enqueue)

            async def consume(n):
                for _ in range(n):
                    await sess.run(dequeue)

            async def both(n):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(produce, n)
                    nursery.start_soon(consume, n)

            await both(max(1, runs // 20))  # warm up plans and caches
            start = time.perf_counter()
            await both(runs)
            elapsed = time.perf_counter() - start
        return {"items_per_s": runs * batch / elapsed, "runs_per_s": 2 * runs / elapsed}


async def main(items):
    trivial = max([await trivial_rate(items) for _ in range(3)])
    single = max([await exchange_rate(items, 1) for _ in range(3)],
                 key=lambda r: r["runs_per_s"])
    batched = max([await exchange_rate(items * 20, BATCH) for _ in range(3)],
                  key=lambda r: r["items_per_s"])
    ratio = single["runs_per_s"] / trivial
    print(f"machine: {platform.machine()} {platform.processor() or ''} Python "
          f"{platform.python_version()} numpy {np.__version__} trio {trio.__version__}")
    print(f"(a) trivial Session.run:            {trivial:10.0f} runs/s")
    print(f"(b) one item per run, prod+cons:    {single['runs_per_s']:10.0f} queue runs/s "
          f"({single['items_per_s']:.0f} items/s); ratio to (a) {ratio:.2f} (target >= 0.40)")
    print(f"(c) enqueue_many/dequeue_many {BATCH}: {batched['items_per_s']:10.0f} items/s "
          f"({batched['items_per_s'] / 100_000:.2f}x the 100k items/s target)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000)
    trio.run(main, parser.parse_args().items)
