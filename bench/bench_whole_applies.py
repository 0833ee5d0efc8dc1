"""What holding SIGINT around every apply kernel's call costs (``kernels/sigint_hold.whole``:
an apply is one update with respect to a Ctrl-C): the tree (A) against its apply kernels
unwrapped (B: the registry's entries given the kernels without the hold, as before; the
atomic splits' own hold kept), with A again (A2) beside as the A/A, alternated in one process.

Two measurements, each on the main thread (where the hold swaps SIGINT's handler and back):

- ``--calls``: one small ``ApplyRMSProp`` (``--size`` float32, the compiled loop where numba
  is there), called directly ``--calls`` times a round, the forms alternated round by round
  (the order reversed every other round): the figure is the median round's microseconds a
  call, and B / A, A2 / A of the round-by-round medians;
- ``--models``: the dense models' training steps (form_rounds.py: a session a form, compiled
  with its form in use, rounds alternated), each form's median step, the round-by-round
  ratios, and the seeded losses' bits.

    .venv/bin/python bench/bench_whole_applies.py [--models mlp] [--rounds 16] [--steps 20]
        [--calls 20000] [--size 256]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import form_rounds  # noqa: E402  (forms alternated in one process, written once)

FORMS = ("A", "B", "A2")


def unwrapped_forms():
    """``(use, count)``: ``use(form)`` puts the registry's apply kernels as they are (A, A2)
    or without their hold (B); ``count``: the kernels the hold wraps."""
    from asyncflow.kernels import registry, sigint_hold
    held = sigint_hold.whole(lambda: None).__code__  # (the wrapper's code: one for all)
    wrapped = {key: kernel for key, kernel in registry._KERNELS.items()
               if getattr(kernel.fn, "__code__", None) is held}
    bare = {key: dataclasses.replace(kernel, fn=kernel.fn.__wrapped__)
            for key, kernel in wrapped.items()}

    def use(form):
        registry._KERNELS.update(bare if form == "B" else wrapped)
    return use, len(wrapped)


def ratios(rounds):
    a = rounds["A"]
    out = {}
    for form in FORMS[1:]:
        b = rounds[form]
        out[form] = (statistics.median(y / x for x, y in zip(a, b)),
                     sum(y < x for x, y in zip(a, b)))
    return out


def call_rounds(use, rounds, calls, size):
    """``{form: [us a call per round]}`` of a direct ``ApplyRMSProp`` call."""
    from asyncflow.exec.devices import Device
    from asyncflow.exec.resources import VariableResource
    from asyncflow import dtypes
    from asyncflow.kernels.registry import ANY, get_kernel

    class Context:
        attrs = {"use_nesterov": False, "use_locking": False}
        name, type, xp = "apply", "ApplyRMSProp", np
        device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, 1,
                        intra_op_threads=1)
    ctx = Context()
    rng = np.random.default_rng(0)
    refs = []
    for index in range(3):
        ref = VariableResource(f"v{index}", dtypes.float32, (size,))
        ref.assign((np.abs(rng.standard_normal(size)) + 1).astype(np.float32))
        refs.append(ref)
    grad = rng.standard_normal(size).astype(np.float32) * np.float32(1e-3)
    hyper = [np.float32(h) for h in (0.01, 0.9, 0.5, 1e-6)]
    for form in FORMS:  # (warm: the loop compiled or loaded, the caches filled)
        use(form)
        kernel = get_kernel("ApplyRMSProp", ANY).fn
        for _ in range(min(calls, 1000)):
            kernel(ctx, *refs, *hyper, grad)
    out = {form: [] for form in FORMS}
    for index in range(rounds):
        for form in FORMS if index % 2 == 0 else FORMS[::-1]:
            use(form)
            kernel = get_kernel("ApplyRMSProp", ANY).fn
            start = time.perf_counter()
            for _ in range(calls):
                kernel(ctx, *refs, *hyper, grad)
            out[form].append((time.perf_counter() - start) / calls * 1e6)
    use("A")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args(argv)
    import trio

    import asyncflow as af

    use, count = unwrapped_forms()
    print(f"load average at start: {os.getloadavg()}; {count} apply kernels hold SIGINT (A), "
          f"not B")
    if args.calls:
        rounds = call_rounds(use, args.rounds, args.calls, args.size)
        print(f"ApplyRMSProp on {args.size} float32, {args.calls} calls a round, median round "
              "us a call: " + ", ".join(f"{form} {statistics.median(rounds[form]):.3f}"
                                        for form in FORMS))
        for form, (ratio, lower) in ratios(rounds).items():
            print(f"  {form} / A round by round median {ratio:.4f}; {form} lower in {lower} "
                  f"of {args.rounds}")

    async def run():
        for model in filter(None, args.models.split(",")):
            rounds = await form_rounds.model_rounds(af, model, FORMS, use, rounds=args.rounds,
                                                    steps=args.steps, warmup=args.warmup)
            losses = await form_rounds.seeded_losses(af, model, FORMS, use)
            form_rounds.report(model, rounds, args.steps, losses, base="A")
            walls = {form: [w for w, _ in values] for form, values in rounds.items()}
            for form, (ratio, lower) in ratios(walls).items():
                print(f"  {form} / A round by round median {ratio:.4f}; {form} lower in "
                      f"{lower} of {args.rounds}")
    trio.run(run)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
