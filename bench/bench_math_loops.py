"""The squared error's and SigmoidGrad's compiled loops (kernels/math_loops.py) against their
numpy forms, in the autoencoder's training step and alone (issue 37).

Forms: ``numpy`` (the loops' entry points answer None, so the kernels take their numpy forms)
and ``loop`` (the tree's code). The step: one session of bench_models.py's model, rounds
alternating between the forms (the order swapped each round), each round the median of
``--steps`` steps; printed: each form's best and median round and the ratio to ``numpy``.
The kernels alone: ``_FusedMeanSquaredError`` and ``SigmoidGrad`` on the autoencoder's
[256, 784] float32, best of 7 repeats of 200 calls, forms alternating. The seeded losses of
three steps must have the same bits in both forms (the loops are exact): printed as a check.

Run: ``.venv/bin/python bench/bench_math_loops.py [--models autoencoder,mlp] [--rounds 10]
[--steps 20]`` (the MLP uses neither kernel: its ratio is the run's noise).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (the models, written once)

FORMS = ("numpy", "loop")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="autoencoder,mlp")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.kernels import math_loops, registry

    entries = {name: getattr(math_loops, name)
               for name in ("difference_and_squares", "sigmoid_grad")}

    def use(form):
        for name, fn in entries.items():
            setattr(math_loops, name, fn if form == "loop" else (lambda *args: None))

    def kernels_alone():
        from asyncflow.exec.devices import Device

        class Ctx:
            attrs, name, xp, prepared = {}, "bench", np, None
            device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, 1,
                            intra_op_threads=1)
        rng = np.random.default_rng(0)
        a, b = (rng.random((256, 784), dtype=np.float32) for _ in range(2))
        calls = {op: (registry.get_kernel(op, "CPU").fn, (Ctx(), a, b))
                 for op in ("_FusedMeanSquaredError", "SigmoidGrad")}
        for op, (fn, call_args) in calls.items():
            best = {}
            for _ in range(7):
                for form in FORMS:
                    use(form)
                    fn(*call_args)
                    start = time.perf_counter()
                    for _ in range(200):
                        fn(*call_args)
                    took = (time.perf_counter() - start) / 200 * 1e6
                    best[form] = min(best.get(form, took), took)
            print(f"{op} [256, 784] float32 alone: numpy {best['numpy']:.1f} us, loop "
                  f"{best['loop']:.1f} us ({best['loop'] / best['numpy']:.3f}x)")
        use("loop")

    async def model_rounds(model):
        graph = af.Graph()
        rng = np.random.default_rng(0)
        with graph.as_default():
            feeds, loss, train = bench_models.build(af, model, bench_models.weights(model, rng))
            init = af.global_variables_initializer()
        feed = dict(zip(feeds, bench_models.data(model, rng)))
        async with af.Session(graph=graph) as sess:
            await sess.run(init)
            for _ in range(args.warmup):
                await sess.run([loss, train], feed)
            rounds = {form: [] for form in FORMS}
            for index in range(args.rounds):
                for form in (FORMS if index % 2 == 0 else FORMS[::-1]):
                    use(form)
                    rounds[form].append(await bench_models.median_step_ms(
                        sess, [loss, train], feed, args.steps))
            use("loop")
        return rounds

    async def losses(model):
        out = {}
        for form in FORMS:
            use(form)
            graph = af.Graph()
            rng = np.random.default_rng(0)
            with graph.as_default():
                af.set_random_seed(7)
                feeds, loss, train = bench_models.build(af, model,
                                                        bench_models.weights(model, rng))
                init = af.global_variables_initializer()
            feed = dict(zip(feeds, bench_models.data(model, rng)))
            async with af.Session(graph=graph) as sess:
                await sess.run(init)
                values = [(await sess.run([loss, train], feed))[0] for _ in range(3)]
            out[form] = np.float32(values).tobytes().hex()
        use("loop")
        return out

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        kernels_alone()
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
            print(f"  seeded losses over 3 steps: "
                  f"{'the same bits in both forms' if same else hashes}")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
