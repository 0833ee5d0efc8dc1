"""Request batching for inference: many concurrent callers, one step per batch.

``Batcher`` collects concurrent requests for one graph into batches and runs one
``Session.run`` per batch:

- A request is a dict ``{input_tensor: rows}`` whose arrays share a leading (batch)
  dimension; different requests may carry different numbers of rows.
- The serving task sleeps until a request arrives. Then, unless ``max_batch_size`` rows are
  already queued, it waits for company until the batch is full or ``max_wait_ms`` has passed
  since the batch's first request was queued (TF Serving's batch timeout: a request that
  already waited that long behind running batches goes at once; ``max_wait_ms=0`` never
  waits: it batches what is queued). It takes queued requests in
  arrival order up to ``max_batch_size`` rows (a request that does not fit waits for the next
  batch; one larger than the limit runs alone), concatenates each input along axis 0, runs the
  step once, splits every fetched output back by row counts, and hands each caller its own
  rows, in its own order.
- Arrivals wake the serving task only when it has nothing to do or the batch just filled up,
  and each caller parks on its own task (no event object, no channel): a request costs a park
  and a wake-up, which is what makes batching many small requests pay.
- A failed step fails every request of that batch with the step's error (one ``OpError``); a
  caller cancelled while waiting stops waiting: if its request was not yet taken it is
  dropped, otherwise its rows are computed and discarded.

``BatchQueue`` is the event-loop-free half (validation, queueing, cutting batches, splitting
results) shared with ``asyncflow.aio.Batcher``, which drives it from asyncio.

Structured concurrency: ``async with Batcher(...) as batcher:`` (or ``await
nursery.start(batcher.serve)``) owns the serving task; leaving the block stops it and fails
requests that never ran with ``CancelledError``.
"""
from __future__ import annotations

import collections
import dataclasses

import numpy as np
import outcome
import trio

from asyncflow import errors


class _Request:
    __slots__ = ("feeds", "rows", "waiter", "abandoned", "arrival")

    def __init__(self, feeds, rows, waiter):
        self.feeds = feeds          # arrays aligned with the batcher's inputs
        self.rows = rows
        self.waiter = waiter        # the front end's handle to wake the caller
        self.abandoned = False      # the caller stopped waiting
        self.arrival = 0.0          # when it was queued (the front end's loop clock)


@dataclasses.dataclass(frozen=True, slots=True)
class BatcherStatistics:
    """What a Batcher has done so far (a frozen record, as trio's ``statistics()``)."""

    requests: int
    batches: int
    rows: int
    queued: int
    largest_batch: int

    def as_dict(self):
        """The fields as a plain dict, ready for ``json.dumps`` (a service's stats endpoint)."""
        return dataclasses.asdict(self)


class BatchQueue:
    """Validated requests in arrival order, cut into batches; no event loop involved.

    Args:
        graph: the graph the inputs belong to (feed keys may be names or variables).
        inputs, outputs, max_batch_size: see ``Batcher``.
        settle: ``settle(waiter, result, error)`` wakes one caller (the front end's).
    """

    def __init__(self, graph, inputs, outputs, max_batch_size, settle):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self._graph = graph
        self.inputs = list(inputs)
        self._positions = {t: i for i, t in enumerate(self.inputs)}
        self._dtypes = [np.dtype(object) if t.dtype.is_string else np.dtype(t.dtype.np)
                        for t in self.inputs]
        self._row_dims = [None if t.shape.dims is None else tuple(t.shape.dims[1:])
                          for t in self.inputs]
        # The first input's row shape when fully known: one tuple comparison checks a request.
        first = self._row_dims[0] if self._row_dims else None
        self._row_shape = first if first is not None and None not in first else ()
        self._one_input = len(self.inputs) == 1
        self.single = not isinstance(outputs, (list, tuple))
        self.outputs = [outputs] if self.single else list(outputs)
        self.max_rows = int(max_batch_size)
        self._settle = settle
        self._queue = collections.deque()
        self.queued_rows = 0
        self.requests = self.batches = self.rows = self.largest_batch = 0

    # -- requests ---------------------------------------------------------------------------
    def request(self, feed_dict, waiter):
        """A validated request for ``feed_dict`` (not queued yet).

        Raises:
            InvalidArgumentError: if the feeds don't cover the inputs or disagree on rows.
        """
        if self._one_input and len(feed_dict) == 1:  # the common case, kept short
            (key, value), = feed_dict.items()
            if self._positions.get(key) == 0 or self._position(key) == 0:
                array = value if type(value) is np.ndarray and value.dtype == self._dtypes[0] \
                    else self._as_array(0, value)
                shape = array.shape
                if shape and shape[1:] == self._row_shape:
                    return _Request([array], shape[0], waiter)
                return _Request([array], self._rows(0, array, [value]), waiter)
        values = [None] * len(self.inputs)
        for key, value in feed_dict.items():
            values[self._position(key)] = value
        missing = [t.name for t, v in zip(self.inputs, values) if v is None]
        if missing:
            raise errors.InvalidArgumentError(
                None, None, f"Batcher request is missing feeds for {missing}")
        feeds = [self._as_array(i, value) for i, value in enumerate(values)]
        rows = {self._rows(i, array, values) for i, array in enumerate(feeds)}
        if len(rows) != 1:
            raise errors.InvalidArgumentError(
                None, None, "Batcher request feeds must share a leading batch dimension; got "
                f"shapes {[f.shape for f in feeds]}")
        return _Request(feeds, rows.pop(), waiter)

    def _as_array(self, index, value):
        return np.asarray(value, dtype=self._dtypes[index])

    def _rows(self, index, array, values):
        """The batch rows of ``array`` fed to input ``index``, checked against its shape."""
        shape = array.shape
        row_dims = self._row_dims[index]
        if not shape or (row_dims is not None and (len(row_dims) != len(shape) - 1 or any(
                want is not None and want != have for want, have in zip(row_dims, shape[1:])))):
            tensor = self.inputs[index]
            if not shape:
                raise errors.InvalidArgumentError(
                    None, tensor.op, "Batcher request feeds must share a leading batch "
                    f"dimension; got shapes {[np.shape(v) for v in values]}")
            raise errors.InvalidArgumentError(
                None, tensor.op, f"Batcher request rows of shape {shape[1:]} cannot feed "
                f"{tensor.name}, whose rows have shape {list(row_dims)}")
        return shape[0]

    def _position(self, key):
        """The input index ``key`` (a tensor, variable or name) feeds, resolved once per key."""
        position = self._positions.get(key)
        if position is None:
            tensor = self._graph.as_graph_element(
                key._as_tensor() if hasattr(key, "_as_tensor") else key, allow_operation=False)
            position = self._positions.get(tensor)
            if position is None:
                raise errors.InvalidArgumentError(
                    None, None, f"Batcher request feeds {tensor.name}, which is not one of its "
                    f"inputs {[t.name for t in self.inputs]}")
            self._positions[key] = position
        return position

    def put(self, request, now):
        request.arrival = now
        self._queue.append(request)
        self.queued_rows += request.rows
        self.requests += 1

    @property
    def pending(self):
        """Whether any request is queued."""
        return bool(self._queue)

    def company_deadline(self, max_wait):
        """When the next batch stops waiting for company: ``max_wait`` after its first
        request was queued (TF Serving's ``batch_timeout_micros``), so a request that already
        waited that long in the queue, behind running batches, does not wait again."""
        return self._queue[0].arrival + max_wait

    @property
    def full(self):
        """Whether the queued rows fill a batch."""
        return self.queued_rows >= self.max_rows

    # -- batches ----------------------------------------------------------------------------
    def take(self):
        """The next batch: queued requests in order, up to ``max_rows`` (at least one)."""
        queue, batch, rows = self._queue, [], 0
        while queue:
            request = queue[0]
            if batch and rows + request.rows > self.max_rows:
                break
            queue.popleft()
            self.queued_rows -= request.rows
            if request.abandoned:
                continue
            batch.append(request)
            rows += request.rows
            if rows >= self.max_rows:
                break
        return batch

    def feeds(self, batch):
        """The step's feed dict: each input's rows of every request, concatenated."""
        if len(batch) == 1:
            return dict(zip(self.inputs, batch[0].feeds))
        return {tensor: np.concatenate([r.feeds[i] for r in batch], axis=0)
                for i, tensor in enumerate(self.inputs)}

    def deliver(self, batch, outputs):
        """Hand each request of ``batch`` its rows of ``outputs`` (the step's fetches)."""
        total = sum(r.rows for r in batch)
        self.batches += 1
        self.rows += total
        self.largest_batch = max(self.largest_batch, total)
        arrays = [np.asarray(out) for out in outputs]
        for array in arrays:
            if array.ndim == 0 or array.shape[0] != total:
                self.fail(batch, errors.InvalidArgumentError(
                    None, None, f"Batcher output of shape {array.shape} does not have the "
                    f"batch's {total} rows as its first dimension"))
                return
        start = 0
        for request in batch:
            stop = start + request.rows
            if not request.abandoned:
                rows = [array[start:stop] for array in arrays]
                self._settle(request.waiter, rows[0] if self.single else rows, None)
            start = stop

    async def run_batch(self, run, batch):
        """One step for ``batch`` through ``run`` (a session's ``run``, awaited under
        whichever loop drives this queue); every caller gets its rows or the step's error."""
        try:
            outputs = await run(self.outputs, self.feeds(batch))
        except Exception as exc:  # noqa: BLE001 - every caller of the batch gets the error
            self.fail(batch, exc)
            return
        self.deliver(batch, outputs)

    def fail(self, batch, error):
        for request in batch:
            if not request.abandoned:
                request.abandoned = True
                self._settle(request.waiter, None, error)

    def fail_queued(self, error):
        """Fail every queued request (the serving task is stopping)."""
        queued = list(self._queue)
        self._queue.clear()
        self.queued_rows = 0
        self.fail(queued, error)

    def statistics(self):
        return BatcherStatistics(requests=self.requests, batches=self.batches, rows=self.rows,
                                 queued=len(self._queue), largest_batch=self.largest_batch)


def stopped_error():
    return errors.CancelledError(None, None, "the Batcher stopped before this request completed")


def _reschedule(task, result, error):
    trio.lowlevel.reschedule(task, outcome.Value(result) if error is None else outcome.Error(error))


class Batcher:
    """Batch concurrent requests for ``outputs`` given ``inputs`` into single steps (trio).

    Args:
        session: an open ``af.Session``.
        inputs: the tensors each request feeds (their first dimension is the batch).
        outputs: a tensor or list of tensors to fetch; each must have the batch as its
            first dimension.
        max_batch_size: the most rows one step takes.
        max_wait_ms: how long after the first request of a batch was queued the batch may
            wait for company.
    """

    def __init__(self, session, inputs, outputs, max_batch_size=64, max_wait_ms=2.0):
        self._session = session
        self._queue = BatchQueue(session.graph, inputs, outputs, max_batch_size, _reschedule)
        self._max_wait = max_wait_ms / 1000.0
        self._server = None         # the serving task while it is parked
        self._wake_on_first = False  # parked with nothing queued (else: waiting for company)
        self._serving = False
        self._nursery_cm = self._nursery = None

    # -- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self):
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        await self._nursery.start(self.serve)
        return self

    async def __aexit__(self, *exc_info):
        self._nursery.cancel_scope.cancel()
        return await self._nursery_cm.__aexit__(*exc_info)

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED):
        """Run the serving loop until cancelled."""
        queue = self._queue
        self._serving = True
        task_status.started()
        batch = []  # taken from the queue: failed if we are interrupted
        try:
            while True:
                batch = []
                if not queue.pending:
                    await self._park(wake_on_first=True)
                if not queue.full and self._max_wait > 0:
                    deadline = queue.company_deadline(self._max_wait)
                    if deadline > trio.current_time():
                        with trio.move_on_at(deadline):
                            await self._park(wake_on_first=False)
                batch = queue.take()
                if batch:
                    await queue.run_batch(self._session.run, batch)
        finally:
            self._serving = False
            queue.fail(batch, stopped_error())
            queue.fail_queued(stopped_error())

    async def _park(self, wake_on_first):
        self._server, self._wake_on_first = trio.lowlevel.current_task(), wake_on_first

        def abort(_):
            self._server = None
            return trio.lowlevel.Abort.SUCCEEDED
        await trio.lowlevel.wait_task_rescheduled(abort)

    def statistics(self):
        return self._queue.statistics()

    # -- callers ----------------------------------------------------------------------------
    async def run(self, feed_dict):
        """Submit one request; returns this caller's rows of the outputs.

        Raises:
            InvalidArgumentError: if the feeds don't cover the inputs or disagree on rows.
            CancelledError: if the Batcher is not serving or stops before answering.
            OpError: the batch's step error.
        """
        queue = self._queue
        request = queue.request(feed_dict, trio.lowlevel.current_task())
        if not self._serving:
            await trio.lowlevel.checkpoint()
            raise stopped_error()
        queue.put(request, trio.current_time())
        server = self._server
        if server is not None and (self._wake_on_first or queue.full):
            self._server = None
            trio.lowlevel.reschedule(server)

        def abort(_):
            request.abandoned = True
            return trio.lowlevel.Abort.SUCCEEDED
        return await trio.lowlevel.wait_task_rescheduled(abort)

