"""What ``tf.nn.depthwise_conv2d`` costs (issue 36): one Conv2D with a block-diagonal filter.

asyncflow builds ``depthwise_conv2d`` as a single Conv2D whose ``[fh, fw, C, C * M]`` filter
is zero off its diagonal blocks, so it runs Conv2D's kernels and gradients at ``C`` times the
arithmetic a dedicated depthwise kernel would need. This measures, in one process and
interleaved, a step (forward and the gradients w.r.t. input and filter) of

* ``depthwise``: ``depthwise_conv2d`` 3x3, C channels, multiplier 1, SAME;
* ``dense``: ``conv2d`` 3x3 C -> C, SAME (the same Conv2D work, a dense filter);
* ``per_tap``: the minimal arithmetic written with existing ops: the sum over the 9 taps of
  a shifted slice times that tap's per-channel weights (what a depthwise kernel computes).

The figure is each form's best round's mean step time; ratios are against ``dense``.

Run: ``.venv/bin/python bench/bench_depthwise.py [--rounds 3] [--steps 3] [--channels 32]``.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import trio

import asyncflow as af


def build(form, x, f):
    holder = af.placeholder(af.float32, x.shape)
    channels = x.shape[-1]
    if form == "depthwise":
        filt = af.constant(f)
        y = af.nn.depthwise_conv2d(holder, filt, [1, 1, 1, 1], "SAME")
    elif form == "dense":
        filt = af.constant(np.tile(f, [1, 1, 1, channels]))
        y = af.nn.conv2d(holder, filt, 1, "SAME")
    else:
        filt = af.constant(f)
        padded = af.pad(holder, [[0, 0], [1, 1], [1, 1], [0, 0]])
        height, width = x.shape[1:3]
        y = af.add_n([padded[:, i:i + height, j:j + width, :] * filt[i, j, :, 0]
                      for i in range(3) for j in range(3)])
    loss = af.reduce_sum(y * y)
    return [loss] + af.gradients(loss, [holder, filt]), holder


async def main(rounds, steps, channels):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 32, 32, channels)).astype(np.float32)
    f = (rng.standard_normal((3, 3, channels, 1)) * 0.1).astype(np.float32)
    forms, best = {}, {}
    for form in ("dense", "depthwise", "per_tap"):
        graph = af.Graph()
        with graph.as_default():
            fetches, holder = build(form, x, f)
        session = af.Session(graph=graph)
        await session.__aenter__()
        await session.run(fetches, {holder: x})  # warm up
        forms[form] = (session, fetches, holder)
    for _ in range(rounds):
        for form, (session, fetches, holder) in forms.items():
            start = time.perf_counter()
            for _ in range(steps):
                await session.run(fetches, {holder: x})
            mean = (time.perf_counter() - start) / steps
            best[form] = min(best.get(form, mean), mean)
    for session, _, _ in forms.values():
        await session.__aexit__(None, None, None)
    for form, seconds in best.items():
        print(f"{form:10s} {seconds * 1e3:8.1f} ms/step  x{seconds / best['dense']:.2f} of dense")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--channels", type=int, default=32)
    args = parser.parse_args()
    trio.run(main, args.rounds, args.steps, args.channels)
