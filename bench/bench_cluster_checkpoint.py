"""What keeping a checkpoint's files on the worker costs a Saver on a cluster (issue 36).

A ps and a worker run as ``asyncflow worker`` processes (loopback, one data directory); the
client saves variables that live on the ps with ``saver.save(sess, "ckpt/model", step)``:

* **on the worker** (what a Saver on a cluster does now): the Save step, then a
  ``CommitCheckpoint`` step that writes the ``.meta`` and the ``checkpoint`` state file beside
  the data on the ps (the meta graph's bytes travel in the feed);
* **client-side** (the former behaviour, still that of a Saver rebuilt from a meta graph
  without the bookkeeping ops): the Save step, then the ``.meta`` and the state file written
  by the client in its own folder.

Both write the same data file. Each figure is the median (and best) wall time per save over
``ROUNDS`` rounds of ``REPEATS`` saves, the two forms alternating in order from round to round.

Usage: ``python bench/bench_cluster_checkpoint.py [--mib 1 16]``
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, ".."))
sys.path.insert(0, os.path.join(_HERE, "..", "demos"))

import numpy as np  # noqa: E402
import trio  # noqa: E402

import asyncflow as af  # noqa: E402
from local_cluster import local_cluster  # noqa: E402

ROUNDS = 7
REPEATS = 5


def build(spec, mib):
    graph = af.Graph()
    with graph.as_default():
        with af.device(af.train.replica_device_setter(cluster=af.ClusterSpec(spec))):
            rows = max(1, int(mib * 2**20 / 4 / 256))
            # Initialized by ops (as a model's are), so the meta graph stays small.
            table = af.Variable(af.random_normal([rows, 256]), name="table")
            bias = af.Variable(af.zeros([256]), name="bias")
        saver = af.train.Saver(max_to_keep=2)
    return graph, [table, bias], saver


async def measure(spec, mib):
    graph, variables, saver = build(spec, mib)
    commit = saver._commit_op
    times = {"on the worker": [], "client-side": []}
    await af.Session.reset(spec)  # variables of another size may remain from the last run
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([v.initializer for v in variables])
        await saver.save(sess, "ckpt/model", global_step=0)  # warm: compiled runs
        saver._commit_op = None
        await saver.save(sess, "ckpt_client/model", global_step=0)
        step = 1
        for round_ in range(ROUNDS):
            order = list(times) if round_ % 2 == 0 else list(times)[::-1]
            for form in order:
                saver._commit_op = commit if form == "on the worker" else None
                prefix = "ckpt/model" if form == "on the worker" else "ckpt_client/model"
                start = time.perf_counter()
                for _ in range(REPEATS):
                    await saver.save(sess, prefix, global_step=step)
                    step += 1
                times[form].append((time.perf_counter() - start) / REPEATS)
    saver._commit_op = commit
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, nargs="+", default=[0.01, 16.0],
                        help="sizes of the saved variables, MiB")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as directory:
        os.chdir(directory)  # the client-side files land here; the data in the workers' dir
        with local_cluster({"ps": 1, "worker": 1}, data_dir=directory) as spec:
            for mib in args.mib:
                times = trio.run(measure, spec, mib)
                worker, client = times["on the worker"], times["client-side"]
                print(f"{mib:g} MiB: on the worker median {statistics.median(worker) * 1e3:.2f} "
                      f"ms (best {min(worker) * 1e3:.2f}), client-side median "
                      f"{statistics.median(client) * 1e3:.2f} ms (best {min(client) * 1e3:.2f}); "
                      f"ratio {statistics.median(worker) / statistics.median(client):.2f}x")
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
