"""A worker's per-step rendezvous: local Sends and Recvs, and Recvs pulled from peer workers.

Theory of operation (TF's ``BaseRemoteRendezvous``; docs/distributed.md):
- ``send`` deposits locally (the receiver pulls), except for the edges the master marked
  *pushed* (``RemoteBinding.pushed``, from ``compile/transfer_order.pushed_transfers``: small
  tensors of known size outside loops): those go to the consumer's task in a ``PushTensors``
  as soon as they are sent. The Sends of one scheduling round for one peer share a request
  (one push task per request, spawned by the first: none per edge); ``flush_pushes`` waits
  until every push is acknowledged, or written where the channel sends it one-way (the bare
  same-host protocol: the consumer then fails the step itself if it refuses the push,
  ``push_acceptance.one_way_failed``), so a RunGraph never answers before its pushes left,
  and a push that failed here fails the step. The consumer's worker deposits pushed values in
  the step's local rendezvous (``accept_push``, once ``push_acceptance.py`` accepted its
  keys; a push that arrives before the step's RunGraph creates the step's state, within the
  limits that module sets, as an early pull does), where its Recvs find them: a pushed edge
  costs the step one message (and its Ack, where not one-way) instead of a request and its
  reply. Large tensors stay pulled (a
  pull's reply may lend their memory).
- ``recv(key)`` looks at the key's source device (``src;incarnation;dst;tensor;frame:iter``):
  a device of this worker means a local wait in the ``LocalRendezvous``; any other device is
  pulled from the worker that owns it with ``RecvTensors``.
- Pulls of *batchable* keys for the same peer and of the same level that start in the same
  scheduling round go out in one request: the first Recv task of a round becomes the batch's
  leader, yields so the Recvs the executor started with it add their keys, then sends them
  all. The master gives each batchable key a level (``compile/transfer_order.py``): a batched reply waits
  for every key, and keys of one level never depend on one another, so batching by level
  cannot deadlock.
- ``subscribe(key, callback)`` is the taskless form of ``recv`` (the contract of
  ``LocalRendezvous.subscribe``, TF's ``RecvAsync``): a local key subscribes in the local
  rendezvous (called at once when its value is there, else by the Send); a remote key joins
  the step's open pull for its peer and level, and only a *new* pull starts a task (through
  ``spawn``, which the worker sets for the step's run). The pull calls every callback of its
  keys when the reply arrives, so a step on a worker with N edges starts one task per pull
  request, never one per edge, and none for edges between its own devices. A pull task
  that is done parks and takes the step's next pull (a loop pulls once per iteration): a
  task is spawned only while every pull task of the step is busy, so in-flight pulls never
  wait for one another, and a loop's iterations reuse the same few tasks. Without
  ``spawn`` (a rendezvous used outside a worker step) a remote ``subscribe`` answers False
  and the Recv awaits ``recv`` instead.
- Every pulled value is checked against the Recv's declared dtype and static shape.
- ``abort(error)`` fails local waiters and every later pull with the step's error. Errors that
  arrive from a peer are *derived* (:func:`derived` marks them, :func:`is_derived` asks; on the
  wire it is ErrorReply's ``derived`` field, never a text prefix): the peer reports its own
  root cause to the master, which prefers root causes.

The rendezvous knows nothing of HTTP: it reaches peers through ``transports`` Channels that the
worker service hands it.
"""
from __future__ import annotations

import collections
import dataclasses

import numpy as np
import trio

from asyncflow import errors
from asyncflow.device_names import task_of as task_of_device  # noqa: F401 (master, worker)
from asyncflow.exec.rendezvous import LocalRendezvous, detached
from asyncflow.rendezvous_keys import parse_key, source_device
from transports.messages import PushTensors, RecvTensors, RemoteCallError, TensorEntry
from transports.service import TransportDeadlineExceeded, TransportError
from transports.wire import ChecksumMismatch, RemoteProtocolError


def is_derived(error):
    """True for an error that only follows from another failure (a peer's abort, a cancelled
    pull): the master prefers any other error as the step's root cause."""
    return getattr(error, "_asyncflow_derived", False)


def derived(error):
    """``error`` marked as derived, in place (any other exception becomes an AbortedError).

    Marked errors count as located, so the executor passes them on unchanged (and marked).
    """
    if not isinstance(error, errors.OpError):
        error = errors.AbortedError(None, None, str(error))
    error._asyncflow_derived = True
    error._asyncflow_located = True
    return error


def from_remote(exc, message=None, op=None):
    """The OpError for a RemoteCallError, derived when the reply said so."""
    error = errors.from_code(exc.code, exc.message if message is None else message, op=op)
    return derived(error) if exc.derived else error


def remote_call_error(error, message=None, derived=None):
    """The RemoteCallError that reports an OpError on the wire: the op to blame and whether it
    is derived travel as fields (``derived`` overrides the error's own mark)."""
    op = getattr(error, "op", None)
    name = getattr(op, "name", op if isinstance(op, str) else "") or ""
    return RemoteCallError(errors.error_code_name(error),
                           error.message if message is None else message, op=name,
                           derived=is_derived(error) if derived is None else derived)




def peer_call_error(exc, rpc, task, channel, keys=None, derived_codes=None):
    """The OpError a pull (``rpc`` "RecvTensors", of ``keys``) or a push ("PushTensors") to
    peer ``task`` fails with when its call raised ``exc``: the peer's error answer (derived
    when its code is in ``derived_codes``; None: always, a pull's peer reports its own root
    cause), DATA_LOSS for a ``ChecksumMismatch`` (never retried), DEADLINE_EXCEEDED, or
    UNAVAILABLE naming the worker."""
    call = f"{rpc} {'from' if keys is not None else 'to'} {task}"
    if isinstance(exc, RemoteCallError):
        error = from_remote(exc, f"{call}: {exc.message}")
        return derived(error) if derived_codes is None or exc.code in derived_codes else error
    if isinstance(exc, ChecksumMismatch):
        if keys is None:
            what, damaged = "the answer", "it"
        else:  # the tensor the checksum failed (its header's: all of them)
            what = f"edge {exc.key if exc.key is not None else ', '.join(keys)!r}"
            damaged = "the tensor"
        return errors.DataLossError(None, None, (
            f"{call} at {getattr(channel, 'address', '?')}: {what}: {exc.part}: {exc.detail}; "
            f"{damaged} was damaged in transit and the step failed (not retried: run it "
            "again)"))
    if isinstance(exc, TransportDeadlineExceeded):
        return errors.DeadlineExceededError(None, None, f"{call}: {exc}")
    return errors.UnavailableError(None, None, f"worker {task} is unavailable ({rpc} failed: "
                                   f"{exc})")


@dataclasses.dataclass(frozen=True)
class RecvDeclaration:
    """What a Recv on this worker expects from a peer: its op name, dtype, shape, compression."""

    op_name: str
    dtype: object
    shape: object
    compress: str = ""


@dataclasses.dataclass
class RemoteBinding:
    """How a step reaches peers: ``channel(task) -> Channel`` and the graph's declarations."""

    channel: object                        # callable: task name -> transports Channel
    declarations: dict                     # tensor_name -> RecvDeclaration
    batchable: dict                        # tensor name -> level (same level: may share)
    on_bytes: object = None                # callable(nbytes, peer task) counting pulled bytes
    pushed: frozenset = frozenset()        # tensor names whose producer pushes them
    push_peers: dict = dataclasses.field(default_factory=dict)  # key -> peer task or "" (cache)
    pushed_in: dict = dataclasses.field(default_factory=dict)  # key -> declaration/None (cache)
    pushed_keys: frozenset = frozenset()   # the keys pushes may name (push_acceptance.py)


# A push's deadline: the consumer only deposits and answers, so this is generous; the step's
# own deadline (its cancel scope) ends a push sooner where it is shorter.
PUSH_TIMEOUT_S = 60.0
_KEY_CACHE = 4096  # rendezvous keys a binding remembers as pushed or not


_NUMERIC_SCALARS = frozenset(np.dtype(code).type for code in "?bhilqBHILQefdgFDG")  # (no str)


def host_array(value):
    """``value`` as a host numpy array for the wire (a device array is copied to the host)."""
    kind = type(value)
    if kind is np.ndarray:
        if value.dtype.kind not in "OSU":
            return value  # what np.asarray below would return (most fetches)
    elif kind in _NUMERIC_SCALARS:  # a numpy scalar (an op on 0-d arrays): its 0-d array
        return np.asarray(value)
    to_numpy = getattr(value, "get", None)
    if to_numpy is not None and not isinstance(value, np.ndarray):
        value = to_numpy()
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind in "SU":
        array = np.asarray(value, dtype=object)
    return array


_UNDECLARED = object()  # a pushed key whose Recv declares nothing to check


class _Batch:
    def __init__(self):
        self.keys = []
        self.done = trio.Event()
        self.entries = None
        self.error = None


class _Pull:
    """One RecvTensors request of subscribed keys: its peer, keys and callbacks (None once
    called or unsubscribed)."""

    __slots__ = ("task", "keys", "callbacks")

    def __init__(self, task):
        self.task = task
        self.keys = []
        self.callbacks = []


class _PushBatch:
    """One PushTensors request to ``task``: the entries sent before its task ran."""

    __slots__ = ("task", "entries")

    def __init__(self, task):
        self.task = task
        self.entries = []


class _CheckedDelivery:
    """A Recv's callback for a pushed key: the value is checked against the Recv's declaration
    before the Recv sees it (as a pulled value is)."""

    __slots__ = ("rendezvous", "key", "callback")

    def __init__(self, rendezvous, key, callback):
        self.rendezvous, self.key, self.callback = rendezvous, key, callback

    def __call__(self, item, error):
        rendezvous, callback = self.rendezvous, self.callback
        # Called once: let go of the waiter's table entry, which refers back to the rendezvous
        # (left there, the step's whole state would be freed by the cyclic GC, not at once).
        if rendezvous._pushed_waiters.get(self.key) is self:
            del rendezvous._pushed_waiters[self.key]
        self.rendezvous = self.callback = None
        if error is None:
            try:
                item = rendezvous._checked_pushed(self.key, item)
            except errors.OpError as exc:
                item, error = None, exc
        callback(item, error)


class StepRendezvous:
    """One step's rendezvous on a worker (see the module docstring).

    Args:
        step_id: the step.
        local_devices: full names of this worker's devices.
    """

    def __init__(self, step_id, local_devices):
        self.step_id = step_id
        self.local = LocalRendezvous()
        self._local_devices = frozenset(local_devices)
        self.binding = None
        self._open_batches = {}   # (task, level) -> _Batch still collecting keys
        self._open_pulls = {}     # (task, level) -> _Pull of subscriptions not yet sent
        self._subscribed = {}     # remote key -> its _Pull, until its callback is called
        self.spawn = None         # spawn(async_fn, *args): a task of the step (the worker's)
        self._pulls_due = collections.deque()  # (pull, group) not yet taken by a pull task
        self._idle = None  # a ParkingLot of pull tasks waiting for the next pull, once one parks
        self._spare = False       # a pull task calls its callbacks: it takes one pull next
        self._error = None
        self.pulls = 0
        self.pull_requests = 0
        self._open_pushes = {}    # peer task -> _PushBatch whose task has not run yet
        self._pushing = 0         # push requests not yet answered
        self._pushed_all = None  # a ParkingLot where flush_pushes waits, once it must
        self._push_error = None
        self._pushed_waiters = {}  # pushed remote key -> its _CheckedDelivery
        self._pushed_keys = None   # the keys peers pushed to this step (a set, once pushed)
        self.pushes = 0
        self.push_requests = 0
        self.pushed_bytes = 0

    def send(self, key, value, is_dead=False):
        binding = self.binding
        if binding is not None and binding.pushed:
            peer = binding.push_peers.get(key)
            if peer is None:
                if len(binding.push_peers) >= _KEY_CACHE:  # (a loop's keys differ per iteration)
                    binding.push_peers.clear()
                peer = binding.push_peers[key] = self._push_peer(key, binding)
            if peer:
                self._push_later(peer, key, value, is_dead)
                return
        self.local.send(key, value, is_dead)

    def _push_peer(self, key, binding):
        """The task a key of this worker's Sends is pushed to, or "" (deposited here)."""
        _, _, dst, tensor_name, _ = parse_key(key)
        if tensor_name not in binding.pushed or dst in self._local_devices:
            return ""
        return task_of_device(dst)

    def _push_later(self, peer, key, value, is_dead):
        if self._error is not None:
            return  # (a Send after an abort is a no-op, as locally)
        if self.spawn is None:
            raise errors.InternalError(None, None, f"step {self.step_id}: a pushed Send ran "
                                       "outside a worker step (no task to push from)")
        batch = self._open_pushes.get(peer)
        if batch is None:
            batch = self._open_pushes[peer] = _PushBatch(peer)
            self._pushing += 1
            self.spawn(self._push, batch)
        batch.entries.append(TensorEntry(key, None if is_dead else host_array(value),
                                         is_dead=is_dead))

    async def _push(self, batch):
        """The task of one push: every Send to its peer made before it ran rides along (a
        round: a time-slice checkpoint of the step's task between two Sends lets it go with
        the first; the next spawns another: docs/distributed.md, "Small transfers")."""
        if self._open_pushes.get(batch.task) is batch:
            del self._open_pushes[batch.task]
        try:
            if self._error is None:
                await self._push_request(batch.task, batch.entries)
        except Exception as exc:  # noqa: BLE001 - the step fails with it
            error = exc if isinstance(exc, errors.OpError) else errors.InternalError(
                None, None, f"PushTensors to {batch.task}: {type(exc).__name__}: {exc}")
            if self._push_error is None:
                self._push_error = error
            self.abort(error)
        finally:
            self._pushing -= 1
            if not self._pushing and self._pushed_all is not None:
                self._pushed_all.unpark_all()

    async def flush_pushes(self):
        """Wait until every push of the step is answered; raises the first push's error."""
        while self._pushing or self._open_pushes:
            if self._pushed_all is None:
                self._pushed_all = trio.lowlevel.ParkingLot()
            await self._pushed_all.park()
        if self._push_error is not None:
            raise self._push_error

    async def _push_request(self, task, entries):
        channel = self.binding.channel(task)
        self.push_requests += 1
        self.pushes += len(entries)
        try:
            await channel.push_tensors(PushTensors(self.step_id, entries),
                                       timeout=PUSH_TIMEOUT_S)
        except (RemoteCallError, RemoteProtocolError, TransportError) as exc:
            # (An answer ABORTED or CANCELLED: the consumer's step ended first, derived.)
            raise peer_call_error(exc, "PushTensors", task, channel,
                                  derived_codes=("ABORTED", "CANCELLED")) from exc
        self.pushed_bytes += sum(e.value.nbytes for e in entries if e.value is not None)

    def count_into(self, counters):
        """Add the step's pulls and pushes to a worker's counters (when its RunGraph ends)."""
        counters.pull_requests += self.pull_requests
        counters.tensors_pulled += self.pulls
        counters.push_requests += self.push_requests
        counters.tensors_pushed += self.pushes
        counters.bytes_sent += self.pushed_bytes

    def accept_push(self, entries, keys):
        """Deposit a peer's pushed tensors of this step (the PushTensors handler), which
        ``push_acceptance`` accepted; ``keys``: the set of their keys (this step keeps it).

        Raises:
            RemoteCallError: ALREADY_EXISTS for a key already pushed to the step (its value
                waiting, or taken by its Recv: deposited again it would stay unread), before
                any entry is deposited (what is stored under it stays).
        """
        seen = self._pushed_keys
        if seen is None:
            self._pushed_keys = keys
        elif seen.isdisjoint(keys):
            seen |= keys
        else:
            key = next(e.key for e in entries if e.key in seen)
            raise RemoteCallError("ALREADY_EXISTS", f"PushTensors of step {self.step_id}: "
                                  f"Duplicated send: {key}")
        for entry in entries:
            self.local.send(entry.key, entry.value, entry.is_dead)

    def _pushed_in(self, key):
        """The declaration of a remote key that its producer pushes here, else None."""
        binding = self.binding
        if binding is None or not binding.pushed:
            return None
        try:
            return binding.pushed_in[key]
        except KeyError:
            tensor_name = parse_key(key)[3]
            declaration = None if tensor_name not in binding.pushed else \
                binding.declarations.get(tensor_name) or _UNDECLARED
            if len(binding.pushed_in) >= _KEY_CACHE:  # (a loop's keys differ per iteration)
                binding.pushed_in.clear()
            binding.pushed_in[key] = declaration
            return declaration

    def _checked_pushed(self, key, item):
        declaration = self._pushed_in(key)
        if item[1] or declaration is _UNDECLARED or item[0] is None:
            return item
        return self._checked(TensorEntry(key, item[0]), declaration, key)

    def poll(self, key):
        """``(value, is_dead)`` of a local or pushed key already sent, else None (pulled keys:
        None, so the Recv runs its async kernel and pulls)."""
        if self._is_local(key):
            return self.local.poll(key)
        if self._error is not None:
            raise self._error
        if self._pushed_in(key) is not None:
            item = self.local.poll(key)
            return None if item is None else self._checked_pushed(key, item)
        return None

    async def recv(self, key):
        """``(value, is_dead)`` for ``key``: a local wait (a local or pushed key), or a pull
        from the owning worker."""
        if self._is_local(key):
            return await self.local.recv(key)
        if self._error is not None:
            raise self._error
        if self._pushed_in(key) is not None:
            return self._checked_pushed(key, await self.local.recv(key))
        if self.binding is None:
            raise errors.InternalError(None, None, f"step {self.step_id}: a remote Recv ran "
                                       "before the step was bound to its graph")
        src, _, _, tensor_name, _ = parse_key(key)
        declaration = self.binding.declarations.get(tensor_name)
        level = self.binding.batchable.get(tensor_name)
        if level is not None:
            entry = await self._pull_batched(task_of_device(src), level, key)
        else:
            entry = (await self._request(task_of_device(src), [key]))[0]
        return self._checked(entry, declaration, key)

    def subscribe(self, key, callback):
        """Have ``callback(item, error)`` called once with ``key``'s ``(value, is_dead)`` (or
        ``(None, error)``), as ``LocalRendezvous.subscribe``; a remote key joins a pull.

        Returns:
            False if the key is remote and this rendezvous cannot pull without a caller's
            task (no ``spawn`` or no binding yet): the caller awaits ``recv`` instead.
        """
        if self._is_local(key):
            return self.local.subscribe(key, callback)
        if self._error is not None:
            callback(None, self._error)
            return True
        if self._pushed_in(key) is not None:
            delivery = _CheckedDelivery(self, key, callback)
            self._pushed_waiters[key] = delivery
            return self.local.subscribe(key, delivery)
        if self.spawn is None or self.binding is None:
            return False
        if key in self._subscribed:
            raise RuntimeError(f"Two receivers for rendezvous key {key}")
        src, _, _, tensor_name, _ = parse_key(key)
        task = task_of_device(src)
        level = self.binding.batchable.get(tensor_name)
        group = (task, level)
        pull = self._open_pulls.get(group) if level is not None else None
        if pull is None:
            pull = _Pull(task)
            if level is not None:
                self._open_pulls[group] = pull
            self._pulls_due.append((pull, group))
            if self._spare and level is None:  # a pull task delivering a reply takes it
                self._spare = False                # next (a batch waits for its round)
            elif self._idle:
                self._idle.unpark(count=1)
            else:
                self.spawn(self._puller)
        pull.keys.append(key)
        pull.callbacks.append(callback)
        self._subscribed[key] = pull
        return True

    def unsubscribe(self, key, callback):
        """Drop ``callback`` from ``key`` if it was not called yet (a cancelled receiver)."""
        if self._is_local(key):
            self.local.unsubscribe(key, callback)
            return
        delivery = self._pushed_waiters.get(key)
        if delivery is not None and delivery.callback is callback:
            del self._pushed_waiters[key]
            self.local.unsubscribe(key, delivery)
            return
        pull = self._subscribed.get(key)
        if pull is not None:
            position = pull.keys.index(key)
            if pull.callbacks[position] is callback:
                pull.callbacks[position] = None
                del self._subscribed[key]

    async def _puller(self):
        """A pull task: takes due pulls until there are none, then parks for the next (it
        ends with the step's nursery)."""
        while True:
            while self._pulls_due:
                await self._pull(*self._pulls_due.popleft())
            if self._idle is None:
                self._idle = trio.lowlevel.ParkingLot()
            await self._idle.park()

    async def _pull(self, pull, group):
        """The task of one pull: everything subscribed before it runs rides in its request
        (the drains that subscribed never wait); then each callback gets its value."""
        if self._open_pulls.get(group) is pull:
            del self._open_pulls[group]
        if self._error is not None:
            return  # (``abort`` called the callbacks)
        try:
            entries = await self._request(pull.task, list(pull.keys))
        except Exception as exc:  # noqa: BLE001 - each Recv of the pull fails with it
            self._deliver_error(pull, exc if isinstance(exc, errors.OpError) else
                                errors.InternalError(None, None, f"RecvTensors from "
                                                     f"{pull.task}: {type(exc).__name__}: {exc}"))
            return
        declarations = self.binding.declarations
        # The callbacks run the step on (no await until this task looks at the queue again):
        # the first pull they start is this task's next, not a new task's.
        self._spare = True
        for position, (key, entry) in enumerate(zip(pull.keys, entries)):
            callback = pull.callbacks[position]
            if callback is None:
                continue
            pull.callbacks[position] = None
            del self._subscribed[key]
            try:
                item = self._checked(entry, declarations.get(parse_key(key)[3]), key)
            except errors.OpError as exc:
                callback(None, exc)
            else:
                callback(item, None)
        self._spare = False

    def _deliver_error(self, pull, error):
        for position, callback in enumerate(pull.callbacks):
            if callback is not None:
                pull.callbacks[position] = None
                self._subscribed.pop(pull.keys[position], None)
                callback(None, error)

    def abort(self, error):
        if self._error is None:
            self._error = error
        self.local.abort(error)
        self._pushed_waiters.clear()
        self._open_pushes.clear()  # (their tasks see the error and send nothing)
        pulls = {id(pull): pull for pull in self._subscribed.values()}
        self._open_pulls.clear()
        for pull in pulls.values():
            self._deliver_error(pull, error)

    @property
    def aborted(self):
        return self._error is not None or self.local.aborted

    def release(self):
        """The step failed and its state is dropped here: keep it aborted, by a detached copy
        of its error (``exec/rendezvous.py``: the error's traceback holds the step's frames)."""
        if self._error is not None:
            self._error = detached(self._error)
        self.local.release()

    @property
    def abort_error(self):
        """The error the step was aborted with (None while it is not)."""
        return self._error

    def statistics(self):
        return self.local.statistics()

    def settled(self):
        """Nothing left in the step's rendezvous and nobody waiting in it (what
        ``statistics()`` says with ``pending_sends == waiting_recvs == 0``, without the record)."""
        return self.local.settled()

    def _is_local(self, key):
        return source_device(key) in self._local_devices

    async def _pull_batched(self, task, level, key):
        group = (task, level)
        batch = self._open_batches.get(group)
        if batch is not None:
            position = len(batch.keys)
            batch.keys.append(key)
            await batch.done.wait()
            if batch.error is not None:
                raise batch.error
            return batch.entries[position]
        batch = self._open_batches[group] = _Batch()
        batch.keys.append(key)
        try:
            await trio.lowlevel.checkpoint()  # let the Recvs started with this one join
            await trio.lowlevel.checkpoint()
            if self._open_batches.get(group) is batch:
                del self._open_batches[group]
            batch.entries = await self._request(task, list(batch.keys))
        except BaseException as exc:
            if self._open_batches.get(group) is batch:
                del self._open_batches[group]
            batch.error = exc if isinstance(exc, errors.OpError) else derived(
                errors.CancelledError(None, None,
                                      f"step {self.step_id}: the pull batch was cancelled"))
            raise
        finally:
            batch.done.set()
        return batch.entries[0]

    async def _request(self, task, keys):
        channel = self.binding.channel(task)
        self.pull_requests += 1
        self.pulls += len(keys)
        try:
            reply = await channel.recv_tensors(RecvTensors(self.step_id, keys))
        except (RemoteCallError, RemoteProtocolError, TransportError) as exc:
            # (Not retried: the producer drops what was pulled, and the step fails instead.)
            raise peer_call_error(exc, "RecvTensors", task, channel, keys) from exc
        entries = reply.tensors
        if len(entries) != len(keys) or any(e.key != k for e, k in zip(entries, keys)):
            raise errors.InternalError(None, None, f"RecvTensors from {task} answered other "
                                       "keys than it was asked for")
        if self.binding.on_bytes is not None:
            self.binding.on_bytes(sum(e.value.nbytes for e in entries if e.value is not None),
                                  task)
        return entries

    def _checked(self, entry, declaration, key):
        if entry.error is not None:
            raise derived(errors.from_code(entry.error.code, entry.error.message))
        value = entry.value
        if entry.is_dead or declaration is None or value is None:
            return value, entry.is_dead
        expected = declaration.dtype.np if not declaration.compress else None
        if expected is not None and (declaration.dtype.is_string != (value.dtype == object) or (
                not declaration.dtype.is_string and value.dtype != expected)):
            raise errors.InvalidArgumentError(
                None, None, f"_Recv '{declaration.op_name}': received dtype {value.dtype} for "
                f"{key}, but the Recv declares {declaration.dtype.name}")
        shape = declaration.shape  # (a fully defined shape equal to the value's: no TensorShape)
        if shape is not None and shape.dims != value.shape and \
                not shape.is_compatible_with(value.shape):
            raise errors.InvalidArgumentError(
                None, None, f"_Recv '{declaration.op_name}': received shape {list(value.shape)} "
                f"for {key}, but the Recv declares {shape}")
        return value, entry.is_dead

