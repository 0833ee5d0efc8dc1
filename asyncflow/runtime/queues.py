"""Queue resources on trio: FIFO, random-shuffle and padding queues (TF1's QueueBase).

Theory of operation
- A queue holds *elements*; an element is a tuple of arrays, one per component. The queue
  never looks inside: kernels validate shapes, split batches and stack them.
- Everything that may have to wait is an *attempt*, kept in one of two FIFO lists: enqueue
  attempts (elements still to add) and dequeue attempts (how many elements are still needed,
  and those already taken). ``_flush()`` runs after every change of state: it serves the head
  enqueue attempt while there is room, then the head dequeue attempt while elements are
  available, and repeats until neither moves. Attempts are served strictly in arrival order,
  so a waiting ``dequeue_many`` is never starved by later single dequeues.
- trio's pattern: each operation has a synchronous core (``enqueue_nowait``, ...) that either
  completes at once or raises ``trio.WouldBlock`` (also when others are already waiting, so
  order is kept), and an async wrapper that registers an attempt and parks the task with
  ``wait_task_rescheduled``. Completing an attempt reschedules its task with the result.
- Cancellation (the step was cancelled or failed elsewhere, or the session closed) runs the
  abort callback: the attempt leaves its list, and a partly served dequeue puts the elements
  it took back at the front of the queue, in order, so no element is lost.
- Close (TF1 semantics): afterwards a *new* enqueue fails with AbortedError; enqueue attempts
  already waiting still complete as room frees, unless ``cancel_pending_enqueues`` fails them
  with CancelledError; a dequeue that can no longer be satisfied (closed, too few elements and
  no waiting enqueue that could add more) fails with OutOfRangeError and returns its partial
  batch to the front, except ``dequeue_up_to``, which then returns what it has.
  RandomShuffleQueue only hands out elements while more than ``min_after_dequeue`` remain;
  after close that floor is ignored. Unlike TF1, ``close`` returns at once instead of waiting
  behind blocked enqueues; what callers can observe about elements is the same.
- ``close_for_reset`` (session closed, container reset) fails every waiting attempt with
  CancelledError.

Runs in one trio thread: there are no locks; every method runs without awaiting between
reading and changing state. A dequeue that completes just as its step is cancelled loses the
elements it took (TF1 has the same window).
"""
from __future__ import annotations

import collections
import dataclasses
import random

import outcome
import trio

from asyncflow import errors
from asyncflow.runtime.resources import process_resources

FIFO, RANDOM_SHUFFLE, PADDING_FIFO = "FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue"


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStatistics:
    """A snapshot of a queue (what ``statistics()`` returns)."""

    name: str
    size: int
    capacity: int
    closed: bool
    waiting_enqueues: int
    waiting_dequeues: int
    enqueued: int
    dequeued: int


class _Attempt:
    """One waiting enqueue (``elements``/``position``) or dequeue (``need``/``taken``)."""

    __slots__ = ("task", "parked", "result", "elements", "position", "need", "taken",
                 "allow_small")

    def __init__(self, elements=None, need=0, allow_small=False):
        self.task = trio.lowlevel.current_task()
        self.parked = False
        self.result = None
        self.elements = elements
        self.position = 0
        self.need = need
        self.taken = []
        self.allow_small = allow_small


class QueueResource:
    """A bounded queue of elements shared by the steps of a session (or a process).

    Args:
        kind: ``FIFO``, ``RANDOM_SHUFFLE`` or ``PADDING_FIFO``.
        name: the queue's name in error messages.
        capacity: the most elements held (enqueues wait beyond it).
        dtypes: the components' dtype names (for reuse checks).
        shapes: per component a tuple of dims (None for unknown) or None; or None.
        min_after_dequeue: RandomShuffleQueue's floor.
        seed: RandomShuffleQueue's seed (None: OS entropy).
    """

    def __init__(self, kind, name, capacity, dtypes, shapes=None, min_after_dequeue=0,
                 seed=None):
        self.kind = kind
        self.name = name
        self.capacity = capacity
        self.dtypes = tuple(dtypes)
        self.shapes = shapes
        self.min_after_dequeue = min_after_dequeue
        self._rng = random.Random(seed) if kind == RANDOM_SHUFFLE else None
        self._elements = collections.deque() if kind != RANDOM_SHUFFLE else []
        self._enqueuers = collections.deque()
        self._dequeuers = collections.deque()
        self._closed = False
        self._enqueued = 0
        self._dequeued = 0

    # -- sync cores -------------------------------------------------------------------------
    def enqueue_many_nowait(self, elements):
        """Add all ``elements`` now, or raise.

        Raises:
            trio.WouldBlock: not enough room, or other enqueues are waiting ahead.
            AbortedError: the queue is closed.
        """
        self._check_open()
        if self._enqueuers or len(self._elements) + len(elements) > self.capacity:
            raise trio.WouldBlock
        self._push(elements)
        if self._dequeuers:
            self._flush()

    def enqueue_nowait(self, element):
        self.enqueue_many_nowait((element,))

    def dequeue_many_nowait(self, n, allow_small=False):
        """Take ``n`` elements now (fewer for ``allow_small`` once closed), or raise.

        Raises:
            trio.WouldBlock: too few elements, or other dequeues are waiting ahead.
            OutOfRangeError: closed and too few elements will ever arrive.
        """
        available = self._available()
        if self._dequeuers or available < n:
            if self._closed and not self._enqueuers and not self._dequeuers:
                if allow_small and available:
                    n = available
                else:
                    raise self._insufficient(n)
            else:
                raise trio.WouldBlock
        taken = self._pop(n)
        if self._enqueuers:
            self._flush()
        return taken

    def dequeue_nowait(self):
        return self.dequeue_many_nowait(1)[0]

    def peek_nowait(self):
        """The element ``dequeue_nowait`` would return now, without taking it, or None.

        None also for a RandomShuffleQueue (its next element is drawn when taken).
        """
        if self._rng is not None or self._dequeuers or not self._available():
            return None
        return self._elements[0]

    def poll_enqueue_many(self, elements):
        """``enqueue_many_nowait`` for callers without trio: False where it would wait."""
        try:
            self.enqueue_many_nowait(elements)
        except trio.WouldBlock:
            return False
        return True

    def poll_dequeue_many(self, n, allow_small=False):
        """``dequeue_many_nowait`` for callers without trio: None where it would wait."""
        try:
            return self.dequeue_many_nowait(n, allow_small)
        except trio.WouldBlock:
            return None

    # -- async wrappers ---------------------------------------------------------------------
    async def enqueue_many(self, elements):
        """Add ``elements`` in order, waiting for room as needed (they go in as room frees).

        Raises:
            AbortedError: the queue was closed before this call.
            CancelledError: closed with ``cancel_pending_enqueues`` or reset while waiting.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self.enqueue_many_nowait(elements)
        except trio.WouldBlock:
            return await self._wait(_Attempt(elements=list(elements)), self._enqueuers)
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def enqueue(self, element):
        await self.enqueue_many((element,))

    async def dequeue_many(self, n, allow_small=False):
        """``n`` elements in queue order (random order for a shuffle queue).

        Args:
            n: how many.
            allow_small: ``dequeue_up_to``: once closed, return what remains (at least one).

        Raises:
            OutOfRangeError: closed with too few elements (the partial batch goes back).
            CancelledError: the queue was reset while waiting.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            taken = self.dequeue_many_nowait(n, allow_small)
        except trio.WouldBlock:
            return await self._wait(_Attempt(need=n, allow_small=allow_small), self._dequeuers)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return taken

    async def dequeue(self):
        return (await self.dequeue_many(1))[0]

    async def _wait(self, attempt, waiters):
        waiters.append(attempt)
        self._flush()
        if attempt.result is not None:  # served (or failed) while registering
            await trio.lowlevel.cancel_shielded_checkpoint()
            return attempt.result.unwrap()
        attempt.parked = True

        def abort(_raise_cancel):
            self._abandon(attempt, waiters)
            return trio.lowlevel.Abort.SUCCEEDED
        return await trio.lowlevel.wait_task_rescheduled(abort)

    # -- closing ----------------------------------------------------------------------------
    def close(self, cancel_pending_enqueues=False):
        """Refuse new enqueues; see the module docstring for what waiting attempts see."""
        self._closed = True
        if cancel_pending_enqueues:
            self._fail_all(self._enqueuers, "Enqueue operation was cancelled")
        self._flush()

    def close_for_reset(self):
        """The owning session closed or the container was reset: fail every waiter."""
        self._closed = True
        self._fail_all(self._enqueuers, "Enqueue operation was cancelled")
        self._fail_all(self._dequeuers, "Dequeue operation was cancelled")

    @property
    def closed(self):
        return self._closed

    def size(self):
        return len(self._elements)

    def statistics(self):
        return QueueStatistics(self.name, len(self._elements), self.capacity, self._closed,
                               len(self._enqueuers), len(self._dequeuers), self._enqueued,
                               self._dequeued)

    def read(self):
        """The handle's value when a client fetches it: the queue's name."""
        return self.name.encode()

    # -- internals --------------------------------------------------------------------------
    def _check_open(self):
        if self._closed:
            raise errors.AbortedError(None, None, f"{self.kind} '{self.name}' is closed.")

    def _insufficient(self, n):
        return errors.OutOfRangeError(
            None, None, f"{self.kind} '{self.name}' is closed and has insufficient elements "
            f"(requested {n}, current size {len(self._elements)})")

    def _available(self):
        size = len(self._elements)
        if self.kind == RANDOM_SHUFFLE and not self._closed:
            return max(0, size - self.min_after_dequeue)
        return size

    def _push(self, elements):
        self._elements.extend(elements)
        self._enqueued += len(elements)

    def _pop(self, n):
        self._dequeued += n
        elements = self._elements
        if self._rng is None:
            return [elements.popleft() for _ in range(n)]
        # Swap a uniformly drawn element to the end and pop it. ``int(random() * size)`` is
        # uniform over ``range(size)`` for the sizes a queue holds and costs a fraction of
        # ``randrange`` (one call per element taken, on the consumer's step).
        out = []
        draw, pop, append = self._rng.random, elements.pop, out.append
        for size in range(len(elements), len(elements) - n, -1):
            index = int(draw() * size)
            elements[index], elements[-1] = elements[-1], elements[index]
            append(pop())
        return out

    def _put_back(self, taken):
        self._dequeued -= len(taken)
        if self._rng is None:
            self._elements.extendleft(reversed(taken))
        else:
            self._elements.extend(taken)

    def _finish(self, attempt, result):
        if attempt.parked:
            trio.lowlevel.reschedule(attempt.task, result)
        else:
            attempt.result = result

    def _fail_all(self, waiters, message):
        while waiters:
            attempt = waiters.popleft()
            if attempt.taken:
                self._put_back(attempt.taken)
            self._finish(attempt, outcome.Error(errors.CancelledError(
                None, None, f"{message} ({self.kind} '{self.name}' was closed)")))

    def _abandon(self, attempt, waiters):
        waiters.remove(attempt)
        if attempt.taken:
            self._put_back(attempt.taken)
            attempt.taken = []
        self._flush()

    def _flush(self):
        moved = True
        while moved:
            moved = self._serve_enqueues() | self._serve_dequeues()

    def _serve_enqueues(self):
        moved = False
        while self._enqueuers:
            attempt = self._enqueuers[0]
            room = self.capacity - len(self._elements)
            if room <= 0:
                break
            chunk = attempt.elements[attempt.position:attempt.position + room]
            self._push(chunk)
            attempt.position += len(chunk)
            moved = True
            if attempt.position < len(attempt.elements):
                break
            self._enqueuers.popleft()
            self._finish(attempt, outcome.Value(None))
        return moved

    def _serve_dequeues(self):
        moved = False
        while self._dequeuers:
            attempt = self._dequeuers[0]
            available = self._available()
            if available:
                n = min(available, attempt.need)
                attempt.taken.extend(self._pop(n))
                attempt.need -= n
                moved = True
                if attempt.need == 0:
                    self._dequeuers.popleft()
                    self._finish(attempt, outcome.Value(attempt.taken))
                    continue
            if not (self._closed and not self._enqueuers):
                break
            self._dequeuers.popleft()
            moved = True
            if attempt.allow_small and attempt.taken:
                self._finish(attempt, outcome.Value(attempt.taken))
                continue
            requested = attempt.need + len(attempt.taken)
            self._put_back(attempt.taken)
            self._finish(attempt, outcome.Error(self._insufficient(requested)))
        return moved


def _spec(attrs, kind):
    shapes = attrs.get("shapes") or None
    if shapes is not None:
        shapes = tuple(None if s.dims is None else tuple(s.dims) for s in shapes)
    return {
        "capacity": int(attrs["capacity"]),
        "dtypes": tuple(d.name for d in attrs["component_types"]),
        "shapes": shapes,
        "min_after_dequeue": int(attrs.get("min_after_dequeue", 0)) if kind == RANDOM_SHUFFLE
        else 0,
    }


def _describe(value):
    return "unspecified" if value is None else str(list(value) if isinstance(value, tuple)
                                                   else value)


def lookup_or_create(node_ctx):
    """The queue resource a queue node (FIFOQueue, ...) names, created on first use.

    A queue with a ``shared_name`` on a local session lives in the process-wide manager, so
    sessions in one process share it until ``Session.reset``.

    Raises:
        InvalidArgumentError: a shared queue reopened with another kind, capacity, dtypes,
            shapes or min_after_dequeue, naming which.
    """
    attrs, kind = node_ctx.attrs, node_ctx.type
    shared = attrs.get("shared_name") or ""
    manager = process_resources() if shared and node_ctx.resources.local else node_ctx.resources
    name = shared or node_ctx.name
    spec = _spec(attrs, kind)

    def create():
        seed, seed2 = attrs.get("seed"), attrs.get("seed2")
        entropy = None if seed is None and seed2 is None else (int(seed or 0) << 32) + int(seed2 or 0)
        return QueueResource(kind, name, spec["capacity"], spec["dtypes"], spec["shapes"],
                             spec["min_after_dequeue"], entropy)

    def check(existing):
        if not isinstance(existing, QueueResource) or existing.kind != kind:
            found = getattr(existing, "kind", type(existing).__name__)
            raise errors.InvalidArgumentError(
                None, None, f"Shared resource '{name}' is a {found}, but a {kind} was requested")
        for field in ("capacity", "dtypes", "shapes", "min_after_dequeue"):
            have, want = getattr(existing, field), spec[field]
            if have != want:
                label = {"dtypes": "component types", "shapes": "component shapes"}.get(field, field)
                raise errors.InvalidArgumentError(
                    None, None, f"Shared queue '{name}' has {label} {_describe(have)} but "
                    f"requested {label} {_describe(want)}")
    return manager.lookup_or_create(attrs.get("container", ""), name, create, check)
