"""A one-task step without a timeout (its RunGraph in the session's scope, ``Master.ready``
skipping the refresh between steps) against a real ``asyncflow worker`` process that is
killed, restarted at the same address, or hung between or during steps: each ends as it did
with a scope of the call's own (UnavailableError, AbortedError once, the watchdog's
UnavailableError), never a hang nor a closed session's CancelledError.
"""
from __future__ import annotations

import signal

import pytest
import trio

import asyncflow as af
from killable_workers import WorkerProcess, free_ports, health

W0 = "/job:worker/task:0"
GENEROUS = 60  # bounds a hang only: every step below ends on its own well before


@pytest.fixture
def worker():
    port = free_ports(1)[0]
    proc = WorkerProcess({"worker": [f"127.0.0.1:{port}"]}, "worker", 0)
    try:
        proc.start()
        yield proc
    finally:
        proc.kill()


def _graph():
    graph = af.Graph()
    with graph.as_default(), af.device(W0):
        p = af.placeholder(af.float32, [], name="p")
        doubled = p * 2.0
        queue = af.FIFOQueue(2, [af.float32], shapes=[[]], name="q")
        blocked = queue.dequeue()
    return graph, p, doubled, blocked


async def test_restarted_then_killed_between_steps_within_the_health_interval(worker):
    """No Health between steps (a 60 s interval): the restart is found by the step's RunGraph
    (an unknown handle), reported once as AbortedError; a kill is UnavailableError."""
    graph, p, doubled, _ = _graph()
    config = af.SessionConfig(health_check_interval_s=60.0)
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=worker.cluster, config=config) as sess:
            assert await sess.run(doubled, {p: 1.0}) == 2.0
            run = next(iter(sess._target.cache.values()))
            assert sess._target.master.ready(run)  # the next step skips the refresh
            await trio.to_thread.run_sync(worker.restart)
            with pytest.raises(af.errors.AbortedError, match=f"{W0[:11]}.*restarted"):
                await sess.run(doubled, {p: 2.0})
            assert await sess.run(doubled, {p: 3.0}) == 6.0  # registered again
            assert sess._target.master.ready(next(iter(sess._target.cache.values())))
            await trio.to_thread.run_sync(worker.kill)
            with pytest.raises(af.errors.UnavailableError, match="task:0"):
                await sess.run(doubled, {p: 4.0})
            assert not sess.closed


async def test_a_worker_killed_or_hung_during_a_step_without_a_timeout(worker):
    """The step waits on the worker (an empty queue): SIGSTOP makes the watchdog declare it
    dead (UnavailableError, not CancelledError); once it runs again and is killed mid-step,
    the lost connection fails the next such step with UnavailableError."""
    graph, p, doubled, blocked = _graph()
    config = af.SessionConfig(health_check_interval_s=0.5, worker_dead_after_s=2.0)
    with trio.fail_after(GENEROUS):
        async with af.Session(graph=graph, cluster=worker.cluster, config=config) as sess:
            assert await sess.run(doubled, {p: 1.0}) == 2.0
            for fault in ("hang", "kill"):
                async with trio.open_nursery() as nursery:
                    outcome = {}

                    async def blocked_step(outcome=outcome):
                        try:
                            await sess.run(blocked)  # no timeout: one scope, the session's
                        except af.errors.OpError as exc:
                            outcome["error"] = exc

                    nursery.start_soon(blocked_step)
                    while (await health(worker.address)).stats.steps_in_flight == 0:
                        await trio.sleep(0.02)  # (bounded by fail_after) the step waits there
                    if fault == "hang":
                        worker.proc.send_signal(signal.SIGSTOP)
                    else:
                        worker.kill()
                error = outcome["error"]
                assert isinstance(error, af.errors.UnavailableError), repr(error)
                assert "task:0" in error.message and not sess.closed
                if fault == "hang":
                    worker.proc.send_signal(signal.SIGCONT)
