"""How long ``pairs.run_group`` holds its caller (the event loop) when no pool thread takes
the group's second side (the worker kept busy): a group of two equal dense ``ApplyRMSProp``
applies, the side handed back to its own lines unless a Ctrl-C was noted (A, the tree), and
that side always run by the caller inside the hold (B: ``sigint_hold.noted`` answering True,
c47fix's form), with one plain apply (ONE) and A again (A2) beside as the A/A, alternated
call by call in one process (the order reversed every other round).

Prints each form's median call in ms and its median ratio to ONE, round by round: A and A2
near 1 (the caller computes one side, then a slice check), B near 2 or more (both sides
without a checkpoint).

    .venv/bin/python bench/bench_group_hold.py [--size 1048576] [--rounds 30]
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
import types

import numpy as np

FORMS = ("ONE", "A", "B", "A2")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--rounds", type=int, default=30)
    options = parser.parse_args()
    from asyncflow import dtypes
    from asyncflow.exec import pairs
    from asyncflow.exec.devices import Device
    from asyncflow.exec.resources import VariableResource
    from asyncflow.kernels import sigint_hold
    from asyncflow.kernels.registry import ANY, get_kernel

    class Context:
        attrs = {"use_nesterov": False, "use_locking": False}
        name, type, xp = "apply", "ApplyRMSProp", np
        device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, 2,
                        intra_op_threads=2)

    ctx, size = Context(), options.size
    kernel = get_kernel("ApplyRMSProp", ANY).fn
    refs = []
    for index in range(2):
        refs.append([])
        for slot in range(3):
            ref = VariableResource(f"v{index}_{slot}", dtypes.as_dtype(np.float32), (size,))
            ref.assign(np.full(size, 0.5, np.float32))
            refs[-1].append(ref)
    grad = np.full(size, 0.01, np.float32)
    hyper = tuple(np.float32(v) for v in (0.01, 0.9, 0.5, 1e-6))
    nodes = [types.SimpleNamespace(ctx=ctx, fn=kernel) for _ in refs]
    args = [[*r, *hyper, grad] for r in refs]
    noted = sigint_hold.noted

    def call(form):
        if form == "ONE":
            kernel(ctx, *args[0])
            return
        sigint_hold.noted = (lambda: True) if form == "B" else noted
        try:
            result = pairs.run_group(nodes[0], args[0], [(nodes[1], args[1])])
        finally:
            sigint_hold.noted = noted
        assert pairs.done(result, 1) == (form == "B"), form
    busy, release = threading.Event(), threading.Event()
    ctx.device.intra_op._workers().submit(lambda: (busy.set(), release.wait(600)))
    assert busy.wait(30)
    times = {form: [] for form in FORMS}
    try:
        for form in FORMS:  # (warm-up)
            call(form)
        for index in range(options.rounds):
            for form in (FORMS if index % 2 == 0 else FORMS[::-1]):
                start = time.perf_counter()
                call(form)
                times[form].append(time.perf_counter() - start)
    finally:
        release.set()
    print(f"ApplyRMSProp groups of two {size}-element float32 applies, the worker busy, "
          f"{options.rounds} rounds:")
    for form in FORMS:
        ratio = statistics.median(t / o for t, o in zip(times[form], times["ONE"]))
        print(f"  {form:>3}: median {statistics.median(times[form]) * 1e3:.3f} ms, "
              f"/ ONE round by round median {ratio:.2f}")


if __name__ == "__main__":
    main()
