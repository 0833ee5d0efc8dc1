"""The parameter-server MLP step, ours and TF1's, in alternating short rounds (issue 34): is a
slow round of ours the machine's (TF1's round beside it slow too) or ours alone?

``bench_vs_tf1.py`` times ours and TF1's PS MLP step 30-60 s apart in a round, so a ratio over
0.7x in one round can be either framework meeting one of this machine's slow phases. Here both
run side by side for the whole run: one asyncflow cluster (one ps, one worker,
``demos/local_cluster.py``) with its session in this process, and one TF1 cluster (a
``tf.distribute.Server`` ps and worker) with its ``grpc://`` session in a child process of the
TF interpreter (``--tf-python`` or ``ASYNCFLOW_TF_PYTHON``), which times a series on request.
Each of ``--rounds`` rounds times ``bench_vs_tf1``'s series for each framework in turn (the
MLP 64-128-10, batch 256; 10 untimed steps, then ``--steps`` timed ones, 100 as ``--quick``
there), ours first in odd rounds and TF1's first in even ones (ABBA). Per round: each
median and p90 (ms), ours over TF1's, and each side's CPU a step (ours: client, ps, worker
from ``/proc``, with each process's main thread's time runnable but waiting for a CPU,
``schedstat``; TF1's: its client and servers together). The end: the rounds' medians, the
worst ratio, and the rank correlation of ours against TF1's across rounds (near 1: the two
move together, the machine's phases; near 0: ours alone).

Run: ``.venv/bin/python bench/bench_ps_tf1_rounds.py --tf-python <TF> [--rounds 20]
[--steps 100]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _tree_cpu_s(pid):
    """CPU s of ``pid`` and its children (the TF child and its two servers)."""
    total = _cpu_s(pid)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
                if parent == pid:
                    total += _cpu_s(int(entry))
            except (OSError, ValueError):
                continue
    return total


def _runq_s(pid):
    with open(f"/proc/{pid}/task/{pid}/schedstat") as handle:
        return int(handle.read().split()[1]) / 1e9


# ----------------------------------------------------------------------------- TF1 child


def tf_child():
    """In the TF interpreter: a TF1 cluster and session; each line ``N`` on stdin times N
    steps and answers their times (s) as one JSON line."""
    sys.path.insert(0, _HERE)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import bench_vs_tf1 as w
    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    spec = w._spec(1)
    procs = [subprocess.Popen([sys.executable, "-c", w._TF_SERVER, json.dumps(spec), job, "0"],
                              stdout=subprocess.DEVNULL)
             for job in ("ps", "worker")]
    try:
        deadline = time.monotonic() + 120
        for addresses in spec.values():
            w._wait_port(addresses[0], deadline)
        xs, ys = w._mlp_data()
        g, x, y, loss, train, init = w._mlp(tf1, 0)
        with tf1.Session(f"grpc://{spec['worker'][0]}", graph=g) as sess:
            sess.run(init)
            sess.run([loss, train], {x: xs, y: ys})
            print("ready", flush=True)
            for line in sys.stdin:
                times = w._series(lambda: sess.run([loss, train], {x: xs, y: ys}),
                                  int(line))
                print(json.dumps(times), flush=True)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


# ----------------------------------------------------------------------------- ours


def _figures(times, warmup):
    timed = times[warmup:]
    return statistics.median(timed) * 1e3, statistics.quantiles(timed, n=10)[-1] * 1e3


async def _measure(spec, args, tf):
    import asyncflow as af
    import bench_vs_tf1 as w
    from bench_spin_policy import _tasks
    tasks = _tasks()
    xs, ys = w._mlp_data()
    g, x, y, loss, train, init = w._mlp(af, 0)
    ours, theirs = [], []
    async with af.Session(graph=g, cluster=spec) as sess:
        await sess.run(init)
        await sess.run([loss, train], {x: xs, y: ys})

        async def our_round():
            cpu = {n: _cpu_s(p) for n, p in tasks.items()}
            runq = {n: _runq_s(p) for n, p in tasks.items()}
            times = await w._aseries(lambda: sess.run([loss, train], {x: xs, y: ys}),
                                     w.WARMUP + args.steps)
            n = w.WARMUP + args.steps
            return (*_figures(times, w.WARMUP),
                    {k: (_cpu_s(p) - cpu[k]) / n * 1e6 for k, p in tasks.items()},
                    {k: (_runq_s(p) - runq[k]) / n * 1e6 for k, p in tasks.items()})

        def tf_round():
            cpu = _tree_cpu_s(tf.pid)
            tf.stdin.write(f"{w.WARMUP + args.steps}\n")
            tf.stdin.flush()
            times = json.loads(tf.stdout.readline())
            return (*_figures(times, w.WARMUP),
                    (_tree_cpu_s(tf.pid) - cpu) / len(times) * 1e6)

        for k in range(args.rounds):
            if k % 2 == 0:
                mine, other = await our_round(), tf_round()
            else:
                other, mine = tf_round(), await our_round()
            ours.append(mine[0])
            theirs.append(other[0])
            cpu = " ".join(f"{n[0]} {v:.0f}" for n, v in mine[2].items())
            runq = " ".join(f"{n[0]} {v:.0f}" for n, v in mine[3].items())
            print(f"round {k + 1:>2} ({'ours first' if k % 2 == 0 else 'TF1 first'}): ours "
                  f"{mine[0]:.3f} (p90 {mine[1]:.3f}) TF1 {other[0]:.3f} (p90 {other[1]:.3f}) "
                  f"ours/TF1 {mine[0] / other[0]:.3f} | ours CPU a step {cpu} us, runnable "
                  f"waiting {runq} us | TF1 CPU a step {other[2]:.0f} us | load "
                  f"{open('/proc/loadavg').read().split()[0]}", flush=True)
    ratios = [a / b for a, b in zip(ours, theirs)]
    print(f"\nours ms: median {statistics.median(ours):.3f} [{min(ours):.3f}-{max(ours):.3f}]; "
          f"TF1 ms: median {statistics.median(theirs):.3f} [{min(theirs):.3f}-"
          f"{max(theirs):.3f}]; ours/TF1 median {statistics.median(ratios):.3f}, worst "
          f"{max(ratios):.4f}, rounds over 0.7: {sum(r > 0.7 for r in ratios)}, over 0.6: "
          f"{sum(r > 0.6 for r in ratios)} of {len(ratios)}")
    print(f"rank correlation of ours and TF1's round medians: {_spearman(ours, theirs):.2f}")


def _spearman(a, b):
    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        for rank, i in enumerate(order):
            out[i] = float(rank)
        return out
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return num / den if den else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--tf-python", default=None)
    parser.add_argument("--tf-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tf_child:
        tf_child()
        return
    sys.path.insert(0, _HERE)
    sys.path.insert(0, os.path.join(_HERE, "..", "demos"))
    import bench_vs_tf1 as w
    import trio
    from local_cluster import local_cluster
    tf_python = w.find_tf_python(args.tf_python)
    if tf_python is None:
        parser.error("no --tf-python (nor ASYNCFLOW_TF_PYTHON)")
    tf = subprocess.Popen([tf_python, os.path.abspath(__file__), "--tf-child"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    try:
        if tf.stdout.readline().strip() != "ready":
            raise RuntimeError("the TF1 child did not start")
        with local_cluster({"ps": 1, "worker": 1}) as spec:
            trio.run(_measure, {"ps": spec["ps"], "worker": spec["worker"]}, args, tf)
    finally:
        tf.stdin.close()
        try:
            tf.wait(30)
        except subprocess.TimeoutExpired:
            tf.kill()
            tf.wait()


if __name__ == "__main__":
    main()
