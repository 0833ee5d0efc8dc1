"""One module setting against another in the dense models' training steps, alternated in one
process (issue 37): bench_models.py's MLP and autoencoder, a session a form (built and
compiled with its form in use: form_rounds.py), rounds alternating between form A (the tree as
it is) and form B (``--set MODULE:NAME=VALUE``, a module attribute the code reads, at run time
such as a split threshold or when a plan is compiled such as a graph pass's switch; before
2026-12-07 one session served both forms, so a compile-time setting was measured A/A), the
order swapped each round, so that the machine's noise (its slow and fast phases, bench/RESULTS.md) hits
both alike.

Per model: each form's best and median round (a round's figure is its median step, with the
CPU a step), the ratios B / A of the best rounds, of the median rounds and the median of the
round-by-round ratios, and in how many rounds B was faster. The seeded losses of three steps
are compared between the forms bit for bit.

    .venv/bin/python bench/bench_ab_setting.py \\
        --set "asyncflow.kernels.blas:CHOICE='numpy'" \\
        [--models autoencoder,mlp] [--rounds 12] [--steps 20]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import form_rounds  # noqa: E402  (forms alternated in one process, written once)

FORMS = ("A", "B")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", required=True, action="append", metavar="MODULE:NAME=VALUE",
                        help="form B's setting (a Python literal); may repeat")
    parser.add_argument("--models", default="autoencoder,mlp")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af

    use = form_rounds.setting_forms(args.set)

    async def run():
        print(f"load average at start: {os.getloadavg()}; B: {', '.join(args.set)}")
        for model in args.models.split(","):
            rounds = await form_rounds.model_rounds(af, model, FORMS, use, rounds=args.rounds,
                                                    steps=args.steps, warmup=args.warmup)
            losses = await form_rounds.seeded_losses(af, model, FORMS, use)
            form_rounds.report(model, rounds, args.steps, losses)
            a, b = rounds["A"], rounds["B"]
            lower = sum(y[0] < x[0] for x, y in zip(a, b))
            print(f"  B / A: best {min(w for w, _ in b) / min(w for w, _ in a):.3f}, median "
                  f"{np.median([w for w, _ in b]) / np.median([w for w, _ in a]):.3f}, round "
                  f"by round median {np.median([y[0] / x[0] for x, y in zip(a, b)]):.3f}; "
                  f"B lower in {lower} of {len(a)} rounds")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
