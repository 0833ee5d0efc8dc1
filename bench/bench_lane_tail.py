"""Lane 0's tail split with lane 1's thread on and off, forms alternating in one process
(issue 37): bench_models.py's models, two sessions each, one built with
``exec/lanes.py``'s ``TAIL_SPLIT`` (lane 0's last kernels hand their splits' chunks to lane
1's thread once it is idle) and one without (they run whole, as before); ``TAIL_SPLIT`` is
read when a plan is built, so each session keeps its form.

Each round runs ``--steps`` steps of each form in turn, the order swapped every round
(median step, CPU per step); the figure is each form's best and median round and their
ratio to ``whole``. A model whose plan runs in one lane (the MLP, the convnet) has the same
plan in both forms: its ratio shows the noise. Both forms give one lane's bits: the seeded
losses over three steps are compared and printed.

Run: ``.venv/bin/python bench/bench_lane_tail.py [--models autoencoder,mlp] [--rounds 10]
[--steps 20]``.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (the models, written once)

FORMS = ("whole", "tail")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="autoencoder,mlp")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.exec import lanes

    default = lanes.TAIL_SPLIT

    def model_of(model, seed=None):
        graph = af.Graph()
        rng = np.random.default_rng(0)
        with graph.as_default():
            if seed is not None:
                af.set_random_seed(seed)
            feeds, loss, train = bench_models.build(af, model, bench_models.weights(model, rng))
            init = af.global_variables_initializer()
        return graph, init, [loss, train], dict(zip(feeds, bench_models.data(model, rng)))

    async def open_session(model, form, seed=None):
        graph, init, fetches, feed = model_of(model, seed)
        config = af.ConfigProto(intra_op_parallelism_threads=0)  # the cores, as bench_models
        sess = af.Session(graph=graph, config=config)
        await sess.__aenter__()
        await sess.run(init)
        lanes.TAIL_SPLIT = form == "tail"
        try:
            first = (await sess.run(fetches, feed))[0]  # (the plan is built here)
        finally:
            lanes.TAIL_SPLIT = default
        return sess, fetches, feed, first

    async def model_rounds(model):
        sessions = {form: await open_session(model, form) for form in FORMS}
        for _ in range(args.warmup):
            for sess, fetches, feed, _ in sessions.values():
                await sess.run(fetches, feed)
        rounds = {form: [] for form in FORMS}
        for index in range(args.rounds):
            for form in FORMS if index % 2 == 0 else FORMS[::-1]:
                sess, fetches, feed, _ = sessions[form]
                rounds[form].append(await bench_models.median_step_ms(
                    sess, fetches, feed, args.steps))
        for sess, *_ in sessions.values():
            await sess.__aexit__(None, None, None)
        return rounds

    async def losses(model):
        out = {}
        for form in FORMS:
            sess, fetches, feed, first = await open_session(model, form, seed=7)
            values = [first] + [(await sess.run(fetches, feed))[0] for _ in range(2)]
            await sess.__aexit__(None, None, None)
            out[form] = np.float32(values).tobytes().hex()
        return out

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        for model in args.models.split(","):
            rounds = await model_rounds(model)
            base = min(w for w, _ in rounds["whole"])
            base_median = float(np.median([w for w, _ in rounds["whole"]]))
            print(f"{model}: {args.rounds} rounds of {args.steps} steps, median step ms "
                  f"(CPU ms)")
            for form, values in rounds.items():
                best = min(w for w, _ in values)
                median = float(np.median([w for w, _ in values]))
                print(f"  {form:>6}: best {best:.3f} ({best / base:.3f}x whole), median "
                      f"{median:.3f} ({median / base_median:.3f}x); rounds "
                      + " ".join(f"{w:.2f}({c:.1f})" for w, c in values))
            hashes = await losses(model)
            same = len(set(hashes.values())) == 1
            print(f"  seeded losses over 3 steps: "
                  f"{'the same bits in both forms' if same else hashes}")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
