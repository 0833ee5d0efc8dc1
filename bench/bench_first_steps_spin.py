"""The join spin's background compile (``exec/join_spin.py``) against a process's first steps:
fresh processes, alternated, each importing asyncflow, building bench_models' MLP (or
autoencoder) and timing its first steps one by one, with the spins as they are (A) or
``SPIN_US = 0`` set before the session (B: no compile thread, every split sleeps, as before
the spins).

Per form: the median over processes of ``import asyncflow`` (s), the first step (the plan's
compile, ms), the sum of steps 2-10 and 11-``--steps`` (ms), and in how many processes the
spin's loops were ready by the end. Ratios B / A beside them; A/A with ``--aa``.

    .venv/bin/python bench/bench_first_steps_spin.py [--model mlp] [--procs 6] [--steps 40]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, sys, time
began = time.perf_counter()
import asyncflow as af
imported = time.perf_counter() - began
sys.path.insert(0, HERE)
import trio
import form_rounds
from asyncflow.exec import join_spin
if OFF:
    join_spin.SPIN_US = 0.0

async def main():
    graph, feed, loss, train, init = form_rounds.build(af, MODEL)
    async with af.Session(graph=graph) as sess:
        await sess.run(init)
        times = []
        for _ in range(STEPS):
            start = time.perf_counter()
            await sess.run([loss, train], feed)
            times.append((time.perf_counter() - start) * 1e3)
    return times
times = trio.run(main)
print(json.dumps({"import": imported, "times": times, "ready": bool(join_spin._functions)}))
"""


def child(model, steps, off):
    code = (CHILD.replace("HERE", repr(HERE)).replace("OFF", repr(off))
            .replace("MODEL", repr(model)).replace("STEPS", str(steps)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--procs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--aa", action="store_true", help="B as A (the spins on in both)")
    args = parser.parse_args(argv)
    forms = {"A": False, "B": not args.aa}
    runs = {"A": [], "B": []}
    for index in range(args.procs):
        for form in ("A", "B") if index % 2 == 0 else ("B", "A"):
            runs[form].append(child(args.model, args.steps, forms[form]))
    print(f"{args.model}: {args.procs} processes a form, {args.steps} steps each; "
          f"B: {'A/A' if args.aa else 'SPIN_US=0 (no compile thread)'}")
    figures = {}
    for form, records in runs.items():
        figures[form] = {
            "import s": statistics.median(r["import"] for r in records),
            "step 1 ms": statistics.median(r["times"][0] for r in records),
            "steps 2-10 ms": statistics.median(sum(r["times"][1:10]) for r in records),
            f"steps 11-{args.steps} ms": statistics.median(sum(r["times"][10:])
                                                          for r in records)}
        ready = sum(r["ready"] for r in records)
        print(f"  {form}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures[form].items())
              + f"; loops ready {ready} of {len(records)}")
    print("  B / A: " + ", ".join(f"{k} {figures['B'][k] / figures['A'][k]:.3f}"
                                  for k in figures["A"]))


if __name__ == "__main__":
    main()
