"""A one-task step's direct path (``cluster/direct_step.py``): taken by the usual step of a
run of one task graph (counted by ``DirectStep.steps``), not by a two-task step, a step with
a timeout, a traced step or a step that registers first; and where it is taken, every end of
the step is the driver's: an op's error named on its op, the caller's cancel sending
AbortStep, a killed or hung worker as UnavailableError, a reply after the watchdog started.

Real ``asyncflow worker`` processes on loopback (``process_cluster``, ``killable_workers``),
where the client's channel takes the same-host bare call and reads the reply's values by
its frame template; the counting tests also over the in-process transport (``cluster``).
"""
from __future__ import annotations

import signal

import numpy as np
import pytest
import trio

import asyncflow as af
from killable_workers import WorkerProcess, free_ports, health

W0, W1 = "/job:worker/task:0", "/job:worker/task:1"
T0 = "/job:worker/replica:0/task:0"
GENEROUS = 60  # bounds a hang only: every step below ends on its own well before
CONFIG = af.SessionConfig(health_check_interval_s=60.0)


def _graph(second=W0):
    graph = af.Graph()
    with graph.as_default():
        with af.device(W0):
            p = af.placeholder(af.float32, [], name="p")
            doubled = p * 2.0
            checked = af.check_numerics(doubled, "not finite")
            queue = af.FIFOQueue(4, [af.float32], shapes=[[]], name="q")
            blocked = queue.dequeue()
            put = queue.enqueue([p])
        with af.device(second):
            plus = p + 1.0
    return graph, p, doubled, plus, checked, blocked, put


def _run_of(sess, *fetches):
    """The compiled run the session holds whose fetches are ``fetches`` (tensors)."""
    names = [t.name for t in fetches]
    for (_, fetched, _), run in sess._target.cache.items():
        if [t.name for t in fetched] == names:
            return run
    raise AssertionError(f"no compiled run fetching {names}")


def _counted_driver(monkeypatch):
    """The step ids the master's driver ran (``run_step``), in order."""
    from asyncflow.cluster.master import Master
    driven = []
    real = Master.run_step

    async def run_step(self, graph, run, *args, **kwargs):
        driven.append(run)
        return await real(self, graph, run, *args, **kwargs)

    monkeypatch.setattr(Master, "run_step", run_step)
    return driven


async def test_a_one_task_steps_go_direct_and_return_each_fetch(cluster, monkeypatch):
    spec, _ = cluster
    graph, p, doubled, plus, *_ = _graph()
    driven = _counted_driver(monkeypatch)
    async with af.Session(graph=graph, cluster=spec, config=CONFIG) as sess:
        assert await sess.run([plus, doubled], {p: 1.0}) == [2.0, 2.0]  # registers: driven
        run = _run_of(sess, plus, doubled)
        assert run.direct is not None and run.direct.steps == 0 and len(driven) == 1
        for value in range(5):
            got = await sess.run([plus, doubled, plus], {p: float(value)})
            assert got == [value + 1.0, 2.0 * value, value + 1.0]
            assert all(type(v) is np.float32 for v in got)
        assert run.direct.steps == 5 and len(driven) == 1
        arrays = await sess.run({"d": doubled}, {p: np.float32(3.0)})
        assert arrays == {"d": 6.0}


async def test_a_two_task_step_a_timeout_or_a_trace_takes_the_driver(cluster, monkeypatch):
    spec, _ = cluster
    graph, p, doubled, plus, *_ = _graph(second=W1)
    driven = _counted_driver(monkeypatch)
    async with af.Session(graph=graph, cluster=spec, config=CONFIG) as sess:
        for _ in range(3):
            assert await sess.run([doubled, plus], {p: 1.0}) == [2.0, 2.0]
        assert _run_of(sess, doubled, plus).direct is None and len(driven) == 3
        assert await sess.run(doubled, {p: 2.0}) == 4.0  # registers
        run = _run_of(sess, doubled)
        assert await sess.run(doubled, {p: 2.0}) == 4.0
        assert run.direct.steps == 1 and len(driven) == 4
        options = af.RunOptions(timeout_in_ms=5000)
        assert await sess.run(doubled, {p: 3.0}, options=options) == 6.0
        metadata = af.RunMetadata()
        traced = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE)
        assert await sess.run(doubled, {p: 4.0}, options=traced, run_metadata=metadata) == 8.0
        assert metadata.step_stats and run.direct.steps == 1 and len(driven) == 6
        assert await sess.run(doubled, {p: 5.0}) == 10.0
        assert run.direct.steps == 2 and len(driven) == 6


async def test_a_ctrl_c_in_a_direct_steps_call_aborts_it_as_the_driver_does(cluster):
    """A KeyboardInterrupt where the call waits is raised from ``run`` after AbortStep went
    out (the driver's shielded abort); the session goes on."""
    spec, _ = cluster
    graph, p, doubled, *_ = _graph()
    async with af.Session(graph=graph, cluster=spec, config=CONFIG) as sess:
        assert await sess.run(doubled, {p: 1.0}) == 2.0
        run = _run_of(sess, doubled)
        channel = sess._target.master.tasks[T0].channel
        aborts, real_abort = [], channel.abort_step

        async def abort_step(request, **kwargs):
            aborts.append(request.code)
            return await real_abort(request, **kwargs)

        async def interrupted(request, **kwargs):
            await trio.lowlevel.checkpoint()
            raise KeyboardInterrupt

        channel.abort_step, channel.run_graph_step = abort_step, interrupted
        with pytest.raises(KeyboardInterrupt):
            await sess.run(doubled, {p: 2.0})
        assert run.direct.steps == 1 and aborts == ["CANCELLED"]
        del channel.run_graph_step
        assert await sess.run(doubled, {p: 3.0}) == 6.0 and run.direct.steps == 2


async def test_a_ctrl_c_as_a_direct_steps_call_fails_leaves_no_step_watched(cluster,
                                                                           monkeypatch):
    """A KeyboardInterrupt landing where the call's failure is being kept (a signal is raised
    between any two lines): the step is no longer noted with the master's monitor, which
    would otherwise start a watchdog for it that asks the task's Health for ever."""
    from asyncflow.cluster import direct_step
    from transports.service import TransportUnavailable
    spec, _ = cluster
    graph, p, doubled, *_ = _graph()
    async with af.Session(graph=graph, cluster=spec, config=CONFIG) as sess:
        assert await sess.run(doubled, {p: 1.0}) == 2.0
        run, master = _run_of(sess, doubled), sess._target.master
        channel = master.tasks[T0].channel

        async def lost(request, **kwargs):
            await trio.lowlevel.checkpoint()
            raise TransportUnavailable("connection lost")

        class _Interrupted:
            @staticmethod
            def Error(exc):  # noqa: N802 - outcome.Error's name
                raise KeyboardInterrupt

        channel.run_graph_step = lost
        monkeypatch.setattr(direct_step, "outcome", _Interrupted)
        with pytest.raises(KeyboardInterrupt):
            await sess.run(doubled, {p: 2.0})
        assert run.direct.steps == 1 and not master.monitor._steps
        monkeypatch.undo()
        del channel.run_graph_step
        assert await sess.run(doubled, {p: 3.0}) == 6.0 and run.direct.steps == 2


@pytest.fixture
def worker():
    port = free_ports(1)[0]
    proc = WorkerProcess({"worker": [f"127.0.0.1:{port}"]}, "worker", 0)
    try:
        proc.start()
        yield proc
    finally:
        proc.kill()


async def test_a_direct_steps_reply_is_read_into_its_values_on_the_same_host(worker,
                                                                              monkeypatch):
    from transports.http import client
    read, real = [], client.tensor_values

    def tensor_values(data, limits, cls):
        read.append(real(data, limits, cls))
        return read[-1]

    monkeypatch.setattr(client, "tensor_values", tensor_values)
    graph, p, doubled, plus, *_ = _graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=worker.cluster, config=CONFIG) as sess:
            for value in range(6):
                _fresh(sess)
                assert await sess.run([doubled, plus], {p: float(value)}) == [
                    2.0 * value, value + 1.0]
            assert _run_of(sess, doubled, plus).direct.steps == 5
            assert len(read) == 5 and all(got is not None for got in read[2:])


async def test_an_ops_error_on_a_direct_step_is_named_as_the_drivers(worker):
    graph, p, doubled, _, checked, *_ = _graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=worker.cluster, config=CONFIG) as sess:
            assert await sess.run(checked, {p: 1.0}) == 2.0
            run = _run_of(sess, checked)
            with pytest.raises(af.errors.InvalidArgumentError, match="not finite") as caught:
                await sess.run(checked, {p: float("inf")})
            assert caught.value.op is graph.get_operation_by_name(checked.op.name)
            assert caught.value.__context__ is None  # (raised as the driver raises it)
            timed = af.RunOptions(timeout_in_ms=5000)  # the driver's own, for comparison
            with pytest.raises(af.errors.InvalidArgumentError, match="not finite") as driven:
                await sess.run(checked, {p: float("inf")}, options=timed)
            assert driven.value.message == caught.value.message and driven.value.op is \
                caught.value.op and driven.value.__context__ is None
            assert await sess.run(checked, {p: 2.0}) == 4.0
            assert run.direct.steps == 2


async def test_a_callers_cancel_of_a_direct_step_aborts_it_on_the_worker(worker):
    """A ``move_on_after`` around a direct step waiting on the worker (the run's deadline
    from outside): the step is cancelled there too (AbortStep sent, no step left in flight),
    and the session goes on."""
    graph, p, doubled, _, _, blocked, put = _graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=worker.cluster, config=CONFIG) as sess:
            await sess.run(put, {p: 7.0})
            assert await sess.run(blocked) == 7.0  # (registered: the next goes direct)
            run = _run_of(sess, blocked)
            channel = sess._target.master.tasks[T0].channel
            aborts = []
            real = channel.abort_step

            async def abort_step(request, **kwargs):
                aborts.append(request)
                return await real(request, **kwargs)

            channel.abort_step = abort_step
            _fresh(sess)
            with trio.move_on_after(0.5) as waited:
                await sess.run(blocked)
            assert waited.cancelled_caught and run.direct.steps == 1
            assert [a.code for a in aborts] == ["CANCELLED"]
            while (await health(worker.address)).stats.steps_in_flight:
                await trio.sleep(0.02)  # (bounded by fail_after) the abort ends it there
            _fresh(sess)
            await sess.run(put, {p: 8.0})
            _fresh(sess)
            assert await sess.run(blocked) == 8.0 and run.direct.steps == 2


def _fresh(sess):
    """The task heard from just now: the next step is ready (no Health first; see
    ``tests/cluster/test_step_ready.py``) however slow the machine is today."""
    sess._target.master.tasks[T0].last_ok = trio.current_time()


async def test_a_direct_step_whose_worker_is_hung_or_killed_fails_unavailable(worker):
    """Hung (SIGSTOP): the watchdog, started for the direct step once it outlived the health
    interval, declares the worker dead; killed mid-step: the lost connection."""
    graph, p, doubled, _, _, blocked, put = _graph()
    config = af.SessionConfig(health_check_interval_s=0.5, worker_dead_after_s=2.0)
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=worker.cluster, config=config) as sess:
            assert await sess.run(doubled, {p: 1.0}) == 2.0
            for fault in ("hang", "kill"):
                await sess.run(put, {p: 1.0})
                assert await sess.run(blocked) == 1.0  # (registered: the next goes direct)
                run = _run_of(sess, blocked)
                before, outcome = run.direct.steps, {}
                async with trio.open_nursery() as nursery:
                    async def blocked_step():
                        try:
                            await sess.run(blocked)
                        except af.errors.OpError as exc:
                            outcome["error"] = exc

                    _fresh(sess)
                    nursery.start_soon(blocked_step)
                    await _step_in_flight(worker)
                    if fault == "hang":
                        worker.proc.send_signal(signal.SIGSTOP)
                    else:
                        worker.kill()
                error = outcome["error"]
                assert isinstance(error, af.errors.UnavailableError), repr(error)
                assert "task:0" in error.message and not sess.closed
                assert run.direct.steps == before + 1
                if fault == "hang":
                    worker.proc.send_signal(signal.SIGCONT)
                    while (await health(worker.address)).stats.steps_in_flight:
                        await trio.sleep(0.02)  # (bounded) the cut connection ends it there
            with pytest.raises(af.errors.UnavailableError, match="task:0"):
                await sess.run(doubled, {p: 2.0})


async def test_a_direct_step_answered_after_its_watchdog_started_returns_its_value(worker):
    """The watchdog's driver takes the reply (it may have a verdict of its own): none here,
    so the step returns what the worker fetched."""
    graph, p, _, _, _, blocked, put = _graph()
    config = af.SessionConfig(health_check_interval_s=0.3, worker_dead_after_s=5.0)
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=worker.cluster, config=config) as sess:
            for value in range(3):  # (its reply's frame template kept: read into values)
                await sess.run(put, {p: float(value)})
                assert await sess.run(blocked) == value
            run, master = _run_of(sess, blocked), sess._target.master
            before, asked, got = run.direct.steps, [], []
            real = master._health

            async def counted(task):
                asked.append(task.name)
                return await real(task)

            master._health = counted
            async with trio.open_nursery() as nursery:
                async def blocked_step():
                    got.append(await sess.run(blocked))

                _fresh(sess)
                nursery.start_soon(blocked_step)
                while not asked:  # (bounded by fail_after) only the watchdog asks Health
                    await trio.sleep(0.02)
                assert run.direct.steps == before + 1
                await sess.run(put, {p: 5.0})
            assert got == [5.0] and asked[0] == T0


async def _step_in_flight(worker):
    while (await health(worker.address)).stats.steps_in_flight == 0:
        await trio.sleep(0.02)  # (bounded by the caller's fail_after) the step waits there


async def _in_flight_on_a_call_of_its_own(nursery, worker, call, request, sent):
    """``request`` (the step's RunGraph) sent on a call of the test's, in ``nursery``
    (``call``: the channel's real one), and waited for until the worker runs the step: the
    client's own call may then fail while the worker still holds the step. What the test's
    call ends with (the abort's ABORTED) goes to ``sent``."""
    async def sent_on_its_own():
        try:
            await call(request, timeout=GENEROUS)
        except Exception as exc:  # noqa: BLE001 - the abort's answer
            sent.append(exc)
    nursery.start_soon(sent_on_its_own)
    await _step_in_flight(worker)


async def test_a_ctrl_c_in_a_direct_steps_hand_over_still_aborts_it_on_the_worker(worker,
                                                                                  monkeypatch):
    """A KeyboardInterrupt landing anywhere between the direct call's failure and the
    driver's ``run`` (keeping the failure, the unwatch, the hand-over, the driver's own
    watch): raised from ``run`` after AbortStep went out, once, and the worker holds no step.
    The call fails on the client while the worker still runs the step (its RunGraph sent on
    a call of the test's, which the abort then ends)."""
    from asyncflow.cluster import direct_step
    from transports.service import TransportUnavailable
    graph, p, _, _, _, blocked, put = _graph()
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=worker.cluster, config=CONFIG) as sess:
            await sess.run(put, {p: 1.0})
            assert await sess.run(blocked) == 1.0  # (registered: the next goes direct)
            run, master = _run_of(sess, blocked), sess._target.master
            channel, monitor = master.tasks[T0].channel, master.monitor
            real_call, real_abort = channel.run_graph_step, channel.abort_step
            real_watch, real_unwatch = monitor.watch, monitor.unwatch

            def once(*_):
                monkeypatch.undo()
                raise KeyboardInterrupt

            class _Interrupted:
                Error = staticmethod(once)

            async def interrupted_driven(self, reply):
                once()

            points = {  # each undone as it raises (``once``)
                "keeping": lambda: monkeypatch.setattr(direct_step, "outcome", _Interrupted),
                "unwatching": lambda: monkeypatch.setattr(monitor, "unwatch", lambda step: (
                    once() if type(step) is direct_step._Call else real_unwatch(step))),
                "handing over": lambda: monkeypatch.setattr(direct_step._Call, "driven",
                                                            interrupted_driven),
                "driving": lambda: monkeypatch.setattr(monitor, "watch", lambda step: (
                    once() if type(step) is direct_step._Ended else real_watch(step))),
            }
            for point, inject in points.items():
                aborts, sent = [], []

                async def abort_step(request, **kwargs):
                    aborts.append(request.code)
                    return await real_abort(request, **kwargs)

                async with trio.open_nursery() as nursery:
                    async def lost(request, **kwargs):
                        await _in_flight_on_a_call_of_its_own(nursery, worker, real_call,
                                                              request, sent)
                        inject()
                        raise TransportUnavailable("connection lost")

                    channel.abort_step, channel.run_graph_step = abort_step, lost
                    _fresh(sess)
                    with pytest.raises(KeyboardInterrupt):
                        await sess.run(blocked)
                    assert aborts == ["CANCELLED"], point
                    assert master.monitor._steps == {}, point
                del channel.run_graph_step, channel.abort_step
                assert [getattr(e, "code", e) for e in sent] == ["ABORTED"], (point, sent)
                assert (await health(worker.address)).stats.steps_in_flight == 0, point
            assert run.direct.steps == len(points)
            _fresh(sess)
            await sess.run(put, {p: 2.0})
            _fresh(sess)
            assert await sess.run(blocked) == 2.0 and run.direct.steps == 1 + len(points)


@pytest.mark.parametrize("first", ["in the call", "in the hand-over"])
def test_a_second_ctrl_c_as_a_direct_steps_abort_waits_raises_the_interrupt_alone(worker,
                                                                                   first):
    """Ctrl-C twice: the first where the step's call waits (the driver's AbortStep) or in its
    hand-over (``_Call.settle``'s), the second while that AbortStep's nursery waits (trio
    delivers a Ctrl-C to the main task there, shield or not): ``run`` raises the second
    KeyboardInterrupt itself, as ``except KeyboardInterrupt`` expects, not inside the
    nursery's group; the step is aborted on the worker and the session goes on. Real
    signals in a ``trio.run`` of the test's own, whose main task runs the step."""
    from asyncflow.cluster import direct_step
    from transports.service import TransportUnavailable

    def ctrl_c_soon():  # as a Ctrl-C while trio waits (its run loop: KI-protected, deferred)
        trio.lowlevel.current_trio_token().run_sync_soon(signal.raise_signal, signal.SIGINT)

    async def main():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # (trio's)
        graph, p, _, _, _, blocked, put = _graph()
        async with af.Session(graph=graph, cluster=worker.cluster, config=CONFIG) as sess:
            await sess.run(put, {p: 1.0})
            assert await sess.run(blocked) == 1.0  # (registered: the next goes direct)
            run, master = _run_of(sess, blocked), sess._target.master
            channel = master.tasks[T0].channel
            real_call, real_abort = channel.run_graph_step, channel.abort_step
            interrupts, aborts, cut, sent = [], [], [], []

            def ctrl_c_now():  # in ``_step``'s frames (not KI-protected): raised at once
                try:
                    signal.raise_signal(signal.SIGINT)
                except KeyboardInterrupt as exc:
                    interrupts.append(exc)
                    raise

            async def abort_step(request, **kwargs):
                aborts.append(request.code)
                await real_abort(request, **kwargs)  # (answered: the worker's step is over)
                ctrl_c_soon()
                try:
                    await trio.sleep_forever()  # until the second Ctrl-C ends the wait
                except trio.Cancelled:
                    cut.append(request.code)
                    raise

            class _Interrupted:
                @staticmethod
                def Error(exc):  # noqa: N802 - outcome.Error's name
                    direct_step.outcome = outcome
                    ctrl_c_now()

            async with trio.open_nursery() as nursery:
                async def waits(request, **kwargs):
                    await _in_flight_on_a_call_of_its_own(nursery, worker, real_call, request,
                                                          sent)
                    if first == "in the hand-over":
                        direct_step.outcome = _Interrupted
                        raise TransportUnavailable("connection lost")
                    ctrl_c_soon()
                    try:
                        await trio.sleep_forever()
                    except KeyboardInterrupt as exc:
                        interrupts.append(exc)
                        raise

                outcome = direct_step.outcome
                channel.abort_step, channel.run_graph_step = abort_step, waits
                _fresh(sess)
                with pytest.raises(KeyboardInterrupt) as caught:
                    await sess.run(blocked)
            assert len(interrupts) == 1 and caught.value is not interrupts[0]  # the second
            assert aborts == cut == ["CANCELLED"] and master.monitor._steps == {}
            assert [getattr(e, "code", e) for e in sent] == ["ABORTED"]
            del channel.run_graph_step, channel.abort_step
            _fresh(sess)
            await sess.run(put, {p: 2.0})
            _fresh(sess)
            assert await sess.run(blocked) == 2.0 and run.direct.steps == 2

    async def bounded():
        with trio.fail_after(GENEROUS):
            await main()

    trio.run(bounded)
