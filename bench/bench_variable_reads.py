"""A step of variable reads, a module setting against another, alternated in one process (issue
37: the static form's variable lines, ``codegen.BIND_VARIABLES``): ``--variables`` variables
of 4 floats each, read (VariableV2 and its Identity) and summed by one AddN, so the step is
the reads' lines, the session's own path and one kernel. A session a form, its plan compiled
with its form in use; rounds alternate form A (the tree as it is) and form B (``--set
MODULE:NAME=VALUE``), the order swapped each round. A round's figure: the median of
``--steps`` steps' wall (us). Printed: each form's best and median round, B - A round by
round (median, in us and per variable) and in how many rounds B was slower. An A/A: ``--set``
with the tree's own value.

    .venv/bin/python bench/bench_variable_reads.py \\
        --set "asyncflow.exec.codegen:BIND_VARIABLES=False" [--variables 24] [--rounds 16]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import form_rounds  # noqa: E402  (setting_forms: the --set forms)

FORMS = ("A", "B")


def build(af, count):
    graph = af.Graph()
    with graph.as_default():
        variables = [af.Variable(np.full(4, k, np.float32), name=f"v{k}") for k in range(count)]
        total = af.add_n([v.value() for v in variables], name="total")
        init = af.global_variables_initializer()
    return graph, total, init, float(4 * sum(range(count)))


async def median_step_us(sess, fetch, steps):
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        await sess.run(fetch)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", required=True, action="append", metavar="MODULE:NAME=VALUE")
    parser.add_argument("--variables", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af

    use = form_rounds.setting_forms(args.set)

    async def run():
        print(f"load average at start: {os.getloadavg()}; B: {', '.join(args.set)}; "
              f"{args.variables} variables")
        async with contextlib.AsyncExitStack() as stack:
            runs = {}
            try:
                for form in FORMS:
                    use(form)
                    graph, total, init, expected = build(af, args.variables)
                    sess = await stack.enter_async_context(af.Session(graph=graph))
                    await sess.run(init)
                    assert float((await sess.run(total)).sum()) == expected
                    runs[form] = (sess, total)
            finally:
                use("A")
            for form in FORMS:
                await median_step_us(*runs[form], args.warmup)
            rounds = {form: [] for form in FORMS}
            for k in range(args.rounds):
                for form in FORMS if k % 2 == 0 else FORMS[::-1]:
                    rounds[form].append(await median_step_us(*runs[form], args.steps))
        a, b = rounds["A"], rounds["B"]
        for form in FORMS:
            figures = rounds[form]
            print(f"  {form}: best {min(figures):.2f} us, median "
                  f"{statistics.median(figures):.2f}; rounds "
                  f"{' '.join(f'{x:.1f}' for x in figures)}")
        diffs = [y - x for x, y in zip(a, b)]
        median = statistics.median(diffs)
        each = median / args.variables * 1e3
        print(f"  B - A round by round: median {median:+.2f} us ({each:+.0f} ns a variable), "
              f"range {min(diffs):+.2f} to {max(diffs):+.2f}; B slower in "
              f"{sum(d > 0 for d in diffs)} of {len(diffs)} rounds; B / A of the medians "
              f"{statistics.median(b) / statistics.median(a):.3f}")
        print(f"load average at end: {os.getloadavg()}")

    trio.run(run)


if __name__ == "__main__":
    main()
