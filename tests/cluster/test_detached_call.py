"""channels.DetachedCall: a result is either taken by a caller that waited for it or undone,
never both and never neither, whatever the order of the answer and the callers' cancels."""
import gc
import weakref

import pytest
import trio
import trio.testing

from asyncflow.cluster import channels


def _call(answers):
    """``(call, undone, pending)``: a call that returns "graph" once ``answers`` is set."""
    undone, pending = [], set()

    async def call():
        await answers.wait()
        return "graph"

    async def abandoned(result):
        undone.append(result)
    return call, abandoned, undone, pending


async def test_a_cancel_and_the_answer_at_once_undo_the_result():
    answers = trio.Event()
    call, abandoned, undone, pending = _call(answers)
    detached = await channels.detached_call(call, abandoned, pending)
    got = []
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def waiter():
            with scope:
                got.append(await detached.result())
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()  # (both in one scheduler pass: the waiter has not run its cancel yet)
        answers.set()
    await trio.testing.wait_all_tasks_blocked()
    assert (got, undone, pending) == ([], ["graph"], set())


async def test_a_caller_that_joins_after_the_first_was_cancelled_takes_the_result():
    answers = trio.Event()
    call, abandoned, undone, pending = _call(answers)
    detached = await channels.detached_call(call, abandoned, pending)
    with trio.move_on_after(0.01):
        await detached.result()
    assert not detached.answered
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.testing.wait_all_tasks_blocked)
        answers.set()
        assert await detached.result() == "graph"
    await trio.testing.wait_all_tasks_blocked()
    assert (undone, pending) == ([], set())


async def test_a_failure_is_raised_to_the_caller_and_a_cancelled_caller_starts_nothing():
    async def fails():
        raise channels.TransportUnavailable("down")

    async def abandoned(result):
        raise AssertionError("nothing to undo")
    pending = set()
    with pytest.raises(channels.TransportUnavailable):
        await (await channels.detached_call(fails, abandoned, pending)).result()
    with trio.CancelScope() as scope:
        scope.cancel()
        await channels.detached_call(fails, abandoned, pending)
    await trio.testing.wait_all_tasks_blocked()
    assert scope.cancelled_caught and not pending


async def test_an_undo_that_fails_is_logged_naming_the_call(caplog):
    async def call():
        return "graph"

    async def abandoned(result):
        raise RuntimeError(f"could not undo {result}")
    with trio.CancelScope() as scope:  # the caller leaves before the answer
        detached = await channels.detached_call(call, abandoned, set(),
                                                "RegisterGraph on /job:worker/task:0")
        scope.cancel()
        await detached.result()
    await trio.testing.wait_all_tasks_blocked()
    assert "RegisterGraph on /job:worker/task:0" in caplog.text, caplog.text
    assert "could not undo graph" in caplog.text, caplog.text


async def test_a_failure_raised_to_its_caller_is_not_kept_by_the_call():
    # The call stays on its TaskGraph until the next registration: its outcome must not keep
    # the error, whose traceback holds the caller's frames (a step's feeds) in a cycle.
    async def fails():
        raise channels.TransportUnavailable("down")

    async def abandoned(result):
        raise AssertionError("nothing to undo")
    gc.disable()
    try:
        detached = await channels.detached_call(fails, abandoned, set())
        try:
            await detached.result()
        except channels.TransportUnavailable as exc:
            raised = weakref.ref(exc)
        await trio.testing.wait_all_tasks_blocked()
        assert raised() is None, "kept alive by the call"
    finally:
        gc.enable()
