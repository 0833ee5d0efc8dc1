"""A cluster step's RunGraphs on several tasks without a nursery of the step's own.

Why: the usual PS step (ready, no timeout: the session's ``CallCancel`` split one a RunGraph,
``master._StepDriver``) opened a nursery a step (a trio cancel scope and a join) only to run
its first RunGraph from a task of its own while the step's task sends the last. Here that
task starts in the master's step monitor's nursery (``StepMonitor.spawn``, open once the
master's first step ran) and the step's task joins it by an Event. What the nursery gave is
kept by hand:

- the step's task returns or raises only once every call has ended (and the abort of a failed
  step has been sent): cancelled or failed itself, it first ends the others (their
  CallCancels, as the driver's own cancel: they report nothing), then waits for them, shielded;
- a spawned call raises nothing into the monitor: an exception of its is raised by the step's
  task; the monitor's own cancel (the master closing) ends the call as the session's close;
- the first failure aborts the step everywhere from a task of its own, which then ends the
  calls still running once ``grace_s`` has passed (the nursery's deadline did so).

Knows only the driver's interface (``_run_one``, ``_abort``, the call cancels); no wire.
"""
from __future__ import annotations

import trio

from asyncflow.cluster.channels import only_cancelled


class Join:
    """The spawned calls of one step, and the failure's abort if one began."""

    __slots__ = ("running", "ended", "raised", "aborting", "aborted")

    def __init__(self):
        self.running = 0        # spawned calls not yet ended
        self.ended = trio.Event()  # set when ``running`` drops to 0
        self.raised = None      # the first exception a spawned call raised
        self.aborting = None    # the failure task's grace scope, once it began
        self.aborted = None     # an Event set when the failure task has ended


async def run(driver, order):
    """``driver``'s RunGraphs in ``order``: all but the last from the monitor's nursery, the
    last from this task. False (nothing started) where the monitor has no nursery yet."""
    monitor, join = driver.master.monitor, Join()
    driver.join = join  # (before a spawned call can fail)
    try:
        for index in order[:-1]:
            join.running += 1
            if not monitor.spawn(_spawned, driver, join, index):
                join.running -= 1
                if index == order[0]:
                    driver.join = None
                    return False  # (nothing started: the caller's nursery then)
                raise RuntimeError("the step monitor closed as the step started")  # (a close)
            await trio.lowlevel.checkpoint()  # (as a nursery's start: the task begins first)
        await driver._run_one(order[-1])
        if join.running:
            await join.ended.wait()
    except BaseException:
        driver.cancelled_own = True  # (the calls ended by this, as a nursery's children)
        for cancel in driver.cancels:
            cancel.cancel()
        with trio.CancelScope(shield=True):
            await _ended(join)
        raise
    await _ended(join)
    if join.raised is not None:
        raised, join.raised = join.raised, None
        raise raised
    return True


async def _ended(join):
    """Wait until the spawned calls and the failure's task have ended (its grace cut short)."""
    if join.running:
        await join.ended.wait()
    if join.aborted is not None:
        join.aborting.cancel()  # (the calls have ended: no grace to wait out)
        await join.aborted.wait()


async def _spawned(driver, join, index):
    try:
        await driver._run_one(index)
    except BaseException as exc:  # noqa: BLE001 - raised by the step's task
        if only_cancelled(exc):  # the monitor's (and its group): the master closes
            driver.closed_calls = True  # (as the session's close would end the call)
            raise
        if join.raised is None:
            join.raised = exc
    finally:
        join.running -= 1
        if not join.running:
            join.ended.set()


def failed(driver, code, message, grace_s):
    """The step's first failure: abort it everywhere from a task of its own, and end the calls
    still running ``grace_s`` later. False where the monitor has no nursery (closing)."""
    join = driver.join
    join.aborting = trio.CancelScope(deadline=trio.current_time() + grace_s)
    join.aborted = trio.Event()
    if driver.master.monitor.spawn(_after_failure, driver, join, code, message):
        return True
    join.aborting = join.aborted = None
    return False


async def _after_failure(driver, join, code, message):
    try:
        with join.aborting:  # (cancelled by ``_ended`` once the calls have ended)
            await driver._abort(code, message)  # (shielded and bounded: its own)
            await trio.sleep_forever()
        if join.running:  # the grace passed with calls still running: ended as the driver's
            for cancel in driver.cancels:
                driver.cancel_call(cancel)
    finally:
        join.aborted.set()
