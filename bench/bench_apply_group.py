"""The MLP's tail applies alone: separate ``ApplyRMSProp`` nodes against one
``_FusedApplyRMSPropGroup`` (compile/group_applies.py; issue 37), alternated in one process.

A step runs only ``RMSPropOptimizer.apply_gradients`` over the MLP's (bench_models.py) five
variables past its first layer's weights (biases [256], [256], [10]; weights [256,256],
[256,10]) with constant gradients: the tail that grouping changes, without the rest of the
step's noise. Three forms, a session each, compiled with its setting: A (grouped), B
(``ENABLED = False``: the separate applies) and A2 (grouped again: the A/A beside the A/B);
rounds alternate the forms (the order rotated each round). Per form: the best and median
round (a round's figure: its median step, microseconds); B / A and A2 / A, best, median and
round by round. The variables after the rounds are compared between the forms bit for bit
(each form ran the same number of steps).

    .venv/bin/python bench/bench_apply_group.py [--rounds 30] [--steps 200] [--dtype float32]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

SHAPES = ([256], [256, 256], [256], [256, 10], [10])
FORMS = ("A", "B", "A2")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.compile import group_applies

    dtype = np.dtype(args.dtype)

    def build():
        rng = np.random.default_rng(0)
        graph = af.Graph()
        with graph.as_default():
            variables = [af.Variable(rng.standard_normal(s).astype(dtype)) for s in SHAPES]
            grads = [af.constant(rng.standard_normal(s).astype(dtype)) for s in SHAPES]
            train = af.train.RMSPropOptimizer(0.001, momentum=0.9).apply_gradients(
                list(zip(grads, variables)))
            init = af.global_variables_initializer()
        return graph, train, init, variables

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        sessions = {}
        for form in FORMS:
            group_applies.ENABLED = form != "B"
            graph, train, init, variables = build()
            sess = af.Session(graph=graph)
            await sess.run(init)
            await sess.run(train)  # (compiled now, under this form)
            sessions[form] = (sess, train, variables)
        group_applies.ENABLED = True
        for _ in range(20):
            for form in FORMS:
                await sessions[form][0].run(sessions[form][1])
        out = {form: [] for form in FORMS}
        for index in range(args.rounds):
            shift = index % len(FORMS)
            for form in FORMS[shift:] + FORMS[:shift]:
                sess, train = sessions[form][:2]
                times = []
                for _ in range(args.steps):
                    start = time.perf_counter()
                    await sess.run(train)
                    times.append(time.perf_counter() - start)
                out[form].append(float(np.median(times)) * 1e6)
        values = {form: [np.asarray(v).tobytes() for v in await sessions[form][0].run(
            sessions[form][2])] for form in FORMS}
        for form in FORMS:
            await sessions[form][0].close()
        print(f"{args.rounds} rounds of {args.steps} steps, {dtype.name}: median step us")
        for form in FORMS:
            print(f"  {form:2}: best {min(out[form]):.1f}, median {np.median(out[form]):.1f}")
        for form, name in (("B", "B / A"), ("A2", "A2 / A")):
            ratios = [y / x for x, y in zip(out["A"], out[form])]
            lower = sum(r < 1 for r in ratios)
            print(f"  {name}: best {min(out[form]) / min(out['A']):.3f}, median "
                  f"{np.median(out[form]) / np.median(out['A']):.3f}, round by round median "
                  f"{np.median(ratios):.3f}; lower in {lower} of {len(ratios)} rounds")
        same = values["A"] == values["B"] == values["A2"]
        print(f"  variables after the rounds: {'the same bits' if same else 'DIFFERENT'} in "
              f"every form")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    sys.exit(main())
