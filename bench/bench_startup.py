"""Start-up: ``import asyncflow`` and a CLI worker's first served step, in fresh processes.

For each tree (this one and, with ``--baseline DIR``, a checkout of an earlier commit, imported
from DIR through ``PYTHONPATH``), alternating round by round so both see the same load:

* import: wall time and CPU (user+sys) of ``python -c "import asyncflow"``; ``import numpy``
  alongside as the floor every process pays;
* worker: from spawning ``python -m asyncflow worker`` (one loopback task) to its "listening
  on" line, and to the result of a first step (a small float32 graph placed on it) run by a
  Session in this process (this tree's client, the same for both trees).

Reports the best of ``--rounds`` for each, and baseline / this ratios.

Run: ``.venv/bin/python bench/bench_startup.py [--rounds 5] [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import trio  # noqa: E402

import asyncflow as af  # noqa: E402
from reserved_ports import free_ports  # noqa: E402 (ports no test or other benchmark draws)

ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
DEADLINE_S = 60.0


def _env(tree):
    return {**os.environ, **ONE_BLAS_THREAD, "PYTHONPATH": tree}


def _child_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_import(tree, module):
    """(wall s, CPU s) of a fresh interpreter importing ``module`` from ``tree``."""
    cpu, start = _child_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], env=_env(tree), cwd=tree,
                   check=True, timeout=DEADLINE_S)
    return time.perf_counter() - start, _child_cpu() - cpu


def _first_step_graph():
    graph = af.Graph()
    with graph.as_default(), af.device("/job:worker/task:0"):
        x = af.placeholder(af.float32, [4], name="x")
        total = af.reduce_sum(x * 2.0, name="total")
    return graph, x, total


async def _first_step(spec):
    graph, x, total = _first_step_graph()
    async with af.Session(graph=graph, cluster=spec) as sess:
        got = await sess.run(total, {x: np.ones(4, np.float32)},
                             options=af.RunOptions(timeout_in_ms=int(DEADLINE_S * 1000)))
    assert got == 8.0, got


def time_worker(tree):
    """(s to "listening on", s to the first step's result) of a fresh CLI worker of ``tree``."""
    spec = {"worker": [f"127.0.0.1:{port}" for port in free_ports(1)]}
    with tempfile.TemporaryDirectory() as data_dir:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "asyncflow", "worker", "--cluster", json.dumps(spec),
             "--job", "worker", "--task", "0", "--log-level", "WARNING", "--data-dir", data_dir],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tree), cwd=tree)
        try:
            deadline = start + DEADLINE_S
            while True:
                ready, _, _ = select.select([proc.stdout], [], [],
                                            max(deadline - time.perf_counter(), 0))
                if not ready:
                    raise TimeoutError(f"the worker of {tree} did not listen in time")
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"the worker of {tree} exited: {proc.wait()} "
                                       f"{proc.stderr.read()[-2000:]}")
                if "listening on" in line:
                    break
            listening = time.perf_counter() - start
            trio.run(_first_step, spec)
            return listening, time.perf_counter() - start
        finally:
            proc.kill()
            proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", help="a checkout of an earlier commit to compare with")
    args = parser.parse_args()
    trees = {"this": ROOT}
    if args.baseline:
        trees = {"baseline": os.path.abspath(args.baseline), **trees}
    time_worker(ROOT)  # untimed: the client's own first Session (its imports, first compile)
    results = {name: {"numpy": [], "import": [], "import_cpu": [], "listening": [], "step": []}
               for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            row = results[name]
            row["numpy"].append(time_import(tree, "numpy")[0])
            wall, cpu = time_import(tree, "asyncflow")
            row["import"].append(wall)
            row["import_cpu"].append(cpu)
            listening, step = time_worker(tree)
            row["listening"].append(listening)
            row["step"].append(step)
    print(f"best of {args.rounds} fresh processes, seconds (load {os.getloadavg()[0]:.1f})")
    header = ["import numpy", "import asyncflow", "its CPU", "worker listening",
              "worker first step"]
    print(f"{'tree':>10} " + " ".join(f"{h:>18}" for h in header))
    for name, row in results.items():
        cells = [min(row[k]) for k in ("numpy", "import", "import_cpu", "listening", "step")]
        print(f"{name:>10} " + " ".join(f"{c:18.3f}" for c in cells))
    if args.baseline:
        cells = [min(results["baseline"][k]) / min(results["this"][k])
                 for k in ("numpy", "import", "import_cpu", "listening", "step")]
        print(f"{'base/this':>10} " + " ".join(f"{c:18.2f}" for c in cells))


if __name__ == "__main__":
    main()
