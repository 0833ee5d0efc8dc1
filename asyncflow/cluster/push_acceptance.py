"""Which PushTensors a worker accepts, and how much a peer may park in steps not yet run here.

Theory of operation (``remote_rendezvous.py`` says what a push is):
A PushTensors names no sender, and a field that did would prove no more than the key does:
every peer holds the cluster's token. So the worker judges each pushed rendezvous key
(``src;incarnation;dst;tensor;frame:iter``) by what it can check itself, as TF's
``BaseRemoteRendezvous`` checks a key's devices before it touches the table, and refuses the
whole request, before it creates any state or deposits any value, unless every key

1. is well formed and given once, with a value (or marked dead) and no error, a value smaller
   than any the master pushes (``transfer_order.PUSH_MAX_BYTES``) and no string tensor (the
   master pulls those; their ``nbytes`` would count pointers, not the bytes held);
2. names a destination device of this worker and a source device that is not one of its;
3. lies in the root frame (pushed transfers are never in or after a loop:
   ``compile/transfer_order.pushed_transfers``), for a step id a master could have drawn
   (``1 <= step_id < 2**63``);
4. comes from a task of the sender's cluster, never this task itself. That cluster is the
   master's, as TF's ClusterSpec propagation makes a session's (``CreateWorkerSession`` with
   the master's ``cluster_def``): the peers its RegisterGraph named, known here while a
   graph of that master names the request's other keys. The ClusterSpec this worker was
   started with (a Server's, TF_CONFIG's) proves nothing either way: a master's may list
   tasks it does not (a task added since, a worker given only its own job), so a key no
   graph here names, from another task, is judged by rule 5 alone;
5. is, to the letter, the key of a pushed Recv (its source device and incarnation,
   destination, tensor name): of the step's own graph once the step's RunGraph has bound it,
   else of a graph registered here; and the step's RunGraph has not ended here (each of its
   Recvs took its value before it could).

Rules 1-4 and a key of a bound step that is no Recv of its graph are INVALID_ARGUMENT (HTTP
400) naming the key. A key that no registered graph names, from another task (whether this
worker's ClusterSpec lists it or not: the message says), is ABORTED (409): that is what a genuine push meets when its consumer lost the graph (a restart,
an expired lease, a Reset); the producer marks an ABORTED push derived, so the consumer's own
error (its RunGraph's unknown handle: AbortedError, as a restart or a graph registered
again) stays the step's root cause. A push for a step that ended here is ABORTED too, as a late
pull is. A key already pushed to the step (its value waiting, or already taken by its Recv) is
ALREADY_EXISTS, and what was stored under it stays.

**Parked pushes are bounded.** A push for a step whose RunGraph has not started here parks its
values in the step's state until it does (or ``step_ttl`` drops it). At most
``max_parked_steps`` such steps (default :data:`MAX_PARKED_STEPS`) and ``max_parked_bytes`` of
their values (default :data:`MAX_PARKED_BYTES`) are parked at once; a push beyond either is
refused with RESOURCE_EXHAUSTED naming its step, and leaves nothing. Values pushed to a step
that already runs are not parked: its graph names each key once. A step leaves the account
when its RunGraph binds it or its state is dropped (finished, failed, aborted, reset, past
``step_ttl``: ``_unpark``), so the account holds no state of a step that is gone and a push
within the limits costs a dictionary update.
"""
from __future__ import annotations

import os

from asyncflow import errors
from asyncflow.cluster.remote_rendezvous import derived
from asyncflow.cluster.spec import tasks_of_health
from asyncflow.compile.transfer_order import PUSH_MAX_BYTES
from asyncflow.device_names import task_of
from asyncflow.rendezvous_keys import ROOT_FRAME_ITER, make_key, parse_key, source_device
from transports.messages import RemoteCallError

# The rpcs a worker sends its peers one-way where the transport can (the bare same-host
# protocol): a push is not answered; its receiver fails the step itself (``one_way_failed``).
ONE_WAY_RPCS = frozenset() if os.environ.get("ASYNCFLOW_ONE_WAY_PUSH") == "0" else \
    frozenset({"push_tensors"})
MAX_PARKED_STEPS = 256
MAX_PARKED_BYTES = 256 << 20
_STEP_IDS = range(1, 1 << 63)  # a master draws odd 62-bit ids; any positive int64 passes


def check_push(step_id, entries, local_devices):
    """Refuse a PushTensors for ``local_devices``' worker that is not well formed (rules 1-3
    of the module docstring), before it creates any state for its step.

    Returns:
        The set of the request's keys.

    Raises:
        RemoteCallError: INVALID_ARGUMENT naming the key (or the step).
    """
    if step_id not in _STEP_IDS:
        raise RemoteCallError("INVALID_ARGUMENT", f"PushTensors names step {step_id}, which no "
                              "master draws (step ids are 1 to 2**63-1)")
    if not entries:
        raise RemoteCallError("INVALID_ARGUMENT", f"PushTensors of step {step_id} carries no "
                              "tensors")
    seen = set()
    for entry in entries:
        try:
            src, _, dst, _, frame_iter = parse_key(entry.key)
        except ValueError as exc:
            raise RemoteCallError("INVALID_ARGUMENT", f"PushTensors: {exc}") from None
        problem = ("names a source device of this worker" if src in local_devices
                   else f"is for {dst}, not a device of this worker"
                   if dst not in local_devices else "is given twice"
                   if entry.key in seen else "carries an error" if entry.error is not None
                   else "carries no value" if entry.value is None and not entry.is_dead
                   else "carries strings, but pushed transfers are never strings"
                   if entry.value is not None and entry.value.dtype.hasobject
                   else f"carries {entry.value.nbytes} bytes, but pushed transfers are under "
                   f"{PUSH_MAX_BYTES}" if entry.value is not None and
                   entry.value.nbytes >= PUSH_MAX_BYTES
                   else f"is in frame {frame_iter}, but pushed transfers are never in a loop"
                   if frame_iter != ROOT_FRAME_ITER else None)
        if problem is not None:
            raise RemoteCallError("INVALID_ARGUMENT", f"PushTensors of step {step_id}: key "
                                  f"{entry.key!r} {problem}")
        seen.add(entry.key)
    return seen


def pushed_recv_keys(graph, pushed, local_devices):
    """The rendezvous keys of ``graph``'s Recvs whose producer, on another worker, pushes them
    (``pushed``: their tensor names): the only keys a push for the graph's steps may name."""
    keys = set()
    for op in graph.get_operations():
        if op.type != "_Recv":
            continue
        attrs = op.attrs
        src, incarnation = attrs.get("send_device"), attrs.get("send_device_incarnation")
        if attrs.get("tensor_name") in pushed and src not in local_devices and \
                isinstance(incarnation, int):  # (else its Recv fails when it runs)
            keys.add(make_key(src, incarnation, attrs.get("recv_device"), attrs["tensor_name"]))
    return frozenset(keys)


class PushAcceptance:
    """The PushTensors handler of ``WorkerService`` (mixed in): the rules of the module
    docstring, then the deposit. Uses the service's task, devices, graphs, steps, cluster."""

    max_parked_steps = MAX_PARKED_STEPS
    max_parked_bytes = MAX_PARKED_BYTES
    _parked = None      # step id -> [its state, bytes parked], made by the first parked push
    _parked_bytes = 0

    async def push_tensors(self, request):
        """PushTensors: a peer's Sends to this worker, deposited in the step's rendezvous."""
        step_id, entries = request.step_id, request.tensors
        keys = check_push(step_id, entries, self._device_set)  # before any state
        state = self._steps.get(step_id)
        binding = None if state is None else state.rendezvous.binding
        nbytes = sum(e.value.nbytes for e in entries if e.value is not None)
        if binding is not None:  # the step runs here: its graph names the keys
            if not keys <= binding.pushed_keys:
                raise self._unknown_key(step_id, entries, [binding])
            if state.ran:  # (its Recvs took their values: this one would stay until step_ttl)
                raise RemoteCallError("ABORTED", f"PushTensors of step {step_id}: the step "
                                      f"already ran on {self.task}")
        else:  # (one request's keys are one graph's: a subset test per graph, no key loop)
            for wg in self._graphs.values():
                if keys <= wg.binding.pushed_keys:
                    break
            else:
                bindings = [wg.binding for wg in self._graphs.values()]
                if any(not any(e.key in b.pushed_keys for b in bindings) for e in entries):
                    raise self._unknown_key(step_id, entries, bindings)
            parked = self._parked
            if parked is None:
                parked = self._parked = {}
            entry = parked.get(step_id)
            if entry is not None and entry[0] is not state:
                entry = None  # a step of that id that is gone
            if (entry is None and len(parked) >= self.max_parked_steps) or \
                    self._parked_bytes + nbytes > self.max_parked_bytes:
                self._make_room(step_id, nbytes)
        state = self._find_or_create(step_id)
        state.rendezvous.accept_push(entries, keys)
        if binding is None:
            if entry is not None:
                entry[1] += nbytes
            else:
                self._parked_bytes -= parked.pop(step_id, (None, 0))[1]
                parked[step_id] = [state, nbytes]
            self._parked_bytes += nbytes
        self._count_received(nbytes, task_of(source_device(entries[0].key)))

    def one_way_failed(self, method, fields, error):
        """A one-way PushTensors was refused with ``error`` (a RemoteCallError; ``fields``:
        the request's, its ``step_id`` among them, or None where its frame did not say):
        no answer tells its sender, so the step fails here by the push's error, and the
        master, which waits for this worker's RunGraph, fails the step on every task (a step
        whose RunGraph has not come yet fails when it does). Without a step id, every step
        not yet run here fails (the push was for one of them, or for one to come)."""
        step_id = fields.get("step_id") if fields is not None else None
        if method != "push_tensors":
            return
        if type(step_id) is not int:  # (unknown)
            step_ids = [step_id for step_id, state in self._steps.items() if not state.ran]
        else:
            step_ids = [step_id]
        for step_id in step_ids:
            state = self._steps.get(step_id)
            if state is not None and state.ran:
                continue  # (it ended here: a late push, as a late pull, changes nothing)
            code = error.code if error.code not in ("ABORTED", "CANCELLED") else "ABORTED"
            failure = errors.from_code(code, f"step {step_id} on {self.task}: a "
                                       f"PushTensors to it was refused: {error.message}")
            if error.derived or code == "ABORTED":
                failure = derived(failure)
            if state is None:
                if step_id in self._tombstones or step_id in self._abort_marks:
                    continue  # (failed here already: its first error stays)
                self._abort_marks[step_id] = f"failed ({failure.message})"
                self._abort_marks.move_to_end(step_id)
                while len(self._abort_marks) > 4 * self._max_steps:
                    self._abort_marks.popitem(last=False)
            else:
                state.rendezvous.abort(failure)

    def _unpark(self, step_id):
        """``step_id`` leaves the parked account: its RunGraph bound it, or it is dropped."""
        entry = self._parked.pop(step_id, None) if self._parked else None
        if entry is not None:
            self._parked_bytes -= entry[1]

    def _unknown_key(self, step_id, entries, bindings):
        """The refusal of the first of ``entries`` whose key none of ``bindings`` names (the
        step's graph's, when it runs here; else every registered graph's)."""
        key = next(e.key for e in entries if not any(e.key in b.pushed_keys for b in bindings))
        task = task_of(parse_key(key)[0])
        where = f"PushTensors of step {step_id}: key {key!r}"
        # The sender's cluster (rule 4): the master's, of the graphs naming the other keys.
        views = [wg.peers for wg in self._graphs.values() if wg.binding in bindings and
                 any(e.key in wg.binding.pushed_keys for e in entries)]
        if task == self.task or (views and not any(task in peers for peers in views)):
            return RemoteCallError("INVALID_ARGUMENT", f"{where} names source task {task}, "
                                   f"which is not a peer task of {self.task}'s cluster")
        state = self._steps.get(step_id)
        if state is not None and state.rendezvous.binding is not None:
            return RemoteCallError("INVALID_ARGUMENT", f"{where} names no pushed Recv of the "
                                   f"step's graph on {self.task}")
        known = {name for name, _ in tasks_of_health(self.cluster)}
        for wg in self._graphs.values():
            known.update(wg.peers)
        unknown = "" if task in known else (f"; {task} is in no cluster this worker knows of "
                                            "(its own ClusterSpec, a registered graph's)")
        return RemoteCallError("ABORTED", f"{where} names no pushed Recv of a graph registered "
                               f"on {self.task} (the graph was dropped or the worker restarted, "
                               f"or the key is not the cluster's){unknown}")

    def _make_room(self, step_id, nbytes):
        """Drop the steps past ``step_ttl`` (which leave the parked account); then refuse
        (RESOURCE_EXHAUSTED) a push that still exceeds a limit."""
        parked = self._parked
        self._sweep()
        if (step_id not in parked and len(parked) >= self.max_parked_steps) or \
                self._parked_bytes + nbytes > self.max_parked_bytes:
            raise RemoteCallError("RESOURCE_EXHAUSTED", (
                f"PushTensors of step {step_id}: {self.task} already parks the pushed "
                f"values of {len(parked)} steps whose RunGraph has not started here "
                f"({self._parked_bytes} bytes; at most {self.max_parked_steps} steps and "
                f"{self.max_parked_bytes} bytes); {nbytes} bytes more are refused"))
