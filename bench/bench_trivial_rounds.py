"""Why a round of ``bench_vs_tf1.py``'s trivial step is slow: the trivial series in many short
rounds, each printed with the counters that tell a slow round from a fast one.

``--clusters`` times over, a fresh one-ps, one-worker cluster (``demos/local_cluster.py``, as
``bench_vs_tf1.py`` starts one a round) and a fresh session run ``--rounds`` rounds of
``--steps`` trivial steps (``p * 2.0`` on the worker from a fed scalar) after ``--warmup``
untimed ones. ``--before reduce`` first runs ``bench_vs_tf1``'s local 64 MiB reduce in the
process, as its asyncflow side does before the trivial series; ``--between tf|ray|both`` runs
``bench_vs_tf1``'s TF1 and/or Ray side (``--tf-python``, ``--ray-python``) between clusters,
as its rounds do, so processes those leave running show in the next cluster's rounds.
``--pause-ms`` leaves the cluster idle before each round (what an idle gap does to the next
steps); ``--busy-first-ms`` keeps every CPU busy (other processes) that long after the warm-up
(the machine out of its idle state, this cluster's processes not warmed by it); ``--no-probe`` drops the CPU probes between rounds.

Per round: the median, p10, p90 step (ms), the share of steps over 1.25x the p10 (a bimodal
series against one shifted whole) and each 100 steps' median in turn (us: a phase shows as a run
of windows); ``probe``: each CPU's speed beside the round (this process moved onto each CPU in
turn: the best of 20 runs of a fixed pure-Python loop, us, before and after the round,
averaged), alone and then with a busy process on the other CPU; the machine's steal time over
the round (``/proc/stat``); this client's bare waits by outcome (spun, parked, parked at once
for want of a core ``busy``, ``shared``, ``skipped``: ``bare_io.COUNTS``) and its GC
collections and their time (``gc.callbacks``); for each process (client ``c``, ps ``p``, worker
``w``) per step: CPU (ms), its main thread's voluntary and involuntary context switches, minor
faults, its main thread's time on a CPU and runnable waiting for one (us,
``/proc/PID/task/PID/schedstat``: the guest's view), the CPU its other threads used (ms; how
many there are); the CPUs each ran on (``/proc/PID/stat`` field 39, sampled every
``--sample-every`` steps, 25) and the share of samples where the client and the worker sat on
the same CPU; the machine's runnable threads (``/proc/loadavg``) over the samples (mean, max);
the other processes found runnable (state R, not this cluster's) at the round's start and end.
``--dump FILE`` appends each round's step times (us, a JSON list a line).

Run: ``.venv/bin/python bench/bench_trivial_rounds.py [--clusters 3] [--rounds 6]
[--steps 1000] [--before reduce] [--between ray --ray-python <Ray>]``.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid):
    """(CPU s, minor faults, the CPU it last ran on) of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK, int(fields[7]), int(fields[36])


def _switches(pid):
    """(voluntary, involuntary) context switches of a process's main thread."""
    out = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")):
                name, value = line.split(":")
                out[name] = int(value)
    return out["voluntary_ctxt_switches"], out["nonvoluntary_ctxt_switches"]


def _others_cpu(pid):
    """CPU s used by a process's threads other than its main one, and how many there are."""
    total, count = 0.0, 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        if int(tid) == pid:
            continue
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK
        count += 1
    return total, count


def _schedstat(pid):
    """(s on a CPU, s runnable but waiting for one) of a process's main thread."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as handle:
        run, wait = handle.read().split()[:2]
    return int(run) / 1e9, int(wait) / 1e9


def _sample(tasks):
    """Each process's counters now, by name (see the module)."""
    out = {}
    for name, pid in tasks.items():
        cpu, faults, _ = _stat(pid)
        voluntary, involuntary = _switches(pid)
        others, threads = _others_cpu(pid)
        on_cpu, runq = _schedstat(pid)
        out[name] = {"cpu": cpu, "flt": faults, "vol": voluntary, "inv": involuntary,
                     "others": others, "threads": threads, "on_cpu": on_cpu, "runq": runq}
    return out


def _steal():
    """The machine's steal time so far (s: the hypervisor ran something else on our vCPUs)."""
    with open("/proc/stat") as handle:
        return int(handle.readline().split()[8]) / _TICK


def _probe():
    """Each CPU's speed now: the best of 20 runs of a fixed pure-Python loop in this process
    moved onto that CPU alone (us), for each CPU in turn; then the same for each CPU while a
    busy process holds the other CPUs (a pair of vCPUs that the host runs on one of its cores
    in turn is slower only while both are busy, as a spinning pair keeps them); then this
    process's own CPUs again."""
    mask = os.sched_getaffinity(0)
    try:
        out = []
        for cpu in sorted(mask):
            os.sched_setaffinity(0, {cpu})
            out.append(_loop())
        for cpu in sorted(mask):
            hog = subprocess.Popen([sys.executable, "-c", _HOG, ",".join(
                str(c) for c in sorted(mask - {cpu}))])
            try:
                os.sched_setaffinity(0, {cpu})
                time.sleep(0.05)  # (the hog started and busy)
                out.append(_loop())
            finally:
                hog.kill()
                hog.wait()
        return out
    finally:
        os.sched_setaffinity(0, mask)


_HOG = ("import os, sys\nos.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(',')})\n"
        "while True: pass")


def _busy_cpus(seconds):
    """Every CPU busy for ``seconds`` (one busy process each, then killed): the machine
    brought out of its idle state without this cluster's processes doing anything."""
    hogs = [subprocess.Popen([sys.executable, "-c", _HOG, str(cpu)])
            for cpu in sorted(os.sched_getaffinity(0))]
    try:
        time.sleep(seconds)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _loop():
    best = float("inf")
    for _ in range(20):
        start = time.perf_counter()
        total = 0
        for i in range(2000):
            total += i * i
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def _runnable_now(fd):
    return int(os.pread(fd, 128, 0).split()[3].split(b"/")[0])


def _others_running(ours):
    """Names of the processes in state R that are not this cluster's (nor this scan)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in ours:
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                text = handle.read()
        except OSError:
            continue
        name, rest = text.split(" (", 1)[1].rsplit(")", 1)
        if rest.split()[0] == "R":
            found.append(name)
    return found


class _GcWatch:
    def __init__(self):
        self.count, self.seconds, self._start = 0, 0.0, 0.0

    def __call__(self, phase, info):
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.count += 1
            self.seconds += time.perf_counter() - self._start


async def _round(run, steps, tasks, watch, loadavg, args):
    from transports.http import bare_io
    counts = dict(bare_io.COUNTS)
    gcs, gc_s = watch.count, watch.seconds
    others = _others_running(set(tasks.values()))
    probe, steal = (_probe() if args.probe else []), _steal()
    if args.pause_ms:
        import trio
        await trio.sleep(args.pause_ms / 1e3)
    before = _sample(tasks)
    times, same, cpus, runnable = [], 0, {name: {} for name in tasks}, []
    for i in range(steps):
        start = time.perf_counter()
        await run()
        times.append(time.perf_counter() - start)
        if args.sample_every and i % args.sample_every == 0:
            placed = {name: _stat(pid)[2] for name, pid in tasks.items()}
            same += placed["client"] == placed["worker"]
            for name, cpu in placed.items():
                cpus[name][cpu] = cpus[name].get(cpu, 0) + 1
            runnable.append(_runnable_now(loadavg))
    after = _sample(tasks)
    steal = _steal() - steal
    probe = [(a + b) / 2 for a, b in zip(probe, _probe())] if args.probe else [0.0, 0.0]
    others += _others_running(set(tasks.values()))
    p10 = statistics.quantiles(times, n=10)[0]
    per = {name: {key: (after[name][key] - before[name][key]) / steps for key in after[name]}
           for name in tasks}
    for name in tasks:
        per[name]["threads"] = after[name]["threads"]
    if args.dump:
        with open(args.dump, "a") as handle:
            handle.write(json.dumps([round(t * 1e6, 1) for t in times]) + "\n")
    return {"median": statistics.median(times) * 1e3, "p10": p10 * 1e3,
            "p90": statistics.quantiles(times, n=10)[-1] * 1e3,
            "windows": [statistics.median(times[i:i + 100]) * 1e3
                        for i in range(0, steps, 100)],
            "slow_share": sum(t > 1.25 * p10 for t in times) / steps,
            "counts": {k: bare_io.COUNTS[k] - counts[k] for k in counts},
            "gc": (watch.count - gcs, (watch.seconds - gc_s) * 1e3),
            "per": per, "cpus": cpus, "same_cpu": same / max(len(runnable), 1),
            "runnable": (statistics.mean(runnable or [0]), max(runnable or [0])),
            "others": sorted(set(others)), "probe": probe, "steal": steal}


def _print(label, r):
    half = len(r["probe"]) // 2
    per = "; ".join(f"{name[0]} cpu {v['cpu'] * 1e3:.3f} vol {v['vol']:.2f} inv "
                    f"{v['inv']:.3f} flt {v['flt']:.2f} on-cpu {v['on_cpu'] * 1e6:.0f} us runq "
                    f"{v['runq'] * 1e6:.1f} us others {v['others'] * 1e3:.3f} "
                    f"({v['threads']} threads)" for name, v in r["per"].items())
    cpus = " ".join(f"{name[0]}{dict(sorted(c.items()))}" for name, c in r["cpus"].items())
    c = r["counts"]
    alone = " ".join(f"{v:.0f}" for v in r["probe"][:half])
    paired = " ".join(f"{v:.0f}" for v in r["probe"][half:])
    print(f"{label} median {r['median']:.4f} p10 {r['p10']:.4f} p90 {r['p90']:.4f} slow "
          f"{r['slow_share']:.2f} | probe {alone} | with the other busy {paired} us | steal "
          f"{r['steal']:.2f} s | client waits spun {c['spun']} parks {c['parks']} busy "
          f"{c['busy']} shared {c['shared']} skipped {c['skipped']} | gc {r['gc'][0]} "
          f"({r['gc'][1]:.2f} ms) | {per} | {cpus} same {r['same_cpu']:.2f} | runnable "
          f"{r['runnable'][0]:.2f} max {r['runnable'][1]} | others {r['others']} | by 100 "
          f"steps {' '.join(f'{w * 1e3:.0f}' for w in r['windows'])} us", flush=True)


async def _measure(spec, args, out):
    import asyncflow as af
    import bench_vs_tf1 as workloads
    from bench_spin_policy import _tasks
    tasks = _tasks()
    watch = _GcWatch()
    gc.callbacks.append(watch)
    loadavg = os.open("/proc/loadavg", os.O_RDONLY)
    try:
        (graph, p, doubled, *_, local_graph, local_big, local_sum) = \
            workloads._trivial_and_pull(af)
        if args.before == "reduce":
            async with af.Session(graph=local_graph) as local:
                await local.run(local_big.initializer)
                for _ in range(4):
                    await local.run(local_sum)
        cluster = {"ps": spec["ps"], "worker": spec["worker"]}
        async with af.Session(graph=graph, cluster=cluster) as sess:
            await sess.run(doubled, {p: 1.0})
            for _ in range(args.warmup):
                await sess.run(doubled, {p: 1.0})
            if args.busy_first_ms:
                _busy_cpus(args.busy_first_ms / 1e3)
            for n in range(args.rounds):
                _print(f"{out['label']} round {n + 1}", await _round(
                    lambda: sess.run(doubled, {p: 1.0}), args.steps, tasks, watch, loadavg,
                    args))
    finally:
        gc.callbacks.remove(watch)
        os.close(loadavg)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--no-probe", dest="probe", action="store_false",
                        help="no CPU probes between rounds (they move this process and "
                             "start busy processes)")
    parser.add_argument("--sample-every", type=int, default=25,
                        help="steps between samples of the processes' CPUs (0: none)")
    parser.add_argument("--dump", default="", help="append each round's step times (us, "
                        "one JSON list a line) to this file")
    parser.add_argument("--busy-first-ms", type=float, default=0.0,
                        help="every CPU kept busy this long (other processes) after the "
                             "warm-up, before the first round")
    parser.add_argument("--pause-ms", type=float, default=0.0,
                        help="the cluster left idle this long before each round")
    parser.add_argument("--before", choices=("none", "reduce"), default="none",
                        help="reduce: bench_vs_tf1's local 64 MiB reduce first")
    parser.add_argument("--between", choices=("none", "tf", "ray", "both"), default="none",
                        help="bench_vs_tf1's TF1 and/or Ray side between clusters")
    parser.add_argument("--tf-python", default=None, help="a Python with tensorflow")
    parser.add_argument("--ray-python", default=None, help="a Python with ray")
    args = parser.parse_args()
    sys.path.insert(0, _HERE)
    import bench_vs_tf1 as workloads
    import trio
    tf_python = (workloads.find_tf_python(args.tf_python)
                 if args.between in ("tf", "both") else None)
    ray_python = (workloads.find_ray_python(args.ray_python)[0]
                  if args.between in ("ray", "both") else None)
    for k in range(args.clusters):
        if k and args.between in ("tf", "both"):
            if tf_python is None:
                parser.error("--between tf: no --tf-python")
            workloads.run_tf(tf_python, True, [1])
        if k and args.between in ("ray", "both"):
            if ray_python is None:
                parser.error("--between ray: no --ray-python")
            workloads.run_ray(ray_python, 1000)
        with open("/proc/loadavg") as handle:
            load = handle.read().split()[0]
        from transports.http import bare_io
        print(f"-- cluster {k + 1} (load {load}; {os.path.dirname(bare_io.__file__)})",
              flush=True)
        sys.path.insert(0, os.path.join(_HERE, "..", "demos"))
        from local_cluster import local_cluster
        with local_cluster({"ps": 1, "worker": 1}) as spec:
            trio.run(_measure, spec, args, {"label": f"cluster {k + 1}"})


if __name__ == "__main__":
    main()
