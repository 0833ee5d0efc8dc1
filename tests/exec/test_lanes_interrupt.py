"""A Ctrl-C in lane 0 while the lane thread waits for one of its flags (``exec/lanes.py``):
the thread's wait ends when lane 0 stops it, even when a second Ctrl-C cuts lane 0's stop
short, and when the pool closes (the lane's owner) if the stop never ran at all. Whichever
way the step ends, the loop thread's flags (``intra_op.whole``: kernels whole while lane 1 is
live, lane 0's tail joinable) are put back: a later step's large GEMM splits again.

The interrupt is injected where a signal's KeyboardInterrupt would surface: lane 0 raises it
right after handing lane 1 to the pool's lane thread (once that thread waits for a flag lane 0
will now never set) or once its tail began, and the second one inside ``LaneRun.stop`` (the
future's ``cancel``, the halt's lock), before its first line, or as a real SIGINT there
(``_thread.interrupt_main``: the handler in place, trio's, raises it). Each wait on the lane
thread is bounded (``GENEROUS``): a thread that waits for good fails the test instead of
hanging it.
"""
import _thread
import concurrent.futures
import dataclasses
import threading
import time

import pytest
import test_lanes

import numpy as np

import asyncflow as af
from asyncflow.exec import intra_op, lanes
from asyncflow.kernels import registry

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


def ctrl_c(how):
    """A Ctrl-C here: raised (``raise``: where a signal's would surface) or a real SIGINT
    (``signal``: the handler in place runs right after the call and raises)."""
    if how == "signal":
        _thread.interrupt_main()
    raise KeyboardInterrupt  # (not reached after a signal's)


async def interrupted_step(monkeypatch, second, first="start"):
    """One two-lane MLP step whose lane 0 is interrupted (``first``: "start", once lane 1's
    thread waits for it; "signal", the same by SIGINT; "tail", once lane 0's tail began, lane 1
    held live by ``blocked_apply``); ``second``: what happens to the stop ("cancel": a Ctrl-C
    in its ``future.cancel()``, "halt": one in its halt's lock, "entry": one before its first
    line, "signal": a SIGINT there). Returns the step's LaneRun and the thread's future."""
    start, stop, halt, tail, seen = (lanes.LaneRun.start, lanes.LaneRun.stop,
                                     lanes.LaneRun.halt, lanes.LaneRun.tail, {})

    def interrupted_start(self):
        start(self)
        seen["run"], seen["future"] = self, self.future
        if first == "tail":
            return
        seen["waited"] = waits_for_a_flag(self, self.future)
        if second == "cancel":
            self.future = _CancelInterrupted(self.future)
        ctrl_c("signal" if first == "signal" else "raise")  # (the first Ctrl-C)

    def interrupted_tail(self):
        tail(self)
        if first == "tail":
            seen["waited"] = self.tailing and intra_op.whole.join is self
            raise KeyboardInterrupt  # (the first Ctrl-C: lane 0 in its tail, lane 1 live)

    def interrupted_halt(self):  # (the stop's; the pool's close, later, halts as ever)
        if second == "halt" and not seen.get("halted"):
            seen["halted"] = True
            raise KeyboardInterrupt
        halt(self)

    def interrupted_stop(self):
        if second in ("entry", "signal"):
            ctrl_c("signal" if second == "signal" else "raise")
        stop(self)
    monkeypatch.setattr(lanes, "ENABLED", True)
    feed = test_lanes.batch_of()
    with af.Graph().as_default():
        x, y, loss, train, _ = build("mlp")
        async with af.Session(config=af.ConfigProto(intra_op_parallelism_threads=2)) as session:
            await session.run(af.global_variables_initializer())
            patched = {"start": interrupted_start, "stop": interrupted_stop,
                       "halt": interrupted_halt, "tail": interrupted_tail}
            for name, fn in patched.items():
                monkeypatch.setattr(lanes.LaneRun, name, fn)
            raised = None
            try:
                await session.run([loss, train], dict(zip((x, y), feed)))
            except BaseException as exc:  # noqa: BLE001 -- the injected interrupt, checked
                raised = exc
            finally:
                for name, fn in (("start", start), ("stop", stop), ("halt", halt),
                                 ("tail", tail)):
                    monkeypatch.setattr(lanes.LaneRun, name, fn)
    assert seen["waited"], "lane 1's thread never waited for lane 0 (or no tail began)"
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
        intra_op.shared_pool(2).close(GENEROUS)


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


def blocked_apply(monkeypatch, name):
    """Lane 1's apply ``name`` waits (``GENEROUS`` s at most) until the returned event is set:
    lane 1 is live whatever lane 0 does meanwhile."""
    release = threading.Event()
    kernel = registry._KERNELS[("ApplyRMSProp", registry.ANY)]

    def fn(ctx, *args, _fn=kernel.fn):
        if ctx.name == name:
            release.wait(GENEROUS)
        return _fn(ctx, *args)
    monkeypatch.setitem(registry._KERNELS, ("ApplyRMSProp", registry.ANY),
                        dataclasses.replace(kernel, fn=fn))
    return release


async def gemm_hand_offs(monkeypatch):
    """How many splits of a later step's GEMM (33M multiply-adds: it splits, on the loop's
    thread, below the offload threshold) were handed to the pool's workers, over 3 steps.
    Every worker is taken as idle (``all_busy``), so the count depends on the loop thread's
    flags only."""
    posts = []
    post = intra_op._Workers.post

    def counting(self, item, count):
        posts.append(count)
        return post(self, item, count)
    monkeypatch.setattr(intra_op._Workers, "post", counting)
    monkeypatch.setattr(intra_op.IntraOpPool, "all_busy", lambda self: False)
    rng = np.random.default_rng(7)
    a, b = test_lanes.big(rng, 256, 512), test_lanes.big(rng, 512, 256)
    with af.Graph().as_default():
        fed = [af.placeholder(af.float32, value.shape) for value in (a, b)]
        product = af.matmul(*fed)
        async with af.Session(config=af.ConfigProto(intra_op_parallelism_threads=2)) as session:
            for _ in range(3):
                got = await session.run(product, dict(zip(fed, (a, b))))
    assert np.allclose(got, a @ b, rtol=1e-4, atol=1e-3)
    return len(posts)


@pytest.mark.parametrize("first, second", [("start", "entry"), ("start", "halt"),
                                           ("start", "cancel"), ("signal", "signal"),
                                           ("tail", "entry")])
async def test_a_second_ctrl_c_leaves_no_flag_set_on_the_loop_thread(first, second, laned,
                                                                     monkeypatch, request):
    """A step interrupted twice, the second time anywhere in its stop (or before it): the loop
    thread's flags are put back, and a later step's large GEMM splits over the pool again (it
    ran whole for the rest of the process when a stop cut short had left them set)."""
    if "signal" in (first, second):
        request.getfixturevalue("main_thread")
    release = None
    if first == "tail":
        await test_lanes.train_steps("mlp", 1, True, monkeypatch)  # which apply is lane 1's
        where = test_lanes.lane_of_op(laned)
        release = blocked_apply(monkeypatch, sorted(
            n for n, lane in where.items() if lane == 1 and n.endswith("ApplyRMSProp"))[0])
    try:
        run, future = await interrupted_step(monkeypatch, second, first)
        assert not getattr(intra_op.whole, "active", False), "kernels left whole on the loop"
        assert getattr(intra_op.whole, "join", None) is None, "a stopped lane left joinable"
        assert not run.alone and not run.tailing
        assert await gemm_hand_offs(monkeypatch) == 3, "a later step's GEMM never split"
    finally:
        if release is not None:
            release.set()
        intra_op.shared_pool(2).close(GENEROUS)  # (halts a lane whose stop was cut short)
    assert ended(run, future), "the lane thread still waits after its pool closed"
