"""No path runs kernels for longer than a time slice without a checkpoint (``timeslice``).

For every path that runs kernels -- the generated static schedule (trio, the asyncio inline
path, and stepped by hand when a multi-partition step starts it inline), the ready queue, the
``Driver`` across CPU partitions, the frame-aware loop and compiled loops -- a step that runs
long lets a concurrent task run, a cancel scope around it fires, and (for steps that never
end) ``RunOptions.timeout_in_ms`` raises DeadlineExceededError.

Ticks are counted, not timed: the ``stepped_clock`` fixture makes the time-slice clock advance
a quarter slice per read, so a slice ends after a fixed number of checks, however loaded the
machine, and a ticker task that cancels the step on its third turn interrupts it long before
its end. The infinite loops use the real clock, whose deadlines are lower bounds only; the
``no_hang`` guard turns a step that never yields into a failure instead of a hung run.
"""
import asyncio
import itertools
import signal

import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow import aio, errors
from asyncflow.exec import timeslice
from partition_graphs import TWO_CPUS, counting_tasks
import loop_modes

# The CPU executor's paths: a GPU would take these ops off them (conftest.cpu_only).
pytestmark = pytest.mark.usefixtures("cpu_only")

CHAIN = 2000  # kernels of the long straight-line steps: 125 slice checks
PARTS = 600   # the same across partitions (partitioning a long ping-pong takes a while)


@pytest.fixture(autouse=True)
def no_hang():
    """Fail (rather than hang) a test whose step never gives control back."""
    def hung(signum, frame):
        raise TimeoutError("the step ran 120 s without a checkpoint the test could use")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def stepped_clock(monkeypatch):
    """The slice clock advances a quarter slice per read; returns the count of reads."""
    reads = itertools.count()
    counted = []

    def clock():
        counted.append(None)
        return next(reads) * timeslice.TIME_SLICE_S / 4

    monkeypatch.setattr(timeslice, "clock", clock)
    timeslice.restart()
    yield counted
    timeslice.restart()


@pytest.fixture(params=["compiled", "dynamic"])
def loop_mode(request):
    """Simple loops on the compiled runner, and the same loops on the frame machinery."""
    loop_modes.use(request.param)
    yield request.param
    loop_modes.use("compiled")


class Ticker:
    """A task beside the step: counts its turns; may cancel ``scope`` on turn ``cancel_at``."""

    def __init__(self, scope=None, cancel_at=None):
        self.ticks = 0
        self.scope = scope
        self.cancel_at = cancel_at

    async def run(self):
        while True:
            self.ticks += 1
            if self.ticks == self.cancel_at:
                self.scope.cancel()
                return
            await trio.sleep(0)


async def run_counting_tasks(step, spawned):
    """``await step()``, appending to ``spawned`` the tasks it started."""
    with counting_tasks() as counts:
        result = await step()
    spawned.append(counts.spawned)
    return result


async def ticks_during(step):
    """Run ``await step()`` beside a ticker; returns (its result, the ticker's turns)."""
    ticker = Ticker()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker.run)
        await trio.sleep(0)  # the ticker has started and is runnable
        ticker.ticks = 0
        result = await step()
        nursery.cancel_scope.cancel()
    return result, ticker.ticks


async def cancelled_by_a_ticker(step, turns=3):
    """Run ``await step()`` while a ticker cancels it on its ``turns``-th turn.

    Returns whether the cancellation interrupted the step (the step cannot have finished:
    after it returns nothing here checkpoints before the scope closes).
    """
    scope = trio.CancelScope()
    ticker = Ticker(scope, turns)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker.run)
        with scope:
            await step()
    return scope.cancelled_caught


def chain(x, length=CHAIN):
    for _ in range(length):
        x = x + 1.0
    return x


def forever():
    return af.while_loop(lambda i: i > -1, lambda i: i + 1, [af.constant(0)])


def the_plan(sess):
    (compiled,) = sess._cache.values()
    return compiled.plans


# -- the budget ---------------------------------------------------------------------------
def test_a_slice_opens_on_the_first_check_and_ends_a_slice_later(stepped_clock):
    timeslice.restart()
    assert timeslice.due() is False  # opens the slice at 0
    assert [timeslice.due() for _ in range(4)] == [False, False, False, True]
    timeslice.restart()
    assert timeslice.due() is False  # a new slice
    timeslice.begin()  # a step begins a quarter slice later: the slice goes on
    assert timeslice.BUDGET.end


def test_a_step_beginning_long_after_its_slice_ended_starts_a_new_one(stepped_clock):
    timeslice.restart()
    timeslice.due()  # opens at 0: ends at 1 slice
    for _ in range(8):
        stepped_clock and timeslice.clock()  # two slices pass (an await elsewhere)
    timeslice.begin()
    assert timeslice.BUDGET.end == 0.0


# -- static schedules ---------------------------------------------------------------------
async def test_a_long_static_step_lets_other_tasks_run(stepped_clock):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        y = chain(x)
        async with af.Session(config=loop_modes.config()) as sess:
            assert await sess.run(y, {x: 0.0}) == CHAIN
            (plan,) = the_plan(sess)
            assert plan.static and not plan.control_flow
            reads = len(stepped_clock)
            value, ticks = await ticks_during(lambda: sess.run(y, {x: 1.0}))
            reads = len(stepped_clock) - reads
    assert value == CHAIN + 1
    # One check per 2 * CHECK_EVERY kernels, not per kernel: a clock read, and one more where the
    # check opens or ends a slice (here every few checks: a slice ends every 4 reads).
    assert reads <= 2 * (CHAIN // timeslice.CHECK_EVERY) + 4
    assert ticks >= CHAIN // (2 * timeslice.CHECK_EVERY) // 8


async def test_a_short_static_step_never_reads_the_clock(stepped_clock):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        y = chain(x, 2 * timeslice.CHECK_EVERY - 1)
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(y, {x: 0.0})
            source_reads = len(stepped_clock)
            for _ in range(10):
                await sess.run(y, {x: 0.0})
            # Only the run's end (Session._share_the_loop) and start look at the clock.
            assert len(stepped_clock) - source_reads <= 2 * 10


async def test_a_static_step_checks_after_each_kernel_its_shapes_say_is_large(stepped_clock):
    reads = {}
    for shape in ([], [300, 300]):  # 90,000 elements: over timeslice.LARGE_KERNEL_COST
        with af.Graph().as_default():
            x = af.placeholder(af.float32, shape, name="x")
            y = chain(x, 8)
            async with af.Session(config=loop_modes.config()) as sess:
                feed = {x: np.zeros(shape, np.float32)}
                await sess.run(y, feed)
                before = len(stepped_clock)
                await sess.run(y, feed)
                reads[len(shape)] = len(stepped_clock) - before
    # A check (a clock read) after every large kernel but the last; none for small ones
    # (the run's start and end read it at most twice).
    assert reads[0] <= 2 and reads[2] >= 7, reads


async def test_a_cancelled_static_step_stops_within_a_slice(stepped_clock):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        y = chain(x)
        async with af.Session(config=loop_modes.config()) as sess:
            assert await cancelled_by_a_ticker(lambda: sess.run(y, {x: 0.0}))


# -- the ready queue ----------------------------------------------------------------------
def queued_chain(x, probe):
    """A chain, then ``probe`` (a py_func), beside two dequeues: two waiting kernels keep the
    step off the static path; the chain does not depend on them, so it runs in the step's
    first drain, before the dequeues wait for anything."""
    queue = af.FIFOQueue(4, [af.float32], shapes=[[]])
    fill = queue.enqueue_many([[1.0, 2.0]])
    probed = af.py_func(probe, [chain(x)], af.float32)
    return fill, probed + queue.dequeue() + queue.dequeue()


async def test_a_long_ready_queue_step_lets_other_tasks_run(stepped_clock):
    ticker, seen = Ticker(), []

    def probe(value):
        seen.append(ticker.ticks)  # the ticker's turns while the chain ran
        return value

    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        fill, y = queued_chain(x, probe)
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(fill)
            assert await sess.run(y, {x: 0.0}) == CHAIN + 3
            (plan,) = next(c.plans for c in sess._cache.values()
                           if len(c.plans[0].nodes) > CHAIN)
            assert not plan.static and not plan.control_flow
            await sess.run(fill)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticker.run)
                await trio.sleep(0)
                ticker.ticks = 0
                assert await sess.run(y, {x: 1.0}) == CHAIN + 4
                nursery.cancel_scope.cancel()
    assert seen[-1] >= CHAIN // timeslice.CHECK_EVERY // 8


async def test_a_cancelled_ready_queue_step_stops_within_a_slice(stepped_clock):
    seen = []
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        fill, y = queued_chain(x, lambda value: seen.append(value) or value)
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(fill)
            assert await cancelled_by_a_ticker(lambda: sess.run(y, {x: 0.0}))
    assert seen == []  # cancelled in the middle of the chain


# -- partitions on two CPUs: the Driver, and static partitions stepped by hand -------------
def ping_pong(x, hops):
    """``hops`` identities alternating between the two CPUs: every hop is a Send/Recv edge."""
    for i in range(hops):
        with af.device(f"/device:CPU:{(i + 1) % 2}"):
            x = af.identity(x)
    return x


async def test_a_long_ping_pong_across_partitions_lets_other_tasks_run(stepped_clock):
    hops = 2 * PARTS
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        y = ping_pong(x, hops)
        async with af.Session(config=loop_modes.config(TWO_CPUS)) as sess:
            assert await sess.run(y, {x: 2.0}) == 2.0
            plans = the_plan(sess)
            assert len(plans) == 2 and not any(p.static or p.control_flow for p in plans)
            spawned = []
            value, ticks = await ticks_during(
                lambda: run_counting_tasks(lambda: sess.run(y, {x: 1.0}), spawned))
    assert value == 1.0
    # Every hop is a drain of the other partition: the budget counts across drains. (Without
    # slices, starting the partitions' tasks gives the ticker about 7 turns, however long.)
    assert ticks >= hops // timeslice.CHECK_EVERY // 6
    assert spawned == [0]  # the step yielded from its own task: no task per partition


async def test_a_cancelled_ping_pong_stops_within_a_slice(stepped_clock):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        y = ping_pong(x, PARTS)
        async with af.Session(config=loop_modes.config(TWO_CPUS)) as sess:
            assert await cancelled_by_a_ticker(lambda: sess.run(y, {x: 0.0}))


def two_static_partitions(x, length):
    with af.device("/device:CPU:0"):
        a = chain(x, length)
    with af.device("/device:CPU:1"):
        b = chain(x * 2.0, length)
    return a, b


async def test_long_static_partitions_started_inline_let_other_tasks_run(stepped_clock):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        a, b = two_static_partitions(x, PARTS)
        async with af.Session(config=loop_modes.config(TWO_CPUS)) as sess:
            assert await sess.run([a, b], {x: 0.0}) == [PARTS, PARTS]
            plans = the_plan(sess)
            assert len(plans) == 2 and all(p.static for p in plans)
            spawned = []
            value, ticks = await ticks_during(
                lambda: run_counting_tasks(lambda: sess.run([a, b], {x: 1.0}), spawned))
    assert value == [PARTS + 1, PARTS + 2]
    assert ticks >= PARTS // timeslice.CHECK_EVERY // 8
    assert spawned == [0]  # suspended schedules resumed by hand in the step's own task


async def test_a_paused_static_partition_finishes_in_its_task_beside_a_loop(stepped_clock):
    # The loop's partition needs a task of its own (control flow), so the static one, paused
    # at the end of a slice while it started inline, finishes in a task too.
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        with af.device("/device:CPU:0"):
            a = chain(x, PARTS)
        with af.device("/device:CPU:1"):
            b = af.while_loop(lambda i: i < 500, lambda i: i + 1, [af.constant(0)])
        async with af.Session(config=loop_modes.config(TWO_CPUS)) as sess:
            assert await sess.run([a, b], {x: 0.0}) == [PARTS, 500]
            plans = the_plan(sess)
            assert [p.static for p in plans].count(True) == 1
            assert [p.control_flow for p in plans].count(True) == 1
            value, ticks = await ticks_during(lambda: sess.run([a, b], {x: 1.0}))
    assert value == [PARTS + 1, 500]
    assert ticks >= PARTS // timeslice.CHECK_EVERY // 8


async def test_cancelled_static_partitions_stop_within_a_slice(stepped_clock):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        a, b = two_static_partitions(x, PARTS)
        async with af.Session(config=loop_modes.config(TWO_CPUS)) as sess:
            assert await cancelled_by_a_ticker(lambda: sess.run([a, b], {x: 0.0}))
            # The session still runs steps afterwards (no schedule left suspended).
            assert await sess.run(x * 1.0, {x: 3.0}) == 3.0


# -- loops: compiled and on the frame machinery -------------------------------------------
async def test_an_infinite_loop_stops_when_its_cancel_scope_expires(loop_mode):
    with af.Graph().as_default():
        result = forever()
        async with af.Session(config=loop_modes.config()) as sess:
            with trio.move_on_after(0.05) as scope:
                await sess.run(result)
            assert scope.cancelled_caught
            assert await sess.run(af.constant(2) + 1) == 3  # the session is still usable


async def test_an_infinite_loop_raises_deadline_exceeded(loop_mode):
    with af.Graph().as_default():
        result = forever()
        async with af.Session(config=loop_modes.config()) as sess:
            with pytest.raises(errors.DeadlineExceededError, match="timeout_in_ms"):
                await sess.run(result, options=af.RunOptions(timeout_in_ms=50))


async def test_an_infinite_loop_is_cancelled_by_another_task(loop_mode):
    with af.Graph().as_default():
        result = forever()
        async with af.Session(config=loop_modes.config()) as sess:
            assert await cancelled_by_a_ticker(lambda: sess.run(result))


async def test_a_long_loop_lets_other_tasks_run(loop_mode, stepped_clock):
    iterations = 3000
    with af.Graph().as_default():
        result = af.while_loop(lambda i: i < iterations, lambda i: i + 1, [af.constant(0)])
        async with af.Session(config=loop_modes.config()) as sess:
            value, ticks = await ticks_during(lambda: sess.run(result))
    assert value == iterations
    # Each iteration runs a handful of kernels: a slice check every few iterations, a
    # slice every four checks.
    assert ticks >= iterations // 100


async def test_an_infinite_loop_across_devices_raises_deadline_exceeded(loop_mode):
    with af.Graph().as_default():
        with af.device("/device:CPU:0"):
            start = af.constant(0.0)

        def body(i):
            with af.device("/device:CPU:1"):
                return i + 1.0

        result = af.while_loop(lambda i: i > -1.0, body, [start])
        async with af.Session(config=loop_modes.config(TWO_CPUS)) as sess:
            with pytest.raises(errors.DeadlineExceededError):
                await sess.run(result, options=af.RunOptions(timeout_in_ms=50))


# -- the asyncio inline path --------------------------------------------------------------
def test_a_long_inline_step_on_asyncio_lets_other_tasks_run_and_is_cancellable(
        stepped_clock):
    async def main():
        with af.Graph().as_default():
            x = af.placeholder(af.float32, [], name="x")
            y = chain(x)
            async with aio.Session() as sess:
                assert await sess.run(y, {x: 0.0}) == CHAIN
                calls = sess._guest.calls
                ticks = 0

                async def ticker():
                    nonlocal ticks
                    while True:
                        ticks += 1
                        await asyncio.sleep(0)

                other = asyncio.create_task(ticker())
                await asyncio.sleep(0)
                ticks = 0
                value = await sess.run(y, {x: 1.0})
                seen = ticks
                inline = sess._guest.calls == calls  # never crossed into the trio guest
                # Cancelled from another task while it runs: stops at its next pause.
                step = asyncio.create_task(sess.run(y, {x: 0.0}))
                await asyncio.sleep(0)  # the step starts and runs until its first pause
                step.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await step
                other.cancel()
                return value, seen, inline

    value, ticks, inline = asyncio.run(main())
    assert value == CHAIN + 1 and inline
    assert ticks >= CHAIN // (2 * timeslice.CHECK_EVERY) // 8
