"""A heavy static plan's step runs whole on a worker thread (``exec/thread_step.py``, issue
37): the same bits as on the loop's thread, back on the loop's thread when the inputs get
small, a failing kernel named, and a cancellation that stops the thread at the next kernel
boundary, the session usable after it."""
import dataclasses
import threading

import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
from asyncflow import errors
from asyncflow.exec import lanes, thread_step
from asyncflow.kernels import registry

# [256, 512] x [512, 1024]: 134M multiply-adds, over the MatMul's offload threshold (67M).
M, K, N = 256, 512, 1024


@pytest.fixture
def spied(monkeypatch):
    """Calls of ``run_stoppable`` (steps on a thread), the MatMuls run (name, thread), and
    ``hold``: when a test sets it to a pair of events, the MatMul "first" sets the first and
    waits (10 s at most) for the second."""
    seen = {"thread_steps": 0, "matmuls": [], "hold": None}
    monkeypatch.setattr(lanes, "ENABLED", False)
    run_stoppable = thread_step.run_stoppable

    async def spy(*args):
        seen["thread_steps"] += 1
        return await run_stoppable(*args)
    monkeypatch.setattr(thread_step, "run_stoppable", spy)
    kernel = registry._KERNELS[("MatMul", registry.ANY)]

    def matmul(ctx, *args, _fn=kernel.fn):
        seen["matmuls"].append((ctx.name, threading.get_ident()))
        if seen["hold"] is not None and ctx.name == "first":
            started, release = seen["hold"]
            started.set()
            assert release.wait(10)
        return _fn(ctx, *args)
    monkeypatch.setitem(registry._KERNELS, ("MatMul", registry.ANY),
                        dataclasses.replace(kernel, fn=matmul))
    return seen


def values(batch, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32)
            for shape in ((batch, K), (K, N), (N, K))]


def graph():
    a = af.placeholder(af.float32, [None, None], name="a")
    b = af.placeholder(af.float32, [None, None], name="b")
    c = af.placeholder(af.float32, [None, None], name="c")
    h = af.nn.relu(af.matmul(a, b, name="first"))
    return (a, b, c), af.reduce_sum(af.matmul(h, c, name="second"), axis=1)


async def steps(feeds_list, enabled, monkeypatch):
    monkeypatch.setattr(thread_step, "ENABLED", enabled)  # read when the plan is built
    with af.Graph().as_default():
        feeds, fetch = graph()
        async with af.Session() as session:
            return [await session.run(fetch, dict(zip(feeds, given))) for given in feeds_list]


async def test_heavy_steps_run_on_a_thread_with_the_bits_of_the_loop(spied, monkeypatch,
                                                                      cpu_only):
    given = [values(M, seed) for seed in range(3)]
    on_thread = await steps(given, True, monkeypatch)
    # The first step ran on the loop's thread (two kernels offloaded), the next two on one.
    assert spied["thread_steps"] == 2
    threads = [thread for _, thread in spied["matmuls"]]
    assert threads[2] == threads[3] and threads[4] == threads[5]  # a step's on one thread
    assert threading.get_ident() not in threads
    spied["thread_steps"] = 0
    on_loop = await steps(given, False, monkeypatch)
    assert spied["thread_steps"] == 0
    for got, want in zip(on_thread, on_loop):
        np.testing.assert_array_equal(got, want)
    h = np.maximum(given[0][0] @ given[0][1], 0)
    np.testing.assert_allclose(on_thread[0], (h @ given[0][2]).sum(axis=1), rtol=1e-4,
                               atol=1e-2)


async def test_small_inputs_go_back_to_the_loop(spied, monkeypatch, cpu_only):
    big, small = values(M), values(4)
    results = await steps([big, big, small, small, big, big], True, monkeypatch)
    # loop (heavy seen), thread, thread (nothing large: back), loop, loop (heavy), thread
    assert spied["thread_steps"] == 3
    want = await steps([small], False, monkeypatch)
    np.testing.assert_array_equal(results[3], want[0])


async def test_a_failing_kernel_on_the_thread_is_named(spied, monkeypatch, cpu_only):
    big = values(M)
    wrong = [big[0], big[1], big[2][:-1]]  # "second": [M, N] x [N - 1, K]
    monkeypatch.setattr(thread_step, "ENABLED", True)
    with af.Graph().as_default():
        feeds, fetch = graph()
        async with af.Session() as session:
            for _ in range(2):
                await session.run(fetch, dict(zip(feeds, big)))
            with pytest.raises(errors.OpError) as raised:
                await session.run(fetch, dict(zip(feeds, wrong)))
            assert spied["thread_steps"] == 2
            assert raised.value.op.name == "second"
            want = await session.run(fetch, dict(zip(feeds, big)))  # still usable
    assert want.shape == (M,)


async def test_cancelling_stops_the_thread_at_the_next_kernel_boundary(spied, monkeypatch,
                                                                       cpu_only):
    big = values(M)
    monkeypatch.setattr(thread_step, "ENABLED", True)
    with af.Graph().as_default():
        feeds, fetch = graph()
        async with af.Session() as session:
            first = await session.run(fetch, dict(zip(feeds, big)))  # on the loop's thread
            started, release = threading.Event(), threading.Event()
            spied["hold"] = (started, release)
            spied["matmuls"].clear()
            scope, returned = trio.CancelScope(), []

            async def step():
                with scope:
                    await session.run(fetch, dict(zip(feeds, big)))
                    returned.append(True)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(step)
                assert await trio.to_thread.run_sync(started.wait, 10)
                scope.cancel()  # the step's task is parked on its thread: it sets stop
                await trio.lowlevel.checkpoint()
                release.set()
            assert not returned
            assert scope.cancelled_caught
            spied["hold"] = None
            assert [name for name, _ in spied["matmuls"]] == ["first"]  # "second" never ran
            assert spied["thread_steps"] == 1
            again = await session.run(fetch, dict(zip(feeds, big)))
    np.testing.assert_array_equal(again, first)


def _with_two_matmuls(extra):
    """The two-MatMul graph's fetch and the fetches ``extra()`` adds beside it."""
    feeds, fetch = graph()
    return feeds, [fetch] + list(extra(feeds))


async def _threads_of(kernel_type, extra, monkeypatch, steps_run=3):
    """The threads ``kernel_type``'s kernel ran on over ``steps_run`` heavy steps of the
    two-MatMul graph with ``extra()``'s fetches."""
    kernel = registry._KERNELS[(kernel_type, "CPU")]
    seen = []

    def spy(ctx, *args, _fn=kernel.fn):
        seen.append(threading.get_ident())
        return _fn(ctx, *args)
    monkeypatch.setitem(registry._KERNELS, (kernel_type, "CPU"),
                        dataclasses.replace(kernel, fn=spy))
    monkeypatch.setattr(thread_step, "ENABLED", True)
    with af.Graph().as_default():
        feeds, fetches = _with_two_matmuls(extra)
        async with af.Session() as session:
            for _ in range(steps_run):
                await session.run(fetches, dict(zip(feeds, values(M))))
    return seen


async def test_a_stateless_py_func_keeps_the_loops_thread(spied, monkeypatch, cpu_only):
    """A ``py_func(stateful=False)`` is the user's code, as ``py_func``'s default is: it
    runs on the event loop's thread, never on the step's worker thread (review: only the
    stateful form was kept off the thread)."""
    ran_on = []

    def record(x):
        ran_on.append(threading.get_ident())
        return x
    seen = await _threads_of(
        "PyFuncStateless", lambda feeds: [af.py_func(
            record, [af.reduce_sum(feeds[0])], af.float32, stateful=False)], monkeypatch)
    assert len(ran_on) == 3 and set(ran_on) == {threading.get_ident()} == set(seen)
    assert spied["thread_steps"] == 0 and len(spied["matmuls"]) == 6


@pytest.mark.parametrize("kernel_type", ["QueueSize", "QueueClose"])
async def test_queue_ops_keep_the_loops_thread(kernel_type, spied, monkeypatch, cpu_only):
    """Queue ops read a ref (the queue's handle) but are not variables: a queue's state
    (its waiters: trio tasks it reschedules) belongs to the event loop's thread (review: the
    thread form counted any op on a ref as a variable's)."""
    def extra(_):
        queue = af.FIFOQueue(4, [af.float32])
        op = queue.size() if kernel_type == "QueueSize" else queue.close()
        return [op]
    ran_on = await _threads_of(kernel_type, extra, monkeypatch)
    assert len(ran_on) == 3 and set(ran_on) == {threading.get_ident()}
    assert spied["thread_steps"] == 0


async def _train(enabled, monkeypatch, steps_run=3):
    """A dense layer's training steps (variables and their updates: the thread form
    applies); the weights after each step."""
    monkeypatch.setattr(thread_step, "ENABLED", enabled)
    rng = np.random.default_rng(3)
    x_value = rng.standard_normal((M, K)).astype(np.float32)
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, K])
        w = af.Variable(rng.standard_normal((K, N)).astype(np.float32) * 0.01)
        v = af.Variable(rng.standard_normal((N, K)).astype(np.float32) * 0.01)
        loss = af.reduce_mean(af.square(af.matmul(af.nn.relu(af.matmul(x, w)), v)))
        train = af.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
        async with af.Session() as session:
            await session.run(af.global_variables_initializer())
            weights = []
            for _ in range(steps_run):
                await session.run(train, {x: x_value})
                weights.append(await session.run(w))
    return weights


async def test_a_training_step_runs_on_a_thread_with_the_loops_bits(spied, monkeypatch,
                                                                    cpu_only):
    on_thread = await _train(True, monkeypatch)
    assert spied["thread_steps"] >= 1  # variables and their updates may leave the loop
    spied["thread_steps"] = 0
    on_loop = await _train(False, monkeypatch)
    assert spied["thread_steps"] == 0
    for got, want in zip(on_thread, on_loop):
        np.testing.assert_array_equal(got, want)


class _Interrupt(BaseException):
    """Not an Exception: passes the generated code's error location untouched."""


async def test_the_limiters_token_comes_back_on_every_path(spied, monkeypatch, cpu_only):
    """The step's thread holds one of its device limiter's tokens: none is left borrowed
    after a step cancelled while it waits for the token, nor after a BaseException raised
    by a kernel on the thread (which reaches the awaiting task as it is)."""
    big = values(M)
    monkeypatch.setattr(thread_step, "ENABLED", True)
    with af.Graph().as_default():
        feeds, fetch = graph()
        async with af.Session() as session:
            feed = dict(zip(feeds, big))
            limiter = session.prepare(fetch, feed).compiled.plans[0].device.limiter
            await session.run(fetch, feed)  # (loop form: the next step is heavy)
            held = [object() for _ in range(int(limiter.total_tokens))]
            for borrower in held:
                await limiter.acquire_on_behalf_of(borrower)
            scope = trio.CancelScope()

            async def waiting_step():
                with scope:
                    await session.run(fetch, feed)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiting_step)
                await trio.testing.wait_all_tasks_blocked()  # (in acquire: no token)
                scope.cancel()
            assert scope.cancelled_caught and spied["thread_steps"] == 1
            for borrower in held:
                limiter.release_on_behalf_of(borrower)
            assert limiter.borrowed_tokens == 0
            kernel = registry._KERNELS[("MatMul", registry.ANY)]
            raising = []

            def interrupted(ctx, *args):
                if raising and ctx.name == "second":
                    raise _Interrupt()
                return kernel.fn(ctx, *args)
            monkeypatch.setitem(registry._KERNELS, ("MatMul", registry.ANY),
                                dataclasses.replace(kernel, fn=interrupted))
            with af.Graph().as_default():  # (a new plan: the patched kernel)
                feeds2, fetch2 = graph()
                async with af.Session() as other:
                    feed2 = dict(zip(feeds2, big))
                    limiter2 = other.prepare(fetch2, feed2).compiled.plans[0].device.limiter
                    await other.run(fetch2, feed2)  # loop form
                    raising.append(True)
                    with pytest.raises(_Interrupt):
                        await other.run(fetch2, feed2)  # on the thread
                    assert spied["thread_steps"] == 2
                    assert limiter2.borrowed_tokens == 0
            again = await session.run(fetch, feed)
    assert again.shape == (M,)


async def test_two_sessions_on_one_graph_train_at_once_with_their_own_bits(spied, monkeypatch,
                                                                          cpu_only):
    """Two sessions of one graph run their heavy training steps at once, each on a worker
    thread of its own (their kernels' scratch arrays, per thread, and the intra-op pool
    shared): each ends with the weights a session alone reaches."""
    monkeypatch.setattr(thread_step, "ENABLED", True)
    rng = np.random.default_rng(8)
    x_value = rng.standard_normal((M, K)).astype(np.float32)
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, K])
        w = af.Variable(rng.standard_normal((K, N)).astype(np.float32) * 0.01)
        v = af.Variable(rng.standard_normal((N, K)).astype(np.float32) * 0.01)
        loss = af.reduce_mean(af.square(af.matmul(af.nn.relu(af.matmul(x, w)), v)))
        train = af.train.AdamOptimizer(0.01).minimize(loss)

        async def trained(session, out):
            await session.run(af.global_variables_initializer())
            for _ in range(4):
                await session.run(train, {x: x_value})
            out.append(await session.run([w, v]))
        alone = []
        async with af.Session() as session:
            await trained(session, alone)
        thread_steps = spied["thread_steps"]
        together = []
        async with af.Session() as first, af.Session() as second:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trained, first, together)
                nursery.start_soon(trained, second, together)
    assert thread_steps == 3 and spied["thread_steps"] == 3 * thread_steps
    for got in together:
        for a, b in zip(got, alone[0]):
            np.testing.assert_array_equal(a, b)
