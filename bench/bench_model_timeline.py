"""Where a training step leaves a core idle: every kernel and every intra-op chunk timed on
the thread that ran it (issue 37).

One session of a bench_models.py model (default: the convnet), its static plan's kernels
wrapped when the plan is compiled (the wrapper records thread, start and end), and the
intra-op pool's chunks wrapped the same way. Per step, from those intervals: the wall time,
how long no thread computed (the executor's own Python, wake-ups), exactly one thread
(a kernel not split, a split's tail, the loop's thread alone) and two or more; and per
kernel, the wall time it took and how much of it only one thread computed (the time a second
core could still take). Medians over ``--steps`` steps; ``--show`` prints the last step;
``--chunks`` each split kernel's chunks (medians: which thread, when each started after the
kernel, how long it took, and how long the kernel went on after its last chunk ended: what
a split's hand-off costs).

    python bench/bench_model_timeline.py --model convnet --steps 20 [--show] [--chunks]
        [--intra-op N]

``--intra-op 1`` (``intra_op_parallelism_threads``; 0, the default, the cores) with
``ASYNCFLOW_LANES=0`` in the environment runs every kernel whole on one thread: each kernel's
wall time is then its CPU time, the step's CPU by kernel (what a step costs on a machine that
gives the process one core).

``--ab ROUNDS`` first times the step run whole on a worker thread (``exec/thread_step.py``)
against the loop's form, two sessions of the model in this process, rounds alternating:
each round's median step and CPU per step, both forms, and the ratio of their best rounds.

The wrappers cost a few microseconds a kernel and a chunk; the figures are for finding
where one core works, not for step times (bench_models.py).
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


class Recorder:
    def __init__(self):
        self.kernels = []  # (thread, name, op type, start, end)
        self.chunks = []   # (thread, start, end)

    def wrap_plan(self, plan):
        for node in plan.schedule:
            if getattr(node.fn, "timed", False):
                continue

            def fn(ctx, *args, _fn=node.fn, _name=node.op.name, _type=node.op.type):
                start = time.perf_counter()
                try:
                    return _fn(ctx, *args)
                finally:
                    self.kernels.append((threading.get_ident(), _name, _type, start,
                                         time.perf_counter()))
            fn.timed = True
            node.fn = fn

    def install(self):
        from asyncflow.exec import dispatch, intra_op
        generate = dispatch.generate_forms

        def generate_forms(plan, *args, **kwargs):
            if plan.static and plan.static_fn is None:
                self.wrap_plan(plan)
            return generate(plan, *args, **kwargs)
        dispatch.generate_forms = generate_forms
        drain = intra_op._ChunkQueue.drain
        chunks = self.chunks

        def timed_drain(queue, fn, limit=None):
            def chunk(start, stop):
                begin = time.perf_counter()
                try:
                    fn(start, stop)
                finally:
                    chunks.append((threading.get_ident(), begin, time.perf_counter()))
            return drain(queue, chunk, limit)
        intra_op._ChunkQueue.drain = timed_drain

    def clear(self):
        self.kernels.clear()
        self.chunks.clear()


def busy_profile(intervals_by_thread, start, end):
    """Seconds in [start, end] with 0, 1 and 2+ threads computing, and the 1-thread stretches
    as (a, b) pairs."""
    events = []
    for intervals in intervals_by_thread.values():
        for a, b in merge(intervals):
            events.append((max(a, start), 1))
            events.append((min(b, end), -1))
    events.sort()
    counts = [0.0, 0.0, 0.0]
    single = []
    level, last = 0, start
    for t, delta in events:
        if t > last:
            counts[min(level, 2)] += t - last
            if level == 1:
                single.append((last, t))
        level += delta
        last = max(last, t)
    if end > last:
        counts[min(level, 2)] += end - last
    return counts, single


def merge(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def overlap(a, b, stretches):
    return sum(max(0.0, min(b, d) - max(a, c)) for c, d in stretches)


def analyse(rec, start, end):
    by_thread = {}
    # A kernel's own thread computes for the kernel's whole time except while it waits for
    # a helper's chunk; a chunk's thread for the chunk. Kernels on the thread that also ran
    # chunks are counted once (merged intervals per thread).
    for thread, _, _, a, b in rec.kernels:
        by_thread.setdefault(thread, []).append((a, b))
    for thread, a, b in rec.chunks:
        by_thread.setdefault(thread, []).append((a, b))
    counts, single = busy_profile(by_thread, start, end)
    per_kernel = {}
    for thread, name, op_type, a, b in rec.kernels:
        wall, alone = per_kernel.get(name, (op_type, 0.0, 0.0))[1:]
        per_kernel[name] = (op_type, wall + b - a, alone + overlap(a, b, single))
    return counts, per_kernel


def split_chunks(rec):
    """Per split kernel of one step: ``(name, [(own thread, start after the kernel's start,
    duration)] in start order, kernel end after its last chunk's end)``, seconds."""
    out = []
    for thread, name, _, a, b in rec.kernels:
        inside = sorted((c, d, t == thread) for t, c, d in rec.chunks if a <= c <= b)
        if len(inside) > 1:
            out.append((name, [(own, c - a, d - c) for c, d, own in inside],
                        b - max(d for _, d, _ in inside)))
    return out


def print_chunks(per_kernel):
    """``per_kernel``: name -> one ``split_chunks`` entry's chunks and tail per step."""
    print("  split kernels, medians (us): per chunk its thread (c: the kernel's, w: a helper), "
          "start after the kernel's start + duration; the kernel's end after its last chunk")
    for name, samples in per_kernel.items():
        counts = {len(chunks) for chunks, _ in samples}
        if len(counts) != 1:
            print(f"    {name}: chunk counts vary {sorted(counts)}")
            continue
        parts = []
        for index in range(counts.pop()):
            own = [chunks[index][0] for chunks, _ in samples]
            starts = [chunks[index][1] for chunks, _ in samples]
            lengths = [chunks[index][2] for chunks, _ in samples]
            parts.append(f"{'c' if sum(own) * 2 >= len(own) else 'w'} "
                         f"{np.median(starts) * 1e6:.0f}+{np.median(lengths) * 1e6:.0f}")
        tail = np.median([tail for _, tail in samples]) * 1e6
        print(f"    {name}: " + ", ".join(parts) + f"; end +{tail:.0f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="convnet", choices=bench_models.MODELS)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--show", action="store_true", help="print the last step's kernels")
    parser.add_argument("--chunks", action="store_true",
                        help="print each split kernel's chunks (medians)")
    parser.add_argument("--intra-op", type=int, default=0, metavar="N",
                        help="intra_op_parallelism_threads (0: the cores)")
    parser.add_argument("--ab", type=int, default=0, metavar="ROUNDS",
                        help="first time the thread form against the loop's, ROUNDS rounds")
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af

    rec = Recorder()
    config = af.ConfigProto(intra_op_parallelism_threads=args.intra_op)

    async def session(enabled):
        from asyncflow.exec import thread_step
        thread_step.ENABLED = enabled  # read when the plan is built (the first run)
        graph = af.Graph()
        rng = np.random.default_rng(0)
        with graph.as_default():
            feeds, loss, train = bench_models.build(af, args.model,
                                                    bench_models.weights(args.model, rng))
            init = af.global_variables_initializer()
        sess = af.Session(graph=graph, config=config)
        await sess.__aenter__()
        await sess.run(init)
        feed = dict(zip(feeds, bench_models.data(args.model, rng)))
        for _ in range(args.warmup):
            await sess.run([loss, train], feed)
        thread_step.ENABLED = True
        return sess, feed, loss, train

    async def ab():
        forms = {"thread": await session(True), "loop": await session(False)}
        best = {name: [] for name in forms}
        for _ in range(args.ab):
            for name, (sess, feed, loss, train) in forms.items():
                best[name].append(await bench_models.median_step_ms(
                    sess, [loss, train], feed, args.steps))
        for name, rounds in best.items():
            print(f"{name:>6}: median step ms (CPU ms) by round: "
                  + ", ".join(f"{w:.2f} ({c:.1f})" for w, c in rounds))
        print(f"thread / loop, best rounds: "
              f"{min(best['thread'])[0] / min(best['loop'])[0]:.3f}")
        for sess, *_ in forms.values():
            await sess.__aexit__(None, None, None)

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        if args.ab:
            await ab()
        rec.install()
        graph = af.Graph()
        rng = np.random.default_rng(0)
        with graph.as_default():
            feeds, loss, train = bench_models.build(af, args.model,
                                                    bench_models.weights(args.model, rng))
            init = af.global_variables_initializer()
        feed = dict(zip(feeds, bench_models.data(args.model, rng)))
        async with af.Session(graph=graph, config=config) as sess:
            await sess.run(init)
            for _ in range(args.warmup):
                await sess.run([loss, train], feed)
            steps, kernels, splits = [], {}, {}
            for _ in range(args.steps):
                rec.clear()
                cpu = time.process_time()
                start = time.perf_counter()
                await sess.run([loss, train], feed)
                end = time.perf_counter()
                cpu = time.process_time() - cpu
                counts, per_kernel = analyse(rec, start, end)
                steps.append([end - start, cpu] + counts)
                for name, (op_type, wall, alone) in per_kernel.items():
                    kernels.setdefault((name, op_type), []).append((wall, alone))
                for name, chunks, tail in split_chunks(rec):
                    splits.setdefault(name, []).append((chunks, tail))
            last = list(rec.kernels), list(rec.chunks), start
        med = np.median(np.array(steps), axis=0) * 1e3
        print(f"{args.model}, median of {args.steps} steps: wall {med[0]:.2f} ms, CPU "
              f"{med[1]:.2f} ms; no thread computing {med[2]:.2f} ms, one thread "
              f"{med[3]:.2f} ms, two or more {med[4]:.2f} ms")
        print("  kernel (op type): median wall ms, of it one thread alone ms")
        rows = sorted(((np.median([w for w, _ in v]) * 1e3, np.median([s for _, s in v]) * 1e3,
                        name, op_type) for (name, op_type), v in kernels.items()), reverse=True)
        for wall, alone, name, op_type in rows:
            if wall >= 0.05:
                print(f"  {wall:7.2f} {alone:7.2f}  {name} ({op_type})")
        by_type = {}
        for wall, _, _, op_type in rows:
            by_type[op_type] = by_type.get(op_type, 0.0) + wall
        print(f"  by op type (sums of the medians, ms; all {sum(by_type.values()):.2f}): "
              + ", ".join(f"{op_type} {wall:.2f}" for op_type, wall in
                          sorted(by_type.items(), key=lambda item: -item[1]) if wall >= 0.01))
        if args.chunks:
            print_chunks(splits)
        if args.show:
            kernels_, chunks, origin = last
            threads = {}
            for thread, name, op_type, a, b in sorted(kernels_, key=lambda r: r[3]):
                tag = threads.setdefault(thread, f"t{len(threads)}")
                inside = [(c, d) for t, c, d in chunks if a <= c <= b]
                helpers = sorted({threads.setdefault(t, f"t{len(threads)}")
                                  for t, c, d in chunks if a <= c <= b and t != thread})
                print(f"  {tag} {(a - origin) * 1e3:8.3f} -> {(b - origin) * 1e3:8.3f} ms "
                      f"{name} ({op_type}) chunks {len(inside)} helpers {helpers}")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
