"""A forward GEMM of the dense models on OpenBLAS's own two threads against our row split
(issue 37): does raising numpy's OpenBLAS to two threads around one call win, switch included?

The device holds OpenBLAS at one thread process-wide (``exec/intra_op.py``) and splits the
large GEMMs by rows over its intra-op pool. OpenBLAS's pthreads build reads one global count
(``blas_cpu_number``) when a GEMM starts; ``openblas_set_num_threads(n)`` stores it (and
creates server threads only when ``n`` is above the count it started with), so the switch
itself should cost a call. After a job its server thread keeps polling for the next one for
``OPENBLAS_THREAD_TIMEOUT`` (2^28 cycles by default, tenths of a second) before it sleeps: a
core taken from whatever runs next. This times, alternating the forms in one process (the
machine's slow and fast phases hit them alike), on each shape:

- ``one``: the product on one BLAS thread (the baseline); ``one2``: the same again (A/A);
- ``split``: our pool's split (``kernels/intra_op.for_gemm``: two row chunks, the caller's
  ``GEMM_LEAD_MACS`` longer), as the MatMul kernel runs it;
- ``obt``: ``openblas_set_num_threads(2)``, the product, ``openblas_set_num_threads(1)``;
- ``switch``: the two calls of the switch alone (no product);
- ``split_after_obt``: the ``split`` form timed right after an ``obt`` product (OpenBLAS's
  server thread still polling beside our two threads), against ``split_after_one`` (the
  split right after a one-thread product): the spin's cost to the next kernels.

Per shape: each form's median over ``--repeat`` rounds and its ratio to ``one``; whether
``obt`` and ``split`` have ``one``'s bits.

Run: ``.venv/bin/python bench/bench_blas_threads.py [--repeat 200] [--shapes mlp,ae]``.
"""
from __future__ import annotations

import argparse
import statistics
import time
import types

import numpy as np
import threadpoolctl

from asyncflow.exec.intra_op import IntraOpPool, claim_blas
from asyncflow.kernels import intra_op

SHAPES = {
    "mlp MatMul": ((128, 784), (784, 256)),
    "mlp MatMul_1": ((128, 256), (256, 256)),
    "ae MatMul": ((256, 784), (784, 256)),
    "ae MatMul_3": ((256, 256), (256, 784)),
}


def openblas_calls():
    """numpy's OpenBLAS's ``(set_num_threads, get_num_threads)`` as ctypes functions."""
    for lib in threadpoolctl.ThreadpoolController().lib_controllers:
        if lib.internal_api == "openblas" and "numpy" in lib.filepath:
            return lib._get_symbol("openblas_set_num_threads"), lib.get_num_threads
    raise SystemExit("numpy's BLAS is not OpenBLAS")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--shapes", default="")
    parser.add_argument("--no-obt", action="store_true",
                        help="leave the obt forms out (the split and one without the spin)")
    args = parser.parse_args()
    claim_blas()  # BLAS at one thread, as a CPU device holds it
    set_threads, get_threads = openblas_calls()
    assert get_threads() == 1, get_threads()
    pool = IntraOpPool(2, "bench-intra-op")
    ctx = types.SimpleNamespace(device=types.SimpleNamespace(intra_op=pool))
    rng = np.random.default_rng(0)
    picked = [name for name in SHAPES
              if not args.shapes or any(part in name for part in args.shapes.split(","))]
    for name in picked:
        (m, k), (_, n) = SHAPES[name]
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        out = np.empty((m, n), np.float32)

        def one():
            np.matmul(a, b, out=out)

        def split():
            def rows(start, stop):
                np.matmul(a[start:stop], b, out=out[start:stop])
            # (for_gemm's rule, whatever the size: the 8.4 M product does not split today)
            count = m
            lead = max(0, min(round(intra_op.GEMM_LEAD_MACS / (k * n)), count - 2 * 2))
            pool.run(rows, intra_op.lead_bounds(count, 2, lead))

        def obt():
            set_threads(2)
            try:
                np.matmul(a, b, out=out)
            finally:
                set_threads(1)

        def switch():
            set_threads(2)
            set_threads(1)

        bits = {}
        for form in (one, split, obt):
            form()
            bits[form.__name__] = out.copy()
        times = {key: [] for key in ("one", "one2", "split", "obt", "switch",
                                     "split_after_one", "split_after_obt")}
        clock = time.perf_counter
        for _ in range(args.repeat):
            for key, form in (("one", one), ("split", split), ("obt", obt), ("one2", one),
                              ("switch", switch)):
                if args.no_obt and key == "obt":
                    continue
                start = clock()
                form()
                times[key].append(clock() - start)
            for key, first in (("split_after_one", one), ("split_after_obt", obt)):
                if args.no_obt and key == "split_after_obt":
                    continue
                first()
                start = clock()
                split()
                times[key].append(clock() - start)
        assert get_threads() == 1
        base = statistics.median(times["one"])
        print(f"{name}: [{m}, {k}] @ [{k}, {n}] ({m * k * n / 1e6:.1f} M multiply-adds), "
              f"{args.repeat} rounds, median us (ratio to one)")
        for key, values in times.items():
            if not values:
                continue
            med = statistics.median(values)
            print(f"  {key:16s} {med * 1e6:9.1f}  {med / base:6.3f}")
        for key in ("split", "obt"):
            same = np.array_equal(bits[key].view(np.uint32), bits["one"].view(np.uint32))
            diff = float(np.max(np.abs(bits[key] - bits["one"])))
            print(f"  bits {key} == one: {same} (max |diff| {diff:.3g})")
    spin(obt_last=obt, set_threads=set_threads)
    pool.close(5)


def spin(obt_last, set_threads):
    """The CPU the process burns while this thread sleeps, after a product on OpenBLAS's two
    threads against after none: OpenBLAS's server thread polling for its next job."""
    clock = time.process_time
    for label, before in (("after nothing", None), ("after an obt product", obt_last)):
        used = []
        for _ in range(5):
            if before is not None:
                before()
            start = clock()
            time.sleep(0.5)
            used.append(clock() - start)
        print(f"spin: CPU over the next 0.5 s {label}: "
              + ", ".join(f"{value * 1e3:.0f} ms" for value in used))


if __name__ == "__main__":
    main()
