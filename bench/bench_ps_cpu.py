"""The parameter-server MLP step's wall and each process's CPU, against a baseline tree (issue 34).

The workload is ``bench_vs_tf1.py``'s MLP (64-128-10; w1/b1/w2/b2 on ``/job:ps/task:0``, the
step on ``/job:worker/task:0``): one ps and one worker process (``asyncflow worker``, one BLAS
thread each, on loopback: the bare same-host protocol) and the client, a fresh cluster per run.
Per batch size, after 100 warm-up steps, ``--steps`` steps in a row: the median step, and the
CPU a step of the client (``time.process_time``), the ps and the worker (``/proc/<pid>/stat``,
utime + stime, Linux), read before and after the block.

With ``--baseline-tree PATH`` the same script runs from that tree (its ``PYTHONPATH``) and from
this one in alternation, ``--pairs`` pairs ordered base, this, this, base, ...; it prints each
run and, per batch, the medians over the runs of each tree and this tree's over the baseline's
(lower is better). A wall figure on a shared 2-core machine moves by 10-30 % between runs: the
CPU columns and the pairs' count of wins say more than one pair.

Usage: ``.venv/bin/python bench/bench_ps_cpu.py [--batches 256,1] [--steps 2000]
[--baseline-tree PATH --pairs 6]``.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from bench_trivial_vs_ray import _cpu_s

_HERE = os.path.dirname(os.path.abspath(__file__))
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
WARMUP = 100


def _start(spec):
    env = {**os.environ, **_ONE_THREAD}
    procs = [subprocess.Popen([sys.executable, "-m", "asyncflow", "worker", "--cluster",
                               json.dumps(spec), "--job", job, "--task", "0", "--log-level",
                               "WARNING"], stdout=subprocess.PIPE, text=True, env=env)
             for job in ("ps", "worker")]
    for proc in procs:
        while "listening on" not in (line := proc.stdout.readline()):
            if not line:
                raise RuntimeError("a worker process failed to start")
    return procs


def one_run(batches, steps):
    """This tree's figures: {batch: (median us, client, ps, worker CPU us a step)}."""
    sys.path.insert(0, _HERE)
    import trio

    import asyncflow as af
    from bench_vs_tf1 import _mlp, _mlp_data
    from reserved_ports import free_ports
    ps, worker = free_ports(2)
    spec = {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{worker}"]}
    procs, out = _start(spec), {}

    async def run():
        g, x, y, loss, train, init = _mlp(af, 0)
        async with af.Session(graph=g, cluster=spec) as sess:
            await sess.run(init)
            for batch in batches:
                feeds = dict(zip((x, y), _mlp_data(batch)))
                for _ in range(WARMUP):
                    await sess.run([loss, train], feeds)
                times = []
                before = [time.process_time()] + [_cpu_s(p.pid) for p in procs]
                for _ in range(steps):
                    start = time.perf_counter()
                    await sess.run([loss, train], feeds)
                    times.append(time.perf_counter() - start)
                after = [time.process_time()] + [_cpu_s(p.pid) for p in procs]
                out[batch] = (statistics.median(times) * 1e6,
                              *[(b - a) / steps * 1e6 for a, b in zip(before, after)])
    try:
        trio.run(run)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)
    return out


def _line(label, batch, figures):
    wall, client, ps, worker = figures
    return (f"{label:<8} batch {batch:>4}: {wall:7.0f} us; CPU a step client {client:5.0f}, "
            f"ps {ps:5.0f}, worker {worker:5.0f}, all {client + ps + worker:5.0f} us; "
            f"load {open('/proc/loadavg').read().split()[0]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="256,1")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--baseline-tree", default=None)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.one or args.baseline_tree is None:
        figures = one_run(batches, args.steps)
        if args.one:
            print(json.dumps(figures))
        else:
            for batch, row in figures.items():
                print(_line("this", batch, row))
        return
    trees = {"base": os.path.abspath(args.baseline_tree),
             "this": os.path.abspath(os.path.join(_HERE, ".."))}
    runs = {"base": [], "this": []}
    for pair in range(args.pairs):
        for label in (("base", "this") if pair % 2 == 0 else ("this", "base")):
            tree = trees[label]
            env = {**os.environ, "PYTHONPATH": tree}
            done = subprocess.run([sys.executable, os.path.join(_HERE, "bench_ps_cpu.py"),
                                   "--one", "--batches", args.batches, "--steps",
                                   str(args.steps)], cwd=tree, env=env, check=True,
                                  capture_output=True, text=True)
            figures = {int(b): row for b, row in json.loads(done.stdout.splitlines()[-1]).items()}
            runs[label].append(figures)
            for batch, row in figures.items():
                print(_line(label, batch, row), flush=True)
    print(f"\nmedians over {args.pairs} runs a tree; this / base (lower is better)")
    for batch in batches:
        for column, name in enumerate(("wall", "client CPU", "ps CPU", "worker CPU")):
            base = statistics.median(r[batch][column] for r in runs["base"])
            this = statistics.median(r[batch][column] for r in runs["this"])
            wins = sum(t[batch][column] < b[batch][column]
                       for t, b in zip(runs["this"], runs["base"]))
            print(f"batch {batch:>4} {name:<11} base {base:7.0f} us  this {this:7.0f} us  "
                  f"ratio {this / base:5.3f}  this lower in {wins} of {args.pairs} pairs")


if __name__ == "__main__":
    main()
