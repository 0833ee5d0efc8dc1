"""Dense optimizer applies in pairs (``asyncflow/exec/pairs.py``) against one after the other,
in one process.

For each model (bench_models.py's MLP and autoencoder), two sessions of the same seeded graph,
static schedules in one lane (``lanes.ENABLED = False``: the autoencoder's default plan takes
two lanes, whose lane 1 already runs its applies beside lane 0): one built with applies
never paired (``pairs.APPLY_PAIR_MIN`` out of reach), one as the tree builds it. Their
training steps alternate round by round; per form the best round's mean step, its CPU ms a
step, the median round, and whether the first steps' losses were the same bits; the per-round
ratios paired / one after the other and their median (steadier than the best rounds' ratio:
the rounds of one form swing by 10 % on a shared machine).

    python bench/bench_apply_pairs.py --models mlp,autoencoder --rounds 8 --steps 20
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (the models, written once)
from bench_lanes import session  # noqa: E402


async def compare(af, model, rounds, steps):
    from asyncflow.exec import lanes, pairs
    lanes.ENABLED = False
    keep = pairs.APPLY_PAIR_MIN
    runs = {}
    for form, minimum in (("one after the other", 1 << 62), ("paired", keep)):
        pairs.APPLY_PAIR_MIN = minimum  # read when the plan is built (the first run)
        runs[form] = await session(af, model)
        sess, feed, loss, train = runs[form]
        runs[form] += ([(await sess.run([loss, train], feed))[0] for _ in range(3)],)
    pairs.APPLY_PAIR_MIN = keep
    same = len({tuple(run[4]) for run in runs.values()}) == 1
    timed = {form: [] for form in runs}
    for _ in range(rounds):
        for form, (sess, feed, loss, train, _) in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                await sess.run([loss, train], feed)
            timed[form].append(((time.perf_counter() - wall) / steps * 1e3,
                                (time.process_time() - cpu) / steps * 1e3))
    for sess, *_ in runs.values():
        await sess.__aexit__(None, None, None)
    print(f"{model}: same losses {same}")
    for form, rows in timed.items():
        best = min(rows)
        print(f"  {form:>20}: best {best[0]:.3f} ms a step (CPU {best[1]:.3f} ms), median "
              f"{np.median([w for w, _ in rows]):.3f} ms")
    ratios = [p[0] / o[0] for p, o in zip(timed["paired"], timed["one after the other"])]
    print(f"  paired / one after the other, per round: "
          + ", ".join(f"{r:.3f}" for r in ratios) + f"; median {np.median(ratios):.3f}; "
          f"best rounds {min(timed['paired'])[0] / min(timed['one after the other'])[0]:.3f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,autoencoder")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        for model in args.models.split(","):
            if model not in bench_models.MODELS:
                raise SystemExit(f"unknown model {model!r}: one of {bench_models.MODELS}")
            await compare(af, model, args.rounds, args.steps)
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
