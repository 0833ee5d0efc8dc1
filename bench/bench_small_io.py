"""Benchmark: small IO kernels' thread hop (blocking IO kernels always run on a worker thread).

ReadFile of a 1 KiB file, ``Saver.save`` and ``Saver.restore`` of four small float32
variables (1 KiB each, ``write_meta_graph=False``): each a loop of ``--steps`` runs in one
session, the median of ``--repeats`` loops, in microseconds per run. Every measurement runs in
a fresh subprocess; ``--against OTHER_PYTHONPATH`` also measures another checkout (before the
IO kernels went to threads), interleaved with this one in the same run, and prints the ratio.

Run: ``python bench/bench_small_io.py [--steps N] [--repeats R] [--against PYTHONPATH]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

KINDS = ("read_file", "save", "restore")


def _child(kind, directory, steps):
    import numpy as np
    import trio

    import asyncflow as af
    from asyncflow.ops import io as io_ops

    small = os.path.join(directory, "small.bin")
    with open(small, "wb") as handle:
        handle.write(b"x" * 1024)
    prefix = os.path.join(directory, "model")
    with af.Graph().as_default():
        variables = [af.Variable(np.full(256, i, np.float32), name=f"v{i}") for i in range(4)]
        saver = af.train.Saver(variables)
        read = io_ops.read_file(small)

        async def main():
            async with af.Session() as sess:
                await sess.run(af.global_variables_initializer())
                await saver.save(sess, prefix, write_meta_graph=False)
                if kind == "read_file":
                    async def once():
                        await sess.run(read)
                elif kind == "save":
                    async def once():
                        await saver.save(sess, prefix, write_meta_graph=False)
                else:
                    async def once():
                        await saver.restore(sess, prefix)
                for _ in range(5):  # warm up: compiled plans, caches
                    await once()
                start = time.perf_counter()
                for _ in range(steps):
                    await once()
                return (time.perf_counter() - start) / steps * 1e6
        return trio.run(main)


def _measure(kind, steps, pythonpath):
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory() as directory:
        result = subprocess.run([sys.executable, __file__, "--child", kind, directory,
                                 str(steps)], capture_output=True, text=True, check=False,
                                env=env)
    if result.returncode:
        raise RuntimeError(f"{kind} failed:\n{result.stderr}")
    return float(result.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--against", default=None, metavar="PYTHONPATH")
    args = parser.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = {"this": here}
    if args.against:
        paths["against"] = args.against
    print(f"{'kernel':<10} " + " ".join(f"{name + ' us/run':>16}" for name in paths)
          + ("   this/against" if args.against else ""))
    for kind in KINDS:
        times = {name: [] for name in paths}
        for _ in range(args.repeats):
            for name, path in paths.items():  # interleaved: load drifts hit both alike
                times[name].append(_measure(kind, args.steps, path))
        medians = {name: statistics.median(values) for name, values in times.items()}
        line = f"{kind:<10} " + " ".join(f"{medians[name]:>16.1f}" for name in paths)
        if args.against:
            line += f"   {medians['this'] / medians['against']:.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
