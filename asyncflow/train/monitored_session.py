"""``af.train.MonitoredTrainingSession``: a training loop's session that saves, hooks and recovers.

    async with af.train.MonitoredTrainingSession(checkpoint_dir=d, hooks=[...]) as sess:
        while not sess.should_stop():
            await sess.run(train_op, feed)

Theory of operation (TF1's MonitoredSession = _RecoverableSession(_CoordinatedSession(
_HookedSession(Session))), flattened into one class):
- Entering: the Scaffold fills in what the caller left out (init op, ready op, local init
  op, a Saver over the global variables), hooks get ``begin()``, the graph is finalized (a
  loop that keeps adding ops is a bug), then a session is *created*.
- Creating a session: open ``af.Session(master, graph, config, cluster)``; the chief restores
  the latest checkpoint of ``checkpoint_dir`` if there is one, else runs the init op (and
  ``init_fn``); a non-chief waits until the ready op reports no uninitialized variable (the
  chief initializes the shared ones), up to ``max_wait_secs``. Then the local init op runs,
  and every hook gets ``after_create_session(session, coord)``. The chief's
  CheckpointSaverHook saves right there, so a checkpoint of the start state always exists.
- ``run``: each hook's ``before_run`` may add fetches, feeds and options; one ``sess.run``
  fetches everything; each hook's ``after_run`` sees its own results; a stop request makes
  ``should_stop()`` True.
- Recovery: a run (hooks included) that fails with ``UnavailableError`` or ``AbortedError``
  (a worker died, a step was aborted) closes the session and creates a new one, retrying
  with exponential backoff (0.05 s doubling to 1 s) while creation itself fails that way,
  until ``recovery_wait_secs`` have passed. A new cluster session re-registers the graph's
  partitions on the workers (a restarted worker is a new incarnation), and the restore puts
  the variables back to the latest checkpoint: what is lost is at most the steps since it.
  The failed run is then run again on the new session, so the caller's loop never sees the
  error. Local sessions recover at once. Concurrent runs share one recovery (a generation
  number tells a run whether the session it failed on was already replaced).
- Leaving cleanly (or on OutOfRangeError, the normal end of input, which is swallowed) calls
  every hook's ``end(session)`` (the CheckpointSaverHook saves the final state), then closes
  the session. Leaving on another error closes without ``end``.
- ``statistics()`` returns a frozen record: runs, recoveries, sessions created, recovery
  durations, the last checkpoint restored.
"""
from __future__ import annotations

import dataclasses
import logging

import trio

from asyncflow import errors
from asyncflow.graph.graph import GraphKeys, get_default_graph
from asyncflow.ops.state import (
    global_variables_initializer, local_variables_initializer, report_uninitialized_variables,
)
from asyncflow.exec.options import RunOptions
from asyncflow.session import Session
from asyncflow.train.hooks import (
    CheckpointSaverHook, SessionRunArgs, SessionRunContext, SessionRunValues, StepCounterHook,
    call_hook,
)
from asyncflow.train.queue_runner import Coordinator
from asyncflow.train.saver import default_saver, latest_checkpoint
from asyncflow.train.training_util import get_global_step

logger = logging.getLogger("asyncflow.train")

PREEMPTION_ERRORS = (errors.AbortedError, errors.UnavailableError)
USE_DEFAULT = object()
_READY_OP = "ready_op"
_BACKOFF_START_S, _BACKOFF_MAX_S = 0.05, 1.0


class Scaffold:
    """The ops a MonitoredTrainingSession needs; whatever is None gets TF1's default.

    Args:
        init_op: initializes the model (default: ``global_variables_initializer()``).
        init_feed_dict: feeds for ``init_op``.
        init_fn: ``init_fn(scaffold, session)`` (plain or async), run after ``init_op``.
        ready_op: a string tensor of uninitialized variable names (default:
            ``report_uninitialized_variables()``); a non-chief waits until it is empty.
        local_init_op: run after every session creation (default: the local variables'
            initializer).
        saver: the Saver used to restore and save (default: ``default_saver()``).
    """

    def __init__(self, init_op=None, init_feed_dict=None, init_fn=None, ready_op=None,
                 local_init_op=None, saver=None):
        self.init_op, self.init_feed_dict, self.init_fn = init_op, init_feed_dict, init_fn
        self.ready_op, self.local_init_op, self.saver = ready_op, local_init_op, saver

    def finalize(self, graph):
        """Fill in the missing defaults, shared through the graph's collections.

        A default is taken from its collection when an earlier Scaffold put it there, and
        created (and put there) otherwise, so several MonitoredTrainingSessions on one graph
        reuse the same ops (TF1's ``Scaffold.get_or_default``).
        """
        with graph.as_default():
            if self.init_op is None:
                self.init_op = _get_or_default(graph, GraphKeys.INIT_OP,
                                               global_variables_initializer)
            if self.ready_op is None:
                self.ready_op = _get_or_default(graph, _READY_OP, report_uninitialized_variables)
            if self.local_init_op is None:
                self.local_init_op = _get_or_default(graph, GraphKeys.LOCAL_INIT_OP,
                                                     local_variables_initializer)
            if self.saver is None:
                self.saver = default_saver(graph)
        return self


def _get_or_default(graph, key, make):
    items = graph.get_collection(key)
    if len(items) > 1:
        raise RuntimeError(f"More than one item in the {key!r} collection; pass the op to use "
                           "in a Scaffold")
    if items:
        return items[0]
    op = make()
    graph.add_to_collection(key, op)
    return op


@dataclasses.dataclass(frozen=True, slots=True)
class MonitoredSessionStatistics:
    """A snapshot of a MonitoredTrainingSession's bookkeeping.

    Attributes:
        runs: runs that completed (hooks included).
        recoveries: runs that failed with Unavailable/Aborted and were recovered.
        sessions_created: sessions opened (1 + recoveries, plus failed creation attempts
            that got as far as opening).
        recovery_seconds: per recovery, seconds from the failure to the new session ready.
        recovery_log: per recovery, ``(failed_at, ready_at, error type name)`` in
            ``trio.current_time()`` seconds.
        restored_checkpoint: the checkpoint the latest session was restored from, or None.
        last_error: the message of the last recovered error, or None.
    """

    runs: int
    recoveries: int
    sessions_created: int
    recovery_seconds: tuple
    recovery_log: tuple
    restored_checkpoint: str | None
    last_error: str | None


def _merge_options(base, extra):
    if extra is None:
        return base
    merged = RunOptions(timeout_in_ms=max(base.timeout_in_ms, extra.timeout_in_ms),
                        trace_level=max(base.trace_level, extra.trace_level))
    return merged


class MonitoredTrainingSession:
    """A session for training loops: init/restore, periodic checkpoints, hooks, recovery.

    Args:
        master: the Session target (as ``af.Session``).
        is_chief: the chief initializes or restores, and saves checkpoints; others wait for
            the model to be ready.
        checkpoint_dir: where checkpoints are restored from and saved to (None: neither).
        scaffold: a Scaffold (default: all defaults).
        hooks: SessionRunHooks for every task.
        chief_only_hooks: hooks used only when ``is_chief``.
        save_checkpoint_secs: save every this many seconds (default 600, unless only
            ``save_checkpoint_steps`` is given; None: not by time).
        save_checkpoint_steps: save every this many global steps (None: not by steps).
        config: a SessionConfig.
        cluster: a ClusterSpec: the sessions are a cluster's master.
        graph: the graph (default: the default graph).
        log_step_count_steps: the chief logs global steps/sec this often (None or 0: never).
        max_wait_secs: how long a non-chief waits for the chief to initialize the model.
        recovery_wait_secs: how long a recovery waits for the cluster to be whole again.
    """

    def __init__(self, master="", is_chief=True, checkpoint_dir=None, *, scaffold=None,
                 hooks=None, chief_only_hooks=None, save_checkpoint_secs=USE_DEFAULT,
                 save_checkpoint_steps=USE_DEFAULT, config=None, cluster=None, graph=None,
                 log_step_count_steps=100, max_wait_secs=7200.0, recovery_wait_secs=120.0):
        if save_checkpoint_secs is USE_DEFAULT:
            both_default = save_checkpoint_steps is USE_DEFAULT
            save_checkpoint_secs = 600 if both_default or save_checkpoint_steps is None else None
        if save_checkpoint_steps is USE_DEFAULT:
            save_checkpoint_steps = None
        self._master, self._is_chief, self._dir = master, is_chief, checkpoint_dir
        self._scaffold = scaffold or Scaffold()
        self._config, self._cluster = config, cluster
        self._graph = graph
        self._max_wait, self._recovery_wait = max_wait_secs, recovery_wait_secs
        self._hooks = list(hooks or [])
        if is_chief:
            self._hooks += list(chief_only_hooks or [])
        self._save_secs, self._save_steps = save_checkpoint_secs, save_checkpoint_steps
        self._log_step_count_steps = log_step_count_steps
        self._sess = None
        self._coord = None
        self._generation = 0
        self._recovery_lock = trio.Lock()
        self._should_stop = False
        self._entered = self._closed = False
        self._runs = self._recoveries = self._sessions_created = 0
        self._recovery_log = []
        self._restored = None
        self._last_error = None
        self._streak_started = self._streak_delay = None

    # -- properties -----------------------------------------------------------------------
    @property
    def graph(self):
        return self._graph

    @property
    def session(self):
        """The af.Session in use now (None between a failure and its recovery)."""
        return self._sess

    @property
    def hooks(self):
        return list(self._hooks)

    def should_stop(self):
        """True once a hook or the coordinator asked to stop, or the session is closed."""
        return self._closed or self._should_stop or (
            self._coord is not None and self._coord.should_stop())

    def statistics(self):
        """A MonitoredSessionStatistics snapshot."""
        return MonitoredSessionStatistics(
            runs=self._runs, recoveries=self._recoveries,
            sessions_created=self._sessions_created,
            recovery_seconds=tuple(ready - failed for failed, ready, _ in self._recovery_log),
            recovery_log=tuple(self._recovery_log),
            restored_checkpoint=self._restored, last_error=self._last_error)

    # -- entering and leaving ---------------------------------------------------------------
    async def __aenter__(self):
        if self._entered:
            raise RuntimeError("A MonitoredTrainingSession can be entered only once")
        self._entered = True
        self._graph = self._graph or get_default_graph()
        self._scaffold.finalize(self._graph)
        with self._graph.as_default():
            self._add_default_hooks()
            for hook in self._hooks:
                await call_hook(hook.begin)
        self._graph.finalize()
        await self._create_with_retries(first=True)
        return self

    def _add_default_hooks(self):
        if not self._is_chief:
            return
        has_step = get_global_step(self._graph) is not None
        if self._log_step_count_steps and has_step:
            self._hooks.append(StepCounterHook(every_n_steps=self._log_step_count_steps))
        if self._dir is not None and (self._save_secs or self._save_steps):
            if not has_step:
                raise RuntimeError("MonitoredTrainingSession saves checkpoints under the global "
                                   "step: create it (af.train.get_or_create_global_step())")
            self._hooks.append(CheckpointSaverHook(
                self._dir, save_secs=self._save_secs or None,
                save_steps=None if self._save_secs else self._save_steps,
                scaffold=self._scaffold))

    async def __aexit__(self, exc_type, exc, tb):
        clean = exc_type is None or issubclass(exc_type, (errors.OutOfRangeError,
                                                          StopAsyncIteration))
        try:
            if clean and not self._closed:
                await self._with_recovery(self._call_end_hooks)
        finally:
            await self.close()
        return clean and exc_type is not None

    async def _call_end_hooks(self, session):
        for hook in self._hooks:
            await call_hook(hook.end, session)

    async def close(self):
        """Close the session without calling the hooks' ``end``."""
        self._closed = True
        await self._close_session()

    async def _close_session(self):
        sess, self._sess = self._sess, None
        if self._coord is not None:
            self._coord.request_stop()
        if sess is not None:
            with trio.CancelScope(shield=True):
                try:
                    await sess.close()
                except Exception as exc:  # noqa: BLE001 - a broken session may fail to close
                    logger.warning("closing a failed session raised %r", exc)

    # -- creating sessions ------------------------------------------------------------------
    async def _create_session(self):
        sess = Session(self._master, graph=self._graph, config=self._config,
                       cluster=self._cluster)
        await sess.__aenter__()
        self._sessions_created += 1
        try:
            if self._is_chief:
                await self._restore_or_initialize(sess)
            else:
                await self._wait_until_ready(sess)
            await sess.run(self._scaffold.local_init_op)
            coord = Coordinator()
            for hook in self._hooks:
                await call_hook(hook.after_create_session, sess, coord)
        except BaseException:
            with trio.CancelScope(shield=True):
                await sess.close()
            raise
        self._sess, self._coord = sess, coord
        self._generation += 1

    async def _restore_or_initialize(self, sess):
        path = None
        if self._dir is not None:  # on a cluster, the Saver reads where its Save op writes
            find = getattr(self._scaffold.saver, "latest_checkpoint", None)
            path = (await find(sess, self._dir)) if find is not None else \
                latest_checkpoint(self._dir)
        if path is not None:
            await self._scaffold.saver.restore(sess, path)
            self._restored = path
            logger.info("Restored the model from %s", path)
            return
        await sess.run(self._scaffold.init_op, feed_dict=self._scaffold.init_feed_dict)
        if self._scaffold.init_fn is not None:
            await call_hook(self._scaffold.init_fn, self._scaffold, sess)

    async def _wait_until_ready(self, sess):
        deadline = trio.current_time() + self._max_wait
        delay = _BACKOFF_START_S
        while True:
            pending = await sess.run(self._scaffold.ready_op)
            if len(pending) == 0:
                return
            if trio.current_time() + delay > deadline:
                names = ", ".join(v.decode() if isinstance(v, bytes) else str(v)
                                  for v in list(pending)[:10])
                raise errors.DeadlineExceededError(
                    None, None, f"The model was not ready after {self._max_wait} s (the chief "
                    f"has not initialized or restored it); uninitialized: {names}")
            await trio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX_S)

    async def _create_with_retries(self, first=False, cause=None):
        """Create a session, retrying with backoff while the cluster is not whole."""
        deadline = trio.current_time() + self._recovery_wait
        delay = _BACKOFF_START_S
        while True:
            try:
                await self._create_session()
                return
            except PREEMPTION_ERRORS as exc:
                if trio.current_time() + delay > deadline:
                    what = "start" if first else f"recover from: {cause}"
                    raise errors.UnavailableError(
                        None, None, f"The cluster was not whole within {self._recovery_wait} s "
                        f"(recovery_wait_secs, trying to {what}); last error: {exc}") from exc
                logger.info("session creation failed (%s); retrying in %.2f s", exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX_S)

    async def _recover(self, generation, exc):
        """Replace the session that failed with ``exc`` (unless another run already did).

        A failure on a session that has not completed a run since it was created is part of
        a streak: it waits (backoff) before the next attempt, and a streak longer than
        ``recovery_wait_secs`` gives up, so a fault that persists is raised, not retried
        forever.
        """
        async with self._recovery_lock:
            if generation != self._generation and self._sess is not None:
                return
            started = trio.current_time()
            if self._streak_started is None:
                self._streak_started, self._streak_delay = started, _BACKOFF_START_S
            elif started - self._streak_started > self._recovery_wait:
                raise errors.UnavailableError(
                    None, None, f"Training made no progress for {self._recovery_wait} s: every "
                    f"new session failed again; last error: {exc}") from (
                        exc if isinstance(exc, BaseException) else None)
            else:
                await trio.sleep(self._streak_delay)
                self._streak_delay = min(self._streak_delay * 2, _BACKOFF_MAX_S)
            self._recoveries += 1
            self._last_error = str(exc)
            logger.warning("step failed with %s: %s; recovering from the latest checkpoint",
                           type(exc).__name__, exc)
            await self._close_session()
            await self._create_with_retries(cause=exc)
            self._recovery_log.append((started, trio.current_time(), type(exc).__name__))

    async def _with_recovery(self, body):
        """Await ``body(session)``, recovering and retrying on preemption errors."""
        while True:
            if self._closed:
                raise RuntimeError("Attempted to use a closed MonitoredTrainingSession.")
            if self._sess is None:
                await self._recover(self._generation, self._last_error)
            sess, generation = self._sess, self._generation
            try:
                result = await body(sess)
            except PREEMPTION_ERRORS as exc:
                await self._recover(generation, exc)
                continue
            self._streak_started = None
            return result

    # -- running ----------------------------------------------------------------------------
    async def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Run ``fetches`` with the hooks; recover from Unavailable/Aborted and run again.

        Returns:
            The values of ``fetches`` (as ``af.Session.run``).

        Raises:
            RuntimeError: if the session is closed or was never entered.
            OpError: any error other than Unavailable/Aborted, and those too when the
                cluster does not come back within ``recovery_wait_secs``.
            NanLossDuringTrainingError: from a NanTensorHook.
        """
        if not self._entered:
            raise RuntimeError("Use MonitoredTrainingSession with `async with`")

        async def body(sess):
            return await self._hooked_run(sess, fetches, feed_dict, options, run_metadata)

        result = await self._with_recovery(body)
        self._runs += 1
        return result

    async def _hooked_run(self, sess, fetches, feed_dict, options, run_metadata):
        context = SessionRunContext(SessionRunArgs(fetches, feed_dict, options), sess)
        options = options or RunOptions()
        all_fetches, feeds = {"caller": fetches}, dict(feed_dict or {})
        for hook in self._hooks:
            request = await call_hook(hook.before_run, context)
            if request is None:
                continue
            if request.fetches is not None:
                all_fetches[hook] = request.fetches
            for key, value in (request.feed_dict or {}).items():
                if key in feeds:
                    raise RuntimeError(f"Same tensor is fed by a SessionRunHook and user: {key}")
                feeds[key] = value
            options = _merge_options(options, request.options)
        outputs = await sess.run(all_fetches, feed_dict=feeds or None, options=options,
                                 run_metadata=run_metadata)
        for hook in self._hooks:
            values = SessionRunValues(outputs.get(hook), options, run_metadata)
            await call_hook(hook.after_run, context, values)
        self._should_stop = self._should_stop or context.stop_requested
        return outputs["caller"]
