"""Lane 0's tail helped by lane 1's thread, against lane 0's tail run whole (issue 37).

The autoencoder's step in two lanes (``exec/lanes.py``) ends with lane 0's last GEMM, the
first layer's weight gradient (``gradients/MatMul_grad/MatMul_1``, ~1 ms), while lane 1 has
ended: with ``lanes.HELP_TAIL_S`` set its split is offered to lane 1's thread, which takes
chunks once its lane ended; ``HELP_TAIL_S = 0`` runs it whole, as before. Two sessions, one
built and compiled under each form, rounds of ``--steps`` steps alternating (the order
reversed every other round; ``--forms on,on`` or ``off,off`` for A/A). Every kernel and chunk
is recorded (``bench_model_timeline``'s recorder: a few microseconds a kernel), so that each
round also gives the tail GEMM's median wall time and in how many steps lane 1's thread took a
chunk of it. Lanes are forced on (``Cores.MIN_CPU_WALL = 0``: a loaded machine would send
most steps of both forms back to one lane). Per form the best and median round; the ratio
of the second form's rounds to the first's, round by round, for the step and the GEMM.

    .venv/bin/python bench/bench_lane_tail.py --rounds 12 --steps 20 [--forms on,off]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_model_timeline  # noqa: E402  (its kernel and chunk recorder)
import form_rounds  # noqa: E402  (the models, built the same way)

TAIL = "gradients/MatMul_grad/MatMul_1"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forms", default="on,off", help="two of on, off (A/A: on,on)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.exec import lanes

    first, second = args.forms.split(",")
    forms = [(first, 0), (second, 1)]  # (each its own session, A/A too)
    help_s = lanes.HELP_TAIL_S or 200e-6
    lanes.Cores.MIN_CPU_WALL = 0.0
    rec = bench_model_timeline.Recorder()
    rec.install()

    def use(form):
        lanes.HELP_TAIL_S = help_s if form[0] == "on" else 0

    async def run():
        out = {form: [] for form in forms}
        async with contextlib.AsyncExitStack() as stack:
            sessions = {}
            for form in forms:
                use(form)
                graph, feed, loss, train, init = form_rounds.build(af, "autoencoder")
                sess = await stack.enter_async_context(af.Session(graph=graph))
                await sess.run(init)
                for _ in range(args.warmup):
                    await sess.run([loss, train], feed)
                sessions[form] = (sess, [loss, train], feed)
            for index in range(args.rounds):
                for form in forms if index % 2 == 0 else forms[::-1]:
                    use(form)
                    sess, fetches, feed = sessions[form]
                    walls, tails, helped = [], [], 0
                    for _ in range(args.steps):
                        rec.clear()
                        start = time.perf_counter()
                        await sess.run(fetches, feed)
                        walls.append(time.perf_counter() - start)
                        for thread, name, _, a, b in rec.kernels:
                            if name == TAIL:
                                tails.append(b - a)
                                helped += any(t != thread and a <= c <= b
                                              for t, c, _ in rec.chunks)
                    out[form].append((np.median(walls) * 1e3,
                                      np.median(tails) * 1e3 if tails else float("nan"),
                                      helped))
        return out

    print(f"load average at start: {os.getloadavg()}; forms {args.forms}")
    out = trio.run(run)
    for form in forms:
        rows = out[form]
        walls = [row[0] for row in rows]
        print(f"  {form[0]}: step best {min(walls):.2f}, median {np.median(walls):.2f} ms; "
              f"{TAIL} median {np.median([row[1] for row in rows]):.3f} ms; lane 1's thread "
              f"took a chunk of it in {sum(row[2] for row in rows)} of "
              f"{args.rounds * args.steps} steps")
    a, b = out[forms[0]], out[forms[1]]
    steps = [y[0] / x[0] for x, y in zip(a, b)]
    gemms = [y[1] / x[1] for x, y in zip(a, b)]
    print(f"  {second} / {first}: step best {min(y[0] for y in b) / min(x[0] for x in a):.3f}, "
          f"round by round {np.median(steps):.3f} ({second} lower in "
          f"{sum(r < 1 for r in steps)} of {len(steps)}); the GEMM round by round "
          f"{np.median(gemms):.3f}")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
