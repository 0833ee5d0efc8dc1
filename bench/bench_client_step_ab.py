"""The trivial remote step (issue 34: ``p * 2.0`` on the worker of a one-ps, one-worker
cluster on loopback, ``bench_vs_tf1.py``'s) with one client-side setting against another,
alternated in one process on one cluster and one session, with an A/A beside the A/B.

Form A is the tree as it is; form B sets ``--set MODULE:NAME=VALUE`` (a module attribute the
client reads at each step, a Python literal; may repeat). Each round runs ``--steps`` steps of
each form in the order A B B A, the next round B A A B, so that the machine's phases (bench/
RESULTS.md, c45round) hit both forms alike. A chunk's figure is its median step (us). Per round:
B/A (the B chunks' medians over the A chunks'), and the A/A and B/B (each form's second chunk
over its first). At the end: each ratio's median and range over the rounds, each form's median
chunk, and the client's CPU a step by form (``time.thread_time``: the client spins while the
worker works, so this is about the wall).

    .venv/bin/python bench/bench_client_step_ab.py \\
        --set transports.http.bare_io:ANSWER_TRIES=1 [--rounds 12] [--steps 1000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "demos"))
import form_rounds  # noqa: E402  (``setting_forms``: --set parsed once, for every A/B bench)


async def _chunk(run, steps):
    """(the median step in us, the client's CPU a step in us) of ``steps`` steps."""
    times, clock = [], time.perf_counter_ns
    cpu = time.thread_time_ns()
    for _ in range(steps):
        start = clock()
        await run()
        times.append(clock() - start)
    return statistics.median(times) / 1e3, (time.thread_time_ns() - cpu) / steps / 1e3


async def _measure(spec, args, use):
    import asyncflow as af
    from bench_vs_tf1 import _trivial_and_pull
    graph, p, doubled, *_ = _trivial_and_pull(af)
    rows = []
    async with af.Session(graph=graph, cluster={"ps": spec["ps"],
                                                "worker": spec["worker"]}) as sess:
        def run():
            return sess.run(doubled, {p: 1.0})
        for form in ("A", "B"):  # (both forms warmed on this connection)
            use(form)
            for _ in range(args.warmup):
                await run()
        for n in range(args.rounds):
            order = ("A", "B", "B", "A") if n % 2 == 0 else ("B", "A", "A", "B")
            got = {"A": [], "B": []}
            for form in order:
                use(form)
                got[form].append(await _chunk(run, args.steps))
            use("A")
            (a1, ca1), (a2, ca2) = got["A"]
            (b1, cb1), (b2, cb2) = got["B"]
            row = {"a": (a1, a2), "b": (b1, b2), "ba": (b1 + b2) / (a1 + a2),
                   "aa": a2 / a1, "bb": b2 / b1, "cpu_a": (ca1 + ca2) / 2,
                   "cpu_b": (cb1 + cb2) / 2}
            rows.append(row)
            print(f"round {n + 1:2d} ({''.join(order)}): A {a1:6.1f} {a2:6.1f}  B {b1:6.1f} "
                  f"{b2:6.1f} us   B/A {row['ba']:.3f}  A/A {row['aa']:.3f}  B/B "
                  f"{row['bb']:.3f}   CPU A {row['cpu_a']:.1f} B {row['cpu_b']:.1f} us",
                  flush=True)
    return rows


def summary(rows):
    """The rounds' B/A, A/A and B/B (median and range), the median chunk of each form and,
    where the rows have them, the client's CPU a step (also ``bench_worker_wait_ab.py``'s)."""
    def spread(key):
        values = [row[key] for row in rows]
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"
    a = [x for row in rows for x in row["a"]]
    b = [x for row in rows for x in row["b"]]
    faster = sum(row["ba"] < 1.0 for row in rows)
    print(f"\n{len(rows)} rounds: B/A {spread('ba')}, B faster in {faster}; A/A "
          f"{spread('aa')}; B/B {spread('bb')}")
    cpu = (f"; client CPU a step: A {statistics.median(r['cpu_a'] for r in rows):.1f}, "
           f"B {statistics.median(r['cpu_b'] for r in rows):.1f} us" if "cpu_a" in rows[0] else "")
    print(f"median chunk: A {statistics.median(a):.1f} us, B {statistics.median(b):.1f} us{cpu}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", required=True, action="append", metavar="MODULE:NAME=VALUE",
                        help="form B's setting (a Python literal); may repeat")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=1000, help="steps a chunk")
    parser.add_argument("--warmup", type=int, default=300, help="untimed steps a form first")
    args = parser.parse_args(argv)
    import trio
    from local_cluster import local_cluster
    use = form_rounds.setting_forms(args.set)
    with local_cluster({"ps": 1, "worker": 1}) as spec:
        rows = trio.run(_measure, spec, args, use)
    summary(rows)


if __name__ == "__main__":
    main()
