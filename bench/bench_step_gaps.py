"""Where a dense model's step spends its time outside kernels, and what a time-slice
checkpoint costs there (issue 37).

Three parts, one process:
1. *A checkpoint, hot and cold*: ``trio.lowlevel.checkpoint()`` timed in a tight loop, and
   right after work that leaves this thread's caches and predictors cold (a [256, 784] x
   [784, 256] GEMM, an 8 MiB copy, a 1 ms sleep), with a second checkpoint right after the
   first and a bare ``perf_counter()`` pair for scale; ratios against the tight loop. BLAS
   is held at one thread, as a session holds it. Then, after the GEMM, a piece of Python
   (calls, lookups, small allocations: the next kernels' calls) alone and preceded by a
   checkpoint: what the checkpoint adds where the Python after it pays the cold start anyway.
2. *The step's checkpoints* (``--models``): ``timeslice.checkpoint`` (the step's ``pause``)
   wrapped, timed alone for ``--steps`` steps, then as many more with a trio Instrument
   counting what runs inside each: tasks stepped (by name) and the run loop's I/O waits
   (epoll) with their timeouts. (The yield between two runs, ``Session.run_prepared``'s, is
   not one of these.)
3. *Outside kernels*: every kernel of the static plan wrapped (``bench_model_timeline``'s
   recorder: a few us a kernel of its own), per step on the loop's thread: ``sess.run`` to
   the first kernel, the last kernel to the return, and the gaps between kernels by kind:
   those a slice checkpoint ran in, those next to a hand-off (a kernel that split, paired
   or grouped: another thread ran a chunk or a kernel during it), the rest (the generated
   code's own lines: arguments, offload checks, stores, slice checks).

    python bench/bench_step_gaps.py --models mlp,autoencoder --steps 40
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_model_timeline  # noqa: E402  (its kernel and chunk recorder)
import bench_models  # noqa: E402  (the models, written once)


def cold_checkpoints(trio, calls):
    """Part 1: ``{work: (first, second checkpoint, perf_counter pair)}`` medians, seconds."""
    rng = np.random.default_rng(0)
    a = rng.random((256, 784), dtype=np.float32)
    b = rng.random((784, 256), dtype=np.float32)
    big, big_out = rng.random(2 << 20, dtype=np.float32), np.empty(2 << 20, np.float32)
    works = {"tight loop": lambda: None, "GEMM [256,784]x[784,256]": lambda: a @ b,
             "copy 8 MiB": lambda: np.copyto(big_out, big),
             "sleep 1 ms": lambda: time.sleep(0.001)}
    out = {}

    async def measure():
        for name, work in works.items():
            first, second, clock = [], [], []
            for _ in range(calls):
                work()
                t0 = time.perf_counter()
                t1 = time.perf_counter()
                await trio.lowlevel.checkpoint()
                t2 = time.perf_counter()
                await trio.lowlevel.checkpoint()
                t3 = time.perf_counter()
                clock.append(t1 - t0)
                first.append(t2 - t1)
                second.append(t3 - t2)
            out[name] = tuple(float(np.median(v)) for v in (first, second, clock))
        # Python standing for the next kernels' calls, after the GEMM, without and with a
        # checkpoint before it: what skipping the checkpoint would save.
        alone, after = [], []
        for _ in range(calls):
            works["GEMM [256,784]x[784,256]"]()
            t0 = time.perf_counter()
            _python_piece()
            alone.append(time.perf_counter() - t0)
            works["GEMM [256,784]x[784,256]"]()
            t0 = time.perf_counter()
            await trio.lowlevel.checkpoint()
            _python_piece()
            after.append(time.perf_counter() - t0)
        out["piece"] = (float(np.median(alone)), float(np.median(after)))
    trio.run(measure)
    return out


_TABLE = {f"key{i}": i for i in range(64)}


def _python_piece():
    """Some interpreted work: calls, attribute and dict lookups, small allocations."""
    total = 0
    for i in range(0, 64, 4):
        total += _TABLE[f"key{i}"] + len([i, total]) + getattr(np, "float32").__name__.count("3")
    return total


class LoopWatch:
    """A trio Instrument recording, while ``on``, the tasks stepped and the I/O waits."""

    def __init__(self, trio):
        class Instrument(trio.abc.Instrument):
            def before_task_step(_, task):
                if self.on:
                    self.events.append(("task", task.name))

            def before_io_wait(_, timeout):
                if self.on:
                    self.events.append(("io", timeout))
        self.instrument = Instrument()
        self.on = False
        self.events = []


def build(af, model):
    graph = af.Graph()
    rng = np.random.default_rng(0)
    with graph.as_default():
        feeds, loss, train = bench_models.build(af, model, bench_models.weights(model, rng))
        init = af.global_variables_initializer()
    return graph, dict(zip(feeds, bench_models.data(model, rng))), [loss, train], init


def step_checkpoints(trio, af, model, steps, warmup):
    """Part 2: checkpoints a step and their median time (timed alone), then what ran inside
    them (a second pass, the Instrument on)."""
    from asyncflow.exec import timeslice
    graph, feed, fetches, init = build(af, model)
    watch = LoopWatch(trio)
    times, inside = [], []
    original = timeslice.checkpoint

    async def timed():
        start = time.perf_counter()
        try:
            await original()
        finally:
            times.append(time.perf_counter() - start)

    async def watched():
        watch.events.clear()
        watch.on = True
        try:
            await original()
        finally:
            watch.on = False
            inside.append(list(watch.events))

    async def run():
        async with af.Session(graph=graph) as sess:
            await sess.run(init)
            for _ in range(warmup):
                await sess.run(fetches, feed)
            try:
                timeslice.checkpoint = timed  # (read when each step's Step is made)
                for _ in range(steps):
                    await sess.run(fetches, feed)
                trio.lowlevel.add_instrument(watch.instrument)
                timeslice.checkpoint = watched
                for _ in range(steps):
                    await sess.run(fetches, feed)
            finally:
                timeslice.checkpoint = original
                trio.lowlevel.remove_instrument(watch.instrument)
    trio.run(run)
    tasks, waits = {}, {}
    for events in inside:
        for kind, what in events:
            table = tasks if kind == "task" else waits
            table[what] = table.get(what, 0) + 1
    return len(times) / steps, float(np.median(times)) if times else 0.0, tasks, waits, \
        len(inside)


def outside_kernels(trio, af, rec, model, steps, warmup):
    """Part 3: medians per step of the entry, the exit and the gaps by kind (seconds), the
    wall time, and the loop thread's kernel count."""
    from asyncflow.exec import timeslice
    graph, feed, fetches, init = build(af, model)
    pauses = []
    original = timeslice.checkpoint

    async def checkpoint():
        start = time.perf_counter()
        await original()
        pauses.append((start, time.perf_counter()))

    rows = []

    async def run():
        async with af.Session(graph=graph) as sess:
            await sess.run(init)
            for _ in range(warmup):
                await sess.run(fetches, feed)
            loop = threading.get_ident()
            timeslice.checkpoint = checkpoint
            try:
                for _ in range(steps):
                    rec.clear()
                    pauses.clear()
                    start = time.perf_counter()
                    await sess.run(fetches, feed)
                    end = time.perf_counter()
                    rows.append(classify(rec, pauses, loop, start, end))
            finally:
                timeslice.checkpoint = original
    trio.run(run)
    return {key: float(np.median([row[key] for row in rows])) for key in rows[0]}


def classify(rec, pauses, loop, start, end):
    """One step's entry, exit and gaps by kind (see the module docstring)."""
    own = sorted((k for k in rec.kernels if k[0] == loop), key=lambda k: k[3])
    helped = [(a, b) for thread, a, b in rec.chunks]
    helped += [(k[3], k[4]) for k in rec.kernels if k[0] != loop]  # (a pair's, a group's)

    def handoff(kernel):
        a, b = kernel[3], kernel[4]
        return any(a <= c <= b or a <= d <= b or c <= a <= d for c, d in helped)
    row = {"wall": end - start, "entry": own[0][3] - start, "exit": end - own[-1][4],
           "kernels": len(own), "gaps checkpoint": 0.0, "gaps hand-off": 0.0,
           "gaps other": 0.0, "gaps all": 0.0}
    for before, after in zip(own, own[1:]):
        gap = after[3] - before[4]
        row["gaps all"] += gap
        if any(before[4] <= a <= after[3] for a, _ in pauses):
            row["gaps checkpoint"] += gap
        elif handoff(before) or handoff(after):
            row["gaps hand-off"] += gap
        else:
            row["gaps other"] += gap
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,autoencoder")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300, help="part 1's calls per form")
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.exec import intra_op

    intra_op.claim_blas()  # (one BLAS thread, as in the sessions' steps)
    print(f"load average at start: {os.getloadavg()}")
    print("1. trio.lowlevel.checkpoint(), medians (us): first after the work, a second right "
          "after it, a perf_counter() pair; ratio of the first to the tight loop's")
    cold = cold_checkpoints(trio, args.calls)
    tight = cold["tight loop"][0]
    alone, after = cold.pop("piece")
    for name, (first, second, clock) in cold.items():
        print(f"   {name:26s} {first * 1e6:6.1f} {second * 1e6:6.1f} {clock * 1e6:6.2f}"
              f"   {first / tight:5.2f}x")
    print(f"   after the GEMM, some Python alone {alone * 1e6:.1f} us, a checkpoint then the same "
          f"Python {after * 1e6:.1f} us: the checkpoint adds {(after - alone) * 1e6:.1f} us "
          f"({(after - alone) / tight:.2f}x the tight loop's checkpoint)")
    models = args.models.split(",")
    for model in models:
        per_step, median, tasks, waits, count = step_checkpoints(trio, af, model, args.steps,
                                                                 args.warmup)
        print(f"2. {model}: {per_step:.2f} slice checkpoints a step, median "
              f"{median * 1e6:.1f} us ({median / tight:.2f}x the tight loop's); inside "
              f"{count}: tasks stepped {tasks}, I/O waits by timeout {waits}")
    rec = bench_model_timeline.Recorder()
    rec.install()  # (from here on every plan's kernels are wrapped)
    for model in models:
        row = outside_kernels(trio, af, rec, model, args.steps, args.warmup)
        share = (row["entry"] + row["exit"] + row["gaps all"]) / row["wall"]
        print(f"3. {model}: step {row['wall'] * 1e3:.2f} ms (recorded), {row['kernels']:.0f} "
              f"kernels on the loop's thread; outside them {share:.1%}: entry "
              f"{row['entry'] * 1e6:.0f} us, exit {row['exit'] * 1e6:.0f}, gaps "
              f"{row['gaps all'] * 1e6:.0f} (with a checkpoint "
              f"{row['gaps checkpoint'] * 1e6:.0f}, at a hand-off "
              f"{row['gaps hand-off'] * 1e6:.0f}, other {row['gaps other'] * 1e6:.0f})")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
