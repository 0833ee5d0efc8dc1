"""NCHW against NHWC for the convnet's second layer (issue 37): one process, interleaved.

Three forms of the same layer (conv 5x5 32->64 SAME, bias, ReLU, max pool 2x2, and the
gradients of a weighted sum with respect to the input and the filter), batch 128 of 14x14:

* ``nhwc``: the data in NHWC, as the kernels compute it;
* ``nchw``: the data in NCHW, ``data_format="NCHW"`` on conv2d and max_pool (the kernels
  transpose to NHWC and back);
* ``nhwc+transposes``: NCHW data, transposed to NHWC in the graph around the NHWC ops (what
  a user without NCHW support writes).

Each round runs ``--steps`` steps of each form in turn; the figure is the best round's mean
step time, and the ratios are against ``nhwc+transposes`` of the same run.

Run: ``.venv/bin/python bench/bench_conv_layouts.py [--rounds 5] [--steps 5]``.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import trio

import asyncflow as af


def build(form, x_nchw, f, bias):
    """``(fetches, placeholder)`` of one form: ``nhwc`` takes NHWC data, the others NCHW."""
    nchw, plain = form == "nchw", form == "nhwc"
    shape = x_nchw.transpose(0, 2, 3, 1).shape if plain else x_nchw.shape
    x = af.placeholder(af.float32, shape)
    data = x if nchw or plain else af.transpose(x, [0, 2, 3, 1])
    layout = "NCHW" if nchw else "NHWC"
    y = af.nn.conv2d(data, af.constant(f), strides=1, padding="SAME", data_format=layout)
    y = af.nn.relu(y + af.reshape(af.constant(bias), [1, -1, 1, 1] if nchw else [-1]))
    y = af.nn.max_pool(y, ksize=2, strides=2, padding="SAME", data_format=layout)
    if not (nchw or plain):
        y = af.transpose(y, [0, 3, 1, 2])
    weights = np.linspace(-1, 1, 128 * 64 * 7 * 7, dtype=np.float32).reshape(128, 64, 7, 7)
    if plain:
        weights = weights.transpose(0, 2, 3, 1).copy()
    loss = af.reduce_sum(y * af.constant(weights))
    return [loss] + af.gradients(loss, [x]), x


async def main(rounds, steps):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 32, 14, 14)).astype(np.float32)
    f = (rng.standard_normal((5, 5, 32, 64)) * 0.05).astype(np.float32)
    bias = np.zeros(64, np.float32)
    forms = {}
    for form in ("nhwc+transposes", "nchw", "nhwc"):
        graph = af.Graph()
        with graph.as_default():
            fetches, holder = build(form, x, f, bias)
        feed = x.transpose(0, 2, 3, 1).copy() if form == "nhwc" else x
        session = af.Session(graph=graph)
        await session.__aenter__()
        forms[form] = (session, fetches, {holder: feed})
    values = {}
    best = {form: float("inf") for form in forms}
    for _ in range(rounds):
        for form, (session, fetches, feed) in forms.items():
            await session.run(fetches, feed)  # warm
            start = time.perf_counter()
            for _ in range(steps):
                values[form] = await session.run(fetches, feed)
            best[form] = min(best[form], (time.perf_counter() - start) / steps)
    for session, _, _ in forms.values():
        await session.__aexit__(None, None, None)
    reference = values["nhwc+transposes"]
    for form, value in values.items():
        grad = value[1].transpose(0, 3, 1, 2) if form == "nhwc" else value[1]
        assert np.allclose(value[0], reference[0], rtol=1e-4), form
        assert np.allclose(grad, reference[1], rtol=1e-4, atol=1e-5), form
    print(f"load average {os.getloadavg()[0]:.1f}; best of {rounds} rounds of {steps} steps")
    base = best["nhwc+transposes"]
    for form, seconds in best.items():
        print(f"  {form:>16}: {seconds * 1e3:7.2f} ms/step  {seconds / base:.2f}x "
              "nhwc+transposes")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    trio.run(main, args.rounds, args.steps)
