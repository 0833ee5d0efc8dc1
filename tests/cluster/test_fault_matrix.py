"""The fault matrix: a ps and a worker as real ``asyncflow worker`` processes and a client
session, with a fault placed at one stage of a step; every stage ends in an error naming the
task within the run's timeout (or the health check's), the session runs its next step once the
fault is gone, and no step is left in flight on either process.

Faults of the network or of a broken peer come from a :class:`stall_proxy.StallProxy` in front
of each process (the cluster spec names the proxies; the client and the worker reach the ps
only through them): an answer cut after some bytes while the connection stays open (a half
frame, then nothing), an answer that is garbage, or none at all. Faults of the process itself
(SIGSTOP: alive sockets, no answers; SIGKILL) are in ``test_chaos.py``,
``test_one_task_step_faults.py`` and ``test_processes.py``.

Stages: the session's open (Health), RegisterGraph, RunGraph (its answer, the step having
run), the worker's 64 MiB RecvTensors from the ps (cut mid-frame), the client's 64 MiB fetch
(cut mid-frame), an AbortStep and the session's close (DeregisterGraph).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import trio

import asyncflow as af
from killable_workers import WorkerProcess, free_ports, health
from stall_proxy import StallProxy

PS, W0 = "/job:ps/task:0", "/job:worker/task:0"
BIG = 16 << 20  # float32 elements: 64 MiB
TIMEOUT_MS = 2000
GENEROUS = 60  # bounds a hang only


class Pair:
    """A ps and a worker process, each behind a StallProxy; ``spec`` names the proxies."""

    def __init__(self, proxies, procs, spec):
        self.proxies, self.procs, self.spec = proxies, procs, spec

    async def in_flight(self):
        """Steps in flight on the ps and the worker (their Health, past the proxies)."""
        return [(await health(proc.address)).stats.steps_in_flight for proc in self.procs]


@pytest.fixture
async def pair():
    async with trio.open_nursery() as nursery:
        proxies = [await nursery.start(StallProxy().serve) for _ in range(2)]
        spec = {"ps": [proxies[0].address], "worker": [proxies[1].address]}
        ports = free_ports(2)
        procs = [WorkerProcess(spec, "ps", 0, port=ports[0]),
                 WorkerProcess(spec, "worker", 0, port=ports[1])]
        try:
            async with trio.open_nursery() as starting:
                for proc in procs:
                    starting.start_soon(trio.to_thread.run_sync, proc.start)
            for proxy, port in zip(proxies, ports):
                proxy.target = f"127.0.0.1:{port}"
            yield Pair(proxies, procs, spec)
        finally:
            for proxy in proxies:
                proxy.release()
            for proc in procs:
                proc.kill()
            nursery.cancel_scope.cancel()


def _graph():
    graph = af.Graph()
    with graph.as_default():
        with af.device(PS):
            big = af.Variable(af.zeros([BIG], af.float32), name="big")
            small = af.Variable(3.0, name="small")
        with af.device(W0):
            pulled = af.reduce_sum(big * 2.0)  # the worker pulls 64 MiB from the ps
            fetched = big + 1.0                # the client fetches 64 MiB from the worker
            doubled = small * 2.0
            fresh = small * 5.0                # a signature not yet registered
    return graph, dict(init=[big.initializer, small.initializer], pulled=pulled,
                       fetched=fetched, doubled=doubled, fresh=fresh)


OPTIONS = af.RunOptions(timeout_in_ms=TIMEOUT_MS)
# path armed, bytes forwarded, which proxy (0: ps, 1: worker), what the step runs
STAGES = {
    "register": ("/graphs", 0, 1, "fresh"),
    "run_answer": ("/run", 40, 1, "doubled"),           # half its HTTP head, after the step ran
    "recv_64mib": ("/recv", 1 << 20, 0, "pulled"),       # the ps's answer, cut at 1 MiB
    "fetch_64mib": ("/run", 1 << 20, 1, "fetched"),      # the worker's answer, cut at 1 MiB
}


async def _step(sess, fetch, options=OPTIONS):
    started = trio.current_time()
    try:
        with trio.fail_after(GENEROUS):
            await sess.run(fetch, options=options)
    except af.errors.OpError as exc:
        return exc, trio.current_time() - started
    return None, trio.current_time() - started


def _short_form(cases, default):
    """``cases`` as params; those not in ``default`` marked slow (``--runslow``)."""
    return [pytest.param(*case, marks=() if case in default else pytest.mark.slow)
            for case in cases]


@pytest.mark.parametrize("stage,mode", _short_form(
    [(stage, mode) for stage in STAGES for mode in ("stall", "garbage")],
    [("register", "stall"), ("run_answer", "garbage"), ("recv_64mib", "garbage"),
     ("fetch_64mib", "stall")]))
async def test_a_stage_cut_or_garbled_fails_the_step_naming_the_task(pair, stage, mode):
    """With a run timeout: a stalled answer is DeadlineExceededError within it, garbage an
    UnavailableError naming the task at once."""
    path, after, which, fetch = STAGES[stage]
    graph, t = _graph()
    config = af.SessionConfig(health_check_interval_s=60.0, worker_dead_after_s=60.0)
    async with af.Session(graph=graph, cluster=pair.spec, config=config) as sess:
        healthy = await _healthy_step(sess, t["init"])
        if stage != "register":
            healthy = await _healthy_step(sess, t[fetch])
        # The fault must be reached before the run's deadline: on a loaded machine the 64 MiB
        # steps alone may take longer than TIMEOUT_MS, so the timeout is at least three of
        # the same step's healthy runs (measured just now, under the same load).
        timeout = max(TIMEOUT_MS / 1000, 3 * healthy)
        pair.proxies[which].arm(path, mode, after)
        error, elapsed = await _step(sess, t[fetch], af.RunOptions(
            timeout_in_ms=math.ceil(timeout * 1000)))
        assert pair.proxies[which].fired == 1, (repr(error), elapsed, healthy)
        task = ("ps" if which == 0 else "worker")
        if mode == "stall":
            assert isinstance(error, af.errors.DeadlineExceededError), repr(error)
            assert elapsed < timeout + 5.0, (elapsed, timeout)
        else:
            assert isinstance(error, af.errors.UnavailableError), repr(error)
            assert f"job:{task}" in error.message, error.message
        await _recovers(pair, sess, t, which)



@pytest.mark.parametrize("stage", _short_form([(stage,) for stage in STAGES],
                                              [("run_answer",), ("recv_64mib",)]))
async def test_without_a_run_timeout_a_stalled_answer_ends_by_the_health_check(pair, stage):
    """No RunOptions timeout: an answer cut mid-frame on a connection that stays open (the
    peer answers Health: only this answer stalls) fails the step as UnavailableError naming
    the task once ``worker_dead_after_s`` passed without a byte of it (a worker's own pull
    from a peer: its channel's 10 s); a registration never answered, by the same bound."""
    path, after, which, fetch = STAGES[stage]
    graph, t = _graph()
    dead_after = 2.0
    config = af.SessionConfig(health_check_interval_s=0.5, worker_dead_after_s=dead_after)
    async with af.Session(graph=graph, cluster=pair.spec, config=config) as sess:
        await sess.run(t["init"], options=af.RunOptions(timeout_in_ms=30000))
        if stage != "register":
            await sess.run(t[fetch], options=af.RunOptions(timeout_in_ms=30000))
        pair.proxies[which].arm(path, "stall", after)
        error, elapsed = await _step(sess, t[fetch], None)
        assert isinstance(error, af.errors.UnavailableError), repr(error)
        assert f"job:{'ps' if which == 0 else 'worker'}" in error.message, error.message
        bound = 10.0 if stage == "recv_64mib" else dead_after
        assert bound - 0.1 <= elapsed < bound + 5.0, elapsed
        await _recovers(pair, sess, t, which)


async def test_a_registration_cut_by_the_callers_deadline_is_a_cancellation(pair):
    """No RunOptions timeout, the caller's own trio deadline: a RegisterGraph still unanswered
    when it passes ends as that scope's cancellation (``move_on_after`` catches it), never a
    DeadlineExceededError from a registration that was given what was left of the deadline."""
    graph, t = _graph()
    async with af.Session(graph=graph, cluster=pair.spec) as sess:
        await _healthy_step(sess, t["init"])
        pair.proxies[1].arm("/graphs", "silent")
        with trio.fail_after(GENEROUS):
            with trio.CancelScope() as scope:  # its deadline passes once the answer is
                async with trio.open_nursery() as nursery:  # withheld (no guess of when)
                    nursery.start_soon(sess.run, t["fresh"])
                    await pair.proxies[1].stalled.wait()
                    scope.deadline = trio.current_time()
        assert scope.cancelled_caught and pair.proxies[1].fired == 1
        await _recovers(pair, sess, t, 1)


async def test_a_registration_answered_after_the_callers_deadline_leaves_no_graph(pair):
    """A RegisterGraph the worker carried out but answered after the caller's deadline (a slow
    peer, a loaded machine): the step ends as the caller's cancel at once, and the graph the
    late answer names is deregistered, not left on the worker for its lease (the soak test's
    leak: a first step under a 2 ms deadline). The next step registers again and runs; after
    the session closes, the worker holds no graph."""
    graph, t = _graph()
    async with af.Session(graph=graph, cluster=pair.spec) as sess:
        await _healthy_step(sess, t["init"])
        pair.proxies[1].arm("/graphs", "hold")
        with trio.fail_after(GENEROUS):
            with trio.CancelScope() as scope:  # the deadline: once the answer is held (not a
                async with trio.open_nursery() as nursery:  # guess of how long it takes)
                    nursery.start_soon(sess.run, t["fresh"])
                    await pair.proxies[1].stalled.wait()
                    scope.cancel()
        assert scope.cancelled_caught and pair.proxies[1].fired == 1
        worker = pair.procs[1].address
        assert (await health(worker)).stats.graphs == 1  # registered, its answer held
        pair.proxies[1].release()
        with trio.fail_after(GENEROUS):
            while (await health(worker)).stats.graphs:  # the late answer's graph dropped
                await trio.sleep(0.05)
        assert await sess.run(t["fresh"]) == 15.0
        assert (await health(worker)).stats.graphs == 1
    assert (await health(worker)).stats.graphs == 0


async def _healthy_step(sess, fetch):
    """Seconds ``fetch`` takes with no fault (asserted to succeed)."""
    error, elapsed = await _step(sess, fetch, af.RunOptions(timeout_in_ms=30000))
    assert error is None, repr(error)
    return elapsed


async def _recovers(pair, sess, t, which):
    """Once the proxy lets go, the session's next step runs (after at most one error that
    reports the peer down) and neither process keeps a step in flight."""
    pair.proxies[which].release()
    error, _ = await _step(sess, t["doubled"], af.RunOptions(timeout_in_ms=30000))
    if error is not None:
        error, _ = await _step(sess, t["doubled"], af.RunOptions(timeout_in_ms=30000))
    assert error is None, repr(error)
    with trio.fail_after(GENEROUS):
        while await pair.in_flight() != [0, 0]:
            await trio.sleep(0.05)
