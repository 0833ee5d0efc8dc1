"""A Ctrl-C never leaves a split apply half done: the dense applies that update a variable's
stored arrays in place chunk by chunk (``_compiled_apply``'s loops, ``_dense_apply``'s numpy
blocks, ``_FusedMatMulApplyRMSProp``'s row chunks) split atomically
(``IntraOpPool.run(..., atomic=True)``): interrupted in their first chunk (SIGINT, as a Ctrl-C
on the main thread), every element still gets its update exactly once and the
KeyboardInterrupt comes out after. Forcing the split back to a plain one shows what it did
before: the first chunk updated, the rest of the variable not."""
from __future__ import annotations

import _thread
import threading

import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import intra_op, jit, matmul_apply, sigint_hold, training

from apply_context import ApplyContext, resources  # same folder

SIZE = 20000  # float32: past SMALL_BYTES, so the numpy form updates in place too


@pytest.fixture
def plain_splits(monkeypatch):
    """Make the applies' splits plain ones (``atomic`` dropped) and take no hold: the
    behaviour before."""
    def plain(split):
        return lambda *args, atomic=False, **kwargs: split(*args, **kwargs)
    for name in ("for_batch", "for_gemm"):
        monkeypatch.setattr(intra_op, name, plain(getattr(intra_op, name)))
    monkeypatch.setattr(sigint_hold, "hold", lambda: None)


def interrupt_once(monkeypatch, module, name, at_call=1, size=None):
    """``module.name`` wrapped: its call number ``at_call`` (from 1) interrupts the main
    thread as a Ctrl-C would (SIGINT's handler runs at the next bytecode); with ``size``,
    only calls whose first array has that many elements count."""
    original, calls = getattr(module, name), []

    def wrapper(*args):
        result = original(*args)
        if size is not None and args[0].size != size:
            return result
        calls.append(1)
        if len(calls) == at_call:
            _thread.interrupt_main()
        return result
    monkeypatch.setattr(module, name, wrapper)
    return calls


def with_a_busy_worker(ctx, fn):
    """``fn()`` while the pool's one worker is held: the caller runs every chunk, in order
    (so where a plain split stops is deterministic)."""
    busy, release = threading.Event(), threading.Event()
    ctx.device.intra_op._workers().submit(lambda: (busy.set(), release.wait(30)))
    assert busy.wait(30)
    try:
        return fn()
    finally:
        release.set()


def rms_prop(ctx, refs, grad):
    t = grad.dtype.type
    return training._apply_rms_prop(ctx, *refs, t(0.01), t(0.9), t(0.5), t(1e-6), grad)


def initial_values(rng, shape, dtype):
    var = rng.standard_normal(shape).astype(dtype)
    ms = (np.abs(rng.standard_normal(shape)) + 1).astype(dtype)
    mom = rng.standard_normal(shape).astype(dtype)
    return [var, ms, mom], rng.standard_normal(shape).astype(dtype)


def check(refs, initial, expected, whole, first_chunk):
    for ref, before, after in zip(refs, initial, expected):
        got = ref.read().reshape(-1)
        before, after = before.reshape(-1), after.reshape(-1)
        if whole:  # each element stepped exactly once
            assert got.tobytes() == after.tobytes(), ref.name
        else:  # the first chunk stepped, the rest as it was
            assert got[:first_chunk].tobytes() == after[:first_chunk].tobytes(), ref.name
            assert got[first_chunk:].tobytes() == before[first_chunk:].tobytes(), ref.name


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("atomic", [True, False])
def test_an_interrupted_split_apply_steps_every_element_once(
        compiled, atomic, main_thread, monkeypatch, request):
    if compiled and not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")
    if not atomic:
        request.getfixturevalue("plain_splits")
    monkeypatch.setattr(intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(jit, "ENABLED", compiled)
    monkeypatch.setattr(training, "BLOCK", 4000)  # the numpy form: blocks in each chunk
    initial, grad = initial_values(np.random.default_rng(5), (SIZE,), np.float32)
    ctx = ApplyContext(2)
    expected = resources(initial)
    rms_prop(ctx, expected, grad)
    expected = [ref.read().copy() for ref in expected]
    refs = resources(initial)
    stored = [id(ref.read()) for ref in refs]
    if compiled:
        interrupt_once(monkeypatch, training, "rms_prop_loop")
        first_chunk = SIZE // 2  # the first chunk (of two): one loop call
    else:
        interrupt_once(monkeypatch, training, "_scratch", at_call=2)
        first_chunk = 4000  # the first block of the first chunk
    with pytest.raises(KeyboardInterrupt):
        with_a_busy_worker(ctx, lambda: rms_prop(ctx, refs, grad))
    assert [id(ref.read()) for ref in refs] == stored  # (updated in place)
    check(refs, initial, expected, atomic, first_chunk)


@pytest.mark.skipif(not jit.available(), reason="numba is not installed (or ASYNCFLOW_JIT=0)")
@pytest.mark.parametrize("atomic", [True, False])
def test_an_interrupted_fused_matmul_apply_steps_every_row_once(
        atomic, main_thread, monkeypatch, request):
    """float64: a split product's bits depend on its bounds only (on every BLAS core), so
    the fused kernel splits by rows even while the worker is busy."""
    if not atomic:
        request.getfixturevalue("plain_splits")
    for name, value in (("MIN_SPLIT_WORK", 0), ("BLAS_SMALL_MACS", 0), ("GEMM_LEAD_MACS", 0)):
        monkeypatch.setattr(intra_op, name, value)
    rng = np.random.default_rng(6)
    rows, inner, cols = 128, 8, 40
    initial, _ = initial_values(rng, (rows, cols), np.float64)
    a, b = rng.standard_normal((rows, inner)), rng.standard_normal((inner, cols))
    ctx = ApplyContext(2)
    ctx.attrs = {"transpose_a": False, "transpose_b": False}

    def apply(refs):
        t = np.float64
        return matmul_apply._matmul_apply_rms_prop(ctx, *refs, t(0.01), t(0.9), t(0.5),
                                                   t(1e-6), a, b)
    expected = resources(initial)
    apply(expected)
    expected = [ref.read().copy() for ref in expected]
    refs = resources(initial)
    calls = interrupt_once(monkeypatch, training, "rms_prop_loop")
    with pytest.raises(KeyboardInterrupt):
        with_a_busy_worker(ctx, lambda: apply(refs))
    assert len(calls) == (2 if atomic else 1)  # (the split's two row chunks)
    check(refs, initial, expected, atomic, rows // 2 * cols)


async def test_a_step_interrupted_in_its_split_apply_leaves_the_variable_whole(
        main_thread, monkeypatch, cpu_only):
    """Through a session: the Ctrl-C lands in the first chunk of the fused first layer's
    split apply in the second step; the step raises it, and the variable and its slots hold
    the step's update in every row (the stored arrays, updated in place), as two
    uninterrupted steps give."""
    if not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")
    for name, value in (("MIN_SPLIT_WORK", 64), ("BLAS_SMALL_MACS", 0), ("GEMM_LEAD_MACS", 0)):
        monkeypatch.setattr(intra_op, name, value)
    rng = np.random.default_rng(7)
    feed_x = rng.random((96, 20))
    feed_y = np.eye(4)[rng.integers(0, 4, size=96)]

    async def step(interrupt):
        with af.Graph().as_default():
            x = af.placeholder(np.float64, [None, 20])
            y = af.placeholder(np.float64, [None, 4])
            w1 = af.Variable(np.random.default_rng(8).standard_normal((20, 16)), name="w1")
            w2 = af.Variable(np.random.default_rng(9).standard_normal((16, 4)), name="w2")
            loss = af.reduce_mean(af.nn.softmax_cross_entropy_with_logits(
                labels=y, logits=af.matmul(af.nn.relu(af.matmul(x, w1)), w2)))
            train = af.train.RMSPropOptimizer(0.01, momentum=0.5).minimize(loss)
            first = [v for v in af.global_variables() if v.op.name.startswith("w1")]
            config = af.ConfigProto(intra_op_parallelism_threads=2)
            async with af.Session(config=config) as session:
                await session.run(af.global_variables_initializer())
                # (the first step writes new arrays: the initial values are the initializers'
                await session.run(train, {x: feed_x, y: feed_y})  # constants; then in place)
                calls = []
                if interrupt:
                    calls = interrupt_once(monkeypatch, training, "rms_prop_loop",
                                           size=20 * 16)  # (w1's)
                    with pytest.raises(KeyboardInterrupt):
                        await session.run(train, {x: feed_x, y: feed_y})
                    monkeypatch.undo()
                else:
                    await session.run(train, {x: feed_x, y: feed_y})
                return await session.run(first), calls
    expected, _ = await step(False)
    got, calls = await step(True)
    assert len(calls) >= 2  # the first layer's apply split (and the Ctrl-C came in it)
    for new, want in zip(got, expected):
        assert new.tobytes() == want.tobytes()
