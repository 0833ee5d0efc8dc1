"""GPU check: kernels on CuPy vs numpy, stream/event behaviour, and timings. One command:

    python bench/gpu_check.py

Needs only numpy, cupy, msgpack, aiohttp, trio (and asyncflow from this checkout). Exits 0
with a notice when CuPy finds no CUDA device.

1. Correctness: every kernel family (math, array, sources, state, transfer) run on GPU:0 and
   on CPU:0 through a Session; results compared (float tolerance 1e-4 relative).
2. Streams and events: a fetch from the GPU waits for the producing stream by an awaited
   host-function event (``runtime.gpu.stream_done``); a Send GPU:0 -> CPU:0 likewise.
3. Timings: a chain of 1000 small GPU ops (host overhead per op, asyncflow vs CuPy called
   directly); two large matmuls on two streams vs one after another on one stream.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import trio  # noqa: E402

import asyncflow as af  # noqa: E402
from asyncflow.runtime.device import cuda_device_count  # noqa: E402
from asyncflow.runtime.gpu import stream_done  # noqa: E402


def _families(graph):
    with graph.as_default():
        x = af.placeholder(af.float32, [64, 64], name="x")
        v = af.Variable(np.ones((64, 64), np.float32), name="v")
        out = {
            "math": af.reduce_sum(af.tanh(af.matmul(x, x)) * 2.0 + af.exp(-af.abs(x)), axis=1),
            "array": af.reshape(af.identity(x), [4096]),
            "sources": af.fill([3, 3], 2.5) + af.range(0.0, 3.0, 1.0),
            "state": af.assign_add(v, x),
        }
    return x, v, out


async def correctness():
    feed = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    results = {}
    for kind in ("CPU", "GPU"):
        graph = af.Graph()
        with graph.as_default(), af.device(f"/device:{kind}:0"):
            x, v, out = _families(graph)
        with graph.as_default(), af.device("/device:CPU:0"):
            crossed = af.identity(out["math"], name="crossed")   # Send/Recv GPU -> CPU
        async with af.Session(graph=graph, config=af.SessionConfig(allow_soft_placement=False)) as s:
            await s.run(v.initializer)
            results[kind] = await s.run(dict(out, transfer=crossed), {x: feed})
    for name in results["CPU"]:
        np.testing.assert_allclose(results["GPU"][name], results["CPU"][name], rtol=1e-4, atol=1e-4)
        print(f"  {name:9s} GPU == CPU")


async def events():
    import cupy
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a = cupy.ones((4096, 4096), cupy.float32)
        b = a @ a
    start = time.perf_counter()
    await stream_done(stream)
    waited = time.perf_counter() - start
    assert stream.done, "stream_done returned before the stream finished"
    assert float(b[0, 0].get()) == 4096.0
    print(f"  stream_done woke after {waited * 1e3:.2f} ms; stream.done is True")


async def timings():
    import cupy
    n = 1000
    graph = af.Graph()
    with graph.as_default(), af.device("/device:GPU:0"):
        x = af.placeholder(af.float32, [16], name="x")
        y = x
        for _ in range(n):
            y = y + 1.0
    async with af.Session(graph=graph) as s:
        await s.run(y, {x: np.zeros(16, np.float32)})
        start = time.perf_counter()
        await s.run(y, {x: np.zeros(16, np.float32)})
        ours = (time.perf_counter() - start) / n
    z = cupy.zeros(16, cupy.float32)
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(n):
        z = z + 1.0
    cupy.cuda.Device().synchronize()
    direct = (time.perf_counter() - start) / n
    print(f"  chain of {n} small ops: asyncflow {ours * 1e6:.1f} us/op, CuPy directly "
          f"{direct * 1e6:.1f} us/op (overhead {(ours - direct) * 1e6:.1f} us/op)")
    a = cupy.random.standard_normal((8192, 8192), dtype=cupy.float32)
    s1, s2 = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    for label, streams in (("serial, one stream", (s1, s1)), ("two streams", (s1, s2))):
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for stream in streams:
            with stream:
                a @ a
        await stream_done(streams[0])
        await stream_done(streams[1])
        print(f"  two 8192^2 matmuls, {label}: {(time.perf_counter() - start) * 1e3:.1f} ms")


async def main():
    print("1. kernels on GPU vs CPU")
    await correctness()
    print("2. streams and events")
    await events()
    print("3. timings")
    await timings()


if __name__ == "__main__":
    if cuda_device_count() == 0:
        print("gpu_check: CuPy finds no CUDA device here; nothing to check.")
        sys.exit(0)
    trio.run(main)
