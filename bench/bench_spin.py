"""Spin-waits before a thread sleeps (``exec/spin.py``) against sleeping at once, in the
dense models' training steps (issue 37): bench_models.py's MLP and autoencoder in one
process, one session each, rounds alternating between the two forms (``spin.ENABLED``,
read at every wait), the order swapped each round, so the machine's noise (its slow and
fast phases, bench/RESULTS.md) hits both alike.

Per model: each form's best round and median round (a round's figure is its median step),
their ratios spin / sleep, how many rounds spin was faster, and the CPU a step. The seeded
losses of both forms are compared bit for bit (spinning changes when a thread wakes, never
what it computes).

    .venv/bin/python bench/bench_spin.py [--models mlp,autoencoder] [--rounds 12] [--steps 20]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (the models, written once)

FORMS = ("sleep", "spin")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,autoencoder")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--spin-us", type=float, default=None,
                        help="spin.SPIN_S in microseconds (default: the module's)")
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.exec import spin
    if args.spin_us is not None:
        spin.SPIN_S = args.spin_us * 1e-6

    def build(model, seed=None):
        graph = af.Graph()
        rng = np.random.default_rng(0)
        with graph.as_default():
            if seed is not None:
                af.set_random_seed(seed)
            feeds, loss, train = bench_models.build(af, model, bench_models.weights(model, rng))
            init = af.global_variables_initializer()
        return graph, dict(zip(feeds, bench_models.data(model, rng))), loss, train, init

    async def model_rounds(model):
        graph, feed, loss, train, init = build(model)
        async with af.Session(graph=graph) as sess:
            await sess.run(init)
            for _ in range(args.warmup):
                await sess.run([loss, train], feed)
            rounds = {form: [] for form in FORMS}
            for index in range(args.rounds):
                for form in (FORMS if index % 2 == 0 else FORMS[::-1]):
                    spin.ENABLED = form == "spin"
                    await sess.run([loss, train], feed)
                    rounds[form].append(await bench_models.median_step_ms(
                        sess, [loss, train], feed, args.steps))
            spin.ENABLED = True
        return rounds

    async def losses(model):
        out = {}
        for form in FORMS:
            spin.ENABLED = form == "spin"
            graph, feed, loss, train, init = build(model, seed=7)
            async with af.Session(graph=graph) as sess:
                await sess.run(init)
                values = [(await sess.run([loss, train], feed))[0] for _ in range(3)]
            out[form] = np.float32(values).tobytes().hex()
        spin.ENABLED = True
        return out

    async def run():
        print(f"load average at start: {os.getloadavg()}; spin {spin.SPIN_S * 1e6:.0f} us")
        for model in args.models.split(","):
            rounds = await model_rounds(model)
            print(f"{model}: spin loaded {spin.ready()}; {args.rounds} rounds of "
                  f"{args.steps} steps, median step ms (CPU ms)")
            for form, values in rounds.items():
                print(f"  {form:>5}: best {min(w for w, _ in values):.3f}, median "
                      f"{np.median([w for w, _ in values]):.3f}; rounds "
                      + " ".join(f"{w:.2f}({c:.1f})" for w, c in values))
            base, other = rounds["sleep"], rounds["spin"]
            lower = sum(s[0] < b[0] for s, b in zip(other, base))
            print(f"  spin / sleep: best {min(w for w, _ in other) / min(w for w, _ in base):.3f}"
                  f", median {np.median([w for w, _ in other]) / np.median([w for w, _ in base]):.3f}"
                  f", round by round median {np.median([s[0] / b[0] for s, b in zip(other, base)]):.3f}"
                  f"; spin lower in {lower} of {len(base)} rounds")
            hashes = await losses(model)
            same = len(set(hashes.values())) == 1
            print(f"  seeded losses over 3 steps: {'the same bits' if same else hashes}")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
