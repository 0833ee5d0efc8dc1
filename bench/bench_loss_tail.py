"""The autoencoder's loss and its gradient's sigmoid tail: one fused node against four kernels
(kernels/squared_error_sigmoid.py, issue 37), at the kernel level.

Per round, on a [256, 784] float32 batch (the autoencoder's), a fresh sigmoid output ``y``
from a GEMM as in the step (so its cache state is a step's, not a loop's), then one form:

- ``four``: ``_FusedMeanSquaredError``, ``_FusedMeanSquaredErrorGrad``, ``SumToShape``,
  ``SigmoidGrad`` (their registered kernels, as the unfused plan runs them);
- ``whole``: the fused kernel, its compiled pass on this thread.

The forms alternate, the order rotated each round; the median per form and its ratio to
``four`` are printed (the same bits are checked once).

``--steps-ab ROUNDS`` then times the autoencoder's training step with the fusion and without
(``fuse_squared_error.SIGMOID_GRAD``), two sessions each compiled under its own setting (the
switch is read when a plan is compiled; bench_ab_setting.py shared one session between its forms
until form_rounds.py gave each form its own, and can A/B it now too),
rounds of ``--steps`` steps alternating, the order swapped each round: each form's best and
median round, and the median of the round-by-round ratios (fused / unfused); ``--aa``
compiles both sessions fused (the form's own noise floor).

    python bench/bench_loss_tail.py [--rounds 300] [--steps-ab 16 --steps 20]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--steps-ab", type=int, default=0, metavar="ROUNDS")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--aa", action="store_true",
                        help="both sessions fused: the A/A floor of --steps-ab's ratios")
    args = parser.parse_args(argv)
    kernel_figures(args)
    if args.steps_ab:
        import trio
        trio.run(step_figures, args)


async def step_figures(args):
    import asyncflow as af
    from asyncflow.compile import fuse_squared_error
    import bench_models
    import form_rounds
    sessions = {}
    for form in ("fused", "unfused"):
        fuse_squared_error.SIGMOID_GRAD = form == "fused" or args.aa
        graph, feed, loss, train, init = form_rounds.build(af, "autoencoder")
        sess = af.Session(graph=graph)
        await sess.__aenter__()
        await sess.run(init)
        for _ in range(5):  # compiled here, under this form's setting
            await sess.run([loss, train], feed)
        sessions[form] = (sess, feed, loss, train)
    fuse_squared_error.SIGMOID_GRAD = True
    print(f"load average at start: {os.getloadavg()}")
    rounds = {form: [] for form in sessions}
    for index in range(args.steps_ab):
        for form in (("fused", "unfused") if index % 2 == 0 else ("unfused", "fused")):
            sess, feed, loss, train = sessions[form]
            rounds[form].append((await bench_models.median_step_ms(
                sess, [loss, train], feed, args.steps))[0])
    for form, values in rounds.items():
        print(f"{form:>8}: best {min(values):.3f} ms, median {np.median(values):.3f}; rounds "
              + " ".join(f"{v:.2f}" for v in values))
    fused, unfused = rounds["fused"], rounds["unfused"]
    print(f"fused / unfused: best {min(fused) / min(unfused):.3f}, median "
          f"{np.median(fused) / np.median(unfused):.3f}, round by round "
          f"{np.median([a / b for a, b in zip(fused, unfused)]):.3f}; fused lower in "
          f"{sum(a < b for a, b in zip(fused, unfused))} of {len(fused)} rounds")
    print(f"load average at end: {os.getloadavg()}")
    for sess, *_ in sessions.values():
        await sess.__aexit__(None, None, None)


def kernel_figures(args):
    from asyncflow.kernels import squared_error_sigmoid as fused
    from asyncflow.kernels.registry import get_kernel

    class Device:
        intra_op = None

    class Ctx:
        xp, name, attrs, prepared, device = np, "Mean", {"sum_to_y": True}, None, Device()

    one = Ctx()
    rng = np.random.default_rng(0)
    h = rng.random((256, 256), dtype=np.float32)
    w = (rng.standard_normal((256, 784)) * 0.05).astype(np.float32)
    x = rng.random((256, 784), dtype=np.float32)
    grad = np.ones((), np.float32)

    def kernel(op_type):
        return get_kernel(op_type, "CPU").fn

    def four(y):
        loss, diff = kernel("_FusedMeanSquaredError")(one, y, x)
        (dy,) = kernel("_FusedMeanSquaredErrorGrad")(one, grad, diff, loss)
        (dy,) = kernel("SumToShape")(one, dy, np.asarray(y.shape))
        return loss, kernel("SigmoidGrad")(one, y, dy)[0]

    forms = {"four": four,
             "whole": lambda y: fused._fused_squared_error_sigmoid_grad(one, y, x, grad)}

    def sigmoid_output():
        y = h @ w
        np.negative(y, out=y)
        np.exp(y, out=y)
        y += 1
        return np.reciprocal(y, out=y)

    reference = [np.asarray(v).tobytes() for v in four(sigmoid_output())]
    for name, form in forms.items():
        got = [np.asarray(v).tobytes() for v in form(sigmoid_output())]
        print(f"{name}: the same bits as four: {got == reference}")
    times = {name: [] for name in forms}
    names = list(forms)
    for r in range(args.rounds):
        for name in names[r % 2:] + names[:r % 2]:
            y = sigmoid_output()
            start = time.perf_counter()
            forms[name](y)
            times[name].append(time.perf_counter() - start)
    base = np.median(times["four"])
    for name in names:
        median = np.median(times[name])
        print(f"{name:>6}: median {median * 1e6:7.1f} us ({median / base:.3f}x four)")


if __name__ == "__main__":
    main()
