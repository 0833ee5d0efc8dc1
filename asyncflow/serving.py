"""Request batching for inference: many concurrent callers, one step per batch.

``Batcher`` collects concurrent requests for one graph into batches and runs one
``Session.run`` per batch:

- A request is a dict ``{input_tensor: rows}`` whose arrays share a leading (batch)
  dimension; different requests may carry different numbers of rows.
- The serving task takes the first waiting request, then every request already queued
  (without yielding), and waits for more only while the queue is empty, until the batch
  holds ``max_batch_size`` rows or ``max_wait_ms`` has passed since that first request
  (``max_wait_ms=0`` batches what is queued and never waits); it then concatenates each input along axis 0, runs the step once, splits every fetched output back
  by row counts, and hands each caller its own rows, in its own order.
- A failed step fails every request of that batch with the step's error (one ``OpError``);
  a caller that is cancelled while waiting simply stops waiting: its rows may still be
  computed, and are dropped.

Structured concurrency: ``async with Batcher(...) as batcher:`` (or ``await
nursery.start(batcher.serve)``) owns the serving task; leaving the block stops it and fails
requests that never ran with ``CancelledError``. Works from trio directly and from asyncio
through ``asyncflow.aio.Batcher``.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import trio

from asyncflow import errors


@dataclasses.dataclass(slots=True)
class _Request:
    feeds: list           # arrays aligned with Batcher.inputs
    rows: int
    done: trio.Event
    result: object = None
    error: BaseException | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class BatcherStatistics:
    requests: int
    batches: int
    rows: int
    queued: int
    largest_batch: int


class Batcher:
    """Batch concurrent requests for ``outputs`` given ``inputs`` into single steps.

    Args:
        session: an open ``af.Session``.
        inputs: the tensors each request feeds (their first dimension is the batch).
        outputs: a tensor or list of tensors to fetch; each must have the batch as its
            first dimension.
        max_batch_size: the most rows one step takes.
        max_wait_ms: how long the first request of a batch waits for company.
    """

    def __init__(self, session, inputs, outputs, max_batch_size=64, max_wait_ms=2.0):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self._session = session
        self._inputs = list(inputs)
        self._positions = {t: i for i, t in enumerate(self._inputs)}
        self._dtypes = [object if t.dtype.is_string else t.dtype.np for t in self._inputs]
        self._single = not isinstance(outputs, (list, tuple))
        self._outputs = [outputs] if self._single else list(outputs)
        self._max_rows = int(max_batch_size)
        self._max_wait = max_wait_ms / 1000.0
        self._send, self._receive = trio.open_memory_channel(math.inf)
        self._pending = None  # a request taken from the channel that did not fit a batch
        self._nursery_cm = None
        self._stats = {"requests": 0, "batches": 0, "rows": 0, "largest_batch": 0}

    # -- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self):
        self._nursery_cm = trio.open_nursery()
        nursery = await self._nursery_cm.__aenter__()
        await nursery.start(self.serve)
        self._nursery = nursery
        return self

    async def __aexit__(self, *exc_info):
        self._nursery.cancel_scope.cancel()
        return await self._nursery_cm.__aexit__(*exc_info)

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED):
        """Run the serving loop until cancelled."""
        task_status.started()
        batch = []  # requests taken from the channel: failed if we are interrupted
        try:
            while True:
                batch = []
                await self._collect(batch)
                await self._run_batch(batch)
        finally:
            self._fail_unfinished(batch)

    def statistics(self):
        return BatcherStatistics(queued=self._receive.statistics().current_buffer_used,
                                 **self._stats)

    # -- callers ----------------------------------------------------------------------------
    async def run(self, feed_dict):
        """Submit one request; returns this caller's rows of the outputs.

        Raises:
            InvalidArgumentError: if the feeds don't cover the inputs or disagree on rows.
            OpError: the batch's step error.
        """
        feeds, rows = self._validate(feed_dict)
        request = _Request(feeds, rows, trio.Event())
        self._stats["requests"] += 1
        self._send.send_nowait(request)
        await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result[0] if self._single else request.result

    def _position(self, key):
        """The input index ``key`` (a tensor, variable or name) feeds, resolved once per key."""
        position = self._positions.get(key)
        if position is None:
            tensor = self._session.graph.as_graph_element(
                key._as_tensor() if hasattr(key, "_as_tensor") else key, allow_operation=False)
            position = self._positions.get(tensor)
            if position is None:
                raise errors.InvalidArgumentError(
                    None, None, f"Batcher request feeds {tensor.name}, which is not one of its "
                    f"inputs {[t.name for t in self._inputs]}")
            self._positions[key] = position
        return position

    def _validate(self, feed_dict):
        values = [None] * len(self._inputs)
        for key, value in feed_dict.items():
            values[self._position(key)] = value
        missing = [t.name for t, v in zip(self._inputs, values) if v is None]
        if missing:
            raise errors.InvalidArgumentError(None, None, f"Batcher request is missing feeds for {missing}")
        feeds = [np.asarray(value, dtype=dtype) for value, dtype in zip(values, self._dtypes)]
        rows = {f.shape[0] if f.ndim else None for f in feeds}
        if len(rows) != 1 or None in rows:
            raise errors.InvalidArgumentError(
                None, None, "Batcher request feeds must share a leading batch dimension; got "
                f"shapes {[f.shape for f in feeds]}")
        return feeds, rows.pop()

    # -- serving ----------------------------------------------------------------------------
    async def _collect(self, batch):
        """Fill ``batch`` (in place, so an interruption can fail what it holds)."""
        first = self._pending if self._pending is not None else await self._receive.receive()
        self._pending = None
        batch.append(first)
        rows = first.rows
        deadline = trio.current_time() + self._max_wait
        while rows < self._max_rows:
            # Requests already queued join at once (even past the deadline, or with
            # max_wait_ms=0); only an empty queue waits, and only until the deadline.
            request = None
            try:
                request = self._receive.receive_nowait()
            except trio.WouldBlock:
                with trio.move_on_at(deadline):
                    request = await self._receive.receive()
            if request is None:
                break
            if rows + request.rows > self._max_rows:
                self._pending = request
                break
            batch.append(request)
            rows += request.rows

    async def _run_batch(self, batch):
        feeds = {tensor: np.concatenate([r.feeds[i] for r in batch], axis=0)
                 for i, tensor in enumerate(self._inputs)}
        try:
            outputs = await self._session.run(self._outputs, feeds)
        except errors.OpError as exc:
            for request in batch:
                request.error = exc
                request.done.set()
            return
        total = sum(r.rows for r in batch)
        self._stats["batches"] += 1
        self._stats["rows"] += total
        self._stats["largest_batch"] = max(self._stats["largest_batch"], total)
        start = 0
        for request in batch:
            stop = start + request.rows
            request.result = [np.asarray(out)[start:stop] for out in outputs]
            request.done.set()
            start = stop

    def _fail_unfinished(self, running):
        """Fail the requests of an interrupted batch and every request still queued."""
        leftovers = list(running)
        if self._pending is not None:
            leftovers.append(self._pending)
        while True:
            try:
                leftovers.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
        for request in leftovers:
            if not request.done.is_set():
                request.error = errors.CancelledError(
                    None, None, "the Batcher stopped before this request completed")
                request.done.set()
        self._pending = None
