"""A step of one RunGraph runs in its caller's task, and steps still get their watchdog.

The master sends a one-task step from the caller's task (no nursery, no spawned task: two
scheduler passes fewer) and a step on several tasks spawns a task for each RunGraph but the
first; ``StepMonitor``, one timer per master, starts a step's health watchdog once it outlives
``health_check_interval_s``, as the per-step timer did.
"""
import contextlib
import math

import pytest
import trio

import asyncflow as af
from instruments import installed

W0 = "/job:worker/task:0"
_ports = iter(range(7100, 7200))


class _Spawned(trio.abc.Instrument):
    def __init__(self):
        self.names = []

    def task_spawned(self, task):
        self.names.append(task.name)


def counting_tasks():
    return installed(_Spawned())


@contextlib.asynccontextmanager
async def _workers(count):
    """``(spec, servers)`` of ``count`` in-process workers (the in-process transport spawns
    nothing of its own)."""
    spec = af.ClusterSpec({"worker": [f"inprocess:{next(_ports)}" for _ in range(count)]})
    async with trio.open_nursery() as nursery:
        yield spec, [await nursery.start(af.Server(spec, "worker", i).serve)
                     for i in range(count)]
        nursery.cancel_scope.cancel()


@pytest.fixture
async def one_worker():
    async with _workers(1) as (spec, (server,)):
        yield spec, server


WATCHED = af.SessionConfig(health_check_interval_s=1.0)  # a watchdog 1 s into a step


def _blocked_graph():
    graph = af.Graph()
    with graph.as_default(), af.device(W0):
        queue = af.FIFOQueue(2, [af.float32], shapes=[[]])
        blocked = queue.dequeue()
    return graph, queue, blocked


@contextlib.asynccontextmanager
async def _blocked_session(spec, config=WATCHED):
    """``(sess, blocked)``: a session on ``spec`` whose graph a first step registered, and a
    dequeue of that graph's empty queue on W0, which blocks."""
    graph, queue, blocked = _blocked_graph()
    async with af.Session(graph=graph, cluster=spec, config=config) as sess:
        await sess.run(queue.size())
        yield sess, blocked


def _doubling_graph(blocked_on=None):
    """``(graph, p, doubled)``: ``p * 2.0`` on W0. With ``blocked_on`` (a device), also
    ``p + 1.0``, a queue and a dequeue of it (which blocks) there: ``(graph, p, doubled,
    plus, queue, blocked)``."""
    graph = af.Graph()
    with graph.as_default():
        with af.device(W0):
            p = af.placeholder(af.float32, [], name="p")
            doubled = p * 2.0
        if blocked_on is None:
            return graph, p, doubled
        with af.device(blocked_on):
            plus = p + 1.0
            queue = af.FIFOQueue(2, [af.float32], shapes=[[]])
            blocked = queue.dequeue()
    return graph, p, doubled, plus, queue, blocked


def _count_health(server, asked):
    """Append to ``asked`` the trio time of each Health that ``server`` answers."""
    health = server.service.health

    async def counted(request):
        asked.append(trio.current_time())
        return await health(request)

    server.service.health = counted


async def _gone(*_):
    """A Health (a worker's handler, or the master's of a task): the worker is gone."""
    raise af.errors.UnavailableError(None, None, "the worker is gone")


async def _broken(self, task):  # the master's Health: a bug in the watchdog's path
    raise ZeroDivisionError("not an OpError")


async def test_a_one_task_step_spawns_no_task_on_the_master(one_worker):
    spec, _ = one_worker
    graph, p, doubled = _doubling_graph()
    async with af.Session(graph=graph, cluster=spec) as sess:
        assert await sess.run(doubled, {p: 1.0}) == 2.0  # opens, registers, monitor started
        with counting_tasks() as counter:
            for value in range(5):
                assert await sess.run(doubled, {p: float(value)}) == 2.0 * value
    # Five steps, no task: before, every step spawned its RunGraph call as a task.
    assert counter.names == []


async def test_a_long_one_task_step_gets_its_watchdog(one_worker, autojump_clock):
    """A step blocked on the worker (an empty queue) past several health intervals: the
    monitor starts its watchdog after one interval, which asks Health every interval."""
    spec, server = one_worker
    asked = []
    _count_health(server, asked)
    async with _blocked_session(spec) as (sess, blocked):
        start = trio.current_time()
        with pytest.raises(af.errors.DeadlineExceededError):
            await sess.run(blocked, options=af.RunOptions(timeout_in_ms=4500))
        during = [t - start for t in asked if t > start]
        # Health at 1, 2, 3 and 4 s into the step (open's Health came before it).
        assert len(during) == 4 and during[0] == pytest.approx(1.0, abs=0.05)
        asked.clear()
        await trio.sleep(5.0)
        assert asked == []  # the step ended: so did its watchdog


async def test_the_watchdog_fails_a_one_task_step_whose_worker_is_gone(one_worker,
                                                                         autojump_clock):
    spec, server = one_worker
    async with _blocked_session(spec) as (sess, blocked):
        server.service.health = _gone
        start = trio.current_time()
        with pytest.raises(af.errors.OpError) as caught:
            await sess.run(blocked, options=af.RunOptions(timeout_in_ms=60_000))
        # The watchdog's first Health, one interval in, ended the step (not its deadline).
        assert trio.current_time() - start == pytest.approx(1.0, abs=0.5)
        assert not isinstance(caught.value, af.errors.DeadlineExceededError)


@pytest.fixture
async def two_workers():
    async with _workers(2) as workers:
        yield workers


async def test_a_two_task_step_spawns_one_task_and_gets_its_watchdog(two_workers,
                                                                      autojump_clock):
    spec, servers = two_workers
    graph, p, doubled, plus, _, blocked = _doubling_graph("/job:worker/task:1")
    asked = []
    for index, server in enumerate(servers):
        def counted(request, health=server.service.health, index=index):
            asked.append((index, trio.current_time()))
            return health(request)
        server.service.health = counted
    # Until the steps are counted, no virtual time passes (none is needed): a step waiting on
    # a thread (a fake GPU's stream callback) lets the autojump clock jump from timer to
    # timer meanwhile, past the health interval (the next step would check the stale tasks'
    # Health first, tasks of their own) and, under load, past half the graphs' lease (the
    # next step registers again: a fresh-clone run failed so). Measured with a callback
    # 50 ms late: the first step ended 135 virtual seconds in.
    autojump_clock.autojump_threshold = math.inf
    async with af.Session(graph=graph, cluster=spec, config=WATCHED) as sess:
        assert await sess.run([doubled, plus], {p: 1.0}) == [2.0, 2.0]
        with counting_tasks() as counter:
            for value in range(3):
                assert await sess.run([doubled, plus], {p: float(value)}) == [
                    2.0 * value, value + 1.0]
        autojump_clock.autojump_threshold = 0
        # One task a step: the second RunGraph's; the first goes from the caller's task.
        assert counter.names == ["asyncflow.cluster.master.StepDriver._run_one"] * 3
        asked.clear()
        start = trio.current_time()
        with pytest.raises(af.errors.DeadlineExceededError):
            await sess.run([doubled, blocked], {p: 1.0},
                           options=af.RunOptions(timeout_in_ms=2500))
        # The watchdog asked both tasks at 1 and 2 s into the step.
        assert sorted((i, round(t - start, 1)) for i, t in asked) == [
            (0, 1.0), (0, 2.0), (1, 1.0), (1, 2.0)]


async def test_a_watchdog_that_breaks_fails_its_step_not_the_monitor(one_worker, autojump_clock,
                                                                     monkeypatch):
    from asyncflow.cluster.master import Master
    spec, server = one_worker
    async with _blocked_session(spec) as (sess, blocked):
        with monkeypatch.context() as patch:
            patch.setattr(Master, "_health", _broken)
            with pytest.raises(af.errors.InternalError,
                               match="watchdog of step .*ZeroDivisionError"):
                await sess.run(blocked, options=af.RunOptions(timeout_in_ms=60_000))
        # The monitor survived: the next long step still gets its watchdog.
        asked = []
        _count_health(server, asked)
        with pytest.raises(af.errors.DeadlineExceededError):
            await sess.run(blocked, options=af.RunOptions(timeout_in_ms=2500))
        assert len(asked) == 2


async def test_a_one_task_step_without_a_timeout_calls_in_the_sessions_scope(one_worker):
    """One cancel scope a step: the session's close scope is the RunGraph's (no scope of the
    channel's); with ``timeout_in_ms`` the call keeps a scope with its own deadline."""
    spec, _ = one_worker
    graph, p, doubled = _doubling_graph()
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(doubled, {p: 1.0})
        channel = next(iter(sess._target.master.tasks.values())).channel
        calls = []
        real = channel.run_graph_step  # (the master's RunGraph: a StepCall)

        async def run_graph_step(request, **kwargs):
            calls.append(kwargs)
            return await real(request, **kwargs)

        channel.run_graph_step = run_graph_step
        assert await sess.run(doubled, {p: 2.0}) == 4.0
        assert await sess.run(doubled, {p: 3.0},
                              options=af.RunOptions(timeout_in_ms=5000)) == 6.0
    assert calls[0].get("entered") is True and "timeout" not in calls[0]
    assert "entered" not in calls[1] and calls[1]["timeout"] == pytest.approx(6.0)


async def test_closing_the_session_cancels_a_one_task_step_in_flight(one_worker,
                                                                      autojump_clock):
    """The answer a closed session's in-flight step got with two scopes (the session's and
    the call's): CancelledError naming the closed session."""
    spec, server = one_worker
    async with _blocked_session(spec, config=None) as (sess, blocked):
        failures = []
        async with trio.open_nursery() as nursery:
            async def run():
                with pytest.raises(af.errors.CancelledError, match="closed") as info:
                    await sess.run(blocked)  # no timeout: the session's scope is the call's
                failures.append(info.value)

            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            assert server.service.statistics().steps_in_flight == 1
            await sess.close()
        assert len(failures) == 1
        with pytest.raises(RuntimeError, match="closed Session"):
            await sess.run(blocked)


async def test_the_watchdog_fails_a_one_task_step_without_a_timeout(one_worker,
                                                                      autojump_clock):
    """The watchdog cancels the call it declared dead: in the session's scope, the step still
    fails with the watchdog's error, not as a closed session's."""
    spec, server = one_worker
    async with _blocked_session(spec) as (sess, blocked):
        server.service.health = _gone
        start = trio.current_time()
        with pytest.raises(af.errors.OpError, match="gone") as caught:
            await sess.run(blocked)
        assert not isinstance(caught.value, af.errors.CancelledError)
        assert trio.current_time() - start == pytest.approx(1.0, abs=0.5)
        assert not sess.closed


async def test_a_broken_watchdog_fails_a_one_task_step_without_a_timeout(one_worker,
                                                                          autojump_clock,
                                                                          monkeypatch):
    from asyncflow.cluster.master import Master
    spec, server = one_worker
    async with _blocked_session(spec) as (sess, blocked):
        monkeypatch.setattr(Master, "_health", _broken)
        with pytest.raises(af.errors.InternalError, match="watchdog of step"):
            await sess.run(blocked)


async def test_a_callers_cancel_at_once_with_the_watchdogs_is_the_callers(one_worker,
                                                                           autojump_clock):
    """The caller cancels just as the watchdog declares the worker dead (both before the
    step's task runs again): the caller's cancel wins, as with a scope of the call's own (its
    ``move_on_after`` ends the step; no UnavailableError escapes it)."""
    spec, _ = one_worker
    caller = trio.CancelScope()
    async with _blocked_session(spec) as (sess, blocked):
        master = sess._target.master

        async def gone(task):
            if cancel_too:
                caller.cancel()  # the caller gives up in the same moment
            await _gone()

        master._health = gone
        cancel_too = True
        with caller:
            await sess.run(blocked)
        assert caller.cancelled_caught and not sess.closed
        # Alone, the watchdog's cancel still fails the step with its error.
        cancel_too = False
        with pytest.raises(af.errors.UnavailableError, match="gone"):
            await sess.run(blocked)


class _Held:
    """The RunGraph calls of ``channels``, once ``armed``, held where they wait for their
    replies, blind to cancels (shielded), until ``released`` is set: the step's tasks do not
    run again between the two events a test orders, whatever order trio gives a batch."""

    def __init__(self, channels):
        self.armed = False
        self.released = trio.Event()
        for channel in channels:
            channel._exchange = self._holding(channel._exchange)

    def _holding(self, exchange):
        async def held(rpc, request):
            if self.armed and rpc.method == "run_graph":
                with trio.CancelScope(shield=True):
                    await self.released.wait()
                await trio.lowlevel.checkpoint()  # (waiting for the reply: cancels land here)
            return await exchange(rpc, request)
        return held


@pytest.mark.parametrize("first", ["close", "watchdog"])
@pytest.mark.parametrize("verdict", ["gone", "broken"])
@pytest.mark.parametrize("shape", ["one task", "one task, timeout", "two tasks",
                                   "two tasks, timeout"])
async def test_a_close_and_the_watchdogs_verdict_at_once_end_the_step_as_the_first_says(
        first, verdict, shape, autojump_clock):
    """The session closes and the watchdog declares a worker dead (``gone``) or breaks, both
    before the step's task runs again. A close that began first fails the step as a closed
    session's (CancelledError), whoever's scope the call runs in (one task without a timeout:
    the session's); a verdict that came first fails it with the watchdog's UnavailableError
    (a broken watchdog's InternalError)."""
    two = shape.startswith("two")
    async with _workers(2 if two else 1) as (spec, _):
        graph, p, doubled, _, queue, blocked = _doubling_graph(
            f"/job:worker/task:{1 if two else 0}")
        options = af.RunOptions(timeout_in_ms=60_000) if shape.endswith("timeout") else None
        failures = []
        async with af.Session(graph=graph, cluster=spec, config=WATCHED) as sess, \
                trio.open_nursery() as nursery:
            await sess.run([doubled, queue.size()], {p: 1.0})
            master = sess._target.master
            held = _Held([task.channel for task in master.tasks.values()])

            async def close_and_release():
                await sess.close()
                held.released.set()

            async def gone(task):  # the watchdog's Health of the step's first task
                if first == "close":
                    await close_and_release()  # the close began (and ended) first
                else:  # the close begins right after the verdict
                    nursery.start_soon(close_and_release)
                if verdict == "broken":
                    await _broken(master, task)
                await _gone()

            master._health = gone

            async def step():
                with pytest.raises(af.errors.OpError) as caught:
                    await sess.run([doubled, blocked], {p: 2.0}, options=options)
                failures.append(caught.value)

            held.armed = True
            nursery.start_soon(step)
        assert len(failures) == 1 and sess.closed
        if first == "close":
            assert isinstance(failures[0], af.errors.CancelledError), failures[0]
            assert "session was closed" in failures[0].message
        elif verdict == "gone":
            assert isinstance(failures[0], af.errors.UnavailableError), failures[0]
            assert "gone" in failures[0].message
        else:
            assert isinstance(failures[0], af.errors.InternalError), failures[0]
            assert "watchdog of step" in failures[0].message


@pytest.mark.parametrize("first", ["close", "failure"])
@pytest.mark.parametrize("timeout", [None, 60_000], ids=["no timeout", "timeout"])
async def test_a_close_and_an_ops_error_in_a_multi_task_step_end_it_as_the_first_says(
        first, timeout, monkeypatch, autojump_clock):
    """Any failure, not only the watchdog's: an op's error on one task of a two-task step
    recorded while the other task's call still waits, and the session closed, both before the
    step's task runs again. The first decides, as TF1's first status does: an error that
    came first is the step's (it got the closed session's CancelledError), a close that began
    first fails it as a closed session's."""
    from asyncflow.cluster.master import StepDriver
    async with _workers(2) as (spec, _):
        graph = af.Graph()
        with graph.as_default():
            with af.device(W0):
                p = af.placeholder(af.float32, [], name="p")
                checked = af.check_numerics(p * 2.0, "not finite")
            with af.device("/job:worker/task:1"):
                queue = af.FIFOQueue(2, [af.float32], shapes=[[]])
                blocked = queue.dequeue()
        failures = []
        async with af.Session(graph=graph, cluster=spec, config=WATCHED) as sess, \
                trio.open_nursery() as nursery:
            await sess.run([checked, queue.size()], {p: 1.0})
            held = _Held([sess._target.master.tasks["/job:worker/replica:0/task:1"].channel])

            async def close_and_release():
                await sess.close()
                held.released.set()

            recorded = StepDriver._failed

            async def failed(self, error, dead_task=None):  # W0's error, as it is recorded
                if first == "close":
                    await close_and_release()  # the close began (and ended) first
                await recorded(self, error, dead_task)
                if first == "failure":  # the close begins right after
                    nursery.start_soon(close_and_release)

            monkeypatch.setattr(StepDriver, "_failed", failed)

            async def step():
                with pytest.raises(af.errors.OpError) as caught:
                    await sess.run([checked, blocked], {p: float("nan")},
                                   options=af.RunOptions(timeout_in_ms=timeout or 0))
                failures.append(caught.value)

            held.armed = True
            nursery.start_soon(step)
        assert len(failures) == 1 and sess.closed
        if first == "close":
            assert isinstance(failures[0], af.errors.CancelledError), failures[0]
            assert "session was closed" in failures[0].message
        else:
            assert isinstance(failures[0], af.errors.InvalidArgumentError), failures[0]
            assert "not finite" in failures[0].message
