"""Per-call times of the ResizeBilinear kernel (and its gradient) on image-pipeline shapes,
called directly (no session), against another source tree in the same run; also
ResizeNearestNeighborGrad's (``NEAREST_CASES``) where the tree has it.

``--baseline-tree PATH`` runs the same measurements with asyncflow imported from PATH, in
rounds that alternate the two trees (each round a fresh interpreter per tree), and prints
each tree's median over the rounds and the ratio this tree / baseline. Without it, only this
tree. Each round's figure is itself the median of ``--repeats`` timings.

Run: ``python bench/bench_resize_bilinear.py [--baseline-tree PATH] [--rounds 5]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (label, image shape, output size, align_corners, calls per timing)
CASES = [
    ("[1,32,32,3] -> 64x64", (1, 32, 32, 3), (64, 64), False, 400),
    ("[8,224,224,3] -> 299x299", (8, 224, 224, 3), (299, 299), False, 3),
    ("[32,64,64,16] -> 128x128 align", (32, 64, 64, 16), (128, 128), True, 2),
    ("[16,96,96,8] -> 48x48", (16, 96, 96, 8), (48, 48), False, 20),
]

# ResizeNearestNeighborGrad: (label, gradient shape, image size, align_corners,
# half_pixel_centers, calls per timing)
NEAREST_CASES = [
    ("[1,64,64,3] -> 32x32 (x2)", (1, 64, 64, 3), (32, 32), False, False, 100),
    ("[8,299,299,3] -> 224x224 half", (8, 299, 299, 3), (224, 224), False, True, 3),
    ("[1,2048,2048,3] -> 1024x1024 (x2)", (1, 2048, 2048, 3), (1024, 1024), False, False, 2),
    ("[4,512,512,64] -> 256x256 (x2) align", (4, 512, 512, 64), (256, 256), True, False, 1),
    ("[16,48,48,8] -> 96x96 (down)", (16, 48, 48, 8), (96, 96), False, False, 10),
    ("[1,1024,1024,1] -> 128x128 (x8)", (1, 1024, 1024, 1), (128, 128), False, False, 3),
]


def _ctx(op_type, **attrs):
    return types.SimpleNamespace(name=op_type.lower(), type=op_type, attrs=attrs, xp=np,
                                 prepared=False, output_dtypes=(np.float32,), device=None)


def _time(fn, args, repeats, number):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn(*args)
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples) * 1e6


def measure(repeats):
    """``{label: microseconds}`` of this interpreter's asyncflow."""
    import asyncflow  # noqa: F401  (registers the kernels)
    from asyncflow.kernels.registry import get_kernel
    forward = get_kernel("ResizeBilinear", "CPU").fn
    backward = get_kernel("ResizeBilinearGrad", "CPU").fn
    rng = np.random.default_rng(0)
    results = {}
    for label, shape, size, align, number in CASES:
        images = rng.standard_normal(shape).astype(np.float32)
        ctx = _ctx("ResizeBilinear", align_corners=align)
        size_array = np.asarray(size, np.int32)
        results["forward " + label] = _time(forward, (ctx, images, size_array), repeats, number)
        grads = forward(ctx, images, size_array)[0]
        grad_ctx = _ctx("ResizeBilinearGrad", align_corners=align)
        results["grad    " + label] = _time(backward, (grad_ctx, grads, images), repeats,
                                            max(1, number // 2))
    nearest = get_kernel("ResizeNearestNeighborGrad", "CPU")
    for label, shape, size, align, half, number in NEAREST_CASES if nearest else ():
        grads = rng.standard_normal(shape).astype(np.float32)
        ctx = _ctx("ResizeNearestNeighborGrad", align_corners=align, half_pixel_centers=half)
        results["nearest grad " + label] = _time(nearest.fn, (ctx, grads,
                                                              np.asarray(size, np.int32)),
                                                 repeats, number)
    return results


def _round(tree, repeats):
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker",
                           "--repeats", str(repeats)], env=env, capture_output=True, text=True,
                          check=True, cwd=tree)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-tree", metavar="PATH")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.repeats)))
        return
    trees = {"this": HERE}
    if args.baseline_tree:
        trees["baseline"] = os.path.abspath(args.baseline_tree)
    rounds = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            rounds[name].append(_round(tree, args.repeats))
    medians = {name: {label: statistics.median(r[label] for r in runs) for label in runs[0]}
               for name, runs in rounds.items()}
    for label in medians["this"]:
        line = f"{label:40s} this {medians['this'][label]:10.1f} us"
        if "baseline" in medians:
            base = medians["baseline"][label]
            line += f"   baseline {base:10.1f} us   ratio {medians['this'][label] / base:5.3f}"
        print(line, flush=True)
    print(json.dumps(medians))


if __name__ == "__main__":
    main()
