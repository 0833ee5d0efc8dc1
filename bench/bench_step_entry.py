"""A local step's entry and exit: from ``Session.run``'s call to its kernels, and back.

One session of ``bench_models.py``'s MLP training step (``[loss, train_op]`` fed the batch),
its static plan's kernels wrapped (each records when it starts and ends; a few microseconds
a kernel, the same in every tree). Per step: the time from the ``Session.run`` call to the
first kernel (a VariableV2) and to the first GEMM (what the variables' reads cost before
it), and from the last kernel's end until ``run`` returns. Medians and p10 over ``--steps``
warmed-up steps.

    python bench/bench_step_entry.py [--steps 300]
    python bench/bench_step_entry.py --trees OLD NEW [--rounds 2]

``--trees`` runs a fresh process per tree (``PYTHONPATH=TREE``), alternating OLD, NEW, ...,
and prints each figure's median over the rounds per tree and NEW / OLD. BLAS on one thread.
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

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (the models, written once)

FIGURES = ("to first kernel", "to first GEMM", "after last kernel", "step")


async def measure(steps):
    """``{figure: (median, p10)}`` in microseconds for the asyncflow this process imports."""
    import asyncflow as af

    clock = time.perf_counter
    marks = {}
    graph = af.Graph()
    with graph.as_default():
        rng = np.random.default_rng(0)
        feeds, loss, train = bench_models.build(af, "mlp", bench_models.weights("mlp", rng))
        init = af.global_variables_initializer()
        feed = dict(zip(feeds, bench_models.data("mlp", rng)))
    async with af.Session(graph=graph) as sess:
        await sess.run(init)
        for _ in range(20):
            await sess.run([loss, train], feed)
        plans = [compiled.runner.plan for compiled in sess._cache.values()
                 if getattr(compiled.runner, "plan", None) is not None]
        env = max(plans, key=lambda plan: plan.num_slots).static_fn.__globals__

        def wrap(name, kernel):
            gemm = "MatMul" in name

            def timed(*args):
                start = clock()
                marks.setdefault("first", start)
                if gemm:
                    marks.setdefault("gemm", start)
                try:
                    return kernel(*args)
                finally:
                    marks["last"] = clock()
            return timed
        for name in [name for name in env if name.startswith("F_")]:
            env[name] = wrap(name, env[name])
        runs = {figure: [] for figure in FIGURES}
        for _ in range(steps):
            marks.clear()
            start = clock()
            await sess.run([loss, train], feed)
            end = clock()
            runs["to first kernel"].append(marks["first"] - start)
            runs["to first GEMM"].append(marks["gemm"] - start)
            runs["after last kernel"].append(end - marks["last"])
            runs["step"].append(end - start)
    return {figure: (statistics.median(values) * 1e6,
                     sorted(values)[len(values) // 10] * 1e6)
            for figure, values in runs.items()}


def compare(trees, rounds, steps):
    runs = {tree: [] for tree in trees}
    for round_index in range(rounds):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--json",
                                   "--steps", str(steps)], env=env, capture_output=True,
                                  text=True, check=False)
            if done.returncode:
                sys.stderr.write(done.stdout + done.stderr)
                raise SystemExit(f"measuring {tree} failed (exit {done.returncode})")
            runs[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {round_index + 1}/{rounds}: {tree}, load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
    old, new = trees[0], trees[-1]
    print(f"\n{'us, median of rounds (their p10)':<34}" + "".join(
        f" {os.path.basename(os.path.normpath(t)) or t:>18}" for t in trees) + "  new/old")
    for figure in FIGURES:
        cells = {t: (statistics.median(r[figure][0] for r in runs[t]),
                     statistics.median(r[figure][1] for r in runs[t])) for t in trees}
        print(f"{figure:<34}" + "".join(
            f" {cells[t][0]:>9.1f} ({cells[t][1]:>6.1f})" for t in trees)
            + f"  {cells[new][0] / cells[old][0]:>7.2f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--trees", nargs="+", metavar="TREE")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.trees:
        compare(args.trees, args.rounds, args.steps)
        return
    import trio

    figures = trio.run(measure, args.steps)
    if args.json:
        print(json.dumps(figures))
        return
    for figure, (median, p10) in figures.items():
        print(f"{figure:<20} median {median:8.1f} us, p10 {p10:8.1f} us")


if __name__ == "__main__":
    main()
