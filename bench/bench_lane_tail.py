"""Lane 0's tail split over the pool again (``exec/lanes.py``, ``TAIL_SPLITS``), in one
process (issue 37).

For each model (bench_models.py's autoencoder; the MLP runs one lane, so its ratio is this
form's noise), two sessions of the same graph: one built with lane 0's tail run whole, as
before, one with its large kernels split over the pool's split workers. Their training steps
alternate round by round, the order swapped each round; per round each form's median step,
then the ratio of the best rounds and of the median rounds (split / whole) and whether the
two forms' losses over the first three steps have the same bits.

    python bench/bench_lane_tail.py --models autoencoder,mlp --rounds 10 --steps 20
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_lanes import session  # noqa: E402  (bench_models.py's models, one session each)


async def compare(af, lanes, model, rounds, steps):
    runs = {}
    for split in (False, True):
        lanes.TAIL_SPLITS = split  # read when the plan is built (the first run)
        runs[split] = await session(af, model)
        sess, feed, loss, train = runs[split]
        runs[split] += ([(await sess.run([loss, train], feed))[0] for _ in range(3)],)
    lanes.TAIL_SPLITS = True
    same = runs[False][4] == runs[True][4]
    medians = {False: [], True: []}
    for r in range(rounds):
        for split in ((False, True) if r % 2 == 0 else (True, False)):
            sess, feed, loss, train, _ = runs[split]
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                await sess.run([loss, train], feed)
                times.append(time.perf_counter() - start)
            medians[split].append(float(np.median(times)) * 1e3)
    for sess, *_ in runs.values():
        await sess.__aexit__(None, None, None)
    whole, split = medians[False], medians[True]
    print(f"{model}: same losses {same}")
    print("  whole  " + " ".join(f"{t:.2f}" for t in whole))
    print("  split  " + " ".join(f"{t:.2f}" for t in split))
    print(f"  best {min(split):.3f} / {min(whole):.3f} ms = {min(split) / min(whole):.3f}; "
          f"median of rounds {np.median(split):.3f} / {np.median(whole):.3f} = "
          f"{np.median(split) / np.median(whole):.3f}; split lower in "
          f"{sum(s < w for s, w in zip(split, whole))} of {rounds} rounds")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="autoencoder,mlp")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.exec import lanes

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        for model in args.models.split(","):
            await compare(af, lanes, model, args.rounds, args.steps)
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
