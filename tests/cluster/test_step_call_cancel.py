"""The usual cluster step (ready: nothing to refresh or register; no timeout) waits for its
RunGraphs with no trio cancel scope of the session's: a ``CallCancel`` stands in the
session's run scopes (split one a RunGraph for a step on several tasks, the PS step), and a
close ends the step as it ended the scoped one (the closed session's CancelledError, the
workers' steps cancelled, the session's channels closed); so do the watchdog's verdict, a
task's failure and the caller's own cancel, as they did with a scope a call. A step that is
not ready, or has a timeout, keeps the scope. Over both transports (``cluster``)."""
import pytest
import trio

import asyncflow as af
from asyncflow.cluster.channels import only_cancelled
from transports.service import CallCancel

W0 = "/job:worker/task:0"
GENEROUS = 20


def _graph():
    with af.Graph().as_default() as graph:
        with af.device(W0):
            queue = af.FIFOQueue(4, [af.float32], shapes=[[]], name="q")
            put = queue.enqueue([af.constant(1.0)])
            taken = queue.dequeue()
    return graph, put, taken


def _running(server):
    return sum(state.running for state in server.service._steps.values())


async def _scopes_while_waiting(sess, server, fetch, options=None):
    """The session's run scopes while a step of ``fetch`` waits on the worker, and what the
    step raised once the session was closed under it."""
    outcome = []

    async def step():
        with pytest.raises(af.errors.CancelledError, match="session was closed") as caught:
            await sess.run(fetch, options=options)
        outcome.append(caught.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(step)
        while not _running(server):
            await trio.sleep(0.001)  # (bounded by the caller's fail_after)
        scopes = list(sess._run_scopes)
        await sess.close()
    assert len(outcome) == 1
    while _running(server):  # its step cancelled there
        await trio.sleep(0.001)
    return scopes


@pytest.mark.parametrize("options", [None, af.RunOptions(timeout_in_ms=60_000)],
                         ids=["no timeout", "timeout"])
async def test_a_close_ends_a_ready_step_without_a_scope(cluster, options):
    spec, servers = cluster
    graph, put, taken = _graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(put)
            assert await sess.run(taken, options=options) == 1.0  # registered: ready
            run = sess._target.cache[((), (taken,), ())]
            assert sess._target.master.ready(run)
            scopes = await _scopes_while_waiting(sess, servers["worker:0"], taken, options)
    (scope,) = scopes
    assert type(scope) is (CallCancel if options is None else trio.CancelScope)
    assert scope.cancel_called and sess.closed


async def test_a_first_step_keeps_the_scope(cluster):
    spec, servers = cluster
    graph, _, taken = _graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=spec) as sess:
            scopes = await _scopes_while_waiting(sess, servers["worker:0"], taken)
    (scope,) = scopes
    assert type(scope) is trio.CancelScope and scope.cancel_called


async def test_a_close_while_a_failed_call_is_reported_ends_the_step_at_once(cluster,
                                                                             monkeypatch):
    # A ready step's RunGraph failed (the worker lost its graph: NOT_FOUND) and the master asks
    # the worker's Health before it reports (a restart?): a close meanwhile ends that wait and
    # the step with the closed session's CancelledError, as the session's trio scope did.
    spec, servers = cluster
    graph, put, taken = _graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(put)
            assert await sess.run(taken) == 1.0  # registered: ready
            master, asking = sess._target.master, trio.Event()

            async def health(task):  # (an answer that takes long)
                asking.set()
                await trio.sleep_forever()

            monkeypatch.setattr(master, "_health", health)
            servers["worker:0"].service._graphs.clear()  # the worker lost the graph
            assert master.ready(sess._target.cache[((), (taken,), ())])
            outcome = []

            async def step():
                with pytest.raises(af.errors.CancelledError, match="session was closed"):
                    await sess.run(taken)
                outcome.append("closed")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(step)
                await asking.wait()
                scopes = list(sess._run_scopes)
                await sess.close()
            assert outcome == ["closed"]
    assert [type(scope) for scope in scopes] == [CallCancel]


W1 = "/job:worker/task:1"


def _two_task_graph():
    """A dequeue on worker 0 read on worker 1: a step on two tasks that waits on both."""
    with af.Graph().as_default() as graph:
        with af.device(W0):
            queue = af.FIFOQueue(4, [af.float32], shapes=[[]], name="q")
            put = queue.enqueue([af.constant(1.0)])
            taken = queue.dequeue()
        with af.device(W1):
            plus = taken + 1.0
    return graph, put, plus


async def _one_step(sess, put, plus):
    """One two-task step: a value put on worker 0's queue, taken and read on worker 1."""
    await sess.run(put)
    assert await sess.run(plus) == 2.0


async def test_a_close_ends_a_ready_two_task_step_without_a_scope(cluster):
    # The session's run scope is one CallCancel, split one a RunGraph: the close ends both
    # calls, the step raises the closed session's CancelledError, both workers' steps end.
    spec, servers = cluster
    graph, put, plus = _two_task_graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=spec) as sess:
            await _one_step(sess, put, plus)  # registered: ready
            run = sess._target.cache[((), (plus,), ())]
            assert len(run.task_graphs) == 2 and sess._target.master.ready(run)
            scopes = await _scopes_while_waiting(sess, servers["worker:0"], plus)
        while _running(servers["worker:1"]):
            await trio.sleep(0.001)
    (scope,) = scopes
    assert type(scope) is CallCancel and scope.cancel_called and sess.closed


@pytest.mark.parametrize("cluster", ["http"], indirect=True)
async def test_a_ready_two_task_step_enters_only_its_nursery_scope(cluster, monkeypatch):
    # The client's own scopes in a ready two-task step (the caller's task and the one task
    # its driver spawns): none of the session's, none a call's; the driver's nursery's own
    # is trio's (not ``trio.CancelScope``). The first step (registering) enters some. Over
    # the bare same-host protocol: the in-process channel enters a scope a call.
    spec, _ = cluster
    graph, put, plus = _two_task_graph()
    made, real = [], trio.CancelScope
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=spec) as sess:
            mine = {trio.lowlevel.current_task()}

            def counting(*args, **kwargs):
                task = trio.lowlevel.current_task()
                if task in mine or task.name.endswith("StepDriver._run_one"):
                    made.append(task.name)
                return real(*args, **kwargs)

            monkeypatch.setattr(trio, "CancelScope", counting)
            await _one_step(sess, put, plus)
            assert made  # (the counting counts: the first steps' scopes)
            for _ in range(3):
                made.clear()
                await _one_step(sess, put, plus)
                assert made == []


def _failing_graph():
    """``_two_task_graph``'s, with a reshape on worker 1 that fails for a feed of 2 values."""
    graph, put, plus = _two_task_graph()
    with graph.as_default(), af.device(W1):
        x = af.placeholder(af.float32, [None], name="x")
        bad = af.reshape(x, [3])
    return graph, put, x, [plus, bad]


async def test_a_ready_two_task_step_that_fails_aborts_the_other_task(cluster):
    # Worker 1's share fails (an op's error) while worker 0's waits on an empty queue: the
    # step raises that error, its abort ends worker 0's wait, neither worker runs it after.
    spec, servers = cluster
    graph, put, x, fetches = _failing_graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(put)
            assert (await sess.run(fetches, {x: [1.0, 2.0, 3.0]}))[0] == 2.0
            assert sess._target.master.ready(sess._target.cache[((x,), tuple(fetches), ())])
            with pytest.raises(af.errors.InvalidArgumentError, match="x|Reshape"):
                await sess.run(fetches, {x: [1.0, 2.0]})
            for name in ("worker:0", "worker:1"):
                assert not _running(servers[name])
            await sess.run(put)  # the session goes on
            assert (await sess.run(fetches, {x: [1.0, 2.0, 3.0]}))[0] == 2.0


async def test_a_failed_ready_two_task_step_ends_a_call_its_abort_did_not(cluster,
                                                                        autojump_clock):
    # Worker 0 ignores the AbortStep: its call still waits once the abort is sent; the
    # driver ends it after the grace (``2 * ABORT_GRACE_S + 1`` s, a nursery's deadline
    # before) and the step raises worker 1's error.
    from asyncflow.cluster.master import ABORT_GRACE_S
    spec, servers = cluster
    graph, put, x, fetches = _failing_graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(put)
            assert (await sess.run(fetches, {x: [1.0, 2.0, 3.0]}))[0] == 2.0
            service = servers["worker:0"].service
            ignored = []

            async def ignore(request):
                ignored.append(request.step_id)

            service.abort_step = ignore
            start = trio.current_time()
            with pytest.raises(af.errors.InvalidArgumentError, match="x|Reshape"):
                await sess.run(fetches, {x: [1.0, 2.0]})
            assert len(ignored) == 1
            assert trio.current_time() - start == pytest.approx(2 * ABORT_GRACE_S + 1, abs=0.5)


def _idle_sane(sess):
    """Every pooled same-host connection of the session's channels is open (a call a cancel
    ended closed its own: never pooled again)."""
    for task in sess._target.master.tasks.values():
        for conn in getattr(task.channel, "_bare_idle", ()):
            assert conn.stream.socket.fileno() >= 0, task.name


async def _blocked_two_task_step(sess, servers, plus, fault):
    """Run a ready two-task step that waits (worker 0's empty queue); ``fault()`` once it
    waits there; returns what the step raised (None: nothing)."""
    outcome = []

    async def step():
        try:
            await sess.run(plus)
        except BaseException as exc:  # noqa: BLE001 - the caller asserts on it
            outcome.append(exc)
            if not isinstance(exc, (af.errors.OpError, trio.Cancelled, BaseExceptionGroup)):
                raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(step)
        while not _running(servers["worker:0"]):
            await trio.sleep(0.001)  # (bounded by the caller's fail_after)
        await fault(nursery)
    for name in ("worker:0", "worker:1"):  # both shares ended there (aborted, or cancelled)
        while _running(servers[name]):
            await trio.sleep(0.001)
    return outcome[0] if outcome else None


async def test_the_watchdog_declaring_a_task_dead_ends_a_ready_two_task_step(
        cluster, monkeypatch, autojump_clock):
    # Its verdict cancels worker 0's split CallCancel alone: the step raises the watchdog's
    # UnavailableError (not the closed session's CancelledError) before the failure's grace
    # would have ended that call, worker 1's share is aborted, no closed connection stays
    # pooled, and the session goes on.
    from asyncflow.cluster.master import ABORT_GRACE_S
    spec, servers = cluster
    graph, put, plus = _two_task_graph()
    config = af.SessionConfig(health_check_interval_s=0.5)
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=spec, config=config) as sess:
            master = sess._target.master
            real = master._health

            verdict = []

            async def fault(_):
                async def health(task):  # worker 0 stops answering its Health
                    if task.name.endswith("/job:worker/replica:0/task:0"):
                        verdict.append(trio.current_time())
                        raise af.errors.UnavailableError(None, None, f"{task.name} is dead")
                    return await real(task)

                monkeypatch.setattr(master, "_health", health)

            await _one_step(sess, put, plus)
            assert master.ready(sess._target.cache[((), (plus,), ())])
            error = await _blocked_two_task_step(sess, servers, plus, fault)
            assert isinstance(error, af.errors.UnavailableError), repr(error)
            assert "task:0 is dead" in error.message and not sess.closed
            # (the autojump clock's time: the grace's deadline would end it at its full length)
            assert trio.current_time() - verdict[0] < 2 * ABORT_GRACE_S + 1
            _idle_sane(sess)
            monkeypatch.setattr(master, "_health", real)
            await _one_step(sess, put, plus)
            await _one_step(sess, put, plus)  # ready again: the split path
            _idle_sane(sess)


async def test_a_caller_cancelling_a_ready_two_task_step_ends_both_calls(cluster):
    # The caller's own scope cancelled while both RunGraphs wait (no scope of theirs): each
    # call ends (its connection closed, not pooled), the step is aborted on both workers,
    # and the session's next steps go through.
    spec, servers = cluster
    graph, put, plus = _two_task_graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=spec) as sess:
            await _one_step(sess, put, plus)
            assert sess._target.master.ready(sess._target.cache[((), (plus,), ())])

            async def fault(nursery):
                nursery.cancel_scope.cancel()

            error = await _blocked_two_task_step(sess, servers, plus, fault)
            assert only_cancelled(error), repr(error)  # (its nursery's group of them)
            assert not sess.closed
            _idle_sane(sess)
            for _ in range(2):
                await _one_step(sess, put, plus)
            _idle_sane(sess)
