"""What a worker's PushTensors handler costs per request: the acceptance checks and the deposit.

The workload is the PS step's: four float32 tensors pushed in one request, (a) for a step whose
RunGraph has not started on the consumer (the ps's parameters reaching the worker: the step's
state is made by the push, its values parked) and (b) for a step whose RunGraph runs there
(the worker's gradients reaching the ps). The handler is called directly (no transport), on an
in-process ps/worker pair with the graph registered by a master, so what is timed is the
worker's own code: ``push_acceptance.py``'s checks, the step lookup or creation, the deposit.
States are cleared between batches, outside the timed region.

Usage (from the repository root of the tree to measure, or with ``PYTHONPATH`` naming it):

* ``python bench/bench_push_accept.py [--pushes 20000]``: microseconds per request, median
  over batches of 8 and the best batch, for (a) and (b).
* ``python bench/bench_push_accept.py --trees OLD NEW [--rounds 3]``: the same in a fresh
  process per tree (``PYTHONPATH=TREE``), alternating OLD, NEW, OLD, NEW ..., then NEW/OLD.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BATCH = 8  # pushes between clearings: a few steps in flight, as in a PS step


async def _measure(pushes):
    import numpy as np
    import trio

    import asyncflow as af
    from asyncflow.cluster import channels
    from asyncflow.cluster.master import Master
    from transports.messages import PushTensors, RegisterGraph, TensorEntry

    spec = af.ClusterSpec({"ps": ["inprocess:931"], "worker": ["inprocess:932"]})
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            x = af.placeholder(af.float32, [3], name="x")
            parts = [af.multiply(x, float(i), name=f"part{i}") for i in range(4)]
        with af.device("/job:worker/task:0"):
            total = af.add_n(parts, name="total")
    out = {}
    async with trio.open_nursery() as nursery:
        services = {}
        for job in ("ps", "worker"):
            server = await nursery.start(af.Server(spec, job, 0).serve)
            services[job] = server.service
        master = Master(spec, af.SessionConfig())
        await master.open()
        run = master.compile(graph, (x,), (total,), ())
        for tg in run.task_graphs:
            job = tg.task.split("/")[1][4:]
            channel = channels.connect(spec.task_address(job, 0))
            await channel.register_graph(RegisterGraph(tg.graph_def, "bench", tg.options))
        await master.close()
        worker = services["worker"]
        (wg,) = worker._graphs.values()
        ps_device, incarnation = services["ps"].device_names[0], services["ps"].incarnation
        keys = sorted(f"{ps_device};{incarnation:016x};{worker.device_names[0]};{name};0:0"
                      for name in wg.binding.pushed)
        value = np.ones(3, np.float32)
        for case in ("unbound", "bound"):
            per_batch = []
            step_id = 1
            for _ in range(max(1, pushes // BATCH)):
                requests = []
                for _ in range(BATCH):
                    step_id += 2
                    requests.append(PushTensors(step_id, [TensorEntry(k, value) for k in keys]))
                    if case == "bound":
                        state = worker._find_or_create(step_id)
                        state.rendezvous.binding = wg.binding
                started = time.perf_counter()
                for request in requests:
                    await worker.push_tensors(request)
                per_batch.append((time.perf_counter() - started) / BATCH * 1e6)
                worker._steps.clear()
                worker._tombstones.clear()
                if getattr(worker, "_parked", None):
                    worker._parked.clear()
                    worker._parked_bytes = 0
            per_batch.sort()
            out[case] = {"median_us": statistics.median(per_batch), "best_us": per_batch[0]}
        nursery.cancel_scope.cancel()
    return out


def measure(pushes):
    import trio
    return trio.run(_measure, pushes)


def compare(trees, rounds, pushes):
    runs = {tree: [] for tree in trees}
    for _ in range(rounds):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            result = subprocess.run([sys.executable, os.path.abspath(__file__), "--json",
                                     "--pushes", str(pushes)], env=env, cwd=tree,
                                    capture_output=True, text=True, timeout=600, check=True)
            runs[tree].append(json.loads(result.stdout.strip().splitlines()[-1]))
    old, new = trees[0], trees[-1]
    for case in ("unbound", "bound"):
        cells = []
        for tree in (old, new):
            medians = [r[case]["median_us"] for r in runs[tree]]
            cells.append(f"{statistics.median(medians):7.2f} us [{min(medians):.2f}-"
                         f"{max(medians):.2f}]")
        ratio = (statistics.median(r[case]["median_us"] for r in runs[new])
                 / statistics.median(r[case]["median_us"] for r in runs[old]))
        print(f"{case:8s} old {cells[0]}  new {cells[1]}  new/old {ratio:.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pushes", type=int, default=20000)
    parser.add_argument("--trees", nargs="+", metavar="TREE")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.trees:
        compare(args.trees, args.rounds, args.pushes)
        return
    result = measure(args.pushes)
    if args.json:
        print(json.dumps(result))
    else:
        for case, figures in result.items():
            print(f"{case:8s} {figures['median_us']:7.2f} us per push (best batch "
                  f"{figures['best_us']:.2f})")


if __name__ == "__main__":
    main()
