"""Queue runners and the Coordinator, as structured concurrency on trio.

TF1 fills input queues from Python threads (QueueRunner) and stops them with a Coordinator.
Here every enqueue op of a runner is a trio *task* that runs the op again and again in a
nursery the caller owns:

    async with af.train.start_queue_runners(sess) as coord:
        while not coord.should_stop():
            await sess.run(train_op)

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

import trio

from asyncflow import errors
from asyncflow.graph import GraphKeys
from asyncflow.graph.graph import get_default_graph
from asyncflow.runtime.options import RunMetadata

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

    async def join(self):
        """Wait until every runner task has ended, then raise the recorded error (once)."""
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
                coord.request_stop(exc)

    async def cancel(self, sess):
        """Close the queue, failing enqueues blocked on it (used on stop)."""
        if not sess.closed:
            with contextlib.suppress(errors.OpError):
                await sess.run(self.cancel_op)


def add_queue_runner(qr, collection=GraphKeys.QUEUE_RUNNERS):
    """Register ``qr`` so ``start_queue_runners`` starts it."""
    qr.queue.graph.add_to_collection(collection, qr)


@contextlib.asynccontextmanager
async def start_queue_runners(sess, coord=None, collection=GraphKeys.QUEUE_RUNNERS,
                              options=None, on_metadata=None):
    """Run every queue runner of ``sess.graph``'s ``collection`` as tasks while the block runs.

    Args:
        sess: an open Session.
        coord: a Coordinator (a new one when None); the block receives it.
        collection: the collection holding the QueueRunners.
        options, on_metadata: passed to every runner run (see ``QueueRunner.start``).

    Yields:
        The Coordinator.

    Raises:
        The first error a runner hit (once), after every task has stopped.
    """
    coord = coord if coord is not None else Coordinator()
    runners = list((sess.graph or get_default_graph()).get_collection(collection))
    runner_scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_run_runners, sess, coord, runners, runner_scope, options,
                           on_metadata)
        nursery.start_soon(_stop_watch, sess, coord, runners, runner_scope, nursery.cancel_scope)
        try:
            yield coord
        except errors.OutOfRangeError:
            pass  # the input ran out: the normal end of a training loop
        finally:
            coord.request_stop()
    coord.raise_requested_exception()


async def _run_runners(sess, coord, runners, scope, options, on_metadata):
    with coord._task(), scope:
        async with trio.open_nursery() as nursery:
            for runner in runners:
                runner.start(sess, coord, nursery, options, on_metadata)


async def _stop_watch(sess, coord, runners, runner_scope, body_scope):
    """On stop: close the runners' queues and end their tasks; after an error, end the body."""
    await coord._stop.wait()
    for runner in runners:
        await runner.cancel(sess)
    runner_scope.cancel()
    if coord.exception is not None:
        body_scope.cancel()
