"""The session's own Python a step (``Session.run``, ``prepare``, the result), this tree
against another, alternated, with an A/A beside it.

For each form of ``--forms`` (``this`` or ``base``: ``--baseline-tree``'s export, run from it
with it first on ``PYTHONPATH``), in turn and ``--pairs`` times over, a child process measures
on a local session (no workers: the session's part of a step, not the transport's)

* **trivial**: ``await sess.run(t)`` of a one-op fetch, unfed (``bench_foundation.py``'s (c));
* **fed**: ``await sess.run(p * 2.0, {p: 1.0})``, a Python float fed to a float scalar (the
  trivial remote step's feed and fetch, ``bench_vs_tf1.py``);
* **prepare** and **result**: ``sess.prepare(...)`` and ``PreparedRun.result`` of the fed step
  alone;

each the median of ``--rounds`` rounds of ``--steps`` calls (us a call). Printed per turn: each
form's figures; then per workload the ratio of adjacent forms (the later over the earlier:
``this`` over ``base`` or the reverse in an A/B, either over itself in an A/A).

Run: ``.venv/bin/python bench/bench_session_ab.py --baseline-tree <before>
[--forms this,base,this,base] [--pairs 3] [--steps 2000] [--rounds 15]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


async def _child_measure(args):
    import numpy as np
    import trio

    import asyncflow as af
    out = {}
    with af.Graph().as_default():
        t = af.constant(1.0) + 1.0
        p = af.placeholder(af.float32, [], name="p")
        doubled = p * 2.0
        async with af.Session() as sess:
            feed = {p: 1.0}
            request = sess.prepare(doubled, feed)
            computed = [np.float32(2.0)]

            async def trivial():
                await sess.run(t)

            async def fed():
                await sess.run(doubled, feed)

            async def prepare():
                sess.prepare(doubled, feed)

            async def result():
                request.result(computed)

            for name, call in (("trivial", trivial), ("fed", fed), ("prepare", prepare),
                               ("result", result)):
                rounds = []
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    for _ in range(args.steps):
                        await call()
                    rounds.append((time.perf_counter() - started) / args.steps * 1e6)
                out[name] = statistics.median(rounds)
                await trio.lowlevel.checkpoint()
    return out


def child(args):
    import trio
    print(json.dumps(trio.run(_child_measure, args)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--forms", default="this,base,this,base")
    parser.add_argument("--pairs", type=int, default=3, help="times over the forms")
    parser.add_argument("--steps", type=int, default=2000, help="calls a round")
    parser.add_argument("--rounds", type=int, default=15, help="rounds a workload (median)")
    parser.add_argument("--baseline-tree", default="", help="another tree, for form base")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    forms = args.forms.split(",")
    ratios = {}
    for turn in range(args.pairs):
        figures = []
        for form in forms:
            script, env = os.path.abspath(__file__), dict(os.environ)
            tree = os.path.dirname(os.path.dirname(script))
            if form == "base":
                if not args.baseline_tree:
                    parser.error("form base: --baseline-tree is due")
                tree = os.path.abspath(args.baseline_tree)
                env["PYTHONPATH"] = os.pathsep.join(
                    filter(None, [tree, os.environ.get("PYTHONPATH", "")]))
            elif form != "this":
                parser.error(f"form {form}: this or base")
            result = subprocess.run([sys.executable, script, "--child", "--steps",
                                     str(args.steps), "--rounds", str(args.rounds)],
                                    capture_output=True, text=True, env=env, cwd=tree)
            if result.returncode:
                print(f"form {form} failed: {result.stderr[-2000:]}")
                return
            out = json.loads(result.stdout.strip().splitlines()[-1])
            figures.append(out)
            print(f"turn {turn + 1} {form:>4}: " + ", ".join(
                f"{name} {us:.3f} us" for name, us in out.items()), flush=True)
        for i in range(1, len(forms)):
            pair = f"{forms[i]}/{forms[i - 1]}"
            for name in figures[i]:
                ratios.setdefault((pair, name), []).append(figures[i][name]
                                                           / figures[i - 1][name])
    for (pair, name), values in sorted(ratios.items()):
        print(f"{pair:>10} {name:<8} ratio median {statistics.median(values):.3f} "
              f"(range {min(values):.3f}-{max(values):.3f}, {len(values)} pairs)")


if __name__ == "__main__":
    main()
