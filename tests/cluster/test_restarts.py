"""A task restarted between steps (issue 13, item 1): AbortedError once, then recovery works.

Real ``asyncflow worker`` processes on loopback (a ps and a worker), restarted on the same port
while no step is in flight. Before the fix the next run raised NotFoundError (an unknown graph
handle, within the health-check interval) or FailedPreconditionError (re-registered, but the ps
had lost its variables). Now it is AbortedError naming the task, exactly once, and the three
ways of recovering work: re-initializing, a TF1-style loop that restores the latest checkpoint
with a Saver, and MonitoredTrainingSession.
"""
from __future__ import annotations

import numpy as np
import pytest
import trio

import asyncflow as af
from killable_workers import WorkerProcess, free_ports

TIMEOUT = af.RunOptions(timeout_in_ms=30000)
LR = 0.1
TARGET = np.array([1.0, -2.0, 3.0, 0.5], np.float32)


@pytest.fixture
def processes(tmp_path):
    """A ps and a worker process (working directory ``tmp_path``); killed at teardown."""
    ports = free_ports(2)
    spec = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    procs = {"ps": WorkerProcess(spec, "ps", 0, cwd=tmp_path),
             "worker": WorkerProcess(spec, "worker", 0, cwd=tmp_path)}
    try:
        for proc in procs.values():
            proc.start()
        yield spec, procs
    finally:
        for proc in procs.values():
            proc.kill()


def _two_task_graph():
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            a = af.Variable(np.arange(4, dtype=np.float32), name="a")
        with af.device("/job:worker/task:0"):
            b = af.Variable(np.ones(3, dtype=np.float32), name="b")
            total = af.reduce_sum(a) + af.reduce_sum(b)
    return graph, a, b, total


@pytest.mark.parametrize("interval", [60.0, 0.0], ids=["unknown_handle", "health_check"])
async def test_restart_between_steps_is_aborted_once_never_not_found(processes, interval):
    """interval 60 s: the next RunGraph finds its graph handle unknown; 0 s: Health before the
    step shows the new incarnation. Either way one AbortedError names the task."""
    spec, procs = processes
    graph, a, b, total = _two_task_graph()
    config = af.SessionConfig(health_check_interval_s=interval)
    async with af.Session(graph=graph, cluster=spec, config=config) as sess:
        await sess.run([a.initializer, b.initializer], options=TIMEOUT)
        assert await sess.run(total, options=TIMEOUT) == 9.0
        for task, variable in [("ps", a), ("worker", b)]:
            await trio.to_thread.run_sync(procs[task].restart)
            with pytest.raises(af.errors.AbortedError, match=f"/job:{task}/.*restarted"):
                await sess.run(total, options=TIMEOUT)
            # Reported once: the graphs are registered again, and the state is really gone.
            with pytest.raises(af.errors.FailedPreconditionError, match="uninitialized"):
                await sess.run(total, options=TIMEOUT)
            await sess.run(variable.initializer, options=TIMEOUT)
            assert await sess.run(total, options=TIMEOUT) == 9.0


def _training_graph(model_parallel):
    """Gradient descent of ``w`` towards TARGET; ``w`` split over the ps and the worker."""
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            global_step = af.train.get_or_create_global_step()
            w_ps = af.Variable(np.zeros(2, np.float32), name="w_ps")
        with af.device("/job:worker/task:0" if model_parallel else "/job:ps/task:0"):
            w_worker = af.Variable(np.zeros(2, np.float32), name="w_worker")
        with af.device("/job:worker/task:0"):
            w = af.concat([w_ps, w_worker], 0)
            loss = af.reduce_sum(af.square(w - af.constant(TARGET)))
        train_op = af.train.GradientDescentOptimizer(LR).minimize(loss, global_step=global_step)
        saver = af.train.Saver(max_to_keep=3, sharded=model_parallel)
    return graph, train_op, global_step, w, saver


def _expected_w(steps):
    w = np.zeros(4, np.float32)
    for _ in range(steps):
        w = w - np.float32(LR) * 2 * (w - TARGET)
    return w


def _rollbacks(steps_seen):
    return [a - b + 1 for a, b in zip(steps_seen, steps_seen[1:]) if b <= a]


async def _retrying(run, caught, attempts=40):
    """``await run()``, retrying on Unavailable/Aborted (a TF1 loop's restore), bounded."""
    for _ in range(attempts):
        try:
            return await run()
        except (af.errors.UnavailableError, af.errors.AbortedError) as exc:
            caught.append(type(exc).__name__)
            await trio.sleep(0.1)
    raise AssertionError(f"no recovery after {attempts} attempts: {caught}")


async def test_tf1_style_loop_restores_the_latest_checkpoint_after_restarts(processes, tmp_path):
    """The plain TF1 recovery loop on one session: catch Unavailable/Aborted, restore, go on."""
    spec, procs = processes
    steps, save_every, restart_at = 24, 4, {"ps": 6, "worker": 15}
    graph, train_op, global_step, w, saver = _training_graph(model_parallel=True)
    with graph.as_default():
        init = af.global_variables_initializer()
    caught, seen = [], []
    prefix = str(tmp_path / "tf1" / "model")
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(init, options=TIMEOUT)
        await saver.save(sess, prefix, global_step=0)
        step = 0
        for _ in range(4 * steps):  # bounded: every iteration runs a step or recovers
            if step >= steps:
                break
            try:
                await sess.run(train_op, options=TIMEOUT)
                step = int(await sess.run(global_step, options=TIMEOUT))
            except (af.errors.UnavailableError, af.errors.AbortedError) as exc:
                caught.append(type(exc).__name__)
                path = af.train.latest_checkpoint(str(tmp_path / "tf1"))
                await _retrying(lambda: saver.restore(sess, path), caught)
                step = int(await sess.run(global_step, options=TIMEOUT))
                continue
            seen.append(step)
            if step % save_every == 0:
                await saver.save(sess, prefix, global_step=step)
            for task, at in restart_at.items():
                if step == at and seen.count(at) == 1:  # between steps: nothing in flight
                    await trio.to_thread.run_sync(procs[task].restart)
        final = await sess.run(w, options=TIMEOUT)
    assert caught == ["AbortedError", "AbortedError"], caught  # one per restart, no more
    assert seen[-1] == steps
    assert all(lost <= save_every for lost in _rollbacks(seen)), seen
    np.testing.assert_allclose(final, _expected_w(steps), rtol=1e-5)


class _RestartBetweenSteps(af.train.SessionRunHook):
    """Restarts a process after the run that reached a step: no step is in flight then."""

    def __init__(self, global_step, procs, restart_at):
        self._global_step, self._procs, self._restart_at = global_step, procs, dict(restart_at)
        self.seen = []

    async def after_run(self, run_context, run_values):
        step = int(await run_context.session.run(self._global_step))
        self.seen.append(step)
        for task, at in list(self._restart_at.items()):
            if step >= at:
                del self._restart_at[task]
                await trio.to_thread.run_sync(self._procs[task].restart)


@pytest.mark.parametrize("model_parallel", [False, True], ids=["on_ps", "model_parallel"])
async def test_monitored_training_session_recovers_from_restarts_between_steps(
        processes, tmp_path, model_parallel):
    spec, procs = processes
    steps, save_steps = 20, 4
    graph, train_op, global_step, w, _ = _training_graph(model_parallel)
    restarts = _RestartBetweenSteps(global_step, procs, {"ps": 6, "worker": 13})
    hooks = [restarts, af.train.StopAtStepHook(last_step=steps)]
    with trio.fail_after(240):
        async with af.train.MonitoredTrainingSession(
                checkpoint_dir=str(tmp_path / "mts"), save_checkpoint_steps=save_steps,
                hooks=hooks, cluster=spec, graph=graph, log_step_count_steps=None,
                recovery_wait_secs=60) as sess:
            while not sess.should_stop():
                await sess.run(train_op)
            statistics = sess.statistics()
            final = await sess.session.run(w)
    assert statistics.recoveries == 2, statistics
    assert "restarted" in statistics.last_error
    assert restarts.seen[-1] == steps
    assert all(lost <= save_steps for lost in _rollbacks(restarts.seen)), restarts.seen
    np.testing.assert_allclose(final, _expected_w(steps), rtol=1e-5)
