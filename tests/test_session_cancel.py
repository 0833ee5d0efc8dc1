"""Timeouts and cancellation: a step that waits is cancelled cleanly, the session survives."""
import numpy as np
import pytest
import trio

import asyncflow as af


def waiting_graph(started):
    """A graph whose py_func waits forever on the event loop (an async callable)."""
    async def wait_forever(x):
        started.set()
        await trio.sleep_forever()

    x = af.constant(np.float32(1.0))
    blocked = af.py_func(wait_forever, [x], af.float32, name="waits")
    quick = x + 1.0
    return blocked, quick


async def test_timeout_in_ms_raises_deadline_exceeded(autojump_clock):
    with af.Graph().as_default():
        blocked, quick = waiting_graph(trio.Event())
        async with af.Session() as sess:
            with pytest.raises(af.errors.DeadlineExceededError, match="500 ms"):
                await sess.run(blocked, options=af.RunOptions(timeout_in_ms=500))
            assert await sess.run(quick) == 2.0


async def test_session_default_timeout(autojump_clock):
    with af.Graph().as_default():
        blocked, _ = waiting_graph(trio.Event())
        config = af.SessionConfig(operation_timeout_in_ms=250)
        async with af.Session(config=config) as sess:
            with pytest.raises(af.errors.DeadlineExceededError):
                await sess.run(blocked)


async def test_caller_cancel_scope_cancels_the_step(autojump_clock):
    started = trio.Event()
    with af.Graph().as_default():
        blocked, quick = waiting_graph(started)
        async with af.Session() as sess:
            with trio.move_on_after(5) as scope:
                await sess.run(blocked)
            assert scope.cancelled_caught
            assert started.is_set()
            assert sess.statistics().runs_in_flight == 0
            assert await sess.run(quick) == 2.0


async def test_cancel_from_another_task(autojump_clock):
    started = trio.Event()
    with af.Graph().as_default():
        blocked, quick = waiting_graph(started)
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sess.run, blocked)
                await started.wait()
                nursery.cancel_scope.cancel()
            assert await sess.run(quick) == 2.0


async def test_failure_in_one_branch_cancels_the_waiting_branch(autojump_clock):
    started = trio.Event()
    with af.Graph().as_default():
        blocked, _ = waiting_graph(started)
        p = af.placeholder(af.float32, [None])
        bad = af.reshape(p, [7], name="bad")
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError, match="bad") as info:
                await sess.run([blocked, bad], {p: np.ones(3)})
    assert not isinstance(info.value, BaseExceptionGroup)


async def test_traced_nodes_say_whether_they_waited(autojump_clock):
    async def slow(x):
        await trio.sleep(1)
        return x

    with af.Graph().as_default():
        x = af.constant(np.float32(1.0))
        waits = af.py_func(slow, [x], af.float32, name="waits")
        quick = af.identity(x, name="quick")
        metadata = af.RunMetadata()
        async with af.Session() as sess:
            await sess.run([waits, quick], options=af.RunOptions(trace_level=af.RunOptions.FULL_TRACE),
                           run_metadata=metadata)
    by_name = {s.node_name: s for s in metadata.step_stats}
    assert by_name["waits"].waited and not by_name["quick"].waited
    assert by_name["waits"].end_us - by_name["waits"].start_us >= 0
