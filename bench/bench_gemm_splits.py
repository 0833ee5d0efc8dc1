"""The dense models' GEMM splits in their training steps, forms alternating in one process
(issue 37): the step time of bench_models.py's MLP and autoencoder with each way of
splitting their GEMMs over the intra-op pool, rounds interleaved so that the machine's noise
hits every form alike.

Forms (``kernels/intra_op.py``'s constants, read at each call, so one session serves all):

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

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (the models, written once)

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

    def use(form):
        per_work, lead = FORMS[form]
        intra_op.MACS_PER_WORK = defaults[0] if per_work is None else per_work
        intra_op.GEMM_LEAD_MACS = defaults[1] if lead is None else lead

    async def model_rounds(model):
        graph = af.Graph()
        rng = np.random.default_rng(0)
        with graph.as_default():
            feeds, loss, train = bench_models.build(af, model, bench_models.weights(model, rng))
            init = af.global_variables_initializer()
        feed = dict(zip(feeds, bench_models.data(model, rng)))
        async with af.Session(graph=graph) as sess:
            await sess.run(init)
            for _ in range(args.warmup):
                await sess.run([loss, train], feed)
            rounds = {form: [] for form in FORMS}
            for _ in range(args.rounds):
                for form in FORMS:
                    use(form)
                    rounds[form].append(await bench_models.median_step_ms(
                        sess, [loss, train], feed, args.steps))
            use("lead")
        return rounds

    async def losses(model):
        """One seeded step's loss per form, each from the same initial weights."""
        out = {}
        for form in FORMS:
            use(form)
            graph = af.Graph()
            rng = np.random.default_rng(0)
            with graph.as_default():
                af.set_random_seed(7)
                feeds, loss, train = bench_models.build(af, model,
                                                        bench_models.weights(model, rng))
                init = af.global_variables_initializer()
            feed = dict(zip(feeds, bench_models.data(model, rng)))
            async with af.Session(graph=graph) as sess:
                await sess.run(init)
                values = [(await sess.run([loss, train], feed))[0] for _ in range(3)]
            out[form] = np.float32(values).tobytes().hex()
        use("lead")
        return out

    async def run():
        print(f"load average at start: {os.getloadavg()}")
        for model in args.models.split(","):
            rounds = await model_rounds(model)
            base = min(w for w, _ in rounds["even"])
            base_median = float(np.median([w for w, _ in rounds["even"]]))
            print(f"{model}: {args.rounds} rounds of {args.steps} steps, median step ms "
                  f"(CPU ms)")
            for form, values in rounds.items():
                best = min(w for w, _ in values)
                median = float(np.median([w for w, _ in values]))
                print(f"  {form:>6}: best {best:.3f} ({best / base:.3f}x even), median "
                      f"{median:.3f} ({median / base_median:.3f}x); rounds "
                      + " ".join(f"{w:.2f}({c:.1f})" for w, c in values))
            hashes = await losses(model)
            same = len(set(hashes.values())) == 1
            print(f"  seeded losses over 3 steps: {'the same bits in every form' if same else hashes}")
        print(f"load average at end: {os.getloadavg()}")
    trio.run(run)


if __name__ == "__main__":
    main()
