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
- trio's pattern: each operation has a synchronous core (``enqueue_many_nowait``, ...)
  that either completes at once or raises ``trio.WouldBlock`` (also when others are already
  waiting, so order is kept), and an async wrapper that registers an attempt and parks the
  task with ``wait_task_rescheduled``. Completing an attempt reschedules its task with the result.
- Cancellation (the step was cancelled or failed elsewhere, or the session closed) runs the
  abort callback: the attempt leaves its list, and a partly served dequeue puts the elements
  it took back at the front of the queue, in order, so no element is lost.
- Close (TF1 semantics): afterwards a *new* enqueue fails with CancelledError ("... is
  closed.", as TF 1.x's QueueBase); enqueue attempts
  already waiting still complete as room frees, unless ``cancel_pending_enqueues`` fails them
  with CancelledError; a dequeue that can no longer be satisfied (closed, too few elements and
  no waiting enqueue that could add more) fails with OutOfRangeError and returns its partial
  batch to the front, except ``dequeue_up_to``, which then returns what it has.
  RandomShuffleQueue only hands out elements while more than ``min_after_dequeue`` remain;
  after close that floor is ignored. Unlike TF1, ``close`` returns at once instead of waiting
  behind blocked enqueues; what callers can observe about elements is the same.
- ``close_for_reset`` (session closed, container reset) fails every waiting attempt with
  CancelledError.
- Storage: a queue whose components all have fully defined shapes (not a padding queue) keeps
  its elements *columnar*: per component one growing array, rows along axis 0. A batch comes
  in as ``Rows`` (one array per component, see ``_split`` in kernels/data_flow.py) and is
  copied in with one slice assignment per component; ``dequeue_many`` gathers its rows with
  one copy per component (a random gather for the shuffle queue), so no work is done per
  element. Other queues keep a deque (FIFO) or list (shuffle) of element tuples. Both accept
  and hand out lists of element tuples too; a columnar queue hands out ``Rows``, which index
  and iterate as element tuples.
- The shuffle queue draws like swapping a uniformly drawn element to the end and popping it,
  one draw per element, in both storages (the columnar one replays the swaps on positions).

Runs in one trio thread: there are no locks; every method runs without awaiting between
reading and changing state. A dequeue that completes just as its step is cancelled loses the
elements it took (TF1 has the same window).
"""
from __future__ import annotations

import collections
import dataclasses
import random

import numpy as np
import outcome
import trio

from asyncflow import errors
from asyncflow.exec.resources import process_resources

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


class Rows:
    """A block of elements held columnar: one array per component, one row per element.

    Indexing with an int gives that element's tuple (0-d arrays for scalar components);
    slicing gives a ``Rows`` of views; ``len`` is the number of elements.
    """

    __slots__ = ("columns",)

    def __init__(self, columns):
        self.columns = tuple(columns)

    def __len__(self):
        return len(self.columns[0])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Rows(c[index] for c in self.columns)
        return tuple(c[index, ...] for c in self.columns)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


class _ElementStore:
    """Elements as tuples: a deque (FIFO order) or, with ``rng``, a list drawn from at random."""

    def __init__(self, rng):
        self._rng = rng
        self._items = collections.deque() if rng is None else []

    def __len__(self):
        return len(self._items)

    def push(self, elements):
        self._items.extend(elements)

    def peek(self):
        return self._items[0]

    def pop(self, n):
        items = self._items
        if self._rng is None:
            return [items.popleft() for _ in range(n)]
        # Swap a uniformly drawn element to the end and pop it. ``int(random() * size)`` is
        # uniform over ``range(size)`` for the sizes a queue holds and costs a fraction of
        # ``randrange`` (one call per element taken, on the consumer's step).
        out = []
        draw, pop, append = self._rng.random, items.pop, out.append
        for size in range(len(items), len(items) - n, -1):
            index = int(draw() * size)
            items[index], items[-1] = items[-1], items[index]
            append(pop())
        return out

    def put_back(self, chunks):
        taken = [e for chunk in chunks for e in chunk]
        if self._rng is None:
            self._items.extendleft(reversed(taken))
        else:
            self._items.extend(taken)

    @staticmethod
    def join(chunks):
        return [e for chunk in chunks for e in chunk]


class _ColumnStore:
    """Elements of fixed shapes, columnar: live rows are ``[head, head + size)`` of each array."""

    def __init__(self, rng, shapes):
        self._rng = rng
        self._shapes = shapes
        self._columns = None
        self._head = 0
        self._size = 0

    def __len__(self):
        return self._size

    def _reserve(self, n, dtypes):
        """Room for ``n`` more rows after the live ones (arrays of ``dtypes`` at first)."""
        if self._columns is None:
            alloc = max(2 * n, 16)
            # Strings are held as objects, as the kernels pass them (numpy's fixed-width
            # bytes would truncate a later, longer string).
            self._columns = [np.empty((alloc,) + tuple(shape),
                                      object if dtype.kind in "SUO" else dtype)
                             for dtype, shape in zip(dtypes, self._shapes)]
            return
        alloc = len(self._columns[0])
        if self._head + self._size + n <= alloc:
            return
        need = self._size + n
        if 2 * need > alloc:
            alloc = 2 * need
        live = slice(self._head, self._head + self._size)
        columns = [np.empty((alloc,) + b.shape[1:], b.dtype) for b in self._columns]
        for new, old in zip(columns, self._columns):
            new[:self._size] = old[live]
        self._columns, self._head = columns, 0

    def push(self, elements):
        n = len(elements)
        if not n:
            return
        if isinstance(elements, Rows):
            self._reserve(n, [c.dtype for c in elements.columns])
            end = self._head + self._size
            for buffer, column in zip(self._columns, elements.columns):
                buffer[end:end + n] = column
        else:
            self._reserve(n, [np.asarray(v).dtype for v in elements[0]])
            end = self._head + self._size
            for i, element in enumerate(elements, end):
                for buffer, value in zip(self._columns, element):
                    buffer[i, ...] = value  # elementwise, also for object arrays
        self._size += n

    def peek(self):
        return tuple(b[self._head, ...].copy() for b in self._columns)

    def pop(self, n):
        if not n:
            return []
        head = self._head
        if self._rng is None:
            out = Rows(b[head:head + n].copy() for b in self._columns)
            self._head += n
        else:
            out = self._draw(n)
        self._size -= n
        if not self._size:
            self._head = 0
        return out

    def _draw(self, n):
        """``_ElementStore.pop``'s swap-to-end draws, replayed on positions, then one gather."""
        moved, picks = {}, []
        draw, get, append = self._rng.random, None, picks.append
        get = moved.get
        for size in range(self._size, self._size - n, -1):
            index = int(draw() * size)
            append(get(index, index))
            moved[index] = get(size - 1, size - 1)
        head, rest = self._head, self._size - n
        picks = np.asarray(picks, dtype=np.intp) + head
        out = Rows(b[picks] for b in self._columns)
        holes = [(p, s) for p, s in moved.items() if p < rest and p != s]
        if holes:
            dst, src = (np.asarray(v, dtype=np.intp) + head for v in zip(*holes))
            for buffer in self._columns:
                buffer[dst] = buffer[src]
        return out

    def put_back(self, chunks):
        block = self.join(chunks)
        k = len(block)
        if not k:
            return
        if self._rng is not None:
            self.push(block)  # counts the rows itself
            return
        if self._head >= k:
            self._head -= k
            for buffer, column in zip(self._columns, block.columns):
                buffer[self._head:self._head + k] = column
        else:
            live = slice(self._head, self._head + self._size)
            alloc = max(len(self._columns[0]), 2 * (self._size + k))
            columns = [np.empty((alloc,) + b.shape[1:], b.dtype) for b in self._columns]
            for new, old, column in zip(columns, self._columns, block.columns):
                new[:k] = column
                new[k:k + self._size] = old[live]
            self._columns, self._head = columns, 0
        self._size += k

    @staticmethod
    def join(chunks):
        chunks = [c for c in chunks if len(c)]
        if len(chunks) <= 1:
            return chunks[0] if chunks else []
        return Rows(np.concatenate(parts) for parts in zip(*(c.columns for c in chunks)))


class _Attempt:
    """One waiting enqueue (``elements``/``position``) or dequeue (``need``/``taken``)."""

    __slots__ = ("task", "parked", "result", "elements", "position", "need", "taken",
                 "count", "allow_small")

    def __init__(self, elements=None, need=0, allow_small=False):
        self.task = trio.lowlevel.current_task()
        self.parked = False
        self.result = None
        self.elements = elements
        self.position = 0
        self.need = need
        self.taken = []  # chunks popped so far, in order
        self.count = 0   # elements in ``taken``
        self.allow_small = allow_small


class QueueResource:
    """A bounded queue of elements shared by the steps of a session (or a process).

    Args:
        kind: ``FIFO``, ``RANDOM_SHUFFLE`` or ``PADDING_FIFO``.
        name: the queue's name in error messages.
        capacity: the most elements held (enqueues wait beyond it); negative: unbounded.
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
        self.seed_pair = (None, None)  # the op's (seed, seed2), for shared-queue checks
        self._room_limit = float("inf") if capacity < 0 else capacity
        self._rng = random.Random(seed) if kind == RANDOM_SHUFFLE else None
        fixed = shapes is not None and all(s is not None and None not in s for s in shapes)
        self.columnar = fixed and kind != PADDING_FIFO  # takes and hands out ``Rows``
        self._elements = (_ColumnStore(self._rng, shapes) if self.columnar
                          else _ElementStore(self._rng))
        self._enqueuers = collections.deque()
        self._dequeuers = collections.deque()
        self._closed = False
        self._enqueued = 0
        self._dequeued = 0

    rows = Rows  # kernels build batches for a columnar queue without importing the runtime

    # -- sync cores -------------------------------------------------------------------------
    def enqueue_many_nowait(self, elements):
        """Add all ``elements`` now, or raise.

        Raises:
            trio.WouldBlock: not enough room, or other enqueues are waiting ahead.
            CancelledError: the queue is closed.
        """
        self._check_open()
        if self._enqueuers or len(self._elements) + len(elements) > self._room_limit:
            raise trio.WouldBlock
        self._push(elements)
        if self._dequeuers:
            self._flush()

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

    def peek_nowait(self):
        """The element ``dequeue_many_nowait(1)`` would return now, without taking it, or None.

        None also for a RandomShuffleQueue (its next element is drawn when taken).
        """
        if self._rng is not None or self._dequeuers or not self._available():
            return None
        return self._elements.peek()

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
            CancelledError: the queue was closed before this call, or closed with ``cancel_pending_enqueues`` or reset while waiting.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self.enqueue_many_nowait(elements)
        except trio.WouldBlock:
            if not isinstance(elements, Rows):
                elements = list(elements)
            return await self._wait(_Attempt(elements=elements), self._enqueuers)
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def enqueue(self, element):
        await self.enqueue_many((element,))

    async def dequeue_many(self, n, allow_small=False, eager=False):
        """``n`` elements in queue order (random order for a shuffle queue).

        Args:
            n: how many.
            allow_small: ``dequeue_up_to``: once closed, return what remains (at least one).
            eager: when the elements are there at once, return without a schedule point
                (still a cancel point): for a caller that has just had one, such as a
                kernel task that has only started.

        Raises:
            OutOfRangeError: closed with too few elements (the partial batch goes back).
            CancelledError: the queue was reset while waiting.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            taken = self.dequeue_many_nowait(n, allow_small)
        except trio.WouldBlock:
            return await self._wait(_Attempt(need=n, allow_small=allow_small), self._dequeuers)
        if not eager:
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
            raise errors.CancelledError(None, None, f"{self.kind} '{self.name}' is closed.")

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
        self._elements.push(elements)
        self._enqueued += len(elements)

    def _pop(self, n):
        self._dequeued += n
        return self._elements.pop(n)

    def _put_back(self, attempt):
        """Return a failed or abandoned dequeue's elements to the queue, in order."""
        self._dequeued -= attempt.count
        self._elements.put_back(attempt.taken)
        attempt.taken, attempt.count = [], 0

    def _finish(self, attempt, result):
        if attempt.parked:
            trio.lowlevel.reschedule(attempt.task, result)
        else:
            attempt.result = result

    def _fail_all(self, waiters, message):
        while waiters:
            attempt = waiters.popleft()
            if attempt.count:
                self._put_back(attempt)
            self._finish(attempt, outcome.Error(errors.CancelledError(
                None, None, f"{message} ({self.kind} '{self.name}' was closed)")))

    def _abandon(self, attempt, waiters):
        waiters.remove(attempt)
        if attempt.count:
            self._put_back(attempt)
        self._flush()

    def _flush(self):
        moved = True
        while moved:
            moved = self._serve_enqueues() | self._serve_dequeues()

    def _serve_enqueues(self):
        moved = False
        while self._enqueuers:
            attempt = self._enqueuers[0]
            room = self._room_limit - len(self._elements)
            if room <= 0:
                break
            end = len(attempt.elements) if room == float("inf") else attempt.position + room
            chunk = attempt.elements[attempt.position:end]
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
                attempt.taken.append(self._pop(n))
                attempt.count += n
                attempt.need -= n
                moved = True
                if attempt.need == 0:
                    self._dequeuers.popleft()
                    self._finish(attempt, outcome.Value(self._elements.join(attempt.taken)))
                    continue
            if not (self._closed and not self._enqueuers):
                break
            self._dequeuers.popleft()
            moved = True
            if attempt.allow_small and attempt.count:
                self._finish(attempt, outcome.Value(self._elements.join(attempt.taken)))
                continue
            requested = attempt.need + attempt.count
            self._put_back(attempt)
            self._finish(attempt, outcome.Error(self._insufficient(requested)))
        return moved


def spec_of(attrs, kind):
    """A queue node's spec from its attrs: capacity, component dtypes and shapes, and (a shuffle
    queue) min_after_dequeue. Run once per plan node (the queue kernels' prepare hook)."""
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
            shapes, min_after_dequeue or (a shuffle queue) seeds, naming which.
    """
    attrs, kind = node_ctx.attrs, node_ctx.type
    shared = attrs.get("shared_name") or ""
    manager = process_resources() if shared and node_ctx.resources.local else node_ctx.resources
    name = shared or node_ctx.name
    spec = node_ctx.prepared  # ``spec_of``, computed once per plan node (the prepare hook)
    seed_pair = (attrs.get("seed"), attrs.get("seed2"))

    def create():
        seed, seed2 = attrs.get("seed"), attrs.get("seed2")
        entropy = None if seed is None and seed2 is None else (int(seed or 0) << 32) + int(seed2 or 0)
        queue = QueueResource(kind, name, spec["capacity"], spec["dtypes"], spec["shapes"],
                              spec["min_after_dequeue"], entropy)
        queue.seed_pair = seed_pair
        return queue

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
        # An op without seeds accepts the shared queue's (TF1's RandomShuffleQueue kernel).
        if kind == RANDOM_SHUFFLE and any(seed_pair) and existing.seed_pair != seed_pair:
            raise errors.InvalidArgumentError(
                None, None, f"Shared queue '{name}' has random seeds {existing.seed_pair} but "
                f"requested seeds are {seed_pair}.")
    return manager.lookup_or_create(attrs.get("container", ""), name, create, check)
