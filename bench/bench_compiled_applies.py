"""The dense models' training steps with the optimizer applies' compiled loops on and off,
forms alternating in one process (issue 37): bench_models.py's MLP and autoencoder (RMSProp),
one session each, ``kernels/jit.py``'s ``ENABLED`` switched between rounds (read at each
apply, so one plan serves both forms), so that the machine's noise hits both alike.

Forms:

* ``numpy``: the applies' numpy forms (blocked passes in place, ``kernels/training.py``);
* ``loop``: their compiled loops (one pass in place), the tree's default.

Each round runs ``--steps`` steps of each form in turn, the order of the two forms swapped
every round (median step, CPU per step); the figure is each form's best and median round,
with the ratio to ``numpy``. The compiled loops give the numpy forms' bits, so the losses
of one seed over three steps agree bit for bit in both forms: printed as a check.

Run: ``.venv/bin/python bench/bench_compiled_applies.py [--models mlp,autoencoder]
[--rounds 10] [--steps 20]``.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (the models, written once)

FORMS = ("numpy", "loop")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,autoencoder")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.kernels import jit

    if not jit.available():
        raise SystemExit("compiled loops unavailable (numba missing or ASYNCFLOW_JIT=0)")
    default = jit.ENABLED

    def use(form):
        jit.ENABLED = form == "loop"

    def session_of(model, seed=None):
        graph = af.Graph()
        rng = np.random.default_rng(0)
        with graph.as_default():
            if seed is not None:
                af.set_random_seed(seed)
            feeds, loss, train = bench_models.build(af, model, bench_models.weights(model, rng))
            init = af.global_variables_initializer()
        return graph, init, loss, train, dict(zip(feeds, bench_models.data(model, rng)))

    async def model_rounds(model):
        graph, init, loss, train, feed = session_of(model)
        config = af.ConfigProto(intra_op_parallelism_threads=0)  # the cores, as bench_models
        async with af.Session(graph=graph, config=config) as sess:
            await sess.run(init)
            for form in FORMS * args.warmup:
                use(form)
                await sess.run([loss, train], feed)
            rounds = {form: [] for form in FORMS}
            for index in range(args.rounds):
                for form in FORMS if index % 2 == 0 else FORMS[::-1]:
                    use(form)
                    rounds[form].append(await bench_models.median_step_ms(
                        sess, [loss, train], feed, args.steps))
        jit.ENABLED = default
        return rounds

    async def losses(model):
        """Three seeded steps' losses per form, each from the same initial weights."""
        out = {}
        for form in FORMS:
            use(form)
            graph, init, loss, train, feed = session_of(model, seed=7)
            async with af.Session(graph=graph) as sess:
                await sess.run(init)
                values = [(await sess.run([loss, train], feed))[0] for _ in range(3)]
            out[form] = np.float32(values).tobytes().hex()
        jit.ENABLED = default
        return out

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        for model in args.models.split(","):
            rounds = await model_rounds(model)
            base = min(w for w, _ in rounds["numpy"])
            base_median = float(np.median([w for w, _ in rounds["numpy"]]))
            print(f"{model}: {args.rounds} rounds of {args.steps} steps, median step ms "
                  f"(CPU ms)")
            for form, values in rounds.items():
                best = min(w for w, _ in values)
                median = float(np.median([w for w, _ in values]))
                print(f"  {form:>6}: best {best:.3f} ({best / base:.3f}x numpy), median "
                      f"{median:.3f} ({median / base_median:.3f}x); rounds "
                      + " ".join(f"{w:.2f}({c:.1f})" for w, c in values))
            hashes = await losses(model)
            same = len(set(hashes.values())) == 1
            print(f"  seeded losses over 3 steps: {'the same bits in both forms' if same else hashes}")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
