"""The same-host spin's policy (``transports/http/bare_io.py`` ``read_once``), spin on against
off in the same run: step times and each process's CPU.

For each form (``--forms``, a list of ``ASYNCFLOW_BARE_SPIN_US`` values, 0 for off), in turn and
``--pairs`` times over, a child process of this script starts a fresh one-ps, one-worker
cluster (``demos/local_cluster.py``; every process inherits the form's variable) and runs

* **trivial**: ``p * 2.0`` on the worker from a fed scalar (``bench_vs_tf1.py``'s trivial step),
  ``--trivial-steps`` steps after 20 untimed ones;
* **mlp**: ``bench_vs_tf1.py``'s parameter-server MLP step (64-128-10, batch 256), ``--mlp-steps``
  steps after 20 untimed ones.

Printed per form and workload: the median, p10 and p90 step (ms) and the CPU each process
(client, ps, worker) used per step (ms, from ``/proc/<pid>/stat``: user + system), and where
it ran (the CPUs ``/proc`` reported, sampled every 50 steps).

``--hog`` runs a busy Python loop in a process beside the cluster (a third runnable process on
a two-core machine: what another job does to a spinning pair); ``--pin c0,w0`` pins the client
and the worker to CPU 0 (``c``, ``p``, ``w``: client, ps, worker; digits: CPUs).

``--baseline-tree DIR`` (an export of another commit) lets a form run on that tree: a form
``base:200`` runs ``DIR``'s own copy of this script as the child, in ``DIR`` and with ``DIR``
first on every process's ``PYTHONPATH`` (a change to the spin's rule against the rule before
it, alternated). Each child runs in its own tree's root: the cluster's workers are
``python -m asyncflow`` processes, which import the working directory's packages before
``PYTHONPATH``'s (until c44wrk a base form's ps and worker ran this tree's code).

Run: ``.venv/bin/python bench/bench_spin_policy.py [--forms 0,200] [--pairs 3] [--hog]
[--pin c0,w0] [--baseline-tree <before> --forms 0,200,base:200]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid):
    """(CPU seconds used, the CPU it last ran on) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK, int(fields[36])


def _tasks():
    """{"client": this pid, "ps": pid, "worker": pid} of this process's worker children."""
    found = {"client": os.getpid()}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if parent == os.getpid() and b"--job" in argv:
            found[argv[argv.index(b"--job") + 1].decode()] = int(entry)
    return found


async def _measure(run, steps, tasks):
    for _ in range(20):
        await run()
    before = {name: _stat(pid)[0] for name, pid in tasks.items()}
    times, placed = [], {name: {} for name in tasks}
    for i in range(steps):
        start = time.perf_counter()
        await run()
        times.append(time.perf_counter() - start)
        if i % 50 == 0:
            for name, pid in tasks.items():
                cpu = str(_stat(pid)[1])
                placed[name][cpu] = placed[name].get(cpu, 0) + 1
    after = {name: _stat(pid)[0] for name, pid in tasks.items()}
    deciles = statistics.quantiles(times, n=10)
    return {"median_ms": statistics.median(times) * 1e3, "p10_ms": deciles[0] * 1e3,
            "p90_ms": deciles[-1] * 1e3,
            "cpu_ms_per_step": {name: (after[name] - before[name]) / steps * 1e3
                                for name in tasks},
            "cpus": placed}


async def _child_measure(spec, args, out):
    import asyncflow as af
    import bench_vs_tf1 as workloads
    tasks = _tasks()
    for item in filter(None, args.pin.split(",")):
        os.sched_setaffinity(tasks[{"c": "client", "p": "ps", "w": "worker"}[item[0]]],
                             {int(c) for c in item[1:]})
    cluster = {"ps": spec["ps"], "worker": spec["worker"]}
    graph, p, doubled, *_ = workloads._trivial_and_pull(af)
    async with af.Session(graph=graph, cluster=cluster) as sess:
        out["trivial"] = await _measure(lambda: sess.run(doubled, {p: 1.0}),
                                        args.trivial_steps, tasks)
    xs, ys = workloads._mlp_data()
    graph, x, y, loss, train, init = workloads._mlp(af, 0)
    async with af.Session(graph=graph, cluster=cluster) as sess:
        await sess.run(init)
        out["mlp"] = await _measure(lambda: sess.run([loss, train], {x: xs, y: ys}),
                                    args.mlp_steps, tasks)


def child(args):
    import bench_vs_tf1  # (its local cluster of one ps and one worker, written once)
    print(json.dumps(bench_vs_tf1.on_local_cluster(_child_measure, args)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--forms", default="0,200",
                        help="ASYNCFLOW_BARE_SPIN_US values, run in turn (0: off)")
    parser.add_argument("--pairs", type=int, default=3, help="times over the forms")
    parser.add_argument("--trivial-steps", type=int, default=2000)
    parser.add_argument("--mlp-steps", type=int, default=1000)
    parser.add_argument("--hog", action="store_true", help="a busy process beside the cluster")
    parser.add_argument("--pin", default="", help="e.g. c0,w0: client and worker on CPU 0")
    parser.add_argument("--baseline-tree", default="",
                        help="another tree, for forms written base:US")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    try:
        for turn in range(args.pairs):
            for form in args.forms.split(","):
                script, env = os.path.abspath(__file__), dict(os.environ)
                tree = os.path.dirname(os.path.dirname(script))
                if form.startswith("base:"):
                    if not args.baseline_tree:
                        parser.error(f"form {form}: --baseline-tree is due")
                    tree = os.path.abspath(args.baseline_tree)
                    script = os.path.join(tree, "bench", os.path.basename(__file__))
                    env["PYTHONPATH"] = os.pathsep.join(
                        filter(None, [tree, os.environ.get("PYTHONPATH", "")]))
                env["ASYNCFLOW_BARE_SPIN_US"] = form.rpartition(":")[2]
                command = [sys.executable, script, "--child",
                           "--trivial-steps", str(args.trivial_steps),
                           "--mlp-steps", str(args.mlp_steps), "--pin", args.pin]
                with open("/proc/loadavg") as handle:
                    load = handle.read().split()[0]
                # (in its tree: the cluster's ``python -m asyncflow`` processes import the
                # working directory's packages first, whatever PYTHONPATH says)
                result = subprocess.run(command, capture_output=True, text=True, env=env,
                                        cwd=tree)
                if result.returncode:
                    print(f"form {form} failed: {result.stderr[-2000:]}")
                    continue
                out = json.loads(result.stdout.strip().splitlines()[-1])
                for workload, figures in out.items():
                    cpu = ", ".join(f"{name} {ms:.3f}"
                                    for name, ms in figures["cpu_ms_per_step"].items())
                    print(f"turn {turn + 1} spin {form:>8} (load {load}) {workload:<7} median "
                          f"{figures['median_ms']:.3f} ms, p10 {figures['p10_ms']:.3f}, p90 "
                          f"{figures['p90_ms']:.3f}; CPU ms a step: {cpu}; CPUs "
                          f"{figures['cpus']}", flush=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


if __name__ == "__main__":
    main()
