"""A remote step's fast path: ``Master.ready`` skips the refresh and the registration only
when they would do nothing, step ids stay distinct, odd and 62-bit, also in forked clients,
and a step whose call waited on a socket closes the time slice (no yield of the session's
after it), where one over the in-process channel (which may never wait) still yields.

Run over both transports (``cluster`` fixture); the staleness is set on the master's task
records (``last_ok``), not waited for, so no test depends on the clock.
"""
import contextlib

import pytest
import trio

import asyncflow as af
from asyncflow.cluster.master import Master
from asyncflow.exec import timeslice

W0, W1 = "/job:worker/task:0", "/job:worker/task:1"
T0 = "/job:worker/replica:0/task:0"
CONFIG = af.SessionConfig(health_check_interval_s=60.0)


def _graph():
    with af.Graph().as_default() as graph:
        with af.device(W0):
            p = af.placeholder(af.float32, [], name="p")
            doubled = p * 2.0
    return graph, p, doubled


@contextlib.asynccontextmanager
async def _after_a_step(spec):
    """A session on ``_graph()`` after its first step: (sess, p, doubled, master, the run)."""
    graph, p, doubled = _graph()
    async with af.Session(graph=graph, cluster=spec, config=CONFIG) as sess:
        assert await sess.run(doubled, {p: 1.0}) == 2.0
        yield sess, p, doubled, sess._target.master, next(iter(sess._target.cache.values()))


def _count_health(master):
    calls = []
    real = master._health

    async def health(task):
        calls.append(task.name)
        return await real(task)

    master._health = health
    return calls


async def test_a_fresh_registered_run_is_ready_and_its_steps_ask_no_health(cluster):
    spec, _ = cluster
    async with _after_a_step(spec) as (sess, p, doubled, master, run):
        assert master.ready(run)
        calls = _count_health(master)
        for i in range(5):
            assert await sess.run(doubled, {p: float(i)}) == 2.0 * i
        assert calls == []


async def test_a_step_that_waited_on_a_socket_closes_the_slice(cluster, monkeypatch):
    # Every read of the slice clock a slice later: a step counted as a whole slice.
    spec, _ = cluster
    reads = iter(range(1, 10**9))
    monkeypatch.setattr(timeslice, "clock", lambda: next(reads) * timeslice.TIME_SLICE_S)
    yields, real = [], trio.lowlevel.cancel_shielded_checkpoint

    async def counted():
        yields.append(1)
        await real()

    async with _after_a_step(spec) as (sess, p, doubled, master, run):
        over_a_socket = all(master.tasks[tg.task].channel.calls_yield for tg in run.task_graphs)
        assert over_a_socket == (not spec.as_dict()["worker"][0].startswith("inprocess:"))
        timeslice.restart()
        monkeypatch.setattr(trio.lowlevel, "cancel_shielded_checkpoint", counted)
        for i in range(6):
            assert await sess.run(doubled, {p: float(i)}) == 2.0 * i
        monkeypatch.undo()
    # Over a socket the call gave the loop back: no yield after it. In process: as before,
    # every other step (the first opens a slice, the next finds it over).
    assert len(yields) == (0 if over_a_socket else 3)


async def test_a_stale_task_is_asked_its_health_before_the_step(cluster):
    spec, _ = cluster
    async with _after_a_step(spec) as (sess, p, doubled, master, run):
        master.tasks[T0].last_ok = trio.current_time() - 61.0  # past the interval
        assert not master.ready(run)
        calls = _count_health(master)
        assert await sess.run(doubled, {p: 3.0}) == 6.0
        assert calls == [T0]
        assert master.ready(run)  # heard from again


async def test_an_unregistered_or_restarted_run_is_not_ready(cluster):
    spec, _ = cluster
    async with _after_a_step(spec) as (sess, p, doubled, master, run):
        tg = run.task_graphs[0]
        # A graph handle the worker never gave (a registration to redo) is not ready; the
        # next step registers again.
        master.forget_registration(tg)
        assert not master.ready(run)
        assert await sess.run(doubled, {p: 2.0}) == 4.0
        assert master.ready(run)
        # Another task's incarnation not the one the run was compiled against: the step
        # refreshes (and recompiles), as ``refresh`` decides.
        other = next(t for name, t in master.tasks.items() if name != tg.task)
        acknowledged = other.incarnation
        other.incarnation = other.acknowledged = acknowledged + 1
        assert not master.ready(run)
        other.incarnation = other.acknowledged = acknowledged
        assert master.ready(run)
        # A restart not yet reported (incarnation != acknowledged) is not ready: the step
        # reports it.
        task = master.tasks[tg.task]
        task.acknowledged = task.incarnation - 1
        assert not master.ready(run)
        with pytest.raises(af.errors.AbortedError, match="restarted"):
            await sess.run(doubled, {p: 2.0})


async def test_step_ids_are_distinct_odd_and_62_bit(cluster):
    spec, _ = cluster
    async with _after_a_step(spec) as (sess, p, doubled, master, _):
        channel = master.tasks[T0].channel
        seen = []
        real = channel.run_graph_step  # (the master's RunGraph: a StepCall)

        async def run_graph_step(request, **kwargs):
            seen.append(request.step_id)
            return await real(request, **kwargs)

        channel.run_graph_step = run_graph_step
        for _ in range(50):
            await sess.run(doubled, {p: 1.0})
        assert len(seen) == 50 and len(set(seen)) == 50
        assert all(s % 2 == 1 and 0 < s < 2 ** 62 for s in seen)
        # Another session's master draws other ids (one generator a process, reseeded in a
        # forked child).
        other = Master(spec, CONFIG)
        assert other._step_bits(62) != master._step_bits(62)


async def test_forked_clients_of_one_session_draw_different_step_ids(nursery):
    """A Session made before ``os.fork`` and used in two children one after the other: each
    child's master draws its own step ids (a copied generator would give the second child the
    first's ids, which the worker has as finished: its steps would fail ABORTED)."""
    import json
    import os
    import subprocess
    import sys

    from loopback_ports import free_ports

    spec = af.ClusterSpec({"worker": [f"127.0.0.1:{free_ports(1)[0]}"]})
    await nursery.start(af.Server(spec, "worker", 0).serve)
    script = os.path.join(os.path.dirname(__file__), "forked_clients.py")
    with trio.fail_after(120):
        done = await trio.run_process([sys.executable, script, spec.task_address("worker", 0)],
                                      capture_stdout=True, stderr=subprocess.DEVNULL)
    children = json.loads(done.stdout.decode().strip().splitlines()[-1])["children"]
    assert [child["error"] for child in children] == ["", ""]
    first, second = (child["step_ids"] for child in children)
    assert len(first) == len(second) == 3 and not set(first) & set(second)
