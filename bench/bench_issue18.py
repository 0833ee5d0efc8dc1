"""Issue 18's no-regression check: the listed benchmarks, one process per tree, in one table.

Issue 18 rewrites the code that runs plans; its target is that no benchmark gets slower and
that the per-op cost stays flat in graph size. This runs, in one process, the figures it
lists by calling the existing benchmark scripts' functions (nothing is measured differently
from ``make bench``, only fewer rounds):

==================  ==========================================================================
chain               ``bench_foundation``: 1000 dependent ``x + 1``, us per op (median)
wide                ``bench_foundation``: 1000 independent ops + add_n, us per op (median)
trivial             ``bench_foundation``: one ``Session.run`` of a one-op fetch, us (median)
chain 25k/2.5k      ``bench_foundation`` sweep: per-op CPU cost at 25,000 ops over 2,500 (x)
MLP step            ``bench_training``: digits MLP SGD step, ms of process CPU (median)
Send/Recv edge      ``bench_devices``: added process CPU per crossing edge, us (median)
queue runs          ``bench_queues``: one item per run, producer + consumer, runs/s (best of 3)
batching trio       ``bench_serving``: 1,000 one-row requests, Batcher (128) req/s over
                    one run each (x, median of rounds)
batching asyncio    the same through ``aio.Batcher`` (x)
while iteration     ``bench_while``: one of 10,000 ``i + 1`` iterations over one chain op,
                    both process CPU (x)
while dynamic       the same loop (2,000 iterations) on the general frame path (x)
==================  ==========================================================================

Usage (from the repository root of the tree to measure, or with ``PYTHONPATH`` naming it):

* ``python bench/bench_issue18.py``: measure the tree ``asyncflow`` is imported from; print
  the table (``--json`` prints the figures as one JSON object instead).
* ``python bench/bench_issue18.py --trees OLD NEW [--rounds 3]``: run the measurement above
  in a fresh process per tree (``PYTHONPATH=TREE``), alternating OLD, NEW, OLD, NEW ... so
  the machine's load phases hit both alike; print each figure's median per tree and the
  ratio NEW / OLD with the direction that is better. The scripts imported are this file's
  neighbours, whichever tree is measured: they use only the public API.

BLAS runs on one thread (set before numpy is imported), as in ``bench_serving`` and the
recorded MLP figures (``OPENBLAS_NUM_THREADS=1``).
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (unit, better): "lower" or "higher"
FIGURES = {
    "chain": ("us/op", "lower"),
    "wide": ("us/op", "lower"),
    "trivial": ("us/run", "lower"),
    "chain 25k/2.5k": ("x", "lower"),
    "MLP step": ("ms cpu", "lower"),
    "Send/Recv edge": ("us cpu", "lower"),
    "queue runs": ("runs/s", "higher"),
    "batching trio": ("x", "higher"),
    "batching asyncio": ("x", "higher"),
    "while iteration": ("x chain op", "lower"),
    "while dynamic": ("x chain op", "lower"),
}


def measure():
    """Every figure of ``FIGURES`` for the asyncflow this process imports."""
    import trio

    import bench_devices
    import bench_foundation
    import bench_queues
    import bench_serving
    import bench_training

    figures = {}
    found = trio.run(bench_foundation.measure)
    for name in ("chain", "wide"):
        figures[name] = found[name][0][1] / bench_foundation.N * 1e6
    figures["trivial"] = found["trivial"][1] * 1e6
    sweep = trio.run(bench_foundation.chain_sweep)
    small, large = min(sweep), max(sweep)
    figures["chain 25k/2.5k"] = (statistics.median(sweep[large][0])
                                 / statistics.median(sweep[small][0]))

    _, _, af_cpu, _ = trio.run(bench_training.step_times, 5)
    figures["MLP step"] = statistics.median(af_cpu) * 1e3

    edges = 200
    _, edge_cpu = trio.run(bench_devices.edge_cost, edges)
    figures["Send/Recv edge"] = (edge_cpu["crossing"] - edge_cpu["local"]) / edges * 1e6

    figures["queue runs"] = max(trio.run(bench_queues.exchange_rate, 5000, 1)["runs_per_s"]
                                for _ in range(3))

    for label, result in (
            ("batching trio", trio.run(bench_serving.batching_trio, 1000, 3, 128)),
            ("batching asyncio", asyncio.run(bench_serving.batching_asyncio(1000, 3, 128)))):
        out, _ = result
        batched = bench_serving.median_result(out["batched"])["req_per_s"]
        unbatched = bench_serving.median_result(out["unbatched"])["req_per_s"]
        figures[label] = batched / unbatched

    try:
        import bench_while
    except ImportError as exc:  # it also reaches into the runtime, which issue 18 reshapes
        print(f"bench_while not importable against this tree ({exc}): no while figure",
              file=sys.stderr)
        figures["while iteration"] = figures["while dynamic"] = float("nan")
    else:
        figures["while iteration"] = trio.run(_while_ratio, bench_while)
        figures["while dynamic"] = trio.run(_while_ratio, bench_while, 2_000, 3, False)
    return figures


def _loop_config(compiled):
    """A SessionConfig for the compiled or the general frame path, in either tree."""
    import asyncflow as af

    try:
        return af.SessionConfig(compile_loops=compiled)
    except TypeError:  # a tree from before the option: its module flag
        from asyncflow.exec import frames
        frames.COMPILE_LOOPS = compiled
        return af.SessionConfig()


async def _while_ratio(bench_while, iterations=10_000, repeats=3, compiled=True):
    import asyncflow as af
    import numpy as np

    loop_graph, loop_result = bench_while.build_loop(iterations)
    chain_graph, x0, chain = bench_while.build_chain()
    feed = {x0: np.zeros(1, np.float32)}
    async with af.Session(graph=loop_graph, config=_loop_config(compiled)) as loop_sess, \
            af.Session(graph=chain_graph) as chain_sess:
        assert await loop_sess.run(loop_result) == iterations
        await chain_sess.run(chain, feed)
        _, chain_cpu = await bench_while.best_of(lambda: chain_sess.run(chain, feed),
                                                 repeats * 10)
        _, loop_cpu = await bench_while.best_of(lambda: loop_sess.run(loop_result), repeats)
    return (loop_cpu / iterations) / (chain_cpu / 1000)


def print_table(figures):
    print(f"{'benchmark':<18} {'figure':>10}  unit")
    for name, (unit, better) in FIGURES.items():
        print(f"{name:<18} {figures[name]:>10.3f}  {unit} ({better} is better)")


def compare(trees, rounds):
    """Alternate a fresh measuring process per tree, ``rounds`` times; print the medians."""
    runs = {tree: [] for tree in trees}
    for round_index in range(rounds):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            start = time.perf_counter()
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--json"],
                                  env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                sys.stderr.write(done.stdout + done.stderr)
                raise SystemExit(f"measuring {tree} failed (exit {done.returncode})")
            runs[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {round_index + 1}/{rounds}: {tree} measured in "
                  f"{time.perf_counter() - start:.0f} s, load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
    old, new = trees[0], trees[-1]
    header = "".join(f" {os.path.basename(os.path.normpath(t)) or t:>14}" for t in trees)
    print(f"\n{'benchmark':<18}{header} {'new/old':>8}  unit (better)   median of {rounds}; "
          "[min-max]")
    for name, (unit, better) in FIGURES.items():
        medians = {t: statistics.median(r[name] for r in runs[t]) for t in trees}
        spread = "  ".join(f"[{min(r[name] for r in runs[t]):.3g}-"
                           f"{max(r[name] for r in runs[t]):.3g}]" for t in trees)
        cells = "".join(f" {medians[t]:>14.3f}" for t in trees)
        print(f"{name:<18}{cells} {medians[new] / medians[old]:>8.2f}  {unit} ({better})  "
              f"{spread}")


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
    sys.path.insert(0, HERE)
    figures = measure()
    if args.json:
        print(json.dumps(figures))
    else:
        print_table(figures)


if __name__ == "__main__":
    main()
