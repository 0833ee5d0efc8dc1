"""A session's close: a closed session refuses every use the same way, and a close that a
cancel or a KeyboardInterrupt meets still leaves nothing of the session open.

1. Re-entering a closed session (``async with sess:``), a run, and a run prepared before the
   close all raise TF1's ``RuntimeError: Attempted to use a closed Session`` naming the
   session's handle, on an in-process and an HTTP cluster (not an UnavailableError about the
   channels the close closed).
2. A KeyboardInterrupt raised in the close (here by the deregistration of a graph, a hook
   monkeypatched to raise it) or a cancelled close still closes every channel (the workers'
   servers see none of the session's connections left), ends the step monitor's task and the
   step watchdogs it started, and a dead peer (a deregistration that never answers) is waited
   for only a bounded time.
3. A second close waits for the first, from the same trio run or from another thread's.
"""
import os
import signal
import threading

import pytest
import trio
import trio.testing

import asyncflow as af
from asyncflow.cluster import channels
from killable_workers import WorkerProcess

WATCHED = af.SessionConfig(health_check_interval_s=1.0)


def _graph(spec):
    """``(graph, doubled, blocked)`` on the first worker: ``2.0 * 3.0`` and a dequeue of an
    empty queue (it blocks)."""
    graph = af.Graph()
    with graph.as_default(), af.device("/job:worker/task:0"):
        doubled = af.constant(2.0) * 3.0
        blocked = af.FIFOQueue(2, [af.float32], shapes=[[]]).dequeue()
    return graph, doubled, blocked


async def test_a_closed_cluster_session_refuses_every_use_naming_itself(cluster):
    spec, _ = cluster
    graph, doubled, _ = _graph(spec)
    sess = af.Session(graph=graph, cluster=spec)
    async with sess:
        assert await sess.run(doubled) == 6.0
        prepared = sess.prepare(doubled)
    handle = sess._target.master.session_handle
    with pytest.raises(RuntimeError, match=f"Attempted to use a closed Session\\. \\({handle} "):
        await sess.run(doubled)
    with pytest.raises(RuntimeError, match=f"closed Session\\. \\({handle} "):
        async with sess:
            pass
    with pytest.raises(RuntimeError, match=f"closed Session\\. \\({handle} "):
        await sess.run_prepared(prepared)  # prepared before the close
    await sess.close()  # a second close is a no-op


async def _session_connections_gone(servers):
    """Wait (bounded) until no HTTP server of the cluster holds a connection."""
    with trio.fail_after(10):
        for server in servers.values():
            await server.http._guard.empty.wait()


def _interrupting(monkeypatch, master):
    """Make the master's first deregistration raise KeyboardInterrupt (Ctrl-C in the close)."""
    raised = []
    for task in master.tasks.values():
        async def interrupted(*args, **kwargs):
            raised.append(1)
            raise KeyboardInterrupt
        monkeypatch.setattr(task.channel, "deregister_graph", interrupted)
    return raised


async def _opened_after_a_step(spec):
    """A session on ``spec`` entered (not as a context: the tests close it themselves) after
    one step of ``_graph``'s doubling; with its master."""
    graph, doubled, _ = _graph(spec)
    sess = af.Session(graph=graph, cluster=spec)
    await sess.__aenter__()
    assert await sess.run(doubled) == 6.0
    return sess, sess._target.master


@pytest.mark.parametrize("cluster", ["http"], indirect=True)
async def test_ctrl_c_in_the_close_leaves_no_connection_or_task(cluster, monkeypatch):
    spec, servers = cluster
    graph, doubled, blocked = _graph(spec)
    sess = af.Session(graph=graph, cluster=spec, config=WATCHED)
    failures = []
    async with trio.open_nursery() as nursery:
        await sess.__aenter__()
        assert await sess.run(doubled) == 6.0

        async def waits():
            with pytest.raises(af.errors.CancelledError, match="closed"):
                await sess.run(blocked)
            failures.append("cancelled")
        nursery.start_soon(waits)
        master = sess._target.master
        with trio.fail_after(10):  # the blocked step outlives an interval: its watchdog runs
            while master.monitor._ended is None:
                await trio.sleep(0.05)
            await trio.sleep(WATCHED.health_check_interval_s * 1.5)
        ended = master.monitor._ended
        assert sum(len(s.http._guard.connections) for s in servers.values()) > 0
        raised = _interrupting(monkeypatch, master)
        with pytest.raises(KeyboardInterrupt):
            await sess.close()
    assert raised and failures == ["cancelled"]
    assert sess.closed and ended.is_set()  # the monitor's task (and its watchdogs) ended
    for task in master.tasks.values():
        assert task.channel._closed and not task.channel._idle and not task.channel._bare_idle
    await _session_connections_gone(servers)
    for server in servers.values():
        assert not server.service._steps  # no step state left on the workers
    with pytest.raises(RuntimeError, match="closed Session"):
        await sess.run(doubled)


@pytest.mark.parametrize("cluster", ["http"], indirect=True)
async def test_a_cancelled_close_still_closes_every_connection(cluster):
    spec, servers = cluster
    graph, doubled, _ = _graph(spec)
    sess = af.Session(graph=graph, cluster=spec)
    await sess.__aenter__()
    assert await sess.run(doubled) == 6.0
    for task in sess._target.master.tasks.values():
        deregister = task.channel.deregister_graph

        async def slow(*args, deregister=deregister, **kwargs):
            await trio.sleep(0.5)
            return await deregister(*args, **kwargs)
        task.channel.deregister_graph = slow
    with trio.move_on_after(0.1):  # the close's scope is cancelled while it deregisters
        await sess.close()
    for task in sess._target.master.tasks.values():
        assert task.channel._closed and not task.channel._idle and not task.channel._bare_idle
    await _session_connections_gone(servers)


@pytest.mark.parametrize("cluster", ["inprocess"], indirect=True)
async def test_a_close_waits_for_a_dead_peer_only_a_bounded_time(cluster, monkeypatch,
                                                                  autojump_clock):
    spec, _ = cluster
    sess, master = await _opened_after_a_step(spec)
    for task in master.tasks.values():
        async def never_answers(*args, **kwargs):
            await trio.sleep_forever()
        monkeypatch.setattr(task.channel, "deregister_graph", never_answers)
    start = trio.current_time()
    await sess.close()
    assert trio.current_time() - start <= 2 * channels.CLOSE_S
    assert all(task.channel._closed for task in master.tasks.values())


@pytest.mark.parametrize("cluster", ["inprocess"], indirect=True)
async def test_a_channel_close_stalled_past_the_bound_ends_the_close_normally(
        cluster, monkeypatch, autojump_clock):
    # The bound cancels the stalled close inside the shielded scope: that Cancelled is the
    # scope's own and must end there, never escape the close as if the caller were cancelled.
    spec, _ = cluster
    sess, master = await _opened_after_a_step(spec)
    stalled, *others = master.tasks.values()

    async def stalls():
        await trio.sleep_forever()
    monkeypatch.setattr(stalled.channel, "aclose", stalls)
    start = trio.current_time()
    try:
        await sess.close()
    except trio.Cancelled:  # (pytest-trio would let an escaped Cancelled pass silently)
        pytest.fail("the close's own bound escaped it as a Cancelled")
    assert trio.current_time() - start <= 2 * channels.CLOSE_S
    assert others and all(task.channel._closed for task in others)


@pytest.mark.parametrize("cluster", ["inprocess"], indirect=True)
async def test_a_registration_never_answered_keeps_the_close_within_its_bound(
        cluster, monkeypatch, autojump_clock):
    # A dead peer with a registration under way (its step cancelled), its deregistrations
    # unanswered and a channel's close stalled: the close still ends within its bound.
    spec, _ = cluster
    sess, master = await _opened_after_a_step(spec)
    graph = sess.graph
    blocked = graph.get_operation_by_name("fifo_queue_Dequeue").outputs[0]

    async def never_answers(*args, **kwargs):
        await trio.sleep_forever()
    for task in master.tasks.values():
        monkeypatch.setattr(task.channel, "register_graph", never_answers)
        monkeypatch.setattr(task.channel, "deregister_graph", never_answers)
    monkeypatch.setattr(next(iter(master.tasks.values())).channel, "aclose", never_answers)
    with trio.move_on_after(1.0) as scope:
        await sess.run(blocked)  # a signature not yet registered
    assert scope.cancelled_caught and master._registering
    start = trio.current_time()
    await sess.close()
    assert trio.current_time() - start <= 2 * channels.CLOSE_S


async def test_a_step_the_close_cancels_as_it_takes_the_register_lock_registers_nothing(
        cluster, monkeypatch):
    # The close waits only for the registrations under way as it begins: a step woken with
    # the register lock just then (the close cancelled it before it ran) must not send one
    # after, or its graph would outlive the session on the worker.
    spec, servers = cluster
    graph = af.Graph()
    with graph.as_default(), af.device("/job:worker/task:0"):
        two = af.constant(2.0)
        doubled, fresh = two * 3.0, two * 5.0  # fresh: a signature not yet registered
    sess = af.Session(graph=graph, cluster=spec)
    await sess.__aenter__()
    assert await sess.run(doubled) == 6.0
    master, sent = sess._target.master, []
    for task in master.tasks.values():
        register = task.channel.register_graph

        async def recorded(*args, register=register, name=task.name, **kwargs):
            sent.append(name)
            return await register(*args, **kwargs)
        monkeypatch.setattr(task.channel, "register_graph", recorded)

    async def step():
        with pytest.raises(af.errors.CancelledError):
            await sess.run(fresh)
    await master._register_lock.acquire()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(step)
        await trio.testing.wait_all_tasks_blocked()
        assert master._register_lock.statistics().tasks_waiting == 1
        master._register_lock.release()  # the step holds it now: woken, not yet run
        await sess.close()
    await trio.testing.wait_all_tasks_blocked()
    assert sent == [], f"RegisterGraph sent after the close began: {sent}"
    graphs = {name: server.service.statistics().graphs for name, server in servers.items()}
    assert set(graphs.values()) == {0}, graphs


@pytest.mark.parametrize("cluster", ["inprocess"], indirect=True)
async def test_a_second_concurrent_close_returns_once_the_first_has_closed(cluster,
                                                                           monkeypatch):
    spec, _ = cluster
    sess, master = await _opened_after_a_step(spec)
    release = trio.Event()
    for task in master.tasks.values():
        deregister = task.channel.deregister_graph

        async def slow(*args, deregister=deregister, **kwargs):
            await release.wait()
            return await deregister(*args, **kwargs)
        monkeypatch.setattr(task.channel, "deregister_graph", slow)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sess.close)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(trio.lowlevel.checkpoint)
        release.set()
        await sess.close()  # the second: waits for the first's cleanup
        assert all(task.channel._closed for task in master.tasks.values())


def _in_two_threads(first, second, began, timeout=60):
    """``trio.run(first)`` in a thread, and ``trio.run(second)`` in another once ``began`` is
    set; returns what they raised (a thread still running past ``timeout`` fails the test)."""
    raised = []

    def body(main, after):
        try:
            if after is not None:
                assert after.wait(timeout), "the first close never began"
            trio.run(main)
        except BaseException as exc:  # noqa: BLE001 -- returned to the test
            raised.append(exc)
    threads = [threading.Thread(target=body, args=(main, after), daemon=True)
               for main, after in ((first, None), (second, began))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a close never returned"
    return raised


def test_a_close_from_another_threads_trio_run_waits_for_the_first():
    # The first close, in the run that opened the session, waits on a worker stopped with
    # SIGSTOP (its deregistration is not answered); a close from another thread's trio run
    # meanwhile returns only after the first's cleanup is done.
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0).start()
    graph = af.Graph()
    with graph.as_default(), af.device("/job:worker/task:0"):
        doubled = af.constant(2.0) * 3.0
    sess = af.Session(graph=graph, cluster={"worker": [worker.address]})
    began, order = threading.Event(), []

    async def first():
        await sess.__aenter__()
        assert await sess.run(doubled) == 6.0
        target_close = sess._target.close

        async def closing():  # the real close, watched
            began.set()
            await target_close()
            order.append("the first close's cleanup ended")
        sess._target.close = closing
        os.kill(worker.pid, signal.SIGSTOP)
        await sess.close()

    async def second():
        await sess.close()
        order.append("the second close returned")

    try:
        errors = _in_two_threads(first, second, began)
    finally:
        if worker.alive():
            os.kill(worker.pid, signal.SIGCONT)
        worker.kill()
    assert not errors, errors
    assert order == ["the first close's cleanup ended", "the second close returned"]
    assert sess.closed


async def _close_held(sess, doubled, began, release, ended=lambda: None):
    """Open ``sess``, run ``doubled`` (6.0), then close it with its target's close held:
    ``began`` is set when the close reaches the target, which closes once ``release`` is set
    (at most 60 s), then ``ended()`` runs."""
    await sess.__aenter__()
    assert await sess.run(doubled) == 6.0
    target_close = sess._target.close

    async def held():
        began.set()
        await trio.to_thread.run_sync(release.wait, 60)
        await target_close()
        ended()
    sess._target.close = held
    await sess.close()


def test_a_waiting_close_in_another_run_blocks_no_loop_and_is_cancellable():
    # A local session whose close is held (its target's close waits for ``release``): the
    # second close, in another thread's trio run, waits without blocking that run's loop, its
    # caller may cancel the wait, and once released a close returns after the first's.
    with af.Graph().as_default():
        doubled = af.constant(2.0) * 3.0
    sess = af.Session(graph=doubled.graph)
    began, release, order = threading.Event(), threading.Event(), []

    async def first():
        await _close_held(sess, doubled, began, release,
                          lambda: order.append("the first close's cleanup ended"))

    async def second():
        waited = trio.CancelScope()

        async def ticks_then_cancels():  # runs only if the waiting close blocks no loop
            for _ in range(5):
                await trio.sleep(0.01)
            waited.cancel()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticks_then_cancels)
                with waited:
                    await sess.close()
            assert waited.cancelled_caught, "the close did not wait (or blocked the loop)"
            order.append("the cancelled close returned")
        finally:
            release.set()
        await sess.close()
        order.append("the second close returned")

    try:
        errors = _in_two_threads(first, second, began)
    finally:
        release.set()
    assert not errors, errors
    assert order == ["the cancelled close returned", "the first close's cleanup ended",
                     "the second close returned"]


def test_cancelled_waiting_closes_hold_no_thread_of_their_run():
    # Many closes waiting in another thread's trio run for a held first close, all cancelled:
    # none may keep a worker thread (and the run's default thread limiter token) until the
    # first close ends, or that run's own thread work stalls behind them.
    with af.Graph().as_default():
        doubled = af.constant(2.0) * 3.0
    sess = af.Session(graph=doubled.graph)
    began, release = threading.Event(), threading.Event()
    seen = {}

    async def first():
        await _close_held(sess, doubled, began, release)

    async def second():
        limiter = trio.to_thread.current_default_thread_limiter()
        try:
            for _ in range(int(limiter.total_tokens) + 1):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(sess.close)
                    await trio.testing.wait_all_tasks_blocked()  # the close is waiting
                    nursery.cancel_scope.cancel()
            seen["borrowed"] = limiter.borrowed_tokens
            with trio.move_on_after(30) as idle:  # a wait that would exhaust the limiter
                assert await trio.to_thread.run_sync(lambda: 42) == 42
            seen["thread work ran"] = not idle.cancelled_caught
        finally:
            release.set()
        await sess.close()

    errors = _in_two_threads(first, second, began)
    assert not errors, errors
    assert seen == {"borrowed": 0, "thread work ran": True}


def test_two_threads_closing_at_once_close_the_target_once(monkeypatch):
    # The first close is held just as it begins (making its Closing); a close from another
    # thread's trio run meanwhile must not begin a second close of the target (before, it saw
    # the session still open and closed the target again, concurrently). The hold ends when
    # the other close reaches the target's close, or after ``HOLD_S`` if it waits instead.
    import asyncflow.session as session_module
    HOLD_S = 2.0
    with af.Graph().as_default():
        doubled = af.constant(2.0) * 3.0
    sess = af.Session(graph=doubled.graph)
    began, second_closed_target, closes = threading.Event(), threading.Event(), []
    first_thread = []

    class HeldClosing(session_module.Closing):
        __slots__ = ()

        def __init__(self):
            super().__init__()
            if threading.current_thread() is first_thread[0]:
                began.set()
                second_closed_target.wait(HOLD_S)
    monkeypatch.setattr(session_module, "Closing", HeldClosing)

    async def first():
        first_thread.append(threading.current_thread())
        await sess.__aenter__()
        assert await sess.run(doubled) == 6.0
        target_close = sess._target.close

        async def counted():
            closes.append(threading.current_thread().name)
            if threading.current_thread() is not first_thread[0]:
                second_closed_target.set()
            await target_close()
        sess._target.close = counted
        await sess.close()

    async def second():
        await sess.close()

    errors = _in_two_threads(first, second, began)
    assert not errors, errors
    assert len(closes) == 1, closes
    assert sess.closed
