"""MonitoredTrainingSession and hooks on local sessions: init/restore, schedules, recovery."""
import logging

import numpy as np
import pytest
import trio

import asyncflow as af

X = np.linspace(-1.0, 1.0, 8).astype(np.float32)
Y = 3.0 * X + 0.5


def _model(fail_at=None, error=af.errors.UnavailableError, fail_times=1):
    """Linear regression by gradient descent; optionally a py_func that fails at a global step.

    Returns (x, y, loss, train_op, global_step, w, failures) where ``failures`` counts the
    injected errors.
    """
    x = af.placeholder(af.float32, [None], name="x")
    y = af.placeholder(af.float32, [None], name="y")
    w = af.Variable(np.float32(0.0), name="w")
    b = af.Variable(np.float32(0.0), name="b")
    loss = af.reduce_mean(af.square(w * x + b - y), name="loss")
    step = af.train.get_or_create_global_step()
    failures = []

    def maybe_fail(value):
        if fail_at is not None and int(value) == fail_at and len(failures) < fail_times:
            failures.append(int(value))
            raise error(None, None, f"injected failure at step {int(value)}")
        return value

    check = af.py_func(maybe_fail, [step], af.int64, name="chaos")
    with af.control_dependencies([check]):
        train_op = af.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return x, y, loss, train_op, step, w, failures


async def _train(tmp_path, hooks, **kwargs):
    """Run the loop until a hook stops it; return the global step after each run."""
    history = []
    x, y = kwargs.pop("feeds")
    train_op, step = kwargs.pop("fetches")
    async with af.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), hooks=hooks,
                                                 log_step_count_steps=None, **kwargs) as sess:
        while not sess.should_stop():
            _, value = await sess.run([train_op, step], {x: X, y: Y})
            history.append(int(value))
        stats = sess.statistics()
    return history, stats


async def test_initializes_saves_on_schedule_and_stops_at_last_step(tmp_path):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, _ = _model()
        history, stats = await _train(tmp_path, [af.train.StopAtStepHook(last_step=10)],
                                      save_checkpoint_steps=3, feeds=(x, y),
                                      fetches=(train_op, step))
    assert history == list(range(1, 11))
    assert stats.runs == 10 and stats.recoveries == 0 and stats.sessions_created == 1
    assert stats.restored_checkpoint is None
    state = af.train.get_checkpoint_state(str(tmp_path))
    saved = sorted(int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths)
    assert saved == [0, 3, 6, 9, 10]  # at creation, every 3 steps, and at the end
    assert af.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-10")


async def test_restores_latest_checkpoint_and_continues(tmp_path):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, _ = _model()
        await _train(tmp_path, [af.train.StopAtStepHook(last_step=6)],
                     save_checkpoint_steps=100, feeds=(x, y), fetches=(train_op, step))
        # The final state was saved at the end, so a new loop resumes at step 6.
        async with af.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path)) as sess:
            assert await sess.run(step) == 6
            w_restored = await sess.run(w)
            assert sess.statistics().restored_checkpoint.endswith("model.ckpt-6")
        history, _ = await _train(tmp_path, [af.train.StopAtStepHook(num_steps=4)],
                                  feeds=(x, y), fetches=(train_op, step))
    assert history == [7, 8, 9, 10]
    assert w_restored != 0.0


async def test_save_checkpoint_secs_uses_the_trio_clock(tmp_path, autojump_clock):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, _ = _model()
        saver_hooks = []
        async with af.train.MonitoredTrainingSession(
                checkpoint_dir=str(tmp_path), save_checkpoint_secs=5,
                hooks=[af.train.StopAtStepHook(last_step=12)], log_step_count_steps=None) as sess:
            saver_hooks = [h for h in sess.hooks if isinstance(h, af.train.CheckpointSaverHook)]
            while not sess.should_stop():
                await trio.sleep(1.0)
                await sess.run(train_op, {x: X, y: Y})
    assert saver_hooks[0].saved_steps == [0, 5, 10, 12]


async def test_default_schedule_is_600_seconds_unless_only_steps_given(tmp_path):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, _ = _model()
        async with af.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path)) as sess:
            (hook,) = [h for h in sess.hooks if isinstance(h, af.train.CheckpointSaverHook)]
            assert hook._timer._every_secs == 600 and hook._timer._every_steps is None
        async with af.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path),
                                                     save_checkpoint_steps=7) as sess:
            (hook,) = [h for h in sess.hooks if isinstance(h, af.train.CheckpointSaverHook)]
            assert hook._timer._every_steps == 7 and hook._timer._every_secs is None


class _RecordingHook(af.train.SessionRunHook):
    """Async and plain methods mixed; records the calls and what after_run received."""

    def __init__(self, tensor, feed):
        self.calls, self.results = [], []
        self._tensor, self._feed = tensor, feed

    def begin(self):
        self.calls.append("begin")

    async def after_create_session(self, session, coord):
        self.calls.append("after_create_session")
        assert not coord.should_stop()

    async def before_run(self, run_context):
        self.calls.append("before_run")
        return af.train.SessionRunArgs({"value": self._tensor}, feed_dict=self._feed)

    def after_run(self, run_context, run_values):
        self.calls.append("after_run")
        self.results.append(run_values.results["value"])
        if len(self.results) == 2:
            run_context.request_stop()

    async def end(self, session):
        self.calls.append("end")


async def test_hooks_async_or_plain_with_fetches_feeds_and_stop(tmp_path):
    with af.Graph().as_default():
        a = af.placeholder(af.float32, [], name="a")
        doubled = a * 2.0
        one = af.constant(1)
        af.train.get_or_create_global_step()
        hook = _RecordingHook(doubled, {a: 21.0})
        async with af.train.MonitoredTrainingSession(hooks=[hook]) as sess:
            while not sess.should_stop():
                assert await sess.run(one) == 1
        with pytest.raises(RuntimeError, match="fed by a SessionRunHook and user"):
            clashing = _RecordingHook(doubled, {a: 1.0})
            async with af.train.MonitoredTrainingSession(hooks=[clashing]) as sess:
                await sess.run(doubled, {a: 2.0})
    assert hook.results == [42.0, 42.0]
    assert hook.calls == ["begin", "after_create_session", "before_run", "after_run",
                          "before_run", "after_run", "end"]


async def test_logging_tensor_hook_every_n_iter_and_at_end(caplog):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, _ = _model()
        hook = af.train.LoggingTensorHook({"w": w, "step": step}, every_n_iter=2, at_end=True)
        with caplog.at_level(logging.INFO, logger="asyncflow.train"):
            async with af.train.MonitoredTrainingSession(
                    hooks=[hook, af.train.StopAtStepHook(last_step=5)],
                    log_step_count_steps=None) as sess:
                while not sess.should_stop():
                    await sess.run(train_op, {x: X, y: Y})
                    await sess.session.run(step)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("w = ")]
    assert len(lines) == 4  # iterations 0, 2, 4 and at end
    assert lines[-1].endswith("step = 5")
    with pytest.raises(ValueError, match="exactly one of every_n_iter"):
        af.train.LoggingTensorHook([loss], every_n_iter=1, every_n_secs=1)


async def test_nan_loss_fails_with_a_clear_error_or_stops(tmp_path):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, _ = _model()
        nan_y = np.full_like(Y, np.nan)
        async with af.train.MonitoredTrainingSession(
                hooks=[af.train.NanTensorHook(loss, fail_on_nan_loss=False)]) as sess:
            await sess.run(train_op, {x: X, y: Y})
            assert not sess.should_stop()
            await sess.run(train_op, {x: X, y: nan_y})
            assert sess.should_stop()
        with pytest.raises(af.train.NanLossDuringTrainingError, match=r"NaN loss during "
                           r"training: loss:0 = nan\. Lower the learning rate"):
            async with af.train.MonitoredTrainingSession(
                    checkpoint_dir=str(tmp_path), save_checkpoint_steps=100,
                    hooks=[af.train.NanTensorHook(loss)]) as sess:
                await sess.run(train_op, {x: X, y: nan_y})
    # Failing out of the block skips end(): only the start-of-session checkpoint exists.
    assert af.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-0")


async def test_stop_at_step_hook_arguments():
    with pytest.raises(ValueError, match="Exactly one"):
        af.train.StopAtStepHook()
    with pytest.raises(ValueError, match="Exactly one"):
        af.train.StopAtStepHook(num_steps=1, last_step=2)
    with af.Graph().as_default():
        with pytest.raises(RuntimeError, match="Global step should be created"):
            async with af.train.MonitoredTrainingSession(hooks=[af.train.StopAtStepHook(1)]):
                pass


async def _undisturbed_final_w(tmp_path, last_step):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, _ = _model()
        async with af.train.MonitoredTrainingSession(
                hooks=[af.train.StopAtStepHook(last_step=last_step)]) as sess:
            while not sess.should_stop():
                await sess.run(train_op, {x: X, y: Y})
            return await sess.run(w)


@pytest.mark.parametrize("error", [af.errors.UnavailableError, af.errors.AbortedError])
async def test_recovers_from_preemption_by_restoring_the_latest_checkpoint(tmp_path, error):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, failures = _model(fail_at=7, error=error)
        history, stats = await _train(tmp_path / "run", [af.train.StopAtStepHook(last_step=12)],
                                      save_checkpoint_steps=5, feeds=(x, y),
                                      fetches=(train_op, step))
        restored_w = None
        async with af.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path / "run")) as sess:
            restored_w = await sess.run(w)
    assert failures == [7]
    # Steps 6 and 7 ran, the run at 7 failed, the session restored step 5 and went on.
    assert history == [1, 2, 3, 4, 5, 6, 7, 6, 7, 8, 9, 10, 11, 12]
    lost = max(a - b for a, b in zip(history, history[1:]))
    assert lost <= 5  # never more than the checkpoint interval
    assert stats.recoveries == 1 and stats.sessions_created == 2
    assert stats.restored_checkpoint.endswith("model.ckpt-5")
    assert "injected failure at step 7" in stats.last_error
    assert len(stats.recovery_seconds) == 1
    # Deterministic training: the replayed steps give exactly the undisturbed result.
    assert restored_w == await _undisturbed_final_w(tmp_path, 12)


async def test_persistent_failure_is_raised_after_recovery_wait(tmp_path, autojump_clock):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, failures = _model(fail_at=2, fail_times=10**9)
        started = trio.current_time()
        with pytest.raises(af.errors.UnavailableError, match="no progress for 5 s"):
            await _train(tmp_path, [], save_checkpoint_steps=1, recovery_wait_secs=5,
                         feeds=(x, y), fetches=(train_op, step))
    assert 5 <= trio.current_time() - started < 8
    assert 3 <= len(failures) < 20  # backoff, not a busy loop


async def test_non_chief_waits_for_the_model_then_gives_up(autojump_clock):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, _ = _model()
        chief_only = _RecordingHook(loss, None)
        # A local session's variables are its own, so no chief ever initializes them.
        with pytest.raises(af.errors.DeadlineExceededError, match="not ready after 3 s"):
            async with af.train.MonitoredTrainingSession(is_chief=False, max_wait_secs=3,
                                                         chief_only_hooks=[chief_only]):
                pass
    assert chief_only.calls == []


async def test_out_of_range_ends_the_loop_cleanly_with_a_final_save(tmp_path):
    with af.Graph().as_default():
        x, y, loss, train_op, step, w, _ = _model()
        async with af.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path),
                                                     save_checkpoint_steps=100) as sess:
            for _ in range(3):
                await sess.run(train_op, {x: X, y: Y})
            raise af.errors.OutOfRangeError(None, None, "input exhausted")
        assert sess.should_stop()
        with pytest.raises(RuntimeError, match="closed MonitoredTrainingSession"):
            await sess.run(train_op, {x: X, y: Y})
    assert af.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-3")
