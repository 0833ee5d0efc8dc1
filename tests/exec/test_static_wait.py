"""A plan with one waiting kernel stays on the static path and awaits it in place."""
import numpy as np
import pytest
import trio

import asyncflow as af

# The CPU executor's paths: a GPU would take these ops off them (conftest.cpu_only).
pytestmark = pytest.mark.usefixtures("cpu_only")


def _plan(sess, fetch):
    compiled = list(sess._cache.values())
    return [p for c in compiled for p in c.plans if any(
        n.op.name == fetch.op.name for n in p.nodes)][0]


async def test_a_dequeue_waits_in_place_on_the_static_path(autojump_clock):
    with af.Graph().as_default():
        q = af.FIFOQueue(4, [af.float32], shapes=[[]])
        x = af.placeholder(af.float32, [])
        enqueue = q.enqueue([x])
        y = q.dequeue() * 2.0
        async with af.Session() as sess:
            got = []

            async def consumer():
                got.append(await sess.run(y))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(consumer)
                await trio.sleep(1)  # the dequeue waits: nothing was enqueued
                assert got == []
                await sess.run(enqueue, {x: 21.0})
            plan = _plan(sess, y)
            assert plan.static and plan.waits
            assert got == [42.0]
            await sess.run(enqueue, {x: 1.0})  # the twin takes a queued element at once
            assert await sess.run(y) == 2.0


async def test_independent_work_runs_before_the_wait(autojump_clock):
    with af.Graph().as_default():
        q = af.FIFOQueue(4, [af.float32], shapes=[[]])
        v = af.Variable(0.0, name="v")
        bump = af.assign_add(v, 1.0)
        z = af.placeholder(af.float32, [None])
        bad = af.reshape(z, [2, 2], name="bad")
        async with af.Session() as sess:
            await sess.run(v.initializer)
            with trio.move_on_after(5) as scope:
                await sess.run([q.dequeue(), bump])  # waits; the assign ran before the wait
            assert scope.cancelled_caught
            assert await sess.run(v) == 1.0
            with trio.fail_after(5):  # a failure beside the wait surfaces, never a hang
                with pytest.raises(af.errors.InvalidArgumentError, match="bad"):
                    await sess.run([q.dequeue(), bad], {z: [1.0, 2.0, 3.0]})


async def test_closing_the_session_fails_a_step_waiting_in_place(autojump_clock):
    with af.Graph().as_default():
        q = af.FIFOQueue(4, [af.float32], shapes=[[]])
        y = q.dequeue()
        sess = af.Session()
        errors_seen = []

        async def waiter():
            try:
                await sess.run(y)
            except af.errors.CancelledError as exc:
                errors_seen.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(1)
            await sess.close()
        assert len(errors_seen) == 1 and "closed" in str(errors_seen[0])
        assert sess.statistics().runs_in_flight == 0


async def test_a_timeout_ends_a_step_waiting_in_place(autojump_clock):
    with af.Graph().as_default():
        q = af.FIFOQueue(4, [af.float32], shapes=[[]])
        y = q.dequeue()
        async with af.Session() as sess:
            with pytest.raises(af.errors.DeadlineExceededError):
                await sess.run(y, options=af.RunOptions(timeout_in_ms=250))
            await sess.run(q.enqueue([np.float32(3.0)]))
            assert await sess.run(y) == 3.0
