"""Session run hooks: code that watches or steers a training loop (TF1's ``SessionRunHook``).

Theory of operation:
- A hook is called by ``MonitoredTrainingSession`` at fixed points of a session's life:
  ``begin()`` once, before the first session exists (the graph may still grow);
  ``after_create_session(session, coord)`` each time a session is created, including after a
  recovery; ``before_run(run_context)`` before every ``run``, returning ``SessionRunArgs``
  (extra fetches, feeds, options) or None; ``after_run(run_context, run_values)`` with the
  values of its extra fetches; ``end(session)`` when the loop ends cleanly. Each method may be
  a plain function or ``async def``: the caller awaits whatever is awaitable.
- A hook stops the loop with ``run_context.request_stop()``; ``sess.should_stop()`` then
  turns True after the current run.
- Hooks that look at the global step fetch it in ``before_run`` (so it costs no extra run):
  the value read is the step *before* the train op increments it, as in TF1.
- Timers use ``trio.current_time()`` (monotonic, and virtual under ``autojump_clock``).
"""
from __future__ import annotations

import inspect
import logging
import math
import os
import typing

import numpy as np
import trio

from asyncflow.kernels.summary_ops import summary_value
from asyncflow.train.saver import default_saver
from asyncflow.train.training_util import get_global_step

logger = logging.getLogger("asyncflow.train")


class NanLossDuringTrainingError(RuntimeError):
    """The loss became NaN (raised by ``NanTensorHook(fail_on_nan_loss=True)``)."""


class SessionRunArgs(typing.NamedTuple):
    """What a hook adds to a run: fetches (any fetch structure), feeds, options."""

    fetches: object = None
    feed_dict: dict | None = None
    options: object = None


class SessionRunValues(typing.NamedTuple):
    """What a hook gets back: the values of its fetches, the options, the run metadata."""

    results: object
    options: object
    run_metadata: object


class SessionRunContext:
    """The run in progress, as a hook sees it: its arguments, the session, a stop switch.

    Args:
        original_args: the caller's SessionRunArgs.
        session: the af.Session the run goes to.
    """

    def __init__(self, original_args, session):
        self.original_args = original_args
        self.session = session
        self._stop_requested = False

    def request_stop(self):
        """Make ``should_stop()`` of the monitored session True after this run."""
        self._stop_requested = True

    @property
    def stop_requested(self):
        return self._stop_requested


async def call_hook(method, *args):
    """Call a hook method that may be plain or async; return its result."""
    result = method(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


class SessionRunHook:
    """Base class of hooks: every method does nothing unless overridden (plain or async)."""

    def begin(self):
        pass

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        return None

    def after_run(self, run_context, run_values):
        pass

    def end(self, session):
        pass


def _require_global_step(hook_name):
    step = get_global_step()
    if step is None:
        raise RuntimeError(f"Global step should be created to use {hook_name} "
                           "(af.train.get_or_create_global_step())")
    return step


class SecondOrStepTimer:
    """Fires every ``every_secs`` seconds or every ``every_steps`` steps (exactly one of them).

    Raises:
        ValueError: if both or neither are given.
    """

    def __init__(self, every_secs=None, every_steps=None):
        if (every_secs is None) == (every_steps is None):
            raise ValueError("exactly one of every_secs and every_steps must be given, got "
                             f"every_secs={every_secs!r}, every_steps={every_steps!r}")
        self._every_secs, self._every_steps = every_secs, every_steps
        self.reset()

    def reset(self):
        self._last_time = None
        self._last_step = None

    def should_trigger_for_step(self, step):
        """True if ``step`` is due (the first step always is; a repeated step never)."""
        if self._last_step is None:
            return True
        if step == self._last_step:
            return False
        if self._every_secs is not None:
            return trio.current_time() >= self._last_time + self._every_secs
        return step >= self._last_step + self._every_steps

    def update_last_triggered_step(self, step):
        """Record a trigger at ``step``; return (seconds, steps) since the previous one or None."""
        now = trio.current_time()
        elapsed = None if self._last_time is None else (now - self._last_time,
                                                        step - self._last_step)
        self._last_time, self._last_step = now, step
        return elapsed

    def last_triggered_step(self):
        return self._last_step


class StopAtStepHook(SessionRunHook):
    """Requests a stop when the global step reaches a value.

    Args:
        num_steps: stop after this many more steps (counted from the step the first session
            starts at: after a restore, the restored step).
        last_step: stop when the global step reaches this value.

    Raises:
        ValueError: unless exactly one of the two is given (and non-negative).
    """

    def __init__(self, num_steps=None, last_step=None):
        if (num_steps is None) == (last_step is None):
            raise ValueError("Exactly one of num_steps or last_step should be specified.")
        if (num_steps if num_steps is not None else last_step) < 0:
            raise ValueError("num_steps and last_step must be non-negative")
        self._num_steps, self._last_step = num_steps, last_step

    def begin(self):
        self._global_step = _require_global_step("StopAtStepHook")

    async def after_create_session(self, session, coord):
        if self._last_step is None:
            self._last_step = int(await session.run(self._global_step)) + self._num_steps

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step)

    async def after_run(self, run_context, run_values):
        if int(run_values.results) + 1 >= self._last_step:
            # The fetched value may predate this run's increment: read it again to be sure.
            if int(await run_context.session.run(self._global_step)) >= self._last_step:
                run_context.request_stop()


class LoggingTensorHook(SessionRunHook):
    """Logs tensors' values every N runs or seconds (logger ``asyncflow.train``, INFO).

    Args:
        tensors: a dict ``{tag: tensor or name}`` or a list of tensors or names.
        every_n_iter: log every this many runs.
        every_n_secs: log every this many seconds (instead of ``every_n_iter``).
        at_end: also log the final values in ``end``.
        formatter: ``f(dict tag -> value) -> str``; default ``tag = value, ...``.

    Raises:
        ValueError: unless exactly one of ``every_n_iter``/``every_n_secs`` is given
            (or only ``at_end``).
    """

    def __init__(self, tensors, every_n_iter=None, every_n_secs=None, at_end=False,
                 formatter=None):
        only_at_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_at_end and (every_n_iter is None) == (every_n_secs is None):
            raise ValueError("either at_end and/or exactly one of every_n_iter and "
                             "every_n_secs must be provided")
        if every_n_iter is not None and every_n_iter <= 0:
            raise ValueError(f"invalid every_n_iter={every_n_iter}")
        if not isinstance(tensors, dict):
            tensors = {getattr(t, "name", t): t for t in tensors}
        self._tags = list(tensors)
        self._tensors = tensors
        self._timer = None if only_at_end else SecondOrStepTimer(every_n_secs, every_n_iter)
        self._at_end, self._formatter = at_end, formatter
        self._iter = 0
        self.last_logged = None  # the last dict logged (tests and callers may read it)

    def begin(self):
        self._iter = 0
        if self._timer is not None:
            self._timer.reset()

    def before_run(self, run_context):
        self._due = self._timer is not None and self._timer.should_trigger_for_step(self._iter)
        return SessionRunArgs(self._tensors) if self._due else None

    def _log(self, values):
        self.last_logged = dict(values)
        if self._formatter is not None:
            logger.info(self._formatter(values))
        else:
            logger.info(", ".join(f"{tag} = {values[tag]}" for tag in self._tags))

    def after_run(self, run_context, run_values):
        if self._due:
            self._timer.update_last_triggered_step(self._iter)
            self._log(run_values.results)
        self._iter += 1

    async def end(self, session):
        if self._at_end:
            self._log(await session.run(self._tensors))


class NanTensorHook(SessionRunHook):
    """Fails (or stops) when the loss is NaN.

    Args:
        loss_tensor: the loss tensor.
        fail_on_nan_loss: raise NanLossDuringTrainingError (True) or request a stop (False).
    """

    def __init__(self, loss_tensor, fail_on_nan_loss=True):
        self._loss = loss_tensor
        self._fail = fail_on_nan_loss

    def before_run(self, run_context):
        return SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        value = np.asarray(run_values.results)
        if not np.isnan(value).any():
            return
        name = getattr(self._loss, "name", self._loss)
        message = (f"NaN loss during training: {name} = {value.tolist()}. Lower the learning "
                   "rate, clip gradients, or check the input for NaN/Inf "
                   "(af.check_numerics finds the op that produces it).")
        if self._fail:
            raise NanLossDuringTrainingError(message)
        logger.warning("%s Stopping training.", message)
        run_context.request_stop()


class CheckpointSaverHook(SessionRunHook):
    """Saves a checkpoint when a session is created, every N steps or seconds, and at the end.

    Args:
        checkpoint_dir: where to write ``<basename>-<global step>.safetensors``.
        save_secs: save every this many seconds.
        save_steps: save every this many global steps (instead of ``save_secs``).
        saver: the Saver (default: the scaffold's, else one of the graph's SAVERS, else new).
        checkpoint_basename: the file prefix.
        scaffold: a Scaffold whose saver to use.

    Raises:
        ValueError: unless exactly one of ``save_secs``/``save_steps`` is given.
    """

    def __init__(self, checkpoint_dir, save_secs=None, save_steps=None, saver=None,
                 checkpoint_basename="model.ckpt", scaffold=None):
        self._timer = SecondOrStepTimer(save_secs, save_steps)
        self._dir, self._saver, self._scaffold = checkpoint_dir, saver, scaffold
        self._basename = checkpoint_basename
        self.saved_steps = []  # global steps at which this hook saved, in order

    def begin(self):
        self._global_step = _require_global_step("CheckpointSaverHook")

    def _get_saver(self):
        if self._saver is None and self._scaffold is not None:
            self._saver = self._scaffold.saver
        if self._saver is None:
            self._saver = default_saver()
        return self._saver

    async def _save(self, session, step):
        path = os.path.join(self._dir, self._basename)
        await self._get_saver().save(session, path, global_step=step)
        self._timer.update_last_triggered_step(step)
        self.saved_steps.append(step)
        logger.info("Saved checkpoint for step %d into %s.", step, self._dir)

    async def after_create_session(self, session, coord):
        # The state at session start (initialized or restored) is always on disk.
        step = int(await session.run(self._global_step))
        if self._timer.last_triggered_step() != step:
            await self._save(session, step)

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step)

    async def after_run(self, run_context, run_values):
        stale = int(run_values.results)
        if self._timer.should_trigger_for_step(stale + 1):
            step = int(await run_context.session.run(self._global_step))
            if self._timer.should_trigger_for_step(step):
                await self._save(run_context.session, step)

    async def end(self, session):
        step = int(await session.run(self._global_step))
        if self._timer.last_triggered_step() != step:
            await self._save(session, step)


class StepCounterHook(SessionRunHook):
    """Measures global steps per second; logs it and writes a ``global_step/sec`` summary.

    Args:
        every_n_steps: measure every this many global steps.
        every_n_secs: measure every this many seconds (instead of ``every_n_steps``).
        summary_writer: an ``af.summary.FileWriter`` to receive the scalar (optional).
    """

    def __init__(self, every_n_steps=100, every_n_secs=None, summary_writer=None):
        if every_n_secs is not None:
            every_n_steps = None
        self._timer = SecondOrStepTimer(every_n_secs, every_n_steps)
        self._writer = summary_writer
        self.steps_per_sec = None  # the last measurement

    def begin(self):
        self._global_step = _require_global_step("StepCounterHook")
        self._timer.reset()

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results) + 1
        if not self._timer.should_trigger_for_step(step):
            return
        elapsed = self._timer.update_last_triggered_step(step)
        if elapsed is None or elapsed[0] <= 0 or elapsed[1] <= 0:
            return
        self.steps_per_sec = elapsed[1] / elapsed[0]
        if math.isfinite(self.steps_per_sec):
            logger.info("global_step/sec: %g", self.steps_per_sec)
            if self._writer is not None:
                self._writer.add_summary(summary_value("global_step/sec", self.steps_per_sec),
                                         step)
