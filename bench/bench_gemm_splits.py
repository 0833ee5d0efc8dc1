"""The dense models' GEMM splits in their training steps, forms alternating in one process
(issue 37): the step time of bench_models.py's MLP and autoencoder with each way of
splitting their GEMMs over the intra-op pool, rounds interleaved so that the machine's noise
hits every form alike.

Forms (``kernels/intra_op.py``'s constants, read at each call; a session a form, form_rounds.py):

* ``even``: GEMMs from ``MIN_SPLIT_WORK * 16`` multiply-adds (~16.8 M) in even chunks, one a
  thread (the form before the lead);
* ``lead``: the same GEMMs, the caller's chunk ``GEMM_LEAD_MACS`` longer than the worker's
  (the tree's defaults);
* ``lead6``: the lead, and GEMMs split from ``MIN_SPLIT_WORK * 6`` (~6.3 M: the 8.4 M ones
  too; measured, not kept).

Each round runs ``--steps`` steps of every form in turn (median step, CPU per step); the
figure is each form's best round and its median round, with the ratio to ``even``. The
losses of one seed agree bit for bit across forms where a split's chunks have the bits of
the whole GEMM (float32 on OpenBLAS's SkylakeX kernels, ``split_keeps_bits``; with other
BLAS cores they may differ in the last bits): printed as a check.

Run: ``.venv/bin/python bench/bench_gemm_splits.py [--models mlp,autoencoder] [--rounds 8]
[--steps 20]``.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import form_rounds  # noqa: E402  (forms alternated in one process, written once)

FORMS = {"even": (16, 0), "lead": (16, None), "lead6": (6, None)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,autoencoder")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af
    from asyncflow.kernels import intra_op

    defaults = (intra_op.MACS_PER_WORK, intra_op.GEMM_LEAD_MACS)
    forms = ("lead",) + tuple(form for form in FORMS if form != "lead")  # the tree's first

    def use(form):
        per_work, lead = FORMS[form]
        intra_op.MACS_PER_WORK = defaults[0] if per_work is None else per_work
        intra_op.GEMM_LEAD_MACS = defaults[1] if lead is None else lead

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        for model in args.models.split(","):
            rounds = await form_rounds.model_rounds(af, model, forms, use, rounds=args.rounds,
                                                    steps=args.steps, warmup=args.warmup,
                                                    swap=False)
            losses = await form_rounds.seeded_losses(af, model, forms, use)
            form_rounds.report(model, rounds, args.steps, losses, base="even")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
