"""The same-host spin's "no core to spare" rule (``transports/http/bare_io.py``
``machine_busy``): the rule before (form A, ``BUSY_LOOKS`` 1, or ``--base-looks``: one look that
sees more runnable threads than CPUs parks the process's waits for ``LOAD_EVERY_S``) against the
tree's (form B, ``--busy-looks``, default 2: such looks in a row, the second ``RECHECK_S`` after
the first)
under background loads that this script starts beside the trivial remote step.

Two one-ps, one-worker clusters (``demos/local_cluster.py``), one per form, both up for the
whole run; each worker's ``BUSY_LOOKS`` set by a ``sitecustomize`` (written into a temporary
directory on its ``PYTHONPATH``), which also writes the worker's ``bare_io.COUNTS`` to a file on
SIGUSR1 (asked after each chunk). The client is this process: its own ``BUSY_LOOKS`` is set to
the chunk's form before the chunk (its last verdict dropped). Per load (``--loads``), the
background is started, then ``--rounds`` rounds of ``--steps`` trivial steps (``p * 2.0``,
``bench_vs_tf1.py``'s) per chunk in the order A B B A, the next B A A B; a chunk's figure is its
median step (and its mean, the chunk's wall over its steps: a few steps parked in a thousand
move the mean, not the median). Loads:

* ``quiet``: nothing started;
* ``daemon:T:P:B``: a C program (compiled here with ``cc``) of ``T`` threads, each sleeping
  ``P`` us then spinning ``B`` us, their phases spread (a service's background threads);
* ``hog``: a Python ``while True: pass`` (a persistent third runnable process);
* ``ray``: Ray idle (``bench_trivial_vs_ray.py``'s child in ``--ray-python``: its raylet, GCS,
  driver and one actor, no graph compiled; every process of its session ended after).

Printed per chunk and summed per load and form: the median step (us), the client's and the
worker's waits that parked "busy" and those a spin took (per step), and each process's CPU per
step (us, from ``/proc/<pid>/task/*/schedstat``: client, worker, ps, the background) and the
background's share of a core over the chunk (what the spinning pair left it); per load
the rounds' B/A with the A/A and B/B (each form's second chunk over its first) beside it.

    .venv/bin/python bench/bench_spin_busy.py [--loads quiet,daemon:1:1000:40,hog] \\
        [--rounds 6] [--steps 1000] [--busy-looks 2] [--base-looks 1] \\
        [--ray-python <Ray> --loads ray]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, ".."))
sys.path.insert(0, os.path.join(_HERE, "..", "demos"))

_SITE = '''
import json, os, signal
_looks = os.environ.get("ASYNCFLOW_BENCH_BUSY_LOOKS")
if _looks:
    from transports.http import bare_io as _io
    _io.BUSY_LOOKS = int(_looks)
    _where = os.environ["ASYNCFLOW_BENCH_COUNTS_DIR"]

    def _dump(signum, frame):
        path = os.path.join(_where, f"{os.getpid()}.json")
        with open(path + ".part", "w") as handle:
            json.dump(_io.COUNTS, handle)
        os.replace(path + ".part", path)

    signal.signal(signal.SIGUSR1, _dump)
'''

_DAEMON_C = r'''
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
static long period_ns, burst_ns;
static long now_ns(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}
static void *run(void *arg) {
    struct timespec nap = {0, (long)arg};
    nanosleep(&nap, 0);  /* the phase */
    nap.tv_sec = period_ns / 1000000000L; nap.tv_nsec = period_ns % 1000000000L;
    for (;;) {
        nanosleep(&nap, 0);
        long end = now_ns() + burst_ns;
        while (now_ns() < end) {}
    }
    return 0;
}
int main(int argc, char **argv) {
    int threads = atoi(argv[1]);
    period_ns = atol(argv[2]) * 1000L; burst_ns = atol(argv[3]) * 1000L;
    pthread_t t;
    for (int i = 1; i < threads; i++)
        pthread_create(&t, 0, run, (void *)(period_ns * i / threads));
    run((void *)0);
    return 0;
}
'''


def cpu_s(pid):
    """CPU seconds a process's threads have run (``schedstat``: ns on a CPU), live ones."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
                total += int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def _parent(pid):
    """The parent of ``pid`` (``/proc/<pid>/stat``, the field after the state), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def cluster_pids(spec):
    """{"ps": pid, "worker": pid} of this process's children serving ``spec`` (only its own:
    SIGUSR1 goes to the worker found, and another's process would die of it)."""
    found, wanted, me = {}, json.dumps(spec).encode(), os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or _parent(entry) != me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if b"--cluster" in argv and argv[argv.index(b"--cluster") + 1] == wanted:
            found[argv[argv.index(b"--job") + 1].decode()] = int(entry)
    return found


def parse_load(text):
    """("quiet" | "hog" | "ray", None) | ("daemon", (threads, period_us, burst_us))."""
    if text in ("quiet", "hog", "ray"):
        return text, None
    name, *numbers = text.split(":")
    if name == "daemon" and len(numbers) == 3:
        try:
            threads, period, burst = (int(n) for n in numbers)
        except ValueError:
            threads = 0
        if threads > 0 and period > 0 and 0 < burst < period:
            return name, (threads, period, burst)
    raise ValueError(f"load {text!r}: quiet, hog, ray or daemon:THREADS:PERIOD_US:BURST_US due "
                     "(burst under period)")


def compiler():
    """The C compiler that builds the daemon load (``cc`` on the PATH), or a ValueError."""
    found = shutil.which("cc")
    if not found:
        raise ValueError("load daemon: its C program needs a compiler, and no cc is on the PATH "
                         "(install one, or leave daemon loads out of --loads)")
    return found


@contextlib.contextmanager
def background(load, build_dir, ray_python=""):
    """The load started; yields a function that lists its processes' pids (none: quiet).
    Killed and reaped when the block ends (Ray's: every process of its session waited for)."""
    kind, shape = parse_load(load)
    if kind == "quiet":
        yield list
        return
    if kind == "ray":
        if not ray_python:
            raise ValueError("load ray: --ray-python is due")
        import bench_trivial_vs_ray as ray_side
        child = ray_side.start_ray_child(ray_python)
        try:
            time.sleep(1.0)  # (its start's work done: what is left is Ray idle)
            yield lambda: ray_side._session_pids(child.proc.pid)
        finally:
            child.close()
        return
    if kind == "hog":
        command = [sys.executable, "-c", "while True: pass"]
    else:
        binary = os.path.join(build_dir, "daemon")
        if not os.path.exists(binary):
            cc, source = compiler(), binary + ".c"
            with open(source, "w") as handle:
                handle.write(_DAEMON_C)
            subprocess.run([cc, "-O2", "-pthread", "-o", binary, source], check=True)
        command = [binary, *map(str, shape)]
    proc = subprocess.Popen(command)
    try:
        time.sleep(0.2)  # (started, its threads at their phases)
        yield lambda: [proc.pid]
    finally:
        proc.kill()
        proc.wait()


def worker_counts(pid, where, deadline_s=5.0):
    """The worker's ``bare_io.COUNTS`` (SIGUSR1, then its file, fresh), or {} past the deadline."""
    path = os.path.join(where, f"{pid}.json")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    os.kill(pid, signal.SIGUSR1)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(FileNotFoundError):
            with open(path) as handle:
                return json.load(handle)
        time.sleep(0.002)
    return {}


def per_step(after, before, steps, keys=("busy", "spun", "parks")):
    return {key: (after.get(key, 0) - before.get(key, 0)) / steps for key in keys}


async def _measure(specs, args, where, hold):
    import trio
    import asyncflow as af
    from bench_vs_tf1 import _trivial_and_pull
    from transports.http import bare_io
    graph, p, doubled, *_ = _trivial_and_pull(af)
    pids = {form: cluster_pids(spec) for form, spec in specs.items()}
    looks = {"A": args.base_looks, "B": args.busy_looks}
    results = {}
    async with contextlib.AsyncExitStack() as stack:
        runs = {}
        for form, spec in specs.items():
            sess = await stack.enter_async_context(af.Session(
                graph=graph, cluster={"ps": spec["ps"], "worker": spec["worker"]}))
            runs[form] = (lambda s: lambda: s.run(doubled, {p: 1.0}))(sess)
            for _ in range(args.warmup):
                await runs[form]()

        async def chunk(form, load_pids):
            bare_io.BUSY_LOOKS = looks[form]
            bare_io._busy[:] = [0.0, False, 0]
            procs = {"client": [os.getpid()], "worker": [pids[form]["worker"]],
                     "ps": [pids[form]["ps"]], **({"load": load_pids} if load_pids else {})}
            worker_before = await trio.to_thread.run_sync(worker_counts, pids[form]["worker"],
                                                          where)
            client_before = dict(bare_io.COUNTS)
            cpu_before = {n: sum(map(cpu_s, q)) for n, q in procs.items()}
            times, clock, run = [], time.perf_counter_ns, runs[form]
            began = clock()
            for _ in range(args.steps):
                start = clock()
                await run()
                times.append(clock() - start)
            wall = (clock() - began) / 1e9
            cpu = {n: (sum(map(cpu_s, q)) - cpu_before[n]) / args.steps * 1e6
                   for n, q in procs.items()}
            client = per_step(bare_io.COUNTS, client_before, args.steps)
            worker_after = await trio.to_thread.run_sync(worker_counts, pids[form]["worker"],
                                                         where)
            worker = per_step(worker_after, worker_before, args.steps)
            return {"us": statistics.median(times) / 1e3, "mean": wall / args.steps * 1e6,
                    "cpu": cpu, "client": client,
                    "worker": worker, "load_share": cpu.get("load", 0.0) * args.steps / 1e6 / wall}

        for load in args.loads.split(","):
            rows = []
            with hold(load) as load_pids:
                load_pid = load_pids()  # (Ray's: its session's processes when it is idle)
                for n in range(args.rounds):
                    order = ("A", "B", "B", "A") if n % 2 == 0 else ("B", "A", "A", "B")
                    got = {"A": [], "B": []}
                    for form in order:
                        got[form].append(await chunk(form, load_pid))
                    (a1, a2), (b1, b2) = got["A"], got["B"]
                    row = {"a": got["A"], "b": got["B"],
                           "ba": (b1["us"] + b2["us"]) / (a1["us"] + a2["us"]),
                           "ba_mean": (b1["mean"] + b2["mean"]) / (a1["mean"] + a2["mean"]),
                           "aa": a2["us"] / a1["us"], "bb": b2["us"] / b1["us"]}
                    rows.append(row)
                    print(f"{load} round {n + 1:2d} ({''.join(order)}): A {a1['us']:6.1f} "
                          f"{a2['us']:6.1f}  B {b1['us']:6.1f} {b2['us']:6.1f} us  B/A "
                          f"{row['ba']:.3f} (means {row['ba_mean']:.3f})  A/A {row['aa']:.3f}  "
                          f"B/B {row['bb']:.3f}  busy "
                          f"c/w A {a1['client']['busy'] + a2['client']['busy']:.2f}/"
                          f"{a1['worker']['busy'] + a2['worker']['busy']:.2f} B "
                          f"{b1['client']['busy'] + b2['client']['busy']:.2f}/"
                          f"{b1['worker']['busy'] + b2['worker']['busy']:.2f}", flush=True)
            results[load] = rows
            summarize(load, rows)
    return results


def summarize(load, rows):
    """One load's rounds: B/A, A/A, B/B (median, range), and per form the median chunk, the
    waits per step parked busy or spun (client, worker) and the CPU per step by process."""
    def spread(key):
        values = [row[key] for row in rows]
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"
    print(f"== {load}: {len(rows)} rounds, B/A {spread('ba')}, B faster in "
          f"{sum(row['ba'] < 1 for row in rows)}; A/A {spread('aa')}; B/B {spread('bb')}; "
          f"B/A of the chunks' mean steps {spread('ba_mean')}")
    for form in ("a", "b"):
        chunks = [c for row in rows for c in row[form]]
        med = lambda get: statistics.median(get(c) for c in chunks)  # noqa: E731
        cpu = ", ".join(f"{name} {med(lambda c: c['cpu'][name]):.1f}"
                        for name in chunks[0]["cpu"])
        print(f"   {form.upper()}: step {med(lambda c: c['us']):.1f} us (mean "
              f"{med(lambda c: c['mean']):.1f}); a step, busy parks "
              f"client {med(lambda c: c['client']['busy']):.3f} worker "
              f"{med(lambda c: c['worker']['busy']):.3f}, spun client "
              f"{med(lambda c: c['client']['spun']):.3f} worker "
              f"{med(lambda c: c['worker']['spun']):.3f}; CPU us a step: {cpu}; the load's "
              f"share of a core {med(lambda c: c['load_share']):.3f}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="quiet,daemon:1:1000:40,daemon:4:2000:30,hog")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=1000, help="steps a chunk")
    parser.add_argument("--warmup", type=int, default=300, help="untimed steps a form first")
    parser.add_argument("--busy-looks", type=int, default=2, help="form B's BUSY_LOOKS")
    parser.add_argument("--base-looks", type=int, default=1, help="form A's (1: the rule before)")
    parser.add_argument("--ray-python", default="", help="Ray's interpreter (load ray)")
    args = parser.parse_args(argv)
    for load in args.loads.split(","):
        try:
            if parse_load(load)[0] == "daemon":
                compiler()  # (before the clusters start)
        except ValueError as error:
            parser.error(str(error))
    import trio
    import local_cluster as cluster_module
    base_env = cluster_module._ENV
    with tempfile.TemporaryDirectory() as site, contextlib.ExitStack() as stack:
        with open(os.path.join(site, "sitecustomize.py"), "w") as handle:
            handle.write(_SITE)
        path = os.pathsep.join(filter(None, [site, base_env.get("PYTHONPATH", "")]))
        specs = {}
        try:
            for form, looks in (("A", args.base_looks), ("B", args.busy_looks)):
                cluster_module._ENV = {**base_env, "PYTHONPATH": path,
                                       "ASYNCFLOW_BENCH_BUSY_LOOKS": str(looks),
                                       "ASYNCFLOW_BENCH_COUNTS_DIR": site}
                specs[form] = stack.enter_context(cluster_module.local_cluster(
                    {"ps": 1, "worker": 1}))
        finally:
            cluster_module._ENV = base_env
        trio.run(_measure, specs, args, site,
                 lambda load: background(load, site, args.ray_python))


if __name__ == "__main__":
    main()
