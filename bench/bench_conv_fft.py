"""The convnet's second convolution by FFT, this tree against a baseline tree's, in one
process (issue 37).

conv2 of bench_models.py's convnet ([128, 14, 14, 32] 5x5 -> 64, SAME, float32): its fused
forward keeping the spectra (``nn_conv_fft.conv2d`` with ``kept``, BiasAdd + Relu) then its
fused backprop given them (``backprop_both``), as a training step runs them. Two forms,
alternating call by call so that load phases hit them alike: the baseline tree's
``kernels/nn_conv_fft.py`` and ``kernels/dft_gemm.py`` (``--baseline-tree``, e.g. an export of
main; loaded as modules of their own beside this tree's) and this tree's. Per form
the median of each round's ``--calls`` calls; per round the ratios to the baseline; then the
rounds' median ratio and range, on 1 and 2 intra-op threads. Each form's results are
checked against the baseline's first (the same bits expected, or said). Both trees run this
tree's compiled read-out loops (``_read_out_bias``, ``dft_gemm._rows``, unchanged by this
benchmark's changes): numba's disk cache cannot reload one of a module loaded from a path.

Run: ``.venv/bin/python bench/bench_conv_fft.py --baseline-tree <main export> [--calls 7]
[--rounds 6] [--keep-freed]``.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_model_kernels import KernelContext  # noqa: E402


def _load(tree, name):
    path = os.path.join(tree, "asyncflow", "kernels", name + ".py")
    spec = importlib.util.spec_from_file_location("baseline_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def baseline_module(tree):
    """The baseline tree's ``nn_conv_fft`` calling the baseline tree's ``dft_gemm`` (its GEMM
    transforms) where the tree has one."""
    module = _load(tree, "nn_conv_fft")
    from asyncflow.kernels import dft_gemm, nn_conv_fft
    # The read-out loops compiled once, from this tree's modules: numba's disk cache cannot
    # reload a loop of a module loaded from a path (no importable name).
    module._read_out_bias = nn_conv_fft._read_out_bias
    if os.path.exists(os.path.join(tree, "asyncflow", "kernels", "dft_gemm.py")):
        module.dft_gemm = _load(tree, "dft_gemm")
        module.dft_gemm._rows = dft_gemm._rows
    return module


def step(module, ctx, x, f, bias, grad):
    """The forward keeping its spectra, then the backprop given them: ``(out, dx, dw)``."""
    from asyncflow.kernels import nn_conv
    rows, cols = nn_conv._spatial(ctx, x.shape, f.shape[:2])
    plan = module.choose(ctx, (x, f, grad), x.shape, f.shape, rows, cols, x.dtype)
    assert plan is not None, "the FFT algorithm was not chosen"
    out = np.empty(grad.shape, x.dtype)
    kept = []
    module.conv2d(ctx, plan, x, f, out, None, kept, (("BiasAdd", "Relu"), bias))
    spectra = kept[0] if kept[0].dtype == x.dtype else kept[0].view(x.dtype)
    dx, dw = module.backprop_both(ctx, plan, x, f, grad, np.empty(x.shape, x.dtype), spectra)
    return out, dx, dw


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-tree", required=True, metavar="PATH")
    parser.add_argument("--calls", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--keep-freed", action="store_true",
                        help="keep freed memory as ``asyncflow worker`` does")
    args = parser.parse_args(argv)
    from asyncflow.kernels import nn_conv_fft
    if args.keep_freed:
        # As a worker's process does (``asyncflow worker``): freed memory kept for the next
        # temporaries, not returned and faulted in again each call; a plain process (a local
        # session, bench_models.py's servers) keeps glibc's defaults.
        from transports import allocation
        print(f"freed memory kept: {allocation.keep_freed_memory()} bytes")
    baseline = baseline_module(args.baseline_tree)
    rng = np.random.default_rng(0)
    x = np.maximum(rng.standard_normal((128, 14, 14, 32)), 0).astype(np.float32)
    f = (rng.standard_normal((5, 5, 32, 64)) * 0.05).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    grad = rng.standard_normal((128, 14, 14, 64)).astype(np.float32)
    attrs = {"strides": (1, 1, 1, 1), "dilations": (1, 1, 1, 1), "padding": "SAME",
             "data_format": "NHWC"}
    print(f"load average at start: {os.getloadavg()}")
    print("| threads | form | ms (median of rounds) | / baseline, median (range) | bits |")
    print("|---|---|---|---|---|")
    for threads in (1, 2):
        ctx = KernelContext(attrs, threads)
        forms = {"baseline": lambda: step(baseline, ctx, x, f, bias, grad),
                 "this tree": lambda: step(nn_conv_fft, ctx, x, f, bias, grad)}
        reference = forms["baseline"]()
        same = {}
        for name, fn in forms.items():
            result = fn()  # warm: scipy.fft, the read-out loop, the pool's threads
            same[name] = all(a.tobytes() == b.tobytes() for a, b in zip(result, reference))
        medians = {name: [] for name in forms}
        for round_ in range(args.rounds):
            times = {name: [] for name in forms}
            order = list(forms) if round_ % 2 == 0 else list(forms)[::-1]
            for _ in range(args.calls):
                for name in order:
                    start = time.perf_counter()
                    forms[name]()
                    times[name].append(time.perf_counter() - start)
            for name in forms:
                medians[name].append(1e3 * statistics.median(times[name]))
        for name in forms:
            ratios = sorted(a / b for a, b in zip(medians[name], medians["baseline"]))
            print(f"| {threads} | {name} | {statistics.median(medians[name]):.2f} | "
                  f"{statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f}) | "
                  f"{'same' if same[name] else 'differ'} |")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
