"""The split worker's GIL-free bell (``exec/gemm_bell.py``, issue 37): a GEMM chunk handed over
it has the bits of the queue's split (the same ``cblas_?gemm`` call numpy's matmul makes),
transposed and strided operands included; a chunk's epilogue runs on the worker and its error
is raised by the caller; products that are not one plain call, and a worker that is not
waiting, take the queue; an idle worker sleeps rather than spins."""
import threading
import time

import numpy as np
import pytest

from asyncflow.exec import gemm_bell, intra_op
from asyncflow.kernels import blas

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def pool():
    if not gemm_bell.load():
        pytest.skip("the compiled bell cannot run here")
    pool = intra_op.IntraOpPool(2, "test-bell")
    pool.run(lambda start, stop: None, [(0, 1), (1, 2)])  # (starts the worker)
    yield pool
    pool.close(timeout=10)


def _wait_state(pool, states):
    """Until the first worker is in one of ``states`` (it enters ``serve`` after a hand-off:
    a few microseconds; polled with a deadline, not slept for)."""
    from asyncflow.exec import gemm_bell_loop as loop
    deadline = time.monotonic() + 10
    while int(pool._executor.bell.ctl[loop.STATE]) not in states:
        assert time.monotonic() < deadline, "the worker never waited on its bell"
        time.sleep(1e-4)


def _operands(rng, m, k, n, dtype, transpose_a, transpose_b):
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    return (a.T if transpose_a else a), (b.T if transpose_b else b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False),
                                                      (False, True), (True, True)])
def test_a_chunk_over_the_bell_has_the_bits_of_the_queue_split(pool, dtype, transpose_a,
                                                                transpose_b):
    from asyncflow.exec import gemm_bell_loop as loop
    rng = np.random.default_rng(7)
    for m, k, n in [(131, 97, 203), (64, 300, 65), (9, 2, 3), (257, 784, 256)]:
        a, b = _operands(rng, m, k, n, dtype, transpose_a, transpose_b)
        bounds = [(0, m // 2 + 1), (m // 2 + 1, m)]
        want, got = np.empty((m, n), dtype), np.empty((m, n), dtype)
        pool.run(lambda i, j: np.matmul(a[i:j], b, out=want[i:j]), bounds)
        for asleep in (False, True):
            _wait_state(pool, {loop.ASLEEP} if asleep else {loop.IDLE, loop.ASLEEP})
            jobs = pool._executor.bell.compiled
            got[...] = np.nan
            pool.run_gemm(lambda i, j: np.matmul(a[i:j], b, out=got[i:j]), bounds,
                          lambda i, j: (blas.numpy_matmul, a[i:j], b, got[i:j]))
            assert pool._executor.bell.compiled == jobs + 1  # (handed over the bell)
            assert want.tobytes() == got.tobytes()


def test_the_compiled_job_is_the_call_cblas_job_describes():
    if not gemm_bell.load():
        pytest.skip("the compiled bell cannot run here")
    from asyncflow.exec import gemm_bell_loop as loop
    sgemm, dgemm, bits = blas.numpy_cblas()
    rng = np.random.default_rng(3)
    for transpose_a in (False, True):
        for transpose_b in (False, True):
            a, b = _operands(rng, 40, 30, 20, np.float32, transpose_a, transpose_b)
            out = np.empty((40, 20), np.float32)[5:35]
            ctl = np.zeros(80, np.int64)
            ctl[loop.STATE] = loop.IDLE  # (as a waiting worker leaves it)
            assert loop.post_job(ctl, a[5:35], b, out, sgemm, dgemm, bits, 0) == 1
            words = blas.cblas_job(blas.numpy_matmul, a[5:35], b, out)
            assert tuple(ctl[loop.JOB:loop.JOB + 14]) == words


def test_products_that_are_not_one_plain_call_are_not_jobs():
    mm = blas.numpy_matmul
    a = np.ones((8, 6), np.float32)
    assert blas.cblas_job(mm, a, a.T, np.empty((8, 8), np.float32)) is None  # (SYRK's)
    assert blas.cblas_job(mm, a[:, ::2], np.ones((3, 4), np.float32),
                          np.empty((8, 4), np.float32)) is None  # (numpy copies it)
    assert blas.cblas_job(mm, a[:1], np.ones((6, 4), np.float32),
                          np.empty((1, 4), np.float32)) is None  # (a GEMV)
    assert blas.cblas_job(mm, a.astype(np.float16), np.ones((6, 4), np.float16),
                          np.empty((8, 4), np.float16)) is None
    assert blas.cblas_job(lambda x, y, out: None, a, np.ones((6, 4), np.float32),
                          np.empty((8, 4), np.float32)) is None


def test_an_epilogue_runs_on_the_worker_and_its_error_is_raised_by_the_caller(pool):
    from asyncflow.exec import gemm_bell_loop as loop
    a, b = np.ones((64, 32), np.float32), np.ones((32, 16), np.float32)
    out = np.empty((64, 16), np.float32)
    threads = []

    def epilogue(start, stop):
        threads.append(threading.current_thread())
        out[start:stop] += 1

    def fn(start, stop):
        np.matmul(a[start:stop], b, out=out[start:stop])
        out[start:stop] += 1
    job = lambda i, j: (blas.numpy_matmul, a[i:j], b, out[i:j])  # noqa: E731
    _wait_state(pool, {loop.IDLE, loop.ASLEEP})
    pool.run_gemm(fn, [(0, 32), (32, 64)], job, epilogue)
    assert (out == 33).all() and threads == [pool._executor._threads[0]]

    def failing(start, stop):
        raise ValueError(f"rows {start}:{stop}")
    _wait_state(pool, {loop.IDLE, loop.ASLEEP})
    with pytest.raises(ValueError, match="rows 32:64"):
        pool.run_gemm(fn, [(0, 32), (32, 64)], job, failing)
    _wait_state(pool, {loop.IDLE, loop.ASLEEP})  # (the claim ended: the worker waits again)


def test_a_failing_caller_chunk_waits_for_the_worker_and_raises(pool):
    from asyncflow.exec import gemm_bell_loop as loop
    a, b = np.ones((64, 32), np.float32), np.ones((32, 16), np.float32)
    out = np.zeros((64, 16), np.float32)

    def fn(start, stop):
        raise KeyError("caller")
    _wait_state(pool, {loop.IDLE, loop.ASLEEP})
    with pytest.raises(KeyError, match="caller"):
        pool.run_gemm(fn, [(0, 32), (32, 64)], lambda i, j: (blas.numpy_matmul, a[i:j], b,
                                                               out[i:j]))
    assert (out[32:] == 32).all()  # (the worker's chunk was done before the error came out)


def test_a_busy_worker_leaves_the_split_to_the_queue(pool):
    from asyncflow.exec import gemm_bell_loop as loop
    release, started = threading.Event(), threading.Event()

    def hold():
        started.set()
        release.wait(10)
    future = pool._executor.submit(hold)
    assert started.wait(10)
    a, b = np.ones((64, 32), np.float32), np.ones((32, 16), np.float32)
    out = np.zeros((64, 16), np.float32)
    jobs = pool._executor.bell.jobs
    pool.run_gemm(lambda i, j: np.matmul(a[i:j], b, out=out[i:j]), [(0, 32), (32, 64)],
                  lambda i, j: (blas.numpy_matmul, a[i:j], b, out[i:j]))
    assert (out == 32).all() and pool._executor.bell.jobs == jobs  # (the caller did both)
    release.set()
    future.result(10)
    _wait_state(pool, {loop.IDLE, loop.ASLEEP})


def test_an_idle_worker_sleeps_instead_of_spinning(pool, monkeypatch):
    from asyncflow.exec import gemm_bell_loop as loop
    monkeypatch.setattr(gemm_bell, "SPIN_S", 1e-4)
    pool.run(lambda start, stop: None, [(0, 1), (1, 2)])
    _wait_state(pool, {loop.ASLEEP})  # (asleep on its futex: no CPU until a split wakes it)
