"""The fused dropout's compiled kernel (kernels/dropout.py ``compiled_dropout``) against the
same function of an earlier version of that file, alternated in one process.

``--baseline`` names a copy of an earlier ``kernels/dropout.py`` (``git show
<rev>:asyncflow/kernels/dropout.py > <before>/dropout.py``); it is loaded as a module of its
own, its kernel registrations skipped. Rounds alternate the two (the order swapped each round)
and an A/A pair (the current kernel twice) beside them; each round times ``--number`` calls on
one [shape] float32 (or float64) array, best of ``--repeat``. Both are first checked to give
the same bits and generator state. Prints each pair's ratio of medians over the rounds.

    .venv/bin/python bench/bench_dropout_ab.py --baseline <before>/dropout.py [--rounds 15]
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import timeit

import numpy as np

from asyncflow.kernels import dropout, registry


def load_baseline(path):
    """The earlier file as module ``dropout_baseline``, its registrations no-ops."""
    saved = {name: getattr(registry, name)
             for name in ("register_kernel", "register_prepare", "host_memory")}
    registry.register_kernel = lambda *a, **k: (lambda fn: fn)
    registry.register_prepare = lambda *a, **k: (lambda fn: fn)
    registry.host_memory = lambda *a, **k: None
    try:
        spec = importlib.util.spec_from_file_location("dropout_baseline", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # (numba's disk cache imports it by name)
        spec.loader.exec_module(module)
    finally:
        for name, value in saved.items():
            setattr(registry, name, value)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shape", default="128,256")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    old = load_baseline(args.baseline)
    dtype = np.dtype(args.dtype)
    shape = tuple(int(d) for d in args.shape.split(","))
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    keep = np.asarray(0.75, dtype)
    forms = {"new": dropout.compiled_dropout, "new2": dropout.compiled_dropout,
             "old": old.compiled_dropout}
    ref = None
    for name, fn in forms.items():  # compile, and check the bits and states agree
        rng = np.random.default_rng(1)
        got = [a.tobytes() for _ in range(3) for a in fn(rng, x, keep, dtype)]
        got.append(repr(rng.bit_generator.state))
        assert ref is None or got == ref, f"{name} differs from new"
        ref = got
    times = {name: [] for name in forms}
    rng = np.random.default_rng(2)
    for r in range(args.rounds):
        order = list(forms) if r % 2 == 0 else list(reversed(forms))
        for name in order:
            fn = forms[name]
            best = min(timeit.repeat(lambda: fn(rng, x, keep, dtype), number=args.number,
                                     repeat=args.repeat)) / args.number
            times[name].append(best * 1e6)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"{shape} {dtype}, {args.rounds} rounds of best-of-{args.repeat} x {args.number} calls")
    for name in forms:
        print(f"  {name}: median {med[name]:.2f} us a call (min {min(times[name]):.2f}, "
              f"max {max(times[name]):.2f})")
    print(f"  A/B old/new: {med['old'] / med['new']:.3f}   A/A new2/new: "
          f"{med['new2'] / med['new']:.3f}")


if __name__ == "__main__":
    main()
