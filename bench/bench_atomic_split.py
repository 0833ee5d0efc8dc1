"""What an atomic split (``IntraOpPool.run(..., atomic=True)``: a Ctrl-C held until every
chunk ran, the dense applies' splits) costs against a plain one, on the main thread where it
swaps SIGINT's handler and back: splits of ``--chunks`` chunks, alternated in one process
round by round (the order swapped each round), with an A/A beside.

Each round times ``--splits`` splits of a form; the figure is the median round's time per
split, and the ratio of the round-by-round medians B / A (B: atomic) and A / A.

    .venv/bin/python bench/bench_atomic_split.py [--rounds 20] [--splits 2000]
        [--work 0] [--chunks 2] [--before FILE]

``--work``: elements of a numpy add each chunk does (0: empty chunks, the hand-off only).
``--before``: another version's ``exec/intra_op.py`` (``git show REV:asyncflow/exec/intra_op.py``
written to a file), whose plain split joins the rounds as O: O / A is what this version's plain
split gained or lost against it (a pool of each, the same chunks).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import time

import numpy as np

from asyncflow.exec import intra_op


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--splits", type=int, default=2000)
    parser.add_argument("--work", type=int, default=0)
    parser.add_argument("--chunks", type=int, default=2)
    parser.add_argument("--before", default=None)
    args = parser.parse_args(argv)
    pool = intra_op.IntraOpPool(2)
    before = _load(args.before).IntraOpPool(2) if args.before else None
    a = np.ones(max(1, args.work * args.chunks), np.float32)
    out = np.empty_like(a)
    per = max(1, args.work)

    def chunk(start, stop):
        if args.work:
            np.add(a[start * per:stop * per], 1, out=out[start * per:stop * per])
    bounds = [(i, i + 1) for i in range(args.chunks)]

    def timed(atomic):
        if atomic is None:  # the other version's plain split
            return timed_plain(before.run)
        if not atomic:
            return timed_plain(pool.run)
        run = pool.run
        begin = time.perf_counter()
        for _ in range(args.splits):
            run(chunk, bounds, atomic=True)
        return (time.perf_counter() - begin) / args.splits * 1e6

    def timed_plain(run):
        begin = time.perf_counter()
        for _ in range(args.splits):
            run(chunk, bounds)
        return (time.perf_counter() - begin) / args.splits * 1e6
    forms = {"A": False, "B": True, "A2": False}
    if before is not None:
        forms["O"] = None
    times = {name: [] for name in forms}
    for _ in range(3):
        for atomic in forms.values():
            timed(atomic)
    for index in range(args.rounds):
        order = list(forms) if index % 2 == 0 else list(reversed(forms))
        for name in order:
            times[name].append(timed(forms[name]))
    pool.close(30)
    if before is not None:
        before.close(30)
    for name in forms:
        print(f"{name:>2} (atomic={forms[name]}): median round {statistics.median(times[name]):.2f}"
              f" us a split, best {min(times[name]):.2f}")
    ab = statistics.median(b / a for a, b in zip(times["A"], times["B"]))
    aa = statistics.median(b / a for a, b in zip(times["A"], times["A2"]))
    lower = sum(b < a for a, b in zip(times["A"], times["B"]))
    print(f"B / A (round by round, median) {ab:.3f} (B lower in {lower} of {args.rounds});"
          f" A2 / A {aa:.3f}")
    if before is not None:
        oa = statistics.median(o / a for a, o in zip(times["A"], times["O"]))
        print(f"O / A (the other version's plain split against this one's) {oa:.3f}")


def _load(path):
    spec = importlib.util.spec_from_file_location("intra_op_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main()
