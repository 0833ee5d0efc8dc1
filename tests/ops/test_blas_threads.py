"""kernels/blas.py's ``threaded_matmul`` and the MatMul kernels' use of it (``blas.threaded_product``,
``kernels/intra_op.py`` ``run_threaded``): a large GEMM as ONE call on MKL's own OpenMP threads
where the plan runs nothing beside it.

Tolerance: a GEMM reduces over K, and MKL's threads may sum a product's K terms in another order
than one thread (for some shapes; the same order for most here): an element of the threaded
product is within the rounding bound of a K-term sum of the exact product, ``K eps (|a| @ |b|)``,
as one thread's and numpy's are (``within_bound``). For a thread count the bits are the same
run to run, whatever the operands' alignment (MKL's CNR mode and its dynamic threads off).
The threaded layer is opt-in (``ASYNCFLOW_MKL_THREADS=1``, read when MKL loads: one layer a
process): where it is off and MKL installed, ``test_in_a_process_with_mkl_threads`` runs this
file in a child process with it on, and the tests here skip, saying why; where MKL is not
installed all skip.
"""
import os
import re
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from asyncflow.exec import intra_op
from asyncflow.kernels import blas, math as math_kernels

needs_threaded_mkl = pytest.mark.skipif(
    blas.CHOICE == "numpy" or not blas.threaded(),
    reason="MKL is not installed (the [mkl] extra), ASYNCFLOW_BLAS=numpy or MKL's threaded "
           "layer off in this process (ASYNCFLOW_MKL_THREADS=1 not set: the child process "
           "of test_in_a_process_with_mkl_threads runs these)")


@pytest.mark.skipif(blas.CHOICE == "numpy" or blas.THREADED or not blas.available(),
                    reason="MKL not installed, ASYNCFLOW_BLAS=numpy, or this process runs "
                           "the tests with MKL's threads itself")
def test_in_a_process_with_mkl_threads():
    env = dict(os.environ, ASYNCFLOW_MKL_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-rs", __file__], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    # (every test passed there but this one, which skips in the child)
    assert re.search(r"^\d+ passed, 1 skipped in ", done.stdout.splitlines()[-1]), \
        done.stdout[-2000:]
# The dense models' products (bench/bench_models.py: the autoencoder's, the MLP's) and odd ones.
SHAPES = [(256, 784, 256), (256, 256, 784), (128, 784, 256), (128, 256, 256), (784, 128, 256),
          (301, 517, 263)]


def _ctx(threads, name="MatMul", **attrs):
    device = SimpleNamespace(intra_op=intra_op.shared_pool(threads))
    return SimpleNamespace(device=device, xp=np, name=name,
                           attrs={"transpose_a": False, "transpose_b": False, **attrs})


def _operands(seed, dtype, m, k, n):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(dtype),
            rng.standard_normal((k, n)).astype(dtype))


def within_bound(value, a, b):
    """``value`` within ``K eps (|a| @ |b|)`` of the exact product (float64's of exact
    float32 inputs; for float64 inputs float64's own product, its error inside the bound)."""
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = a.shape[1] * np.finfo(value.dtype).eps * (np.abs(a).astype(np.float64)
                                                      @ np.abs(b).astype(np.float64))
    assert np.all(np.abs(value - exact) <= bound)


@needs_threaded_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_two_threads_close_to_one_and_deterministic(dtype, m, k, n):
    a, b = _operands(m + k + n, dtype, m, k, n)
    one = blas.mkl_matmul(a, b, np.empty((m, n), dtype))  # (held at one thread)
    two = blas.threaded_matmul(a, b, np.empty((m, n), dtype), 2)
    within_bound(one, a, b)
    within_bound(two, a, b)
    within_bound(np.matmul(a, b), a, b)  # (numpy's, the reference form: the same bound)
    for shift in range(4):  # run to run, and the operands at other alignments
        a_moved = np.empty(a.size + shift, dtype)[shift:].reshape(a.shape)
        b_moved = np.empty(b.size + shift, dtype)[shift:].reshape(b.shape)
        a_moved[...], b_moved[...] = a, b
        out = np.empty(m * n + shift, dtype)[shift:].reshape(m, n)
        np.testing.assert_array_equal(blas.threaded_matmul(a_moved, b_moved, out, 2), two)
    # the thread count is given back: a later plain call is one thread's again
    np.testing.assert_array_equal(blas.mkl_matmul(a, b, np.empty((m, n), dtype)), one)


@needs_threaded_mkl
def test_transposed_views_as_they_are():
    a, b = _operands(3, np.float32, 256, 784, 256)
    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    two = blas.threaded_matmul(at.T, bt.T, np.empty((256, 256), np.float32), 2)
    within_bound(two, a, b)


def _spy(monkeypatch):
    calls = []
    real = blas.threaded_matmul

    def spy(a, b, out, threads):
        calls.append((a.shape, b.shape, threads))
        return real(a, b, out, threads)
    monkeypatch.setattr(blas, "threaded_matmul", spy)
    return calls


@needs_threaded_mkl
@pytest.mark.parametrize("m, k, n", [(256, 784, 256), (128, 256, 256)])
def test_the_kernels_run_one_threaded_call_not_a_split(m, k, n, monkeypatch):
    """MatMul and _FusedMatMul from ``THREADED_FROM_MACS``: one call on the pool's thread
    count, no split of ours (the 8.4 M product, below the split threshold, too)."""
    calls = _spy(monkeypatch)
    a, b = _operands(5, np.float32, m, k, n)
    pool = intra_op.shared_pool(2)
    splits = pool.splits
    out = math_kernels._matmul(_ctx(2), a, b)[0]
    bias = np.linspace(-1, 1, n).astype(np.float32)
    fused = math_kernels._fused_matmul(_ctx(2, "_FusedMatMul", fused_ops=["BiasAdd", "Relu"]),
                                       a, b, bias)[0]
    assert calls == [((m, k), (k, n), 2)] * 2 and pool.splits == splits
    np.testing.assert_array_equal(out, blas.threaded_matmul(a, b, np.empty_like(out), 2))
    np.testing.assert_array_equal(fused, np.maximum(out + bias, 0))


@needs_threaded_mkl
def test_where_the_plan_runs_kernels_beside_it_the_split_form_runs(monkeypatch):
    """In a pair's chunk (``run_alone``; a lane sets the same flag) the kernel computes as
    before, on its thread; below ``THREADED_FROM_MACS``, with ``THREADED`` off, on a pool of
    one thread, or without a pool: no threaded call either."""
    calls = _spy(monkeypatch)
    a, b = _operands(6, np.float32, 256, 784, 256)
    pool = intra_op.shared_pool(2)
    in_pair = []
    pool.run_alone(lambda start, stop: in_pair.append(math_kernels._matmul(_ctx(2), a, b)[0]),
                   [(0, 1)])
    monkeypatch.setattr(blas, "THREADED", False)
    split = math_kernels._matmul(_ctx(2), a, b)[0]
    np.testing.assert_array_equal(in_pair[0], split)  # (the split form's bits: for_gemm's rule)
    monkeypatch.setattr(blas, "THREADED", True)
    math_kernels._matmul(_ctx(1), a, b)
    math_kernels._matmul(SimpleNamespace(device=SimpleNamespace(intra_op=None), xp=np,
                                         name="MatMul", attrs=_ctx(2).attrs), a, b)
    small = _operands(7, np.float32, 64, 256, 200)
    math_kernels._matmul(_ctx(2), *small)  # (3.3 M multiply-adds)
    assert calls == []


def test_a_reservation_keeps_the_workers_out_of_other_splits():
    """While a threaded call holds the cores (``reserve``), a split started elsewhere runs
    every chunk on its own caller: no third thread beside BLAS's two."""
    pool = intra_op.IntraOpPool(2)
    try:
        ran = []
        pool.run(lambda start, stop: None, [(0, 1), (1, 2)])  # (the workers started)
        pool.reserve()
        try:
            pool.run(lambda start, stop: ran.append(threading.get_ident()),
                     [(0, 1), (1, 2), (2, 3), (3, 4)])
        finally:
            pool.release()
        assert ran == [threading.get_ident()] * 4
        ran.clear()
        done = threading.Event()

        def chunk(start, stop):  # (after the release a worker takes part again)
            ran.append(threading.get_ident())
            if start == 0:
                assert done.wait(10)
            else:
                done.set()
        pool.run(chunk, [(0, 1), (1, 2)])
        assert len(set(ran)) == 2
    finally:
        pool.close(10)


def _cpu_seconds_by_thread():
    ticks = os.sysconf("SC_CLK_TCK")
    times = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # (a thread that ended)
            continue
        times[task] = (int(fields[11]) + int(fields[12])) / ticks
    return times


@needs_threaded_mkl
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux's /proc")
def test_the_threads_working_during_a_threaded_kernel_are_the_pool_s_count(monkeypatch):
    """Counted by the CPU time each thread of the process gained over a few large threaded
    MatMuls (~0.1 s of work): two threads work (the caller and one OpenMP thread), not the
    pool's worker besides them, and not more."""
    a, b = _operands(9, np.float32, 1024, 1024, 1024)
    pool = intra_op.shared_pool(2)
    pool.run(lambda start, stop: None, [(0, 1), (1, 2)])  # (its worker started: counted)
    math_kernels._matmul(_ctx(2), a, b)  # (MKL's OpenMP threads started)
    before, start = _cpu_seconds_by_thread(), time.process_time()
    while time.process_time() - start < 1.0:
        math_kernels._matmul(_ctx(2), a, b)
    after = _cpu_seconds_by_thread()
    gained = sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True)
    total = sum(gained)
    working = [g for g in gained if g >= 0.1 * total]
    assert len(working) == 2, gained[:4]
    assert sum(working) >= 0.9 * total
