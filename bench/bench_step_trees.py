"""Distributed steps of two git trees side by side: one ps and one worker process per
measurement, alternating trees so the machine's load phases hit both alike.

Figures per tree (each measured in a fresh ``local_cluster`` of ``asyncflow worker``
processes on loopback, BLAS on one thread), in the spirit of ``bench_vs_tf1.py``'s workloads:

* ``mlp_p10_ms`` / ``mlp_median_ms``: the parameter-server MLP step (64-128-10, batch 256),
  10th percentile and median of 200 steps (on a loaded machine the percentile says what the
  code costs, the median how often a process waited for a core);
* ``trivial_p10_ms``: the trivial remote step (``p * 2.0`` on the worker), 10th percentile
  of 300 steps;
* ``pull_min_ms`` / ``pull_median_ms``: the step that pulls a 64 MiB variable from the ps and
  reduces it on the worker, best and median of 7.

Usage: ``python bench/bench_step_trees.py --trees OLD NEW [--rounds 3]`` (each a repository
root; ``PYTHONPATH`` names it for its measuring process), or ``python
bench/bench_step_trees.py`` to measure the tree ``asyncflow`` is imported from.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIGURES = ("mlp_p10_ms", "mlp_median_ms", "trivial_p10_ms", "pull_min_ms", "pull_median_ms")


async def _measure(spec, out):
    import asyncflow as af
    from bench_vs_tf1 import _mlp, _mlp_data, _trivial_and_pull
    cluster = {"ps": spec["ps"], "worker": spec["worker"]}
    graph, x, y, loss, train, init = _mlp(af, 0)
    xs, ys = _mlp_data()
    async with af.Session(graph=graph, cluster=cluster) as sess:
        await sess.run(init)
        for _ in range(20):
            await sess.run([loss, train], {x: xs, y: ys})
        steps = []
        for _ in range(200):
            start = time.perf_counter()
            await sess.run([loss, train], {x: xs, y: ys})
            steps.append((time.perf_counter() - start) * 1e3)
    steps.sort()
    out["mlp_p10_ms"], out["mlp_median_ms"] = steps[20], steps[100]
    graph, p, doubled, big, _, big_sum = _trivial_and_pull(af)[:6]
    async with af.Session(graph=graph, cluster=cluster) as sess:
        for _ in range(30):
            await sess.run(doubled, {p: 1.0})
        steps = []
        for _ in range(300):
            start = time.perf_counter()
            await sess.run(doubled, {p: 1.0})
            steps.append((time.perf_counter() - start) * 1e3)
        out["trivial_p10_ms"] = sorted(steps)[30]
        await sess.run(big.initializer)
        await sess.run(big_sum)
        pulls = []
        for _ in range(7):
            start = time.perf_counter()
            await sess.run(big_sum)
            pulls.append((time.perf_counter() - start) * 1e3)
    out["pull_min_ms"], out["pull_median_ms"] = min(pulls), statistics.median(pulls)


def measure():
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(HERE, "..", "demos"))
    import trio
    from local_cluster import local_cluster
    out = {}
    with local_cluster({"ps": 1, "worker": 1}) as spec:
        trio.run(_measure, spec, out)
    return out


def compare(trees, rounds):
    runs = {tree: [] for tree in trees}
    for round_index in range(rounds):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OPENBLAS_NUM_THREADS="1")
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--json"], env=env,
                                  capture_output=True, text=True, check=False)
            if done.returncode:
                sys.stderr.write(done.stdout + done.stderr)
                raise SystemExit(f"measuring {tree} failed (exit {done.returncode})")
            runs[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {round_index + 1}/{rounds}: {tree}: " + ", ".join(
                f"{k} {runs[tree][-1][k]:.2f}" for k in FIGURES)
                + f" (load average {os.getloadavg()[0]:.1f})", flush=True)
    old, new = trees[0], trees[-1]
    print(f"\n{'figure':<16} {'old':>9} {'new':>9} {'new/old':>8}   medians of {rounds} rounds; "
          "[min-max] old, new")
    for name in FIGURES:
        a = [r[name] for r in runs[old]]
        b = [r[name] for r in runs[new]]
        print(f"{name:<16} {statistics.median(a):>9.2f} {statistics.median(b):>9.2f} "
              f"{statistics.median(b) / statistics.median(a):>8.2f}   [{min(a):.2f}-{max(a):.2f}]"
              f" [{min(b):.2f}-{max(b):.2f}]")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--trees", nargs="+", metavar="TREE",
                        help="repository roots to compare, alternating (first = old)")
    parser.add_argument("--rounds", type=int, default=3, help="measurements per tree")
    args = parser.parse_args(argv)
    if args.trees:
        compare(args.trees, args.rounds)
        return
    figures = measure()
    print(json.dumps(figures) if args.json else "\n".join(
        f"{name:<16} {figures[name]:.2f}" for name in FIGURES))


if __name__ == "__main__":
    main()
