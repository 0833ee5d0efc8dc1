"""Benchmark: saving and restoring a 1 GiB model, time and peak memory, vs plain numpy files.

The model is ``--variables`` float32 Variables of ``--mib`` MiB each (default 16 x 64 MiB =
1 GiB). Every measurement runs in a fresh subprocess so one cannot inherit another's memory:

- ``numpy save`` / ``numpy load``: the baseline, ``np.save`` of the same arrays to one ``.npy``
  file each and ``np.load`` of them back (no fsync, no atomic rename).
- ``Saver.save``: ``af.train.Saver().save(sess, path, write_meta_graph=False)`` on variables
  initialised with ``af.ones`` (pages touched, so the values really sit in memory).
- ``Saver.restore``: a fresh session restores the file the save wrote into uninitialised
  variables, then reads one element so the values are known to be there.

Each row gives the median wall time (and range), the throughput, and the median CPU time of
all the process's threads (steadier than wall time on a loaded machine).

Peak memory: the child writes ``5`` to ``/proc/self/clear_refs`` just before the measured call,
which resets the kernel's high-water mark, and reads ``VmHWM`` right after it; the figure
printed is that peak minus the resident size just before (what the save or restore added).
The high-water mark counts every resident page, file-backed mapped pages too (a memory-mapped
reader's pages count while they are mapped). Restores read files the save just wrote, so they
come mostly from the page cache (dropping it needs root).

Files go to a temporary directory under ``--dir`` (default: the system's), deleted at the end.
Run: ``python bench/bench_checkpoint.py [--variables N] [--mib M] [--repeats R]``;
``--against OTHER_PYTHONPATH`` also measures another checkout's Saver, interleaved with this
one's in the same run (a before/after comparison on a noisy machine).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def _status(key):
    with open("/proc/self/status") as fileobj:
        for line in fileobj:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def _reset_peak():
    """The resident size now, after resetting the high-water mark VmHWM to it."""
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as fileobj:
        fileobj.write("5")
    return before


def _measure(call):
    """``(seconds, CPU seconds of every thread, bytes added at the peak)`` of ``call()``."""
    before = _reset_peak()
    start, cpu = time.perf_counter(), time.process_time()
    call()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, _status("VmHWM") - before


async def _ameasure(call):
    """``_measure`` of an async call, from inside trio."""
    before = _reset_peak()
    start, cpu = time.perf_counter(), time.process_time()
    await call()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, _status("VmHWM") - before


def _shape(mib):
    count = mib * 1024 * 1024 // 4
    return [count // 1024, 1024]


def _child_numpy(kind, directory, variables, mib):
    names = [os.path.join(directory, f"v{i}.npy") for i in range(variables)]
    if kind == "numpy_save":
        arrays = [np.ones(_shape(mib), np.float32) for _ in range(variables)]

        def call():
            for name, array in zip(names, arrays):
                np.save(name, array)
    else:
        loaded = []

        def call():
            loaded.extend(np.load(name) for name in names)
    return _measure(call)


def _child_asyncflow(kind, directory, variables, mib):
    import trio

    import asyncflow as af
    path = os.path.join(directory, "model")
    with af.Graph().as_default():
        weights = [af.Variable(af.ones(_shape(mib)), name=f"v{i}") for i in range(variables)]
        saver = af.train.Saver()
        probe = weights[-1][0, 0]

        async def main():
            async with af.Session() as sess:
                if kind == "af_save":
                    await sess.run(af.global_variables_initializer())
                    return await _ameasure(lambda: saver.save(sess, path, write_meta_graph=False))
                measured = await _ameasure(lambda: saver.restore(sess, path))
                if await sess.run(probe) != 1.0:
                    raise AssertionError("the restored value is not the saved one")
                return measured
        return trio.run(main)


def child(argv):
    kind, directory, variables, mib = argv[0], argv[1], int(argv[2]), int(argv[3])
    run = _child_numpy if kind.startswith("numpy") else _child_asyncflow
    seconds, cpu, peak = run(kind, directory, variables, mib)
    print(json.dumps({"seconds": seconds, "cpu": cpu, "peak": peak}))


def _run_child(kind, directory, args, pythonpath=None):
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    result = subprocess.run(
        [sys.executable, __file__, "--child", kind, directory, str(args.variables), str(args.mib)],
        capture_output=True, text=True, check=False, env=env)
    if result.returncode:
        raise RuntimeError(f"{kind} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variables", type=int, default=16)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the temporary directory goes")
    parser.add_argument("--against", default=None, metavar="PYTHONPATH",
                        help="also measure the asyncflow found on this PYTHONPATH (another "
                        "checkout), interleaved with this one, as 'against' rows")
    args = parser.parse_args()
    total = args.variables * args.mib
    print(f"model: {args.variables} float32 variables x {args.mib} MiB = {total} MiB; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    directory = tempfile.mkdtemp(prefix="bench_checkpoint.", dir=args.dir)
    results = {}
    try:
        for _ in range(args.repeats):
            for kind in ("numpy_save", "numpy_load", "af_save", "af_restore"):
                results.setdefault(kind, []).append(_run_child(kind, directory, args))
            if args.against is not None:  # its own files: it may write another format
                other = os.path.join(directory, "against")
                os.makedirs(other, exist_ok=True)
                for kind in ("af_save", "af_restore"):
                    results.setdefault(kind + "_against", []).append(
                        _run_child(kind, other, args, args.against))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    mib = 1024 * 1024
    labels = {"numpy_save": "numpy save", "numpy_load": "numpy load",
              "af_save": "Saver.save", "af_restore": "Saver.restore",
              "af_save_against": "(against) save", "af_restore_against": "(against) restore"}
    for kind, rows in results.items():
        times = [r["seconds"] for r in rows]
        cpu = statistics.median(r["cpu"] for r in rows)
        peaks = [r["peak"] / mib for r in rows]
        print(f"{labels[kind]:>17}: {statistics.median(times):6.2f} s "
              f"({min(times):.2f}-{max(times):.2f}), {total / statistics.median(times):5.0f} MiB/s, "
              f"CPU {cpu:5.2f} s; "
              f"peak added {statistics.median(peaks):6.0f} MiB "
              f"({min(peaks):.0f}-{max(peaks):.0f}), {statistics.median(peaks) / total:.2f}x the model")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
