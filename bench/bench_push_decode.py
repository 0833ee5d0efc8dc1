"""The PS step's large repeated frames decoded whole, with and without a frame template (issue 34).

The frames are the parameter-server MLP step's (``bench_vs_tf1.py``: 64-128-10, batch 256): the
PushTensors of its four float32 parameters or gradients (39,404 bytes with checksums, pushed
once each way a step) and the worker's RunGraph with its two feeds (``x`` 256 x 64 float32 and
``y`` 256 int32, ~67 KB). Each is decoded as the bare same-host server decodes a frame it read
whole (``wire.decode_repeated``; the first of a signature through the full decoder), a fresh
step id (and request id) each frame, in one process.

Two settings alternate block by block (``frame_templates.MAX_FRAME``, templates forgotten at
each switch and learnt again from the block's first frames, outside the timing): "A" keeps
frame templates only up to 16 KiB (the limit before this benchmark: these frames then go
through the header template and the pending frame's build), "B" the module's own limit. Each
block times A, B, A and a fourth run of A ("A2") in that order (odd blocks: B, A, A2, A):
B/A is B over the mean of the two A runs, A/A is A2 over that mean, printed beside B/A as the
ratio this machine's noise gives with no change. Per run the median microseconds a frame; the
result is the median over blocks of B/A (and A/A), its range and the blocks where it was below 1.

``--vary compared`` alternates instead how a template's fixed stretches are compared in a
frame read where it lies (both settings at the module's own limit, frames in a ``bytearray``
as a bare server reads them): "A" every stretch through the view's ``==`` (byte by byte, as
merged first), "B" a stretch over ``frame_templates._COMPARED`` bytes from a copy (r43ps).

Usage: ``.venv/bin/python bench/bench_push_decode.py [--blocks 10] [--frames 400]
[--vary limit|compared]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from transports import frame_templates, header_templates, wire  # noqa: E402
from transports.messages import PushTensors, RunGraph, TensorEntry  # noqa: E402

OLD_LIMIT = 16 * 1024
_KEY = "/job:{0}/replica:0/task:0/device:CPU:0;1f2e3d4c;/job:{1}/replica:0/task:0/device:CPU:0;{2};0:0"
_SHAPES = {"w1": (64, 128), "b1": (128,), "w2": (128, 10), "b2": (10,)}


def _push(step_id, rng):
    return PushTensors(step_id, [
        TensorEntry(_KEY.format("ps", "worker", f"{name}/read:0"),
                    rng.standard_normal(shape).astype(np.float32))
        for name, shape in _SHAPES.items()])


def _run_graph(step_id, rng):
    return RunGraph("sess/1/0123456789abcdef", step_id, [
        TensorEntry("x:0", rng.standard_normal((256, 64)).astype(np.float32)),
        TensorEntry("y:0", rng.integers(0, 10, 256).astype(np.int32))],
        ["loss:0"], request_id=step_id)


def _frame(message):
    return memoryview(b"".join(bytes(b) for b in wire.encode(message)))


def _decode(frame):
    message = wire.decode_repeated(frame)
    if message is None:  # (a signature's first frame: the full decoder, as the server does)
        message = wire.decode(bytes(frame))
    return message


def _block(frames, limit, compared):
    frame_templates.MAX_FRAME = limit
    frame_templates._COMPARED = compared
    frame_templates.forget_all()
    header_templates._templates.clear()
    for frame in frames[:3]:  # learnt outside the timing
        _decode(frame)
    times = []
    for frame in frames[3:]:
        start = time.perf_counter_ns()
        _decode(frame)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--frames", type=int, default=400)
    parser.add_argument("--vary", choices=("limit", "compared"), default="limit")
    args = parser.parse_args()
    new_limit, compared = frame_templates.MAX_FRAME, frame_templates._COMPARED
    by_copy = args.vary == "compared"
    settings = {"A": (new_limit, sys.maxsize) if by_copy else (OLD_LIMIT, compared),
                "B": (new_limit, compared)}
    rng = np.random.default_rng(0)
    for name, make in (("PushTensors", _push), ("RunGraph", _run_graph)):
        frames = [_frame(make(1000 + i, rng)) for i in range(args.frames)]
        if by_copy:
            frames = [memoryview(bytearray(frame)) for frame in frames]
        ratios = {"B/A": [], "A/A": []}
        figures = {"A": [], "B": []}
        for block in range(args.blocks):
            order = ("A", "B", "A", "A2") if block % 2 == 0 else ("B", "A", "A2", "A")
            got = {}
            for label in order:
                got.setdefault(label[0] if label != "A2" else "A2", []).append(
                    _block(frames, *settings[label[0]]))
            a = statistics.mean(got["A"])
            figures["A"].append(a)
            figures["B"].append(got["B"][0])
            ratios["B/A"].append(got["B"][0] / a)
            ratios["A/A"].append(got["A2"][0] / a)
        frame_templates.MAX_FRAME, frame_templates._COMPARED = new_limit, compared
        a, b = ("(stretches by the view)", f"(over {compared} bytes by a copy)") if by_copy \
            else (f"(templates to {OLD_LIMIT // 1024} KiB)", f"(to {new_limit // 1024} KiB)")
        print(f"{name} ({len(frames[0])} bytes): A {a} {statistics.median(figures['A']):.1f} "
              f"us, B {b} {statistics.median(figures['B']):.1f} us a frame")
        for key, values in ratios.items():
            print(f"  {key} median {statistics.median(values):.3f} "
                  f"[{min(values):.3f}-{max(values):.3f}], lower in "
                  f"{sum(v < 1 for v in values)} of {len(values)} blocks")


if __name__ == "__main__":
    main()
