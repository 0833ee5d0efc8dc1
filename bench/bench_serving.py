"""Serving benchmarks: request batching, and the cost of the asyncio embedding.

(a) batching: 1,000 concurrent one-row requests to the digits MLP (64-128-10, the model of
    ``demos/inference_service.py``, random weights), answered (1) by one ``Session.run`` per
    request and (2) through a Batcher (max 64 and max 128 rows, max wait 2 ms), measured in
    the same process on the same session, alternating the two for ``--rounds`` rounds; reported are
    the median throughput of each, their ratio (target >= 5x), and p50/p99 latency (from the
    start of the burst, when all requests are submitted at once, to each answer, so latency
    is mostly queueing). Done twice: from asyncio (``aio.Session``/``aio.Batcher``, trio as
    the loop's guest, as the aiohttp demo serves) and from trio (``serving.Batcher``).
(b) embedding overhead: sequential runs of a trivial graph (one Add of a fed scalar),
    ``Session.run`` inside ``trio.run`` vs ``aio.Session.run`` inside ``asyncio.run``, fresh
    runs of each in one process, alternating; the ratio of median per-run times (target
    <= 2x).

BLAS runs on one thread (OPENBLAS/OMP/MKL_NUM_THREADS=1, set before numpy is imported): on a
small shared machine OpenBLAS's worker threads made a 64-row step of this model take 2-15 ms
instead of ~0.2 ms, which would measure thread contention rather than serving. Besides wall
time, each burst's process CPU time per request is reported: on a shared machine it is the
steadier measure of what serving costs.

Usage: ``python bench/bench_serving.py [--requests 1000] [--rounds 5] [--runs 3000]``.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import trio  # noqa: E402

import asyncflow as af  # noqa: E402
from asyncflow import aio  # noqa: E402
from asyncflow.serving import Batcher  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "demos"))
from inference_service import build_digits_model  # noqa: E402  (the demo's model)

MAX_BATCHES = (64, 128)  # each is measured; 128 is the demo service's default
MAX_WAIT_MS = 2.0


def request_rows(requests, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.random((1, 64), dtype=np.float32) for _ in range(requests)]


def summarize(seconds, cpu_seconds, latencies):
    lat_ms = np.asarray(latencies) * 1000.0
    return {"req_per_s": len(latencies) / seconds,
            "cpu_us_per_req": cpu_seconds / len(latencies) * 1e6,
            "p50_ms": float(np.percentile(lat_ms, 50)),
            "p99_ms": float(np.percentile(lat_ms, 99))}


def median_result(results):
    """The round with the median throughput (its latencies belong to that same round)."""
    return sorted(results, key=lambda r: r["req_per_s"])[len(results) // 2]


# -- (a) batching -----------------------------------------------------------------------------
async def _gather_asyncio(one, count):
    await asyncio.gather(*(one(i) for i in range(count)))


async def _gather_trio(one, count):
    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)


async def _burst(gather, call, rows):
    """Submit every row at once (one task each, through ``gather``); summarize the answers."""
    latencies = [0.0] * len(rows)
    cpu_start = time.process_time()
    start = time.perf_counter()  # every request is submitted at the start of the burst

    async def one(i):
        await call(rows[i])
        latencies[i] = time.perf_counter() - start

    await gather(one, len(rows))
    return summarize(time.perf_counter() - start, time.process_time() - cpu_start, latencies)


async def _batching(session_class, batcher_class, gather, requests, rounds, max_batch):
    """Alternate bursts of one run per request and of Batcher requests, ``rounds`` times."""
    rows = request_rows(requests)
    out = {"unbatched": [], "batched": []}
    with af.Graph().as_default():
        model = build_digits_model()
        fetches = [model.classes, model.probabilities]
        async with session_class() as sess:
            await sess.run(af.global_variables_initializer())
            async with batcher_class(sess, [model.x], fetches, max_batch_size=max_batch,
                                     max_wait_ms=MAX_WAIT_MS) as batcher:
                async def unbatched(r):
                    return await sess.run(fetches, {model.x: r})

                async def batched(r):
                    return await batcher.run({model.x: r})
                await _burst(gather, unbatched, rows[:100])  # compile plans
                await _burst(gather, batched, rows[:100])
                for _ in range(rounds):
                    out["unbatched"].append(await _burst(gather, unbatched, rows))
                    out["batched"].append(await _burst(gather, batched, rows))
                stats = batcher.statistics()
    return out, stats


async def batching_asyncio(requests, rounds, max_batch):
    return await _batching(aio.Session, aio.Batcher, _gather_asyncio, requests, rounds,
                           max_batch)


async def batching_trio(requests, rounds, max_batch):
    return await _batching(af.Session, Batcher, _gather_trio, requests, rounds, max_batch)


# -- (b) embedding overhead -----------------------------------------------------------------
def _trivial_graph():
    x = af.placeholder(af.float32, [], name="x")
    return x, x + 1.0


async def _rate(session_class, runs):
    """``(wall, cpu)`` seconds per trivial run through ``session_class`` (warmed up first)."""
    with af.Graph().as_default():
        x, y = _trivial_graph()
        async with session_class() as sess:
            for _ in range(200):
                await sess.run(y, {x: 1.0})
            cpu_start, start = time.process_time(), time.perf_counter()
            for _ in range(runs):
                await sess.run(y, {x: 1.0})
            return (time.perf_counter() - start) / runs, (time.process_time() - cpu_start) / runs


async def trio_rate(runs):
    return await _rate(af.Session, runs)


async def asyncio_rate(runs):
    return await _rate(aio.Session, runs)


def overhead(runs, rounds):
    """Median ``(wall, cpu)`` seconds per run: under trio, and through aio from asyncio."""
    trio_times, aio_times = [], []
    for _ in range(rounds):
        trio_times.append(trio.run(trio_rate, runs))
        aio_times.append(asyncio.run(asyncio_rate(runs)))
    return ([statistics.median(t[i] for t in trio_times) for i in (0, 1)],
            [statistics.median(t[i] for t in aio_times) for i in (0, 1)])


# -- report -----------------------------------------------------------------------------------
def report_batching(label, out, stats):
    unbatched, batched = median_result(out["unbatched"]), median_result(out["batched"])
    ratio = batched["req_per_s"] / unbatched["req_per_s"]
    print(f"(a) {label}: mean batch {stats.rows / max(stats.batches, 1):.1f} rows "
          f"(largest {stats.largest_batch})")
    for name, r in (("one run per request", unbatched), ("Batcher", batched)):
        print(f"    {name:<20} {r['req_per_s']:>7.0f} req/s  "
              f"{r['cpu_us_per_req']:>5.0f} us CPU/req   p50 {r['p50_ms']:6.1f} ms   "
              f"p99 {r['p99_ms']:6.1f} ms")
    cpu_ratio = unbatched["cpu_us_per_req"] / batched["cpu_us_per_req"]
    print(f"    throughput ratio {ratio:.1f}x (target >= 5x): {'met' if ratio >= 5 else 'MISSED'};"
          f" CPU per request ratio {cpu_ratio:.1f}x")
    return ratio


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3000, help="trivial runs per timing (b)")
    parser.add_argument("--max-batch", type=int, nargs="+", default=list(MAX_BATCHES),
                        help="Batcher max_batch_size values to measure")
    args = parser.parse_args(argv)
    print(f"Python {platform.python_version()}, numpy {np.__version__}, trio {trio.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    for max_batch in args.max_batch:
        report_batching(f"asyncio (aio.Batcher, max {max_batch} rows)",
                        *asyncio.run(batching_asyncio(args.requests, args.rounds, max_batch)))
    for max_batch in args.max_batch:
        report_batching(f"trio (serving.Batcher, max {max_batch} rows)",
                        *trio.run(batching_trio, args.requests, args.rounds, max_batch))
    (trio_s, trio_cpu), (aio_s, aio_cpu) = overhead(args.runs, args.rounds)
    ratio = aio_s / trio_s
    print(f"(b) trivial run: Session.run {trio_s * 1e6:.0f} us ({trio_cpu * 1e6:.0f} us CPU), "
          f"aio.Session.run {aio_s * 1e6:.0f} us ({aio_cpu * 1e6:.0f} us CPU); ratio "
          f"{ratio:.2f}x (target <= 2x): {'met' if ratio <= 2 else 'MISSED'}; CPU ratio "
          f"{aio_cpu / trio_cpu:.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
