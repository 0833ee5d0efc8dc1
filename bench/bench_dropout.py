"""The fused dropout's compiled loop (kernels/dropout.py) against its numpy form (issue 37).

Two measurements, each a ratio against the numpy form measured in the same run:

- the kernel's work alone: ``compiled_dropout`` against ``rng.random`` then the numpy form's
  floor/divide/multiply, on float32 arrays of the MLP's [128, 256] and a larger [128, 1024]
  (best of ``--repeat`` timings of ``--number`` calls);
- the MLP of bench_models.py trained in one process by two sessions, one per form
  (``dropout.COMPILED`` set before each round), rounds alternating, the order swapped each
  round: each round's median step, and the ratio of the forms' best and median rounds.

    python bench/bench_dropout.py [--rounds 10] [--steps 20]
"""
from __future__ import annotations

import argparse
import os
import sys
import timeit

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (the models, written once)


def numpy_form(rng, x, keep):
    mask = rng.random(x.shape, dtype=x.dtype)
    np.add(mask, keep, out=mask)
    np.floor(mask, out=mask)
    out = np.true_divide(x, keep)
    np.multiply(out, mask, out=out)
    return out, mask


def kernel_figures(args):
    from asyncflow.kernels import dropout
    for shape in ((128, 256), (128, 1024)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        keep = np.asarray(0.75, np.float32)
        rng = np.random.default_rng(1)
        dropout.compiled_dropout(rng, x, keep, x.dtype)  # (compiled or loaded from the cache)
        times = {}
        for name, fn in (("numpy", lambda: numpy_form(rng, x, keep)),
                         ("loop", lambda: dropout.compiled_dropout(rng, x, keep, x.dtype))):
            times[name] = min(timeit.repeat(fn, number=args.number,
                                            repeat=args.repeat)) / args.number
        print(f"kernel {list(shape)} float32: numpy form {times['numpy'] * 1e6:.1f} us, "
              f"loop {times['loop'] * 1e6:.1f} us, loop / numpy {times['loop'] / times['numpy']:.3f}")


def step_figures(args):
    import trio

    import asyncflow as af
    from asyncflow.kernels import dropout

    async def session():
        graph = af.Graph()
        rng = np.random.default_rng(0)
        with graph.as_default():
            feeds, loss, train = bench_models.build(af, "mlp", bench_models.weights("mlp", rng))
            init = af.global_variables_initializer()
        sess = af.Session(graph=graph)
        await sess.__aenter__()
        await sess.run(init)
        feed = dict(zip(feeds, bench_models.data("mlp", rng)))
        return sess, feed, loss, train

    async def run():
        forms = {"loop": await session(), "numpy": await session()}
        rounds = {name: [] for name in forms}
        order = list(forms)
        for index in range(args.rounds + 1):
            for name in order:
                sess, feed, loss, train = forms[name]
                dropout.COMPILED = name == "loop"
                for _ in range(3):  # (warm: the first round is dropped too)
                    await sess.run([loss, train], feed)
                wall, _ = await bench_models.median_step_ms(sess, [loss, train], feed,
                                                            args.steps)
                if index:
                    rounds[name].append(wall)
            order.reverse()
        dropout.COMPILED = True
        for name, walls in rounds.items():
            print(f"mlp {name:>5}: median step ms by round: "
                  + ", ".join(f"{w:.2f}" for w in walls))
        best = min(rounds["loop"]) / min(rounds["numpy"])
        median = float(np.median(rounds["loop"])) / float(np.median(rounds["numpy"]))
        print(f"mlp loop / numpy: best rounds {best:.3f}, median rounds {median:.3f}")
        for sess, *_ in forms.values():
            await sess.__aexit__(None, None, None)
    trio.run(run)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--number", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}")
    kernel_figures(args)
    step_figures(args)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
