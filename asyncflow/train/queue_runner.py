"""Queue runners and the Coordinator, as structured concurrency on trio.

TF1 fills input queues from Python threads (QueueRunner) and stops them with a Coordinator.
Here every enqueue op of a runner is a trio *task* that runs the op again and again in a
nursery the caller owns:

    async with af.train.start_queue_runners(sess) as coord:
        while not coord.should_stop():
            await sess.run(train_op)

TF1's form works too: ``threads = af.train.start_queue_runners(sess=sess, coord=coord)``
starts the runners as tasks owned by the session (``QueueRunnerTasks``); they run until
``coord.request_stop()`` (then ``await coord.join(threads)``) or until the session closes.

- A runner's task ends normally when its enqueue fails because the input is exhausted
  (OutOfRangeError, e.g. ``num_epochs`` reached) or its queue was closed (CancelledError,
  AbortedError). The last task of a runner to end closes the runner's queue, so consumers
  drain what is left and then see OutOfRangeError.
- Any other error is recorded by the Coordinator (the first one only), stops everything, and
  is raised once, when the ``async with`` block exits (or by ``await coord.join()``).
- Leaving the block (normally, on error, or after ``coord.request_stop()``) requests a stop,
  closes every runner's queue with ``cancel_pending_enqueues=True`` (so enqueues blocked on
  a full queue end), cancels runner tasks still waiting elsewhere, and waits for all of them.
- An OutOfRangeError raised by the block itself is the normal end of input and is swallowed
  (TF1's ``coord.stop_on_exception()``); a runner error makes the coordinator cancel the block.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging

import trio

from asyncflow import errors
from asyncflow.graph import GraphKeys
from asyncflow.graph.graph import get_default_graph
from asyncflow.exec.options import RunMetadata

_LOG = logging.getLogger(__name__)
_CLOSED_TYPES = (errors.OutOfRangeError, errors.CancelledError, errors.AbortedError)


class Coordinator:
    """Stop signal and first error shared by a training loop and its queue runners.

    Args:
        clean_stop_exception_types: errors that mean "stop" rather than "fail"
            (default: OutOfRangeError).
    """

    def __init__(self, clean_stop_exception_types=None):
        self._clean = tuple(clean_stop_exception_types or (errors.OutOfRangeError,))
        self._stop = trio.Event()
        self._exception = None
        self._reported = False
        self._running = 0
        self._idle = trio.Event()
        self._idle.set()

    def request_stop(self, ex=None):
        """Ask everyone to stop; record ``ex`` unless it is a clean stop or one is recorded."""
        if ex is not None and self._exception is None and not isinstance(ex, self._clean):
            self._exception = ex
        self._stop.set()

    def should_stop(self):
        return self._stop.is_set()

    def clear_stop(self):
        """Forget the stop request and any recorded error (before a restart)."""
        self._stop = trio.Event()
        self._exception = None
        self._reported = False

    async def wait_for_stop(self, timeout=None):
        """Wait until a stop is requested; returns whether it was (False after ``timeout``)."""
        with trio.move_on_after(float("inf") if timeout is None else timeout):
            await self._stop.wait()
        return self._stop.is_set()

    @contextlib.contextmanager
    def stop_on_exception(self):
        """``with coord.stop_on_exception():`` turns an exception into ``request_stop(ex)``."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - recorded, raised once by join
            self.request_stop(exc)

    @property
    def exception(self):
        return self._exception

    def raise_requested_exception(self):
        """Raise the recorded error, once."""
        if self._exception is not None and not self._reported:
            self._reported = True
            raise self._exception

    @contextlib.contextmanager
    def _task(self):
        self._running += 1
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        try:
            yield
        finally:
            self._running -= 1
            if self._running == 0:
                self._idle.set()

    @property
    def running_tasks(self):
        return self._running

    async def join(self, threads=None, stop_grace_period_secs=120, ignore_live_threads=False):
        """Wait until every runner task has ended, then raise the recorded error (once).

        ``threads`` and the other arguments are accepted for TF1 compatibility: every task
        started with this Coordinator is waited for.
        """
        await self._idle.wait()
        self.raise_requested_exception()


class QueueRunner:
    """Enqueue ops to run in parallel to keep a queue full (TF1's ``tf.train.QueueRunner``).

    Args:
        queue: the queue (a QueueBase) the ops fill.
        enqueue_ops: ops (or tensors) to run, one task each.
        close_op: run when the input is exhausted (default ``queue.close()``).
        cancel_op: run on stop (default ``queue.close(cancel_pending_enqueues=True)``).
        queue_closed_exception_types: errors that end a task normally.
    """

    def __init__(self, queue=None, enqueue_ops=None, close_op=None, cancel_op=None,
                 queue_closed_exception_types=None):
        if queue is None or not enqueue_ops:
            raise ValueError("QueueRunner needs a queue and at least one enqueue op")
        self.queue = queue
        self.enqueue_ops = list(enqueue_ops)
        self.close_op = close_op if close_op is not None else queue.close()
        self.cancel_op = cancel_op if cancel_op is not None else \
            queue.close(cancel_pending_enqueues=True)
        self.queue_closed_exception_types = tuple(queue_closed_exception_types or _CLOSED_TYPES)
        self._runs_left = 0

    @property
    def name(self):
        return self.queue.name

    def start(self, sess, coord, nursery, options=None, on_metadata=None):
        """Start one task per enqueue op in ``nursery``.

        Args:
            options: RunOptions for every enqueue run (e.g. FULL_TRACE), or None.
            on_metadata: called with each run's RunMetadata (for timelines), or None.
        """
        self._runs_left = len(self.enqueue_ops)
        for op in self.enqueue_ops:
            nursery.start_soon(self._run, sess, coord, op, options, on_metadata,
                               name=f"QueueRunner {self.name}")

    async def _run(self, sess, coord, enqueue_op, options, on_metadata):
        with coord._task():
            try:
                while not coord.should_stop():
                    metadata = RunMetadata() if on_metadata is not None else None
                    await sess.run(enqueue_op, options=options, run_metadata=metadata)
                    if metadata is not None:
                        on_metadata(metadata)
                    # A run that needed no wait returned without a schedule point: yield,
                    # so consumers and the other runners run between our steps.
                    await trio.lowlevel.checkpoint()
            except self.queue_closed_exception_types:
                self._runs_left -= 1
                if self._runs_left == 0 and not sess.closed:
                    try:
                        await sess.run(self.close_op)
                    except errors.OpError as exc:
                        coord.request_stop(exc)
            except Exception as exc:  # noqa: BLE001 - recorded, raised once on exit
                # Logged here, with its traceback, as TF1's runner threads do: a consumer of
                # the queue sees only that it was closed.
                _LOG.error("Exception in QueueRunner %s: %s", self.name, exc, exc_info=exc)
                coord.request_stop(exc)

    async def cancel(self, sess):
        """Close the queue, failing enqueues blocked on it (used on stop)."""
        if not sess.closed:
            with contextlib.suppress(errors.OpError):
                await sess.run(self.cancel_op)


def add_queue_runner(qr, collection=GraphKeys.QUEUE_RUNNERS):
    """Register ``qr`` so ``start_queue_runners`` starts it."""
    qr.queue.graph.add_to_collection(collection, qr)


def start_queue_runners(sess=None, coord=None, daemon=True, start=True,
                        collection=GraphKeys.QUEUE_RUNNERS, options=None, on_metadata=None):
    """Start every queue runner of ``sess.graph``'s ``collection`` as tasks the session owns.

    Two forms. TF1's plain call starts the runners at once and returns; they run until
    ``coord.request_stop()`` or until the session closes::

        coord = af.train.Coordinator()
        threads = af.train.start_queue_runners(sess=sess, coord=coord)
        ...
        coord.request_stop()
        await coord.join(threads)

    The structured form scopes them to a block, and raises a runner's error when it exits::

        async with af.train.start_queue_runners(sess) as coord:
            ...

    Args:
        sess: an open Session (must be called from its trio task).
        coord: a Coordinator (a new one when None); the block receives it.
        daemon, start: accepted for TF1 compatibility (runners always start).
        collection: the collection holding the QueueRunners.
        options, on_metadata: passed to every runner run (see ``QueueRunner.start``).

    Returns:
        A ``QueueRunnerTasks``: an async context manager yielding the Coordinator, which
        also iterates as TF1's list of "threads" (here: one entry per runner).
    """
    if sess is None:
        raise ValueError("start_queue_runners needs the session: start_queue_runners(sess=sess)")
    coord = coord if coord is not None else Coordinator()
    runners = list((sess.graph or get_default_graph()).get_collection(collection))
    return QueueRunnerTasks(sess, coord, runners, options, on_metadata)


class QueueRunnerTasks:
    """The runner tasks that ``start_queue_runners`` started (see there).

    They run as one trio system task with a cancel scope of its own, registered with the
    session, so closing the session stops them even when no block encloses them (TF1's form:
    a plain call whose runners outlive the call). Structured concurrency is kept where it
    matters: every task ends before ``async with`` exits, before ``coord.join()`` returns,
    or when the session closes, and no error of theirs is lost (the Coordinator keeps it).
    A session is often entered without ``async with`` (``MonitoredTrainingSession``,
    ``asyncflow.aio``), so it cannot lend a nursery of its own.
    """

    def __init__(self, sess, coord, runners, options, on_metadata):
        self.coord = coord
        self.runners = runners
        self._sess = sess
        self._done = trio.Event()
        self._runner_scope = trio.CancelScope()
        self._body_scope = None
        self._counted = coord._task()
        self._counted.__enter__()  # join() waits for us from now, not from when we first run
        owner = getattr(sess, "_owned_tasks", None)
        if owner is not None:
            owner.append(self.stop)
        trio.lowlevel.spawn_system_task(self._main, options, on_metadata,
                                        name="start_queue_runners",
                                        context=contextvars.copy_context())

    def __iter__(self):
        return iter(self.runners)

    def __len__(self):
        return len(self.runners)

    def stop(self):
        """Request a stop and cancel the runner tasks (they end shortly after)."""
        self.coord.request_stop()
        self._runner_scope.cancel()

    async def wait(self):
        """Wait until every runner task has ended."""
        await self._done.wait()

    async def _main(self, options, on_metadata):
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._stop_watch)
                await _run_runners(self._sess, self.coord, self.runners, self._runner_scope,
                                   options, on_metadata)
                if not self.coord.should_stop():  # every runner ended: the input ran out
                    nursery.cancel_scope.cancel()
                # else the stop watch finishes its work (closing queues, ending the block)
        except Exception as exc:  # noqa: BLE001 - a system task must not raise: recorded
            self.coord.request_stop(exc)
        finally:
            owner = getattr(self._sess, "_owned_tasks", None)
            if owner is not None and self.stop in owner:
                owner.remove(self.stop)
            self._done.set()
            self._counted.__exit__(None, None, None)

    async def _stop_watch(self):
        """On stop: close the runners' queues and end their tasks; after an error, end the
        enclosing block."""
        await self.coord._stop.wait()
        for runner in self.runners:
            await runner.cancel(self._sess)
        self._runner_scope.cancel()
        if self.coord.exception is not None and self._body_scope is not None:
            self._body_scope.cancel()

    async def __aenter__(self):
        self._body_scope = trio.CancelScope()
        self._body_scope.__enter__()
        if self.coord.exception is not None:
            self._body_scope.cancel()
        return self.coord

    async def __aexit__(self, exc_type, exc, tb):
        suppressed = self._body_scope.__exit__(exc_type, exc, tb)
        self._body_scope = None
        self.coord.request_stop()
        with trio.CancelScope(shield=True):
            await self._done.wait()
        if exc_type is not None and not suppressed and not issubclass(exc_type, errors.OutOfRangeError):
            return False  # the block's own error wins (it is not the normal end of input)
        self.coord.raise_requested_exception()
        return True


async def _run_runners(sess, coord, runners, scope, options, on_metadata):
    with scope:  # QueueRunnerTasks counts itself as the coordinator's task around this
        async with trio.open_nursery() as nursery:
            for runner in runners:
                runner.start(sess, coord, nursery, options, on_metadata)
