"""The local rendezvous: where Send deposits a tensor and Recv picks it up, for one step.

Theory of operation (the paper's §3.2.2 and TF's ``LocalRendezvousImpl``):
- A table from a rendezvous *key* (``src_device;src_incarnation_hex;dst_device;tensor_name;
  frame_id:iter``, written by ``rendezvous_keys.make_key``) to either a deposited
  ``(value, is_dead)`` or one parked waiter. One Recv reads each key once; reading removes
  the entry, so the table only holds tensors in flight.
- ``send`` never blocks: it deposits, or hands the value to the waiter already parked. A second
  send to the same key before its receive is an ``AbortedError`` ("Duplicated send"), as in
  the 2015 runtime.
- ``poll`` returns None when nothing is there; ``await recv`` parks on a
  ``trio.Event`` until a send or an abort wakes it, so waiting never blocks the loop.
- ``subscribe(key, callback)`` is the taskless form of ``recv``: the callback is called
  synchronously, exactly once, with ``(item, None)`` by the matching ``send`` (or at once if
  the value is already there) or with ``(None, error)`` by ``abort``. The executor uses it so a
  send reaches the receiving partition directly (and drains it inline when both are local
  CPU partitions), with no receiving task in between.
  ``unsubscribe`` drops a callback not yet called (a cancelled partition).
- A parked ``recv`` and a subscription are the same thing in the table: one callable per key
  (a parked ``recv`` is a callable that sets its event).
- ``abort(error)`` fails every present and future ``recv`` with the step's error (the root
  cause, not a derived one) and makes later sends no-ops: the step is being torn down.

A rendezvous lives for one step; it knows nothing of devices, graphs or executors.

``Rendezvous`` (below) is the one contract of every rendezvous a step may hold: this local
one and the worker's ``cluster/remote_rendezvous.StepRendezvous``, which keeps it for local keys
and adds pulls for remote ones.

The key format is not here but in the base module ``rendezvous_keys.py``: the Send/Recv
kernels build keys and kernels may not import the executor, and the worker's rendezvous
parses them; a base module all three import reads as one place, where a re-export here would
be a second name for it. This module holds the interface and the local implementation.
"""
from __future__ import annotations

import dataclasses
import typing

import trio

from asyncflow import errors


class Rendezvous(typing.Protocol):
    """What the Send/Recv kernels, the executor and the step runner use of a rendezvous.

    - ``send(key, value, is_dead)``: deposit; never blocks, never starts a task.
    - ``poll(key)``: ``(value, is_dead)`` when it is already there (a Recv completes inline),
      else None.
    - ``subscribe(key, callback)``: ``callback(item, error)`` called exactly once, never
      from a task of its own for a local key; returns False only when this rendezvous cannot
      deliver ``key`` without the caller's task (then the Recv awaits ``recv``).
    - ``unsubscribe(key, callback)``: drop a callback not yet called (a cancelled Recv).
    - ``await recv(key)``: the awaiting form.
    - ``abort(error)``: every present and future receiver fails with ``error``.
    """

    def send(self, key, value, is_dead=False): ...
    def poll(self, key): ...
    def subscribe(self, key, callback): ...
    def unsubscribe(self, key, callback): ...
    async def recv(self, key): ...
    def abort(self, error): ...
    @property
    def aborted(self): ...
    def statistics(self): ...

@dataclasses.dataclass(frozen=True, slots=True)
class RendezvousStatistics:
    """A snapshot: tensors deposited but not yet received, parked receivers, totals."""

    pending_sends: int
    waiting_recvs: int
    sends: int
    recvs: int
    aborted: bool


class _Waiter:
    """A parked ``recv``: called like a subscription, it keeps the item and wakes the task."""

    __slots__ = ("event", "item")

    def __init__(self):
        self.event = trio.Event()
        self.item = None

    def __call__(self, item, error):
        self.item = item
        self.event.set()


def detached(error):
    """A copy of ``error`` (its class, message, op and marks) without its traceback, cause or
    context: what state that outlives a failed step keeps instead of the error its caller got,
    whose traceback holds the step's frames (and through them that state: a cycle)."""
    copy = type(error).__new__(type(error), *error.args)
    copy.__dict__.update(error.__dict__)
    return copy


class LocalRendezvous:
    """Per-step table matching Sends to Recvs within one process."""

    def __init__(self):
        self._items = {}      # key -> (value, is_dead)
        self._waiters = {}    # key -> callback(item, error): a parked recv or a subscription
        self._error = None
        self._sends = 0
        self._recvs = 0

    def send(self, key, value, is_dead=False):
        """Deposit ``value`` under ``key``; never blocks.

        Raises:
            AbortedError: "Duplicated send" if ``key`` already holds an unreceived value.
        """
        if self._error is not None:
            return
        waiter = self._waiters.pop(key, None)
        self._sends += 1
        if waiter is not None:
            if waiter.__class__ is not _Waiter:
                self._recvs += 1  # a subscription receives here; a parked recv counts itself
            waiter((value, is_dead), None)
            return
        if key in self._items:
            raise errors.AbortedError(None, None, f"Duplicated send: {key}")
        self._items[key] = (value, is_dead)

    def poll(self, key):
        """``(value, is_dead)`` if sent, else None (trio's ``*_nowait`` without the exception:
        a Recv polls once per edge, usually in vain).

        Raises:
            OpError: the step's error after ``abort``.
        """
        if self._error is not None:
            raise self._error
        item = self._items.pop(key, None)  # items are tuples, never None
        if item is not None:
            self._recvs += 1
        return item

    async def recv(self, key):
        """Wait for the value sent under ``key``; returns ``(value, is_dead)``.

        Raises:
            OpError: the step's error if the step is aborted before or while waiting.
            RuntimeError: if another task already waits on ``key``.
        """
        item = self.poll(key)
        if item is not None:
            return item
        if key in self._waiters:
            raise RuntimeError(f"Two receivers for rendezvous key {key}")
        waiter = self._waiters[key] = _Waiter()
        try:
            await waiter.event.wait()
        finally:
            if self._waiters.get(key) is waiter:
                del self._waiters[key]
        if waiter.item is None:
            raise self._error
        self._recvs += 1
        return waiter.item

    def subscribe(self, key, callback):
        """Have ``callback(item, error)`` called once when ``key``'s value arrives.

        ``item`` is ``(value, is_dead)`` and ``error`` None, or, after ``abort``, ``item`` is
        None and ``error`` the step's error. The call is synchronous: at once when the value
        (or the abort) is already there, else from inside the matching ``send`` or ``abort``;
        the callback must not raise and must not wait.

        Raises:
            RuntimeError: if another receiver already waits on ``key``.
        """
        if self._error is not None:
            callback(None, self._error)
            return True
        item = self._items.pop(key, None)
        if item is not None:
            self._recvs += 1
            callback(item, None)
            return True
        if key in self._waiters:
            raise RuntimeError(f"Two receivers for rendezvous key {key}")
        self._waiters[key] = callback
        return True

    def unsubscribe(self, key, callback):
        """Drop ``callback`` from ``key`` if it was not called yet (a cancelled receiver)."""
        if self._waiters.get(key) is callback:
            del self._waiters[key]

    def abort(self, error):
        """Fail every present and future ``recv`` with ``error``; the first abort wins."""
        if self._error is not None:
            return
        self._error = error
        self._items.clear()
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter(None, error)

    def release(self):
        """The step is over: keep it aborted, but not by its error, whose traceback holds the
        step's frames (which hold this rendezvous: a cycle for the GC)."""
        if self._error is not None:
            self._error = detached(self._error)

    @property
    def aborted(self):
        return self._error is not None

    def settled(self):
        """No value waiting for its Recv and no Recv waiting (``statistics()``'s
        ``pending_sends == waiting_recvs == 0``, without building the record)."""
        return not self._items and not self._waiters

    def statistics(self):
        return RendezvousStatistics(pending_sends=len(self._items),
                                    waiting_recvs=len(self._waiters), sends=self._sends,
                                    recvs=self._recvs, aborted=self._error is not None)
