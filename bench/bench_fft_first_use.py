"""What a process's first FFT convolution costs now that ``scipy.fft`` is imported on first use
(``kernels/nn_conv_fft.py``'s ``_load_fft``), and whether the import holds up the trio loop.

Each case runs in a fresh process, alternating ``lazy`` (as shipped) and ``preloaded``
(``scipy.fft`` imported before the session, as it was before the lazy import), round by round,
so both see the same load. A heartbeat task sleeps 1 ms in a loop beside the step; the largest
gap between its wake-ups while the first step runs is how long the loop could not serve.

Cases:

* ``convnet``: the convnet's second layer at batch 32 (``[32, 14, 14, 32]`` by ``[5, 5, 32,
  64]``), which the cost model sends to the FFT path: a heavy kernel, run on a worker thread;
* ``small-forced``: a ``[1, 6, 6, 1]`` by ``[3, 3, 1, 1]`` convolution with ``FORCE = "fft"``
  (the cost model never picks the FFT path this small): a light kernel, run on the loop.

Reports per case and mode the median over ``--rounds`` of the first step's wall time, the
largest loop gap during it, and the second step's wall time.

Run: ``.venv/bin/python bench/bench_fft_first_use.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {"convnet": ([32, 14, 14, 32], [5, 5, 32, 64], None),
         "small-forced": ([1, 6, 6, 1], [3, 3, 1, 1], "fft")}

_CHILD = r"""
import json, sys, time
import numpy as np
import trio
mode, x_shape, f_shape, force = json.loads(sys.argv[1])
if mode == "preloaded":
    import scipy.fft  # noqa: F401
import asyncflow as af
from asyncflow.kernels import nn_conv_fft
nn_conv_fft.FORCE = force
rng = np.random.default_rng(0)
with af.Graph().as_default() as graph, af.device("/cpu:0"):
    x = af.placeholder(af.float32, x_shape)
    w = af.constant(rng.standard_normal(f_shape).astype(np.float32))
    y = af.reduce_sum(af.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME"))
feed = rng.standard_normal(x_shape).astype(np.float32)

async def main():
    gaps, state = [], {"on": True}

    async def beat():
        while state["on"]:
            t = time.perf_counter()
            await trio.sleep(0.001)
            gaps.append(time.perf_counter() - t)

    async with af.Session(graph=graph) as sess:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(beat)
            await trio.sleep(0.02)
            gaps.clear()
            t = time.perf_counter()
            await sess.run(y, {x: feed})
            first = time.perf_counter() - t
            await trio.sleep(0.005)  # the beat that the step held up records its gap
            gap = max(gaps)
            t = time.perf_counter()
            await sess.run(y, {x: feed})
            second = time.perf_counter() - t
            state["on"] = False
    print(json.dumps({"first_ms": first * 1e3, "gap_ms": gap * 1e3, "second_ms": second * 1e3,
                      "fft": "scipy.fft" in sys.modules}))

trio.run(main)
"""


def _one(mode, case):
    x_shape, f_shape, force = CASES[case]
    done = subprocess.run([sys.executable, "-c", _CHILD,
                           json.dumps([mode, x_shape, f_shape, force])],
                          capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(HERE))
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for case in CASES:
        runs = {"lazy": [], "preloaded": []}
        for _ in range(args.rounds):
            for mode in runs:
                runs[mode].append(_one(mode, case))
        for mode, got in runs.items():
            assert all(r["fft"] for r in got), (case, mode, "the FFT path was not taken")
            med = {k: statistics.median(r[k] for r in got)
                   for k in ("first_ms", "gap_ms", "second_ms")}
            print(f"{case:13s} {mode:9s} first step {med['first_ms']:7.1f} ms  largest loop "
                  f"gap {med['gap_ms']:6.1f} ms  second step {med['second_ms']:6.1f} ms")


if __name__ == "__main__":
    main()
