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

The TF1 child runs in a session of its own (``bench_trivial_vs_ray.ChildSession``), driven
one command a line, one JSON object a reply, each read under a deadline: ``run STEPS WARMUP``
answers ``{"times": [...]}`` (STEPS timed steps after WARMUP untimed), ``quit`` ends it, a bad
line is answered ``{"error": ...}``; at the end every process of its session is waited for.

**The interleaved series** (``mlp_interleaved``; ``bench_vs_tf1.py`` runs one a round at the end
of its asyncflow side, on its cluster, and judges issue 34's PS MLP target on it): ours and
TF1's step in strict turns, ours first, ``CHUNKS`` (10) chunks a side of ``STEPS`` (30) timed
steps after ``CHUNK_WARMUP`` (20) untimed, both clusters up the whole series, so that both sides'
steps sample the same stretch of the host's phases (the order: bench_trivial_vs_ray's, where
reversed pairs left half of a side's chunks after its own and its odd/even halves no A/A).
Figures: ``mlp_il_ms`` and ``tf1_mlp_il_ms`` (each the median over all its chunks' timed steps),
``ps_mlp_over_tf1_il`` (their ratio), ``il_aa_ours_mlp`` and ``il_aa_tf1_mlp`` (a side's odd
chunks' median over its even ones': an A/A), and the fairness check of each chunk's idle side:
``il_tf1_idle_cpu`` (the TF1 child's session, servers included, during our chunks) and
``il_ours_idle_cpu`` (our ps, worker and client during TF1's), in cores: neither side is
stopped, so an idle side that burnt CPU would show here (idle for 2 s, the TF1 child and its
servers burnt none; during our chunks 0-4% of a core, the tail of their chunk; SIGSTOPping them
during ours, as bench_trivial_vs_ray does Ray, changed neither side's median: bench/RESULTS.md,
c50psil); ``tf1_left_killed``.

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

from bench_trivial_vs_ray import _cpu_s

_HERE = os.path.dirname(os.path.abspath(__file__))


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

# The interleaved series (bench_vs_tf1's, each round). 20 untimed steps a chunk: with 5, TF1's
# chunks read 1.09x a contiguous 300-step series of the same child beside them (ours 0.99x);
# with 20 both read 0.91x (bench/RESULTS.md, c50psil).
CHUNKS, STEPS, CHUNK_WARMUP = 10, 30, 20
START_DEADLINE_S = 120.0  # the child's start: TensorFlow's import, two servers, the first step
RUN_DEADLINE_S = 60.0  # one ``run`` reply (50 steps of ~2-5 ms)


def parse_command(line):
    """``(name, args)`` of one command line to the TF1 child; ValueError naming the line."""
    words = line.split()
    if words == ["quit"]:
        return "quit", ()
    try:
        if len(words) == 3 and words[0] == "run":
            steps, warmup = int(words[1]), int(words[2])
            if steps > 0 and warmup >= 0:
                return "run", (steps, warmup)
    except ValueError:
        pass
    raise ValueError(f"TF1 child: bad command {line.strip()!r} (expected 'run STEPS WARMUP' "
                     "with STEPS > 0 and WARMUP >= 0, or 'quit')")


def serve_commands(stdin, stdout, step):
    """The TF1 child's loop: ``run STEPS WARMUP`` runs WARMUP untimed steps and STEPS timed
    ones and answers ``{"times": [s, ...]}``; ``quit`` (or the end of stdin) ends it; a bad
    line is answered ``{"error": ...}`` and the loop goes on. One JSON object a line."""
    import bench_vs_tf1 as w
    for line in stdin:
        try:
            name, args = parse_command(line)
        except ValueError as exc:
            stdout.write(json.dumps({"error": str(exc)}) + "\n")
            stdout.flush()
            continue
        if name == "quit":
            return
        steps, warmup = args
        w._series(step, warmup)
        stdout.write(json.dumps({"times": w._series(step, steps)}) + "\n")
        stdout.flush()


def tf_child():
    """In the TF interpreter: a TF1 cluster (a ps and a worker ``tf.distribute.Server``, its
    children) and a ``grpc://`` session on it; answers ``{"ready": true, "servers": [pid,
    ...]}``, then ``serve_commands`` with the MLP step."""
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
            print(json.dumps({"ready": True, "servers": [p.pid for p in procs]}), flush=True)
            serve_commands(sys.stdin, sys.stdout,
                           lambda: sess.run([loss, train], {x: xs, y: ys}))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def start_tf_child(tf_python, deadline_s=START_DEADLINE_S):
    """The TF1 child (this file with ``--tf-child`` in ``tf_python``) in a session of its own
    (bench_trivial_vs_ray's ``ChildSession``: every process it starts is waited for, or killed
    by its PID, at its ``close``), ready: its cluster up and one step run."""
    from bench_trivial_vs_ray import ChildSession
    return ChildSession([tf_python, os.path.abspath(__file__), "--tf-child"], deadline_s,
                        who="TF1 child")


# ----------------------------------------------------------------------------- the series


def _cluster_pids():
    """This process's asyncflow server children (``--job`` in their command line)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    argv = handle.read().split(b"\0")
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            if parent == os.getpid() and b"--job" in argv:
                found.append(int(entry))
    return found


def _pids_cpu_s(pids):
    """User + system CPU seconds of ``pids`` (``stat``: a thread that ended still counts, as
    trio's thread cache's do in this process); a process gone counts 0."""
    return sum(_cpu_s(pid) for pid in pids)


# ``bench_trivial_vs_ray.summarize``'s figures (pooled medians, their ratio, each side's odd
# chunks over its even ones) under this series' names.
_NAMES = {"trivial_il_ms": "mlp_il_ms", "ray_trivial_il_ms": "tf1_mlp_il_ms",
          "trivial_over_ray_il": "ps_mlp_over_tf1_il", "il_aa_ours": "il_aa_ours_mlp",
          "il_aa_ray": "il_aa_tf1_mlp"}


def summarize(ours, theirs):
    """The interleaved figures from each side's chunks (lists of step times, s)."""
    from bench_trivial_vs_ray import summarize as pooled
    figures = pooled(ours, theirs)
    return {new: figures[old] for old, new in _NAMES.items() if old in figures}


async def interleaved(step, child, chunks=CHUNKS, steps=STEPS, warmup=CHUNK_WARMUP,
                      our_pids=(), detail=None):
    """Ours (``await step()``) and TF1's (``child``) PS MLP step in strict turns, ours first:
    each side's chunk is ``warmup`` untimed steps, then ``steps`` timed ones. Beside
    ``summarize``'s figures, what each side's idle processes burnt while the other's chunks ran
    (``il_tf1_idle_cpu``: the TF1 child's session, its servers included, during ours;
    ``il_ours_idle_cpu``: ``our_pids`` during TF1's), in cores."""
    import trio
    ours, theirs, idle = [], [], {"tf1": [0.0, 0.0], "ours": [0.0, 0.0]}
    from bench_trivial_vs_ray import _session_pids
    from bench_vs_tf1 import _aseries
    tf_pids = _session_pids(child.proc.pid)
    for _ in range(chunks):
        cpu, start = _pids_cpu_s(tf_pids), time.perf_counter()
        ours.append((await _aseries(step, warmup + steps))[warmup:])
        idle["tf1"][0] += _pids_cpu_s(tf_pids) - cpu
        idle["tf1"][1] += time.perf_counter() - start
        cpu, start = _pids_cpu_s(our_pids), time.perf_counter()
        reply = await trio.to_thread.run_sync(child.ask, f"run {steps} {warmup}",
                                              RUN_DEADLINE_S)
        idle["ours"][0] += _pids_cpu_s(our_pids) - cpu
        idle["ours"][1] += time.perf_counter() - start
        theirs.append(reply["times"])
    out = summarize(ours, theirs)
    out["il_tf1_idle_cpu"] = idle["tf1"][0] / idle["tf1"][1]
    if our_pids:
        out["il_ours_idle_cpu"] = idle["ours"][0] / idle["ours"][1]
    if detail is not None:  # each chunk's median (us), in order, and its step times (s)
        for name, chunked in (("ours", ours), ("tf1", theirs)):
            detail[name] = [round(statistics.median(c) * 1e6) for c in chunked]
            detail[f"{name}_times"] = chunked
    return out


async def mlp_interleaved(af, cluster, tf_python, mlp=None, chunks=CHUNKS, steps=STEPS,
                          warmup=CHUNK_WARMUP, detail=None):
    """One interleaved series of the PS MLP step on ``cluster`` against a fresh TF1 child,
    ended and waited for (every process of its session gone: ``tf1_left_killed`` counts those
    killed by their PID) before returning, cancelled or failed too. ``mlp``: ``bench_vs_tf1._mlp
    (af, 0)`` (built here when None), run in a session of its own after its ``init``."""
    import trio
    if mlp is None:
        from bench_vs_tf1 import _mlp
        mlp = _mlp(af, 0)
    from bench_vs_tf1 import _mlp_data
    g, x, y, loss, train, init = mlp
    xs, ys = _mlp_data()
    child = await trio.to_thread.run_sync(start_tf_child, tf_python)
    try:
        async with af.Session(graph=g, cluster=cluster) as sess:
            await sess.run(init)
            await sess.run([loss, train], {x: xs, y: ys})
            out = await interleaved(lambda: sess.run([loss, train], {x: xs, y: ys}), child,
                                    chunks, steps, warmup, _cluster_pids() + [os.getpid()],
                                    detail)
    finally:
        with trio.CancelScope(shield=True):  # cancelled, the TF1 processes are still ended
            killed = await trio.to_thread.run_sync(child.close)
    out["tf1_left_killed"] = killed
    return out


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
            cpu = _tree_cpu_s(tf.proc.pid)
            times = tf.ask(f"run {args.steps} {w.WARMUP}", RUN_DEADLINE_S + args.steps)["times"]
            return (*_figures(times, 0),
                    (_tree_cpu_s(tf.proc.pid) - cpu) / (w.WARMUP + len(times)) * 1e6)

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
    tf = start_tf_child(tf_python)
    try:
        with local_cluster({"ps": 1, "worker": 1}) as spec:
            trio.run(_measure, {"ps": spec["ps"], "worker": spec["worker"]}, args, tf)
    finally:
        tf.close()


if __name__ == "__main__":
    main()
