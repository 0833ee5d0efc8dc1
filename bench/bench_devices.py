"""Devices benchmark: two logical CPU devices vs serial numpy, and the cost of a Send/Recv edge.

Run: ``python bench/bench_devices.py`` (re-executes itself in a subprocess with BLAS pinned to
one thread before numpy is imported, and also uses threadpoolctl when it is installed).

1. Eight independent 1024x1024 float32 matmuls, summed. Baseline: the same numpy calls one
   after another in this process. asyncflow: ``device_count={"CPU": 2}``; the greedy placer
   splits the matmuls over both devices, each device offloads them to its own worker thread
   (one per device on two cores). Target: ratio <= 0.6.
2. Send/Recv: a chain of N Identity ops alternating between CPU:0 and CPU:1 (N crossing
   edges) vs the same chain on one device. Added cost per edge = difference / N, in wall
   time and in process CPU time (``time.process_time``, less sensitive to other processes on a
   shared machine; the chain runs on the event loop thread only). Target: < 20 us.
The load average is printed: on a shared machine it says how far the figures can be trusted.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

_PINNED = "ASYNCFLOW_BENCH_PINNED"


def _pin_and_reexec():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env[_PINNED] = "1"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.call([sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=env)


def _best(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


async def edge_cost(chain_edges=200, repeats=20):
    """Runs of a chain of identities crossing CPU:0 <-> CPU:1 at every op, and of the same
    chain on CPU:0 alone: ``({name: best wall s}, {name: median process CPU s})``."""
    import asyncflow as af

    graph = af.Graph()
    with graph.as_default():
        x = af.placeholder(af.float32, [], name="x")
        crossing, local = x, x
        for i in range(chain_edges):
            with af.device(f"/device:CPU:{(i + 1) % 2}"):
                crossing = af.identity(crossing)
            with af.device("/device:CPU:0"):
                local = af.identity(local)
    edge_times, edge_cpu = {}, {}
    async with af.Session(graph=graph, config=af.SessionConfig(device_count={"CPU": 2})) as sess:
        for name, fetch in (("crossing", crossing), ("local", local)):
            await sess.run(fetch, {x: 1.0})
            best, cpu = [], []
            for _ in range(repeats):
                start, start_cpu = time.perf_counter(), time.process_time()
                await sess.run(fetch, {x: 1.0})
                best.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            edge_times[name] = min(best)
            edge_cpu[name] = sorted(cpu)[len(cpu) // 2]
    return edge_times, edge_cpu


def main():
    import numpy as np
    import trio
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
    except ImportError:
        pass
    import asyncflow as af

    rng = np.random.default_rng(0)
    mats = [(rng.standard_normal((1024, 1024)).astype(np.float32),
             rng.standard_normal((1024, 1024)).astype(np.float32)) for _ in range(8)]

    def serial():
        total = mats[0][0] @ mats[0][1]
        for a, b in mats[1:]:
            total = total + a @ b
        return total

    def two_threads():
        """The machine's own ceiling: the same work split over two plain threads."""
        import threading
        halves = [None, None]

        def work(i):
            part = mats[4 * i][0] @ mats[4 * i][1]
            for a, b in mats[4 * i + 1:4 * i + 4]:
                part = part + a @ b
            halves[i] = part
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return halves[0] + halves[1]

    expected = serial()
    serial_s = _best(serial, 3)
    threads_s = _best(two_threads, 3)

    graph = af.Graph()
    with graph.as_default():
        pairs = [(af.placeholder(af.float32, [1024, 1024]), af.placeholder(af.float32, [1024, 1024]))
                 for _ in range(8)]
        total = af.add_n([af.matmul(a, b) for a, b in pairs])
        feed = {p: v for pair, values in zip(pairs, mats) for p, v in zip(pair, values)}
    chain_edges = 200


    async def run():
        config = af.SessionConfig(device_count={"CPU": 2})
        async with af.Session(graph=graph, config=config) as sess:
            got = await sess.run(total, feed)
            np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-2)
            placed = sess._cache[next(iter(sess._cache))].placement
            devices = sorted({d for name, d in placed.items() if name.startswith("MatMul")})
            times = []
            for _ in range(3):
                start = time.perf_counter()
                await sess.run(total, feed)
                times.append(time.perf_counter() - start)
            two_devices_s = min(times)
        return two_devices_s, devices, await edge_cost(chain_edges)

    two_devices_s, devices, (edge_times, edge_cpu) = trio.run(run)
    per_edge_us = (edge_times["crossing"] - edge_times["local"]) / chain_edges * 1e6
    per_edge_cpu_us = (edge_cpu["crossing"] - edge_cpu["local"]) / chain_edges * 1e6
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, numpy {np.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"8x matmul 1024 f32, serial numpy:       {serial_s * 1e3:8.1f} ms")
    print(f"8x matmul 1024 f32, asyncflow CPU:0+1:  {two_devices_s * 1e3:8.1f} ms "
          f"(matmuls on {len(devices)} devices)")
    print(f"8x matmul 1024 f32, two plain threads:  {threads_s * 1e3:8.1f} ms "
          f"(ratio {threads_s / serial_s:.2f}: what these cores allow)")
    print(f"ratio two devices / serial: {two_devices_s / serial_s:.2f}  (target <= 0.6)")
    print(f"chain of {chain_edges} identities: crossing {edge_times['crossing'] * 1e3:.2f} ms, "
          f"local {edge_times['local'] * 1e3:.2f} ms")
    print(f"added cost per Send/Recv edge: {per_edge_us:.1f} us wall (best of 20), "
          f"{per_edge_cpu_us:.1f} us process CPU (median)  (target < 20 us)")


if __name__ == "__main__":
    if os.environ.get(_PINNED) != "1":
        sys.exit(_pin_and_reexec())
    main()
