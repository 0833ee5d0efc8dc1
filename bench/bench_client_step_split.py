"""Where the client's time goes in one trivial remote step (issue 34: ``p * 2.0`` on the worker
of a one-ps, one-worker cluster on loopback): a ``perf_counter_ns`` mark at each stage's edge,
the median of each stage over ``STEPS`` steps (after 200 untimed).

With ``--split`` the client's stages are wrapped (each wrapper costs ~0.2-0.3 us, so the
stages read a little high and the step too): ``Session.prepare``'s return; the direct step's
``_step``; the channel's ``run_graph_step``; the RunGraph's encode (``_encode_step``); the
request's ``writev`` (``bare_io.write_now``); the answer's read (``bare._read``: the spin or
the park); its decode (``client._step_values``); ``PreparedRun.result``. Without it, the
step's median and p10 alone (unwrapped).

    .venv/bin/python bench/bench_client_step_split.py 3000 [--split]
"""
import functools
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "demos"))

import trio  # noqa: E402

import asyncflow as af  # noqa: E402
from asyncflow import session  # noqa: E402
from asyncflow.cluster import direct_step  # noqa: E402
from transports.http import bare, bare_io, client  # noqa: E402

_clock = time.perf_counter_ns
_marks = []  # (stage edge, ns) of the step under way


def _wrap(owner, name, before, after):
    """``owner.name`` (a plain function) marked before and/or after each call."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def marked(*args, **kwargs):
        if before:
            _marks.append((before, _clock()))
        result = inner(*args, **kwargs)
        if after:
            _marks.append((after, _clock()))
        return result
    setattr(owner, name, marked)


def _wrap_async(owner, name, before, after):
    """``owner.name`` (a coroutine function) marked before and/or after each await."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    async def marked(*args, **kwargs):
        if before:
            _marks.append((before, _clock()))
        result = await inner(*args, **kwargs)
        if after:
            _marks.append((after, _clock()))
        return result
    setattr(owner, name, marked)


def _mark_stages():
    _wrap(session.Session, "prepare", None, "prepared")
    _wrap_async(direct_step.DirectStep, "_step", "direct0", "direct1")
    _wrap_async(client.TrioHttpChannel, "run_graph_step", "rgs0", "rgs1")
    _wrap(client.TrioHttpChannel, "_encode_step", "encode0", "encode1")
    _wrap(bare_io, "write_now", "writev0", "writev1")
    _wrap_async(bare, "_read", None, "read")
    _wrap(client, "_step_values", "decode0", "decode1")
    _wrap(session.PreparedRun, "result", "result0", "result1")


async def _measure(spec, steps, split):
    from bench_vs_tf1 import _trivial_and_pull
    graph, p, doubled, *_ = _trivial_and_pull(af)
    async with af.Session(graph=graph, cluster={"ps": spec["ps"],
                                                "worker": spec["worker"]}) as sess:
        for _ in range(200):
            await sess.run(doubled, {p: 1.0})
        rows, walls = [], []
        for _ in range(steps):
            _marks.clear()
            start = _clock()
            await sess.run(doubled, {p: 1.0})
            end = _clock()
            walls.append((end - start) / 1e3)
            if split:
                rows.append([("start", start), *_marks, ("end", end)])
    walls.sort()
    print(f"step median {statistics.median(walls):.1f} us, p10 {walls[len(walls) // 10]:.1f}")
    if not rows:
        return
    names = [name for name, _ in rows[-1]]
    alike = [row for row in rows if [name for name, _ in row] == names]
    if len(alike) < len(rows):
        print(f"({len(rows) - len(alike)} steps took other stages: left out)")
    for i in range(1, len(names)):
        stage = statistics.median((row[i][1] - row[i - 1][1]) / 1e3 for row in alike)
        print(f"  {names[i - 1]:>9} -> {names[i]:<9} {stage:6.2f} us")


def main():
    from local_cluster import local_cluster
    steps = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 3000
    split = "--split" in sys.argv
    if split:
        _mark_stages()
    with local_cluster({"ps": 1, "worker": 1}) as spec:
        trio.run(_measure, spec, steps, split)


if __name__ == "__main__":
    main()
