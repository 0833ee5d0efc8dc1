"""What a clear of the codec's caches costs a remote step, and how often a service that opens
sessions clears them.

The codec keeps four caches, each cleared whole when it reaches its bound ("a bound, not an
LRU"): the validated headers (``schema.VALIDATED_HEADERS``, 256), the header templates
(``header_templates``, 64), the frame templates (``frame_templates``, 64) and the encoding
templates (``repeat_frames``, 256). After a clear the next steps of each live signature decode
in full and teach them again.

**Cost.** One process serves the trivial remote step's cluster itself (a ps and a worker, each
an ``af.Server`` on a loopback port of this process, the bare protocol as between processes)
and runs ``--signatures`` signatures of it (``p * 2.0`` fetched, then ``p * 3.0``: each its own
partition registered on the worker). The client and the worker share the caches here, so a
clear charges the step both sides' re-learning, as two processes clearing together would.
Each round runs every form once, in an order rotated each round: a form clears what it names
(outside the timing), then runs ``--after`` steps of each signature, each timed on its own
(``perf_counter_ns``). Forms: ``none`` (nothing cleared: A), ``none2`` (nothing either: the
A/A beside), ``all`` (``repeat_frames.forget_kept``), ``frames``, ``headers`` (header templates),
``validated``, ``encode`` (repeat_frames). Per form and step after the clear: the median over
the rounds (us) and its excess over ``none``'s; a clear's cost is the sum of the excesses.

**Frequency.** ``--sessions`` sessions one after another, each as a web service's request
would (``Session`` opened on the cluster, ``--session-steps`` steps of each signature, closed),
starting from nothing kept; after each, every cache's entries by message kind. Printed: a
session's median time, the entries each session adds to each cache (by kind: a RunGraph's are
taught on the worker, a reply's on the client) and so the sessions between two clears of each
cache at its bound; under the tree before (``keeping_stale``) and the tree.

**Stale.** What the closed sessions' templates cost the steps of a session opened after them
while they are kept (``_stale``): the live templates behind them in their lists (B, the tree
before) or in front (A: as in the tree, which drops them), alternated.

**Churn** (r48dup): the change itself end to end, alternated in one process: a round runs
A B B A (or B A A B), each form from nothing kept: ``--stale`` sessions of ``--stale-steps``
steps a signature opened and closed, then a live session's ``--stale-steps`` steps and a timed
chunk of ``--chunk`` (the chunk's median step). A: the tree (each closed session's templates
dropped at its deregistration); B: the tree before (``keeping_stale``). A/A and B/B: the two
chunks of a form in a round.

    .venv/bin/python bench/bench_codec_clear.py [--parts frequency,cost,stale,churn] \\
        [--rounds 300] [--after 3] [--signatures 2] [--sessions 20] [--session-steps 3] \\
        [--stale 9] [--stale-steps 300] [--chunk 200]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import time

FORMS = ("none", "none2", "all", "frames", "headers", "validated", "encode")


def _clears():
    from transports import frame_templates, header_templates, repeat_frames
    from transports.schema import VALIDATED_HEADERS
    return {"none": lambda: None, "none2": lambda: None, "all": repeat_frames.forget_kept,
            "frames": frame_templates.forget_all, "headers": header_templates.forget_all,
            "validated": VALIDATED_HEADERS.clear, "encode": repeat_frames.forget_all}


def kept_by_kind():
    """Each cache's entries now, by message kind: ``{cache: Counter(kind)}``."""
    from transports import frame_templates, header_templates, repeat_frames
    from transports.schema import SCHEMA_BY_CLASS, VALIDATED_HEADERS
    return {
        "validated": collections.Counter(v[0].kind for v in VALIDATED_HEADERS.values()),
        "headers": collections.Counter(t.schema.kind for ts in header_templates._templates.values()
                                       for t in ts),
        "frames": collections.Counter(SCHEMA_BY_CLASS[f.cls].kind
                                      for fs in frame_templates._by_size.values() for f in fs),
        "encode": collections.Counter(SCHEMA_BY_CLASS[key[0]].kind
                                      for key in repeat_frames._templates_by_key),
    }


@contextlib.contextmanager
def keeping_stale():
    """The tree before 2026-12-07 (c48dup): a worker's deregistered graph's templates kept
    (``repeat_frames.forget_graph`` not called at the deregistration)."""
    from asyncflow.cluster import worker
    forget, worker._forget_frames = worker._forget_frames, lambda handle: None
    try:
        yield
    finally:
        worker._forget_frames = forget


def _bounds():
    from transports import frame_templates, header_templates, repeat_frames, schema
    return {"validated": schema._CACHED_HEADERS, "headers": header_templates._KEPT,
            "frames": frame_templates.KEPT, "encode": repeat_frames._KEPT}


async def _steps(runs, n):
    """``n`` steps of each signature (``runs``: one step function each)."""
    for _ in range(n):
        for run in runs:
            await run()


async def _closed_sessions(af, graph, cluster, runs_of, args):
    """``args.stale`` sessions, each closed after ``args.stale_steps`` steps of each signature."""
    for _ in range(args.stale):
        async with af.Session(graph=graph, cluster=cluster) as sess:
            await _steps(runs_of(sess), args.stale_steps)


async def _chunk(runs, n):
    """The median step (us) of ``n`` timed steps of each signature."""
    clock, times = time.perf_counter_ns, []
    for _ in range(n):
        for run in runs:
            start = clock()
            await run()
            times.append(clock() - start)
    return statistics.median(times) / 1e3


async def _alternated(args, measure):
    """``args.rounds // 10`` rounds of the forms A and B alternated A B B A / B A A B, each
    form's figure ``await measure(form)`` (a median step, us), each round printed; the rows."""
    rows = []
    for n in range(args.rounds // 10):
        order = "ABBA" if n % 2 == 0 else "BAAB"
        got = {"A": [], "B": []}
        for form in order:
            got[form].append(await measure(form))
        rows.append(got)
        print(f"  round {n + 1:2d} ({order}): A {got['A'][0]:6.1f} {got['A'][1]:6.1f}  "
              f"B {got['B'][0]:6.1f} {got['B'][1]:6.1f} us", flush=True)
    return rows


def _summary(rows):
    """``_alternated``'s rows summed up: each form's median step, B/A and B - A round by
    round, the A/A and B/B within rounds, the rounds B was higher."""
    a = [sum(r["A"]) / 2 for r in rows]
    b = [sum(r["B"]) / 2 for r in rows]
    print(f"  A median step {statistics.median(a):.1f} us, B {statistics.median(b):.1f}; B/A "
          f"round by round median {statistics.median([y / x for x, y in zip(a, b)]):.3f} "
          f"(B - A {statistics.median([y - x for x, y in zip(a, b)]):+.1f} us a step); A/A "
          f"{statistics.median([r['A'][1] / r['A'][0] for r in rows]):.3f}, B/B "
          f"{statistics.median([r['B'][1] / r['B'][0] for r in rows]):.3f}; B higher in "
          f"{sum(y > x for x, y in zip(a, b))} of {len(rows)}")


async def _cost(af, graph, cluster, runs_of, args):
    clears = _clears()
    times = {form: [[] for _ in range(args.after * args.signatures)] for form in FORMS}
    clock = time.perf_counter_ns
    async with af.Session(graph=graph, cluster=cluster) as sess:
        runs = runs_of(sess)
        await _steps(runs, args.warmup)
        for n in range(args.rounds):
            shift = n % len(FORMS)
            for form in FORMS[shift:] + FORMS[:shift]:
                clears[form]()
                slot = 0
                for _ in range(args.after):
                    for run in runs:
                        start = clock()
                        await run()
                        times[form][slot].append(clock() - start)
                        slot += 1
    medians = {form: [statistics.median(t) / 1e3 for t in slots]
               for form, slots in times.items()}
    base = medians["none"]
    labels = [f"s{i + 1}.{j + 1}" for i in range(args.after) for j in range(args.signatures)]
    print(f"cost: {args.rounds} rounds, median step (us) by step after the clear "
          f"(s<step>.<signature>), and the sum of the excesses over 'none'")
    print(f"  {'form':9s} " + " ".join(f"{label:>7s}" for label in labels) + "   excess us")
    for form in FORMS:
        row = medians[form]
        excess = sum(x - a for x, a in zip(row, base))
        print(f"  {form:9s} " + " ".join(f"{x:7.1f}" for x in row) + f"   {excess:+8.1f}")


async def _frequency(af, graph, cluster, runs_of, args):
    print("frequency, the tree before (a deregistered graph's templates kept):")
    with keeping_stale():
        await _sessions(af, graph, cluster, runs_of, args)
    print("frequency, the tree (dropped at the deregistration):")
    await _sessions(af, graph, cluster, runs_of, args)


async def _sessions(af, graph, cluster, runs_of, args):
    from transports import repeat_frames
    repeat_frames.forget_kept()
    bounds = _bounds()
    rows, took = [], []
    for _ in range(args.sessions):
        start = time.perf_counter_ns()
        async with af.Session(graph=graph, cluster=cluster) as sess:
            await _steps(runs_of(sess), args.session_steps)
        took.append(time.perf_counter_ns() - start)
        rows.append(kept_by_kind())
    print(f"frequency: {args.sessions} sessions of {args.signatures} signature(s), "
          f"{args.session_steps} steps each, from nothing kept; a session (opened, its steps, "
          f"closed) took {statistics.median(took[1:] or took) / 1e3:.0f} us (median)")
    for cache, bound in bounds.items():
        counts = [sum(row[cache].values()) for row in rows]
        cleared = sum(b < a for a, b in zip(counts, counts[1:]))
        first, last = rows[0][cache], rows[-1][cache]
        growth = {kind: (last[kind] - first[kind]) / (len(rows) - 1)
                  for kind in sorted(set(first) | set(last))}
        per_session = sum(growth.values())
        every = f"a clear every {bound / per_session:.0f} sessions" if per_session > 0 \
            else "never cleared by sessions"
        print(f"  {cache:9s} bound {bound:3d}: after session 1 {dict(first)}; per later "
              f"session {({k: round(v, 2) for k, v in growth.items() if v})}; {every}"
              f"{f' (cleared {cleared} times here)' if cleared else ''}")


async def _stale(af, graph, cluster, runs_of, args):
    """The live session's frame templates at the front of their lists (A) or behind those of
    ``--stale`` closed sessions (B, as a session opened after them finds them), alternated
    A B B A / B A A B; a chunk's figure is its median step. The closed sessions run under
    the tree before (``keeping_stale``; the tree drops their templates at the deregistration,
    so A is the tree's case). Every session runs ``--stale-steps`` steps of each signature
    first: a RunGraph's ``request_id`` counts from 1 per registration, and its msgpack width
    (fixint, uint8, uint16) is part of a template, so the live session's steps and the closed
    sessions' last ones share one width and list."""
    from transports import frame_templates, repeat_frames
    repeat_frames.forget_kept()
    with keeping_stale():  # (the tree before: the closed sessions' templates kept)
        await _closed_sessions(af, graph, cluster, runs_of, args)
    stale = {id(f) for fs in frame_templates._by_size.values() for f in fs}
    async with af.Session(graph=graph, cluster=cluster) as sess:
        runs = runs_of(sess)
        await _steps(runs, args.stale_steps)
        lists = [fs for fs in frame_templates._by_size.values()
                 if any(id(f) not in stale for f in fs) and len(fs) > 1]
        behind = [sum(id(f) in stale for f in fs) for fs in lists]

        def place(front):
            for fs in lists:
                fs.sort(key=lambda f: (id(f) in stale) == front)

        async def measure(form):
            place(form == "A")
            return await _chunk(runs, args.chunk)

        rows = await _alternated(args, measure)
    print(f"stale: {len(rows)} rounds of {args.chunk} steps a signature a chunk; B: the live "
          f"templates behind those of closed sessions in their lists ({behind} of them), A: in "
          f"front")
    _summary(rows)


async def _churn(af, graph, cluster, runs_of, args):
    """See the module docstring (**Churn**)."""
    from transports import repeat_frames

    async def form(stale):
        repeat_frames.forget_kept()
        with keeping_stale() if stale else contextlib.nullcontext():
            await _closed_sessions(af, graph, cluster, runs_of, args)
            async with af.Session(graph=graph, cluster=cluster) as sess:
                runs = runs_of(sess)
                await _steps(runs, args.stale_steps)
                return await _chunk(runs, args.chunk)

    rows = await _alternated(args, lambda name: form(name == "B"))
    print(f"churn: {len(rows)} rounds; a form: {args.stale} sessions closed, then a live "
          f"session's chunk of {args.chunk} steps a signature; A the tree, B the tree before")
    _summary(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--after", type=int, default=3, help="steps timed after each clear")
    parser.add_argument("--signatures", type=int, default=2, choices=(1, 2))
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--session-steps", type=int, default=3)
    parser.add_argument("--stale", type=int, default=9, help="closed sessions (stale)")
    parser.add_argument("--stale-steps", type=int, default=300, help="steps a session (stale)")
    parser.add_argument("--chunk", type=int, default=200, help="steps a chunk (stale)")
    parser.add_argument("--parts", default="frequency,cost,stale")
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from transports.loopback_ports import free_ports

    graph = af.Graph()
    with graph.as_default():
        p = af.placeholder(af.float32, [], name="p")
        with af.device("/job:worker/task:0"):
            fetches = [p * 2.0, p * 3.0][:args.signatures]

    def runs_of(sess):
        return [(lambda fetch: lambda: sess.run(fetch, {p: 1.0}))(fetch) for fetch in fetches]

    ps, worker = free_ports(2)
    cluster = af.ClusterSpec({"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{worker}"]})

    began = time.perf_counter()

    async def run():
        async with af.Server(cluster, "ps", 0), af.Server(cluster, "worker", 0):
            for part in args.parts.split(","):
                print(f"({part} at {time.perf_counter() - began:.1f} s)", flush=True)
                await {"frequency": _frequency, "cost": _cost, "stale": _stale,
                        "churn": _churn}[part](
                    af, graph, cluster, runs_of, args)

    trio.run(run)


if __name__ == "__main__":
    main()
