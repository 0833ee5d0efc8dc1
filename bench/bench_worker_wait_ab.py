"""The trivial remote step (issue 34: ``p * 2.0`` on the worker of a one-ps, one-worker cluster
on loopback, ``bench_vs_tf1.py``'s) with the worker's wait for the next call spinning with a
trio checkpoint every ``--tries`` tries (form B, 16: the tree's ``bare_io.NEXT_CALL_TRIES``)
against every ``--base-tries`` (form A, 1: the tree's before it), alternated in one client
process, an A/A beside. The second cluster started may read faster whatever its setting:
run the forms swapped too (``--tries 1 --base-tries 16``) and take both orientations together.

A worker's setting cannot be switched from the client between steps, so each form has its own
cluster, both up for the whole run: two one-ps, one-worker clusters, each worker started with
a ``sitecustomize`` (written by this script into a temporary directory on its ``PYTHONPATH``)
that wraps ``transports.http.bare._read`` so that the server's spinning wait for the next call
(``spin`` with ``own`` 0) passes its form's ``tries`` to ``bare_io.read_once``. Both forms run
the same wrapper. Each round runs ``--steps`` steps of each form's session in the order A B B A,
the next round B A A B. A chunk's figure is its median step (us). Per round: B/A, and the A/A
and B/B (each form's second chunk over its first). ``--tries`` equal to ``--base-tries`` is the
A/A of the two clusters themselves.

    .venv/bin/python bench/bench_worker_wait_ab.py [--tries 16] [--base-tries 1] \\
        [--rounds 12] [--steps 1000]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "demos"))
import bench_client_step_ab  # noqa: E402  (``summary``: the rounds printed as its own)

_SITE = '''
import os
_tries = os.environ.get("ASYNCFLOW_BENCH_WAIT_TRIES")
if _tries:
    import transports.http.bare as _bare
    _read, _n = _bare._read, int(_tries)

    async def _wait_read(sock, spin=False, conn=None, own=0, tries=1):
        if spin and not own:  # the server's wait for the next call
            tries = _n
        return await _read(sock, spin, conn, own, tries)

    _bare._read = _wait_read
'''


async def _chunk(run, steps):
    """The median step in us of ``steps`` steps."""
    times, clock = [], time.perf_counter_ns
    for _ in range(steps):
        start = clock()
        await run()
        times.append(clock() - start)
    return statistics.median(times) / 1e3


async def _measure(specs, args):
    import asyncflow as af
    from bench_vs_tf1 import _trivial_and_pull
    graph, p, doubled, *_ = _trivial_and_pull(af)
    rows = []
    async with contextlib.AsyncExitStack() as stack:
        runs = {}
        for form, spec in specs.items():
            sess = await stack.enter_async_context(af.Session(
                graph=graph, cluster={"ps": spec["ps"], "worker": spec["worker"]}))
            runs[form] = (lambda s: lambda: s.run(doubled, {p: 1.0}))(sess)
            for _ in range(args.warmup):
                await runs[form]()
        for n in range(args.rounds):
            order = ("A", "B", "B", "A") if n % 2 == 0 else ("B", "A", "A", "B")
            got = {"A": [], "B": []}
            for form in order:
                got[form].append(await _chunk(runs[form], args.steps))
            (a1, a2), (b1, b2) = got["A"], got["B"]
            row = {"a": (a1, a2), "b": (b1, b2), "ba": (b1 + b2) / (a1 + a2),
                   "aa": a2 / a1, "bb": b2 / b1}
            rows.append(row)
            print(f"round {n + 1:2d} ({''.join(order)}): A {a1:6.1f} {a2:6.1f}  B {b1:6.1f} "
                  f"{b2:6.1f} us   B/A {row['ba']:.3f}  A/A {row['aa']:.3f}  B/B "
                  f"{row['bb']:.3f}", flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=16, help="form B's worker's tries")
    parser.add_argument("--base-tries", type=int, default=1, help="form A's worker's tries")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=1000, help="steps a chunk")
    parser.add_argument("--warmup", type=int, default=300, help="untimed steps a form first")
    args = parser.parse_args(argv)
    import trio
    import local_cluster as cluster_module
    base_env = cluster_module._ENV
    with tempfile.TemporaryDirectory() as site, contextlib.ExitStack() as stack:
        with open(os.path.join(site, "sitecustomize.py"), "w") as handle:
            handle.write(_SITE)
        path = os.pathsep.join(filter(None, [site, base_env.get("PYTHONPATH", "")]))
        specs = {}
        try:
            for form, tries in (("A", args.base_tries), ("B", args.tries)):
                cluster_module._ENV = {**base_env, "PYTHONPATH": path,
                                       "ASYNCFLOW_BENCH_WAIT_TRIES": str(tries)}
                specs[form] = stack.enter_context(cluster_module.local_cluster(
                    {"ps": 1, "worker": 1}))
        finally:
            cluster_module._ENV = base_env
        rows = trio.run(_measure, specs, args)
    bench_client_step_ab.summary(rows)


if __name__ == "__main__":
    main()
