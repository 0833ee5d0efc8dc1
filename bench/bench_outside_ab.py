"""A module setting against another in the dense models' time *outside kernels*, alternated in
one process (issue 37): bench_step_gaps.py's pieces (entry, exit, the gaps between the loop
thread's kernels by kind) with bench_ab_setting.py's forms (a session a form, built and
compiled with its form in use; rounds alternating A, the tree as it is, and B, ``--set
MODULE:NAME=VALUE``, the order swapped each round).

Every kernel is wrapped by bench_model_timeline's recorder (a few us a kernel of its own, the
same in both forms), so the step's wall is longer than bench_ab_setting's; what this shows is
where a change of the executor's own lines lands, which a whole step's noise hides. Per model
and form: the medians over the rounds of each round's median piece (us), then, round by
round, B - A of the outside total and of the "other" gaps (the generated code's own lines:
arguments, offload tests, stores, slice checks), and in how many rounds B's was larger.

    .venv/bin/python bench/bench_outside_ab.py --set "asyncflow.exec.plan:MEMO_COSTS=False" \\
        [--models mlp,autoencoder] [--rounds 16] [--steps 20]
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_model_timeline  # noqa: E402  (its kernel recorder)
import bench_step_gaps  # noqa: E402  (a step's pieces: classify)
import form_rounds  # noqa: E402  (the models, a session a form)

FORMS = ("A", "B")
PIECES = ("wall", "entry", "exit", "gaps checkpoint", "gaps hand-off", "gaps other")


def outside(row):
    return row["entry"] + row["exit"] + row["gaps all"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", required=True, action="append", metavar="MODULE:NAME=VALUE")
    parser.add_argument("--models", default="mlp,autoencoder")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.exec import timeslice

    use = form_rounds.setting_forms(args.set)
    rec = bench_model_timeline.Recorder()
    rec.install()  # (every plan compiled from here on has its kernels wrapped)
    pauses = []
    original = timeslice.checkpoint
    loop = threading.get_ident()

    async def checkpoint():
        start = time.perf_counter()
        await original()
        pauses.append((start, time.perf_counter()))

    async def pieces(sess, fetches, feed, steps):
        """A round's figure: each piece's median over ``steps`` steps (seconds)."""
        rows = []
        for _ in range(steps):
            rec.clear()
            pauses.clear()
            start = time.perf_counter()
            await sess.run(fetches, feed)
            end = time.perf_counter()
            rows.append(bench_step_gaps.classify(rec, pauses, loop, start, end))
        piece = {key: float(np.median([row[key] for row in rows])) for key in PIECES}
        piece["outside"] = float(np.median([outside(row) for row in rows]))
        return piece

    async def model_rounds(model):
        timeslice.checkpoint = checkpoint
        try:
            return await form_rounds.model_rounds(af, model, FORMS, use, rounds=args.rounds,
                                                  steps=args.steps, warmup=args.warmup,
                                                  measure=pieces)
        finally:
            timeslice.checkpoint = original

    async def run():
        print(f"load average at start: {os.getloadavg()}; B: {', '.join(args.set)}")
        for model in args.models.split(","):
            out = await model_rounds(model)
            print(f"{model}: {args.rounds} rounds of {args.steps} steps, medians over the rounds "
                  "of each round's median (us; the wall in ms)")
            for form in FORMS:
                cells = [f"{key} {np.median([r[key] for r in out[form]]) * 1e6:.0f}"
                         for key in PIECES[1:] + ("outside",)]
                print(f"  {form}: wall {np.median([r['wall'] for r in out[form]]) * 1e3:.3f}; "
                      + ", ".join(cells))
            for key in ("outside", "gaps other", "wall"):
                diffs = [(b[key] - a[key]) * 1e6 for a, b in zip(out["A"], out["B"])]
                print(f"  B - A {key}: round by round median {np.median(diffs):+.1f} us "
                      f"(rounds: {' '.join(f'{d:+.0f}' for d in diffs)}); B larger in "
                      f"{sum(d > 0 for d in diffs)} of {len(diffs)}")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
