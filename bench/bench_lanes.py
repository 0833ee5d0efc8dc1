"""A static schedule in one lane and in two (``asyncflow/exec/lanes.py``), in one process.

For each model (bench_models.py's MLP and autoencoder), two sessions of the same graph: one
built with lanes switched off, one with them on. Their training steps alternate round by
round (best round's mean step, and CPU ms a step: on a loaded machine the CPU a step costs
tells what the lanes' synchronisation adds when no second core is free; the two-lane plan
falls back to one lane for a while where it finds no second core, ``lanes.Cores``). Then the
lanes' timeline, every step in two lanes: every kernel of the two-lane plan timed on the thread it ran on, per step the
time the loop's thread spent in kernels, the lane thread's, and how long both computed at
once (the overlap), the median over the steps; ``--show`` prints the last step's kernels.

    python bench/bench_lanes.py --models mlp,autoencoder --rounds 6 --steps 20
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (the models, written once)


async def session(af, model, seed=7):
    graph = af.Graph()
    rng = np.random.default_rng(0)
    with graph.as_default():
        af.set_random_seed(seed)
        feeds, loss, train = bench_models.build(af, model, bench_models.weights(model, rng))
        init = af.global_variables_initializer()
    sess = af.Session(graph=graph)
    await sess.__aenter__()
    await sess.run(init)
    return sess, dict(zip(feeds, bench_models.data(model, rng))), loss, train


async def compare(af, lanes, model, rounds, steps):
    runs = {}
    for enabled in (False, True):
        lanes.ENABLED = enabled  # read when the plan is built (the first run)
        runs[enabled] = await session(af, model)
        sess, feed, loss, train = runs[enabled]
        losses = [(await sess.run([loss, train], feed))[0] for _ in range(3)]
        runs[enabled] += (losses,)
    lanes.ENABLED = True
    same = runs[False][4] == runs[True][4]
    best = {False: [], True: []}
    for _ in range(rounds):
        for enabled, (sess, feed, loss, train, _) in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                await sess.run([loss, train], feed)
            best[enabled].append(((time.perf_counter() - wall) / steps * 1e3,
                                  (time.process_time() - cpu) / steps * 1e3))
    for sess, *_ in runs.values():
        await sess.__aexit__(None, None, None)
    one, two = min(best[False]), min(best[True])
    print(f"{model}: same losses {same}; one lane {one[0]:.2f} ms ({one[1]:.2f} CPU ms), "
          f"two lanes {two[0]:.2f} ms ({two[1]:.2f} CPU ms), two/one {two[0] / one[0]:.3f}")


async def timeline(af, lanes, model, steps, show):
    records = []
    generate = lanes._generate

    def timed(plan, order, lane_of, deps, pool):
        for node in order:
            def fn(ctx, *args, _fn=node.fn, _name=node.op.name, _lane=lane_of[node.index]):
                start = time.perf_counter()
                try:
                    return _fn(ctx, *args)
                finally:
                    records.append((_lane, threading.get_ident(), _name, start,
                                    time.perf_counter()))
            node.fn = fn
        return generate(plan, order, lane_of, deps, pool)
    lanes._generate = timed
    threshold, lanes.Cores.MIN_CPU_WALL = lanes.Cores.MIN_CPU_WALL, 0.0  # every step in lanes
    try:
        sess, feed, loss, train = await session(af, model)
        for _ in range(5):  # (the plan is built on the first)
            await sess.run([loss, train], feed)
    finally:
        lanes._generate = generate
    loop_thread = threading.get_ident()
    stats = []
    for _ in range(steps):
        records.clear()
        start = time.perf_counter()
        await sess.run([loss, train], feed)
        wall = time.perf_counter() - start
        mine = [(a, b) for _, thread, _, a, b in records if thread == loop_thread]
        other = [(a, b) for _, thread, _, a, b in records if thread != loop_thread]
        overlap = sum(max(0.0, min(b, d) - max(a, c)) for a, b in other for c, d in mine)
        stats.append((wall, sum(b - a for a, b in mine), sum(b - a for a, b in other), overlap,
                      sum(1 for lane, thread, *_ in records if lane == 1 and thread != loop_thread),
                      sum(1 for lane, *_ in records if lane == 1)))
    await sess.__aexit__(None, None, None)
    lanes.Cores.MIN_CPU_WALL = threshold
    med = np.median(np.array(stats), axis=0) * 1e3
    on_thread = sum(s[4] for s in stats)
    print(f"{model} timeline, median of {steps} steps: wall {med[0]:.2f} ms, kernels on the "
          f"loop's thread {med[1]:.2f} ms, on the lane thread {med[2]:.2f} ms, both at once "
          f"{med[3]:.2f} ms; lane 1's kernels on the lane thread {on_thread} of "
          f"{sum(s[5] for s in stats)} (the rest run by lane 0)")
    if show:
        first = min(r[3] for r in records)
        for lane, thread, name, a, b in sorted(records, key=lambda r: r[3]):
            where = "loop" if thread == loop_thread else "lane"
            print(f"  lane {lane} on {where}: {(a - first) * 1e3:7.3f} -> {(b - first) * 1e3:7.3f} ms  {name}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,autoencoder")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--timeline-steps", type=int, default=40)
    parser.add_argument("--show", action="store_true", help="print the last step's kernels")
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.exec import lanes

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        for model in args.models.split(","):
            await compare(af, lanes, model, args.rounds, args.steps)
            await timeline(af, lanes, model, args.timeline_steps, args.show)
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
