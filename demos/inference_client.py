"""Load generator for ``demos/inference_service.py``: batched vs unbatched, side by side.

Theory of operation: the client takes held-out digits (the same split the service trained
without), builds ``--requests`` payloads of ``--rows`` rows each, and fires them all at once
with aiohttp (at most ``--concurrency`` connections open). Each request's latency runs from
just before it is sent to the parsed answer; throughput is requests over the wall time of
the whole burst. It does this first against ``POST /predict`` (the Batcher) and then against
``POST /predict_unbatched`` (one ``Session.run`` per request), checks every answer against
the labels, and prints both rows plus the throughput ratio and the server's batch counters.

Usage::

    python demos/inference_client.py [--url http://127.0.0.1:8080] [--requests 1000]
        [--rows 1] [--concurrency 1000]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import aiohttp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inference_service import load_digits_split  # noqa: E402  (a sibling demo file)

ENDPOINTS = ("/predict", "/predict_unbatched")


def make_payloads(requests, rows, seed=0):
    """``requests`` payloads of ``rows`` test digits each, with their labels."""
    _, _, test_x, test_y = load_digits_split(seed=seed)
    rng = np.random.default_rng(seed + 1)
    picks = [rng.integers(0, len(test_x), rows) for _ in range(requests)]
    return [{"rows": test_x[p].tolist()} for p in picks], [test_y[p] for p in picks]


async def burst(client, url, payloads):
    """Send every payload concurrently; returns ``(seconds, latencies, answers)``.

    Raises:
        RuntimeError: if any response is not HTTP 200 (its body is in the message).
    """
    latencies = [0.0] * len(payloads)

    async def one(i):
        start = time.perf_counter()
        async with client.post(url, json=payloads[i]) as resp:
            body = await resp.json()
            if resp.status != 200:
                raise RuntimeError(f"{url} answered {resp.status}: {body}")
        latencies[i] = time.perf_counter() - start
        return body["classes"]

    start = time.perf_counter()
    answers = await asyncio.gather(*(one(i) for i in range(len(payloads))))
    return time.perf_counter() - start, latencies, answers


async def server_cpu(client, base_url):
    """The service's process CPU seconds so far (from ``/healthz``)."""
    async with client.get(base_url.rstrip("/") + "/healthz") as resp:
        return (await resp.json())["cpu_seconds"]


def summarize(endpoint, seconds, latencies, answers, labels, server_cpu_s):
    """A result row: throughput, latency percentiles (ms), accuracy of the answers and
    the service's CPU time per request (us)."""
    lat_ms = np.asarray(latencies) * 1000.0
    correct = sum(int(np.sum(np.asarray(a) == y)) for a, y in zip(answers, labels))
    total = sum(len(y) for y in labels)
    return {"endpoint": endpoint, "requests": len(latencies), "seconds": seconds,
            "req_per_s": len(latencies) / seconds,
            "p50_ms": float(np.percentile(lat_ms, 50)), "p90_ms": float(np.percentile(lat_ms, 90)),
            "p99_ms": float(np.percentile(lat_ms, 99)), "accuracy": correct / total,
            "server_cpu_us": server_cpu_s / len(latencies) * 1e6}


async def load_test(base_url, requests=1000, rows=1, concurrency=1000):
    """Run the burst against each endpoint in turn.

    Returns:
        ``(results, health)``: one ``summarize`` row per endpoint, and ``/healthz``'s JSON
        after the bursts.
    """
    payloads, labels = make_payloads(requests, rows)
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=300)
    results = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
        for endpoint in ENDPOINTS:
            url = base_url.rstrip("/") + endpoint
            # Warm up: compile the step's plans and open the connections the burst reuses,
            # so the measurement is of serving, not of TCP handshakes.
            await burst(client, url, payloads[:min(concurrency, requests)])
            cpu_before = await server_cpu(client, base_url)
            seconds, latencies, answers = await burst(client, url, payloads)
            cpu = await server_cpu(client, base_url) - cpu_before
            results.append(summarize(endpoint, seconds, latencies, answers, labels, cpu))
        async with client.get(base_url.rstrip("/") + "/healthz") as resp:
            health = await resp.json()
    return results, health


def report(results, health, print=print):
    """Print the comparison table, the throughput ratio and the Batcher's counters."""
    print(f"{'endpoint':<20}{'requests':>9}{'req/s':>10}{'p50 ms':>9}{'p90 ms':>9}"
          f"{'p99 ms':>9}{'accuracy':>10}{'server CPU/req':>16}")
    for r in results:
        print(f"{r['endpoint']:<20}{r['requests']:>9}{r['req_per_s']:>10.0f}{r['p50_ms']:>9.1f}"
              f"{r['p90_ms']:>9.1f}{r['p99_ms']:>9.1f}{r['accuracy']:>10.3f}"
              f"{r['server_cpu_us']:>13.0f} us")
    by_name = {r["endpoint"]: r for r in results}
    if set(ENDPOINTS) <= set(by_name):
        batched, unbatched = by_name["/predict"], by_name["/predict_unbatched"]
        print(f"batching: {batched['req_per_s'] / unbatched['req_per_s']:.1f}x the throughput "
              f"of one run per request; the service spends "
              f"{unbatched['server_cpu_us'] / batched['server_cpu_us']:.1f}x less CPU per request")
    stats = health.get("batcher", {})
    if stats.get("batches"):
        print(f"server Batcher: {stats['requests']} requests in {stats['batches']} steps "
              f"(mean {stats['rows'] / stats['batches']:.1f} rows, largest "
              f"{stats['largest_batch']})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=1, help="digits per request")
    parser.add_argument("--concurrency", type=int, default=1000, help="open connections")
    args = parser.parse_args(argv)
    results, health = asyncio.run(load_test(args.url, args.requests, args.rows, args.concurrency))
    report(results, health)


if __name__ == "__main__":
    main()
