"""Per-kernel times of the math kernels that carry TF1's special values (FloorDiv, FloorMod,
Pow, ArgMax/ArgMin, Round) on realistic shapes, called directly (no session), so that a
check for a special value is seen against the plain numpy call.

Run it twice, once against the tree before a change (``PYTHONPATH=<old tree>``), and compare
the two; each line is the median of several repeats, in microseconds.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import types

import numpy as np

import asyncflow  # noqa: F401  (registers the kernels)
from asyncflow.kernels.registry import get_kernel


def _ctx(op_type, out_dtype=None, **attrs):
    return types.SimpleNamespace(
        name=op_type.lower(), type=op_type, attrs=attrs, xp=np, prepared=False,
        output_dtypes=(out_dtype,), device=None)


def _time(fn, args, repeats, number):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn(*args)
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples) * 1e6


def cases():
    rng = np.random.default_rng(0)
    f_small = rng.standard_normal((256, 10)).astype(np.float32)
    f_big = rng.standard_normal((4096, 1000)).astype(np.float32)
    f_1m = (rng.standard_normal(1 << 20) * 100).astype(np.float32)
    f_1m_pos = np.abs(f_1m) + 1
    i_1m = rng.integers(-1000, 1000, 1 << 20).astype(np.int32)
    i_div = rng.integers(1, 50, 1 << 20).astype(np.int32)
    yield "ArgMax f32 [256,10] axis 1", "ArgMax", (f_small,), dict(axis=1), np.int64, 2000
    yield "ArgMax f32 [4096,1000] axis 1", "ArgMax", (f_big,), dict(axis=1), np.int64, 5
    yield "ArgMin f32 [4096,1000] axis 1", "ArgMin", (f_big,), dict(axis=1), np.int64, 5
    yield "ArgMax i32 [1M] axis 0", "ArgMax", (i_1m,), dict(axis=0), np.int64, 20
    yield "FloorMod i32 [1M] by [1M]", "FloorMod", (i_1m, i_div), {}, None, 5
    yield "FloorMod i32 [1M] by scalar 7", "FloorMod", (i_1m, np.asarray(7, np.int32)), {}, None, 5
    yield "FloorMod f32 [1M] by [1M]", "FloorMod", (f_1m, f_1m_pos), {}, None, 5
    yield "FloorMod f32 [1M] by scalar 7", "FloorMod", (f_1m, np.asarray(7, np.float32)), {}, None, 5
    yield "FloorDiv i32 [1M] by [1M]", "FloorDiv", (i_1m, i_div), {}, None, 5
    yield "FloorDiv i32 [1M] by scalar 7", "FloorDiv", (i_1m, np.asarray(7, np.int32)), {}, None, 5
    yield "FloorDiv f32 [1M] by [1M]", "FloorDiv", (f_1m, f_1m_pos), {}, None, 5
    yield "Pow f32 [1M] ** 2", "Pow", (f_1m, np.asarray(2, np.float32)), {}, None, 5
    yield "Pow f32 [1M] ** 0.5", "Pow", (f_1m_pos, np.asarray(0.5, np.float32)), {}, None, 5
    yield "Pow i32 [1M] ** 2", "Pow", (i_div, np.asarray(2, np.int32)), {}, None, 5
    yield "Round f32 [1M]", "Round", (f_1m,), {}, None, 5


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    results = {}
    for label, op_type, inputs, attrs, out_dtype, number in cases():
        kernel = get_kernel(op_type, "CPU").fn
        ctx = _ctx(op_type, out_dtype, **attrs)
        results[label] = _time(kernel, (ctx, *inputs), args.repeats, number)
        print(f"{args.label:8s} {label:34s} {results[label]:10.1f} us", flush=True)
    print(json.dumps({"label": args.label, "us": results}))


if __name__ == "__main__":
    main()
