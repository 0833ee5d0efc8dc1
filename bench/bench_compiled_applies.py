"""The dense models' training steps with the optimizer applies' compiled loops on and off,
forms alternating in one process (issue 37): bench_models.py's MLP and autoencoder (RMSProp),
a session a form (form_rounds.py), ``kernels/jit.py``'s ``ENABLED`` switched between rounds
(read at each apply), so that the machine's noise hits both alike.

Forms:

* ``numpy``: the applies' numpy forms (blocked passes in place, ``kernels/training.py``);
* ``loop``: their compiled loops (one pass in place), the tree's default.

Each round runs ``--steps`` steps of each form in turn, the order of the two forms swapped
every round (median step, CPU per step); the figure is each form's best and median round,
with the ratio to ``numpy``. The compiled loops give the numpy forms' bits, so the losses
of one seed over three steps agree bit for bit in both forms: printed as a check.

Run: ``.venv/bin/python bench/bench_compiled_applies.py [--models mlp,autoencoder]
[--rounds 10] [--steps 20]``.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import form_rounds  # noqa: E402  (forms alternated in one process, written once)

FORMS = ("loop", "numpy")  # the tree's default first


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,autoencoder")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.kernels import jit

    if not jit.available():
        raise SystemExit("compiled loops unavailable (numba missing or ASYNCFLOW_JIT=0)")

    def use(form):
        jit.ENABLED = form == "loop"

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        config = af.ConfigProto(intra_op_parallelism_threads=0)  # the cores, as bench_models
        for model in args.models.split(","):
            rounds = await form_rounds.model_rounds(af, model, FORMS, use, rounds=args.rounds,
                                                    steps=args.steps, warmup=args.warmup,
                                                    config=config)
            losses = await form_rounds.seeded_losses(af, model, FORMS, use)
            form_rounds.report(model, rounds, args.steps, losses, base="numpy")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
