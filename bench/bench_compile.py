"""Compile time of a large graph: ``compiled_run.compile_run`` (prune, place, rewrite, partition,
plans), the first ``Session.run`` of a signature minus running it.

Issue 35 builds plans straight from the compile-time nodes instead of materialising a
second graph of Operations per partition; this measures what that saved. Three graphs of
``--ops`` ops (a chain of ``x + c`` and ``x * c`` through a placeholder):

==================  ==========================================================================
one device          every op on CPU:0, no pass changes anything (the single-device path)
two devices         the chain alternates CPU:0/CPU:1 every 50 ops (Send/Recv pairs)
rewritten           one device, with a duplicate of every op for CSE to merge (rewritten)
==================  ==========================================================================

Each figure is the median of ``--repeats`` compiles after a first one, in ms of process
CPU; ``--trees OLD NEW`` measures each tree in a fresh process (``PYTHONPATH=TREE``),
alternating, and prints NEW/OLD.
Only what both trees have is called: ``compile_run(graph, feeds, fetches, targets, state,
config, resources)``.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

CASES = ("one device", "two devices", "rewritten")


def build(case, n):
    import numpy as np

    import asyncflow as af
    graph = af.Graph()
    with graph.as_default():
        x = af.placeholder(af.float32, [16], name="x")
        value = x
        for i in range(n // (2 if case == "rewritten" else 1)):
            device = f"/device:CPU:{(i // 50) % 2}" if case == "two devices" else "/device:CPU:0"
            with af.device(device):
                c = af.constant(np.float32(1.0 + i % 7))
                if case == "rewritten":  # a twin CSE merges into ``value``'s op
                    af.add(value, c)
                value = af.add(value, c) if i % 2 else af.multiply(value, c)
    return graph, x, value


def measure(n, repeats):
    from asyncflow.exec import compiled_run
    from asyncflow.exec.devices import make_local_devices
    from asyncflow.exec.options import SessionConfig
    from asyncflow.exec.resources import ResourceManager

    figures = {}
    for case in CASES:
        graph, x, fetch = build(case, n)
        config = SessionConfig(device_count={"CPU": 2})
        times = []
        for repeat in range(repeats + 1):  # the first compile warms caches: not counted
            state = compiled_run.DeviceState.local(make_local_devices({"CPU": 2}))
            start = time.process_time()
            compiled_run.compile_run(graph, [x], [fetch], [], state, config,
                                 ResourceManager(local=True))
            if repeat:
                times.append(time.process_time() - start)
        figures[case] = statistics.median(times) * 1e3
    return figures


def compare(trees, rounds, n, repeats):
    runs = {tree: [] for tree in trees}
    for _ in range(rounds):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--json",
                                   "--ops", str(n), "--repeats", str(repeats)],
                                  env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                sys.stderr.write(done.stdout + done.stderr)
                raise SystemExit(f"measuring {tree} failed (exit {done.returncode})")
            runs[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
    old, new = trees[0], trees[-1]
    print(f"compile_run of {n} ops, ms of process CPU, median of {rounds} processes x "
          f"{repeats} compiles; load average {os.getloadavg()[0]:.1f}")
    print(f"{'graph':<14}{'old':>10}{'new':>10}{'new/old':>9}")
    for case in CASES:
        medians = [statistics.median(r[case] for r in runs[t]) for t in (old, new)]
        print(f"{case:<14}{medians[0]:>10.1f}{medians[1]:>10.1f}{medians[1] / medians[0]:>9.2f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=4000, help="ops in each graph")
    parser.add_argument("--repeats", type=int, default=5, help="compiles per process")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--trees", nargs=2, metavar="TREE",
                        help="OLD and NEW repository roots, measured alternately")
    parser.add_argument("--rounds", type=int, default=3, help="processes per tree")
    args = parser.parse_args(argv)
    if args.trees:
        compare(args.trees, args.rounds, args.ops, args.repeats)
        return
    figures = measure(args.ops, args.repeats)
    print(json.dumps(figures) if args.json else figures)


if __name__ == "__main__":
    main()
