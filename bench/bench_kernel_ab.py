"""Which kernels a module setting moves in a dense model's step: every kernel of two forms
timed, a session a form, rounds alternating in one process (issue 37).

``bench_ab_setting.py`` says whether a setting moves the step; this says where. Form A is the
tree as it is, form B ``--set MODULE:NAME=VALUE`` (as bench_ab_setting.py: read when a plan
is compiled, such as a graph pass's switch, or at run time); each form's session is built
and compiled with its form in use (form_rounds.py). Every kernel is wrapped when it is
looked up for a plan (its thread's wall time from call to return, a few microseconds of
wrapper each), so the figures locate a change, they are not step times. Printed per node
name: each form's median wall time in microseconds over all its runs (a node only one form
has shows a dash for the other), and the median span from the step's first kernel to each
kernel's start: where the step's time went earlier or later. Nodes are listed by the first
form's span (a fused node takes one of its parts' names).

    .venv/bin/python bench/bench_kernel_ab.py \\
        --set "asyncflow.compile.fuse_dropout:RELU_GRAD=False" [--model mlp] [--rounds 20]
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import form_rounds  # noqa: E402  (the models' graphs, written once)

FORMS = ("A", "B")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", required=True, action="append", metavar="MODULE:NAME=VALUE",
                        help="form B's setting (a Python literal); may repeat")
    parser.add_argument("--model", default="mlp", choices=("mlp", "autoencoder"))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.kernels import registry

    set_form = form_rounds.setting_forms(args.set)
    current = ["A"]

    def use(form):
        current[0] = form
        set_form(form)

    spans = collections.defaultdict(list)   # (form, node) -> durations
    starts = collections.defaultdict(list)  # (form, node) -> start after the step's first
    first = {}

    def timed(kernel_fn):
        def fn(ctx, *inputs):
            start = time.perf_counter()
            try:
                return kernel_fn(ctx, *inputs)
            finally:
                form = current[0]
                spans[(form, ctx.name)].append(time.perf_counter() - start)
                starts[(form, ctx.name)].append(start - first.get(form, start))
        return fn
    for key, kernel in list(registry._KERNELS.items()):
        if not kernel.is_async:
            registry._KERNELS[key] = dataclasses.replace(kernel, fn=timed(kernel.fn))

    async def run():
        print(f"load average at start: {os.getloadavg()}; B: {', '.join(args.set)}")
        sessions = {}
        try:
            for form in FORMS:
                use(form)
                graph, feed, loss, train, init = form_rounds.build(af, args.model)
                session = af.Session(graph=graph)
                await session.__aenter__()
                sessions[form] = (session, [loss, train], feed)
                await session.run(init)
                for _ in range(5):
                    await session.run([loss, train], feed)
            spans.clear()
            starts.clear()
            for index in range(args.rounds):
                for form in FORMS if index % 2 == 0 else FORMS[::-1]:
                    use(form)
                    session, fetches, feed = sessions[form]
                    for _ in range(args.steps):
                        first[form] = time.perf_counter()
                        await session.run(fetches, feed)
        finally:
            for session, _, _ in sessions.values():
                await session.__aexit__(None, None, None)
            use("A")
        names = sorted({name for _, name in spans},
                       key=lambda n: np.median(starts.get(("A", n)) or starts[("B", n)]))
        print(f"{args.model}: {args.rounds} rounds of {args.steps} steps a form; median us")
        print(f"  {'A start':>8} {'A wall':>8} {'B start':>8} {'B wall':>8}  node")
        for name in names:
            cells = []
            for form in FORMS:
                for table in (starts, spans):
                    values = table.get((form, name))
                    cells.append(f"{1e6 * np.median(values):8.1f}" if values else f"{'-':>8}")
            print(f"  {' '.join(cells)}  {name}")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
