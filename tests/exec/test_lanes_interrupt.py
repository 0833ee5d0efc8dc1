"""A Ctrl-C in lane 0 while the lane thread waits for one of its flags (``exec/lanes.py``):
the thread's wait ends when lane 0 stops it, even when a second Ctrl-C cuts lane 0's stop
short, and when the pool closes (the lane's owner) if the stop never ran at all.

The interrupt is injected where a signal's KeyboardInterrupt would surface: lane 0 raises it
right after handing lane 1 to the pool's lane thread (once that thread waits for a flag lane 0
will now never set), and the second one inside ``LaneRun.stop`` (the future's ``cancel``) or
before its first line. Each wait on the lane thread is bounded (``GENEROUS``): a thread that
waits for good fails the test instead of hanging it.
"""
import concurrent.futures
import threading
import time

import pytest
import test_lanes

import asyncflow as af
from asyncflow.exec import intra_op, lanes

pytestmark = pytest.mark.usefixtures("cpu_only", "laned", "on_the_worker")
build, laned, on_the_worker = test_lanes.build, test_lanes.laned, test_lanes.on_the_worker

GENEROUS = 20


def waits_for_a_flag(run, thread_future):
    """Until lane 1's thread waits on the condition for a flag (``GENEROUS`` s at most)."""
    deadline = time.monotonic() + GENEROUS
    while time.monotonic() < deadline and not thread_future.done():
        with run.cond:
            if run.waiters:
                return True
        time.sleep(0.001)
    return False


class _CancelInterrupted:
    """The lane thread's future, whose ``cancel`` takes a Ctrl-C (a second one)."""

    def __init__(self, future):
        self.real = future

    def cancel(self):
        raise KeyboardInterrupt


async def interrupted_step(monkeypatch, second):
    """One two-lane MLP step whose lane 0 is interrupted once lane 1's thread waits for it;
    ``second``: what happens to the stop ("cancel": a Ctrl-C in its ``future.cancel()``,
    "entry": one before its first line). Returns the step's LaneRun and the thread's future."""
    start, stop, seen = lanes.LaneRun.start, lanes.LaneRun.stop, {}

    def interrupted_start(self):
        start(self)
        seen["run"], seen["future"] = self, self.future
        seen["waited"] = waits_for_a_flag(self, self.future)
        if second == "cancel":
            self.future = _CancelInterrupted(self.future)
        raise KeyboardInterrupt  # (the first Ctrl-C: lane 1 handed, lane 0 not waiting)

    def interrupted_stop(self):
        if second == "entry":
            raise KeyboardInterrupt
        stop(self)
    monkeypatch.setattr(lanes, "ENABLED", True)
    feed = test_lanes.batch_of()
    with af.Graph().as_default():
        x, y, loss, train, _ = build("mlp")
        async with af.Session(config=af.ConfigProto(intra_op_parallelism_threads=2)) as session:
            await session.run(af.global_variables_initializer())
            monkeypatch.setattr(lanes.LaneRun, "start", interrupted_start)
            monkeypatch.setattr(lanes.LaneRun, "stop", interrupted_stop)
            raised = None
            try:
                await session.run([loss, train], dict(zip((x, y), feed)))
            except BaseException as exc:  # noqa: BLE001 -- the injected interrupt, checked
                raised = exc
            finally:
                monkeypatch.setattr(lanes.LaneRun, "start", start)
                monkeypatch.setattr(lanes.LaneRun, "stop", stop)
    assert seen["waited"], "lane 1's thread never waited for lane 0"
    assert isinstance(raised, KeyboardInterrupt) or isinstance(raised, BaseExceptionGroup) \
        and raised.subgroup(KeyboardInterrupt) is not None, repr(raised)
    return seen["run"], seen["future"]


def ended(run, future):
    """Whether the lane thread's function ended within ``GENEROUS`` s (if not, it is halted
    here, as the fix does, so that a failure leaks no thread)."""
    done, _ = concurrent.futures.wait([future], GENEROUS)
    if not done:
        with run.cond:
            run.abort = True
            run.cond.notify_all()
        future.result(GENEROUS)
    return bool(done)


async def test_a_ctrl_c_inside_lane_0s_stop_still_ends_the_lane_threads_wait(monkeypatch):
    run, future = await interrupted_step(monkeypatch, "cancel")
    assert ended(run, future), "the lane thread still waits for a flag after the step"
    assert run.abort and run.done


async def test_a_lane_never_stopped_is_halted_when_its_pool_closes(monkeypatch):
    run, future = await interrupted_step(monkeypatch, "entry")
    try:
        assert not future.done() and run.waiters == 1  # (waits until someone stops it)
        pool = intra_op.shared_pool(2)
        pool.close(GENEROUS)  # the owner stops: at exit too (``intra_op._stop_at_exit``)
        assert ended(run, future), "the lane thread still waits after its pool closed"
        assert run.abort and run.done and not pool._halts
        names = [thread.name for thread in threading.enumerate()]
        assert not [name for name in names if "intra-op2-lane" in name], names
    finally:
        intra_op.whole.active = False  # (the stop that never ran left the loop's flag set)


def test_the_lane_thread_is_a_daemon_no_exit_joins_before_the_pool_halted_it():
    pool = intra_op.IntraOpPool(2)
    try:
        assert pool.submit(lambda: threading.current_thread().daemon).result(GENEROUS)
    finally:
        pool.close(GENEROUS)


async def test_a_step_after_the_exit_hook_starts_no_lane_thread(laned, monkeypatch):
    """Once ``intra_op._stop_at_exit`` ran (closed every pool, halted and joined their lanes),
    a step still running (another thread's, an atexit hook's) starts no lane thread that no
    one would halt or join while the interpreter finalizes: lane 0 runs lane 1 itself, as the
    splits then run on their caller."""
    monkeypatch.setattr(lanes.LaneRun, "steal", True)  # (the module's rule, not the worker's)
    pool = intra_op.shared_pool(2)
    pool.close(GENEROUS)
    monkeypatch.setattr(intra_op, "_exiting", True)
    one = await test_lanes.train_steps("mlp", 2, False, monkeypatch)
    two = await test_lanes.train_steps("mlp", 2, True, monkeypatch)
    assert laned["runs"] and all(run.future is None and run.done for run in laned["runs"])
    assert pool._lane is None and not pool._halts
    names = [thread.name for thread in threading.enumerate()]
    assert not [name for name in names if "intra-op2-lane" in name], names
    test_lanes.assert_same_bits(one, two)
