"""A worker's RunGraph step path: find or create the step's state, check the feeds, run the
partition's step runner under the request's deadline, answer the fetches, drop the step's state
when it is done (``worker.py``'s docstring says what RunGraph and step state guarantee).

``StepRunning`` is a part of ``WorkerService`` (its base class): the methods here use the
service's graphs, steps, tombstones, counters and status recorder.
"""
from __future__ import annotations

import logging
import math
import time
import weakref

import trio

from asyncflow import errors
from asyncflow.cluster import remote_rendezvous as _rdv
from asyncflow.cluster.remote_rendezvous import host_array as _host
from asyncflow.exec.step import Step
from transports.messages import (
    NodeExecStats, RemoteCallError, RunGraph, RunGraphReply, StepStats, TensorEntry,
)

_log = logging.getLogger("asyncflow.worker")


def _fail(code, message, derived=False):
    raise RemoteCallError(code, message, derived=derived)


class _StepState:
    """A step's state on this worker. Its ``StepRendezvous`` is built when first asked for:
    a plain step's (``_run_plain``) never is, unless a pull, a push or an abort of its id
    comes while it runs, or it fails (the failure aborts it, as the full path's)."""

    __slots__ = ("step_id", "made", "devices", "binding", "created", "running", "ran",
                 "scope")

    def __init__(self, step_id, devices, now, binding=None):
        self.step_id = step_id
        self.made = None  # the StepRendezvous, once asked for
        self.devices = devices  # a frozenset
        self.binding = binding  # the rendezvous's, once made
        self.created = now
        self.running = False
        self.ran = False
        self.scope = None

    @property
    def rendezvous(self):
        made = self.made
        if made is None:
            made = self.made = _rdv.StepRendezvous(self.step_id, self.devices)
            made.binding = self.binding
        return made


class StepRunning:
    """RunGraph and the step state behind it (mixed into ``WorkerService``)."""

    def _sweep(self):
        now = trio.current_time()
        for step_id, state in list(self._steps.items()):
            if now - state.created > self._step_ttl and not state.running:
                self._drop(step_id, "expired")

    def _drop(self, step_id, reason, abort=True):
        """Forget ``step_id``'s state, leave its tombstone; ``abort=False``: nothing waits in
        its rendezvous or is left in it (a finished step), so no error is made for it."""
        state = self._steps.pop(step_id, None)
        if self._parked:
            self._unpark(step_id)
        if abort and state is not None and not state.rendezvous.aborted:
            state.rendezvous.abort(_rdv.derived(errors.AbortedError(
                None, None, f"step {step_id} was {reason} on {self.task}")))
        self._tombstones[step_id] = reason
        while len(self._tombstones) > 4 * self._max_steps:
            self._tombstones.popitem(last=False)

    def _find_or_create(self, step_id):
        reason = self._tombstones.get(step_id) or self._abort_marks.get(step_id)
        if reason is not None:
            _fail("ABORTED", f"step {step_id} was already {reason} on {self.task}")
        state = self._steps.get(step_id)
        if state is None:
            if self._steps:
                self._sweep()
            if len(self._steps) >= self._max_steps:
                _fail("RESOURCE_EXHAUSTED", f"{self.task} already holds {len(self._steps)} "
                      "steps; refusing state for another")
            state = self._steps[step_id] = _StepState(step_id, self._device_set,
                                                      trio.current_time())
        return state

    def _maybe_done(self, state):
        if state.ran and (state.made is None or state.made.settled()):
            self._drop(state.step_id, "finished", abort=False)

    def _feed_values(self, wg, entries):
        if [entry.key for entry in entries] == wg.feed_names:  # the master's order: no lookup
            ordered = entries
        else:
            by_key = {}
            for entry in entries:
                if entry.key in by_key:
                    _fail("INVALID_ARGUMENT", f"feed {entry.key!r} is given twice")
                by_key[entry.key] = entry
            unknown = sorted(set(by_key) - set(wg.feed_names))
            missing = [n for n in wg.feed_names if n not in by_key]
            if unknown or missing:
                _fail("INVALID_ARGUMENT", f"RunGraph feeds of graph {wg.handle} must be "
                      f"exactly {wg.feed_names}; unknown {unknown}, missing {missing}")
            ordered = [by_key[name] for name in wg.feed_names]
        values = []
        for entry, (name, expected, dims, tensor) in zip(ordered, wg.feed_checks):
            value = entry.value
            if value is None:
                _fail("INVALID_ARGUMENT", f"feed {name!r} carries no value")
            if value.dtype != expected:
                _fail("INVALID_ARGUMENT", f"feed {name!r} has dtype {value.dtype}, but its "
                      f"placeholder declares {tensor.dtype.name}")
            shape = value.shape
            if dims is not None and (len(dims) != len(shape) or any(
                    d is not None and d != n for d, n in zip(dims, shape))):
                _fail("INVALID_ARGUMENT", f"feed {name!r} has shape {list(shape)}, but "
                      f"its placeholder declares {tensor.shape}")
            self.counters.bytes_received += value.nbytes
            values.append(value)
        return values

    async def run_graph(self, request):
        return await self.run_graph_in_scope(request, None)

    async def run_graph_in_scope(self, request, scope, admitted=None):
        """RunGraph in the transport's cancel scope of the call (``scope``; None: a scope of
        the step's own), which then also carries the step's deadline and AbortStep's cancel:
        one scope per call instead of two (``transports.service.WorkerServiceProtocol``).
        ``admitted``: ``(graph, feed values)`` of a request whose graph, fetches, feeds and
        request id were checked already (a ``PlainStep`` that the full path must take)."""
        if admitted is None:
            wg = self._graphs.get(request.graph_handle)
            if wg is None:
                _fail("NOT_FOUND", f"no graph with handle {request.graph_handle!r} on "
                      f"{self.task} (incarnation {self.incarnation:x}); register it again")
            if request.fetch_keys != wg.fetch_names and \
                    list(request.fetch_keys) != wg.fetch_names:
                _fail("INVALID_ARGUMENT", f"RunGraph fetch keys {list(request.fetch_keys)} "
                      f"differ from the registered {wg.fetch_names}")
            feed_values = self._feed_values(wg, request.feeds)
            _admit(self, wg, request.step_id, request.request_id)
        else:
            wg, feed_values = admitted
        if wg.plain and not request.trace:
            state = self._plain_state(request.step_id, wg)
            if state is not None:
                if scope is not None:
                    return RunGraphReply(self._entries(wg, await self._run_plain(
                        state, wg, feed_values, request.step_id, request.timeout_ms, scope)))
                with trio.CancelScope() as scope:  # the step's own: its deadline, AbortStep
                    return RunGraphReply(self._entries(wg, await self._run_plain(
                        state, wg, feed_values, request.step_id, request.timeout_ms, scope)))
                raise self._stopped_error(state, request.timeout_ms)  # (answered above)
        state = self._find_or_create(request.step_id)
        if state.running or state.ran:
            _fail("ALREADY_EXISTS", f"step {request.step_id} already ran on {self.task}")
        state.rendezvous.binding = wg.binding  # built once, at registration
        if self._parked:  # its pushed values are its graph's now (push_acceptance.py)
            self._unpark(request.step_id)
        state.running = True
        trace = [] if request.trace or self.status.wants_trace(request.step_id) else None
        step = Step(request.step_id, rendezvous=state.rendezvous, trace=trace)
        wg.running += 1
        wg.runs += 1
        started = time.perf_counter()
        try:
            values = await self._execute(state, wg, feed_values, step, request.timeout_ms,
                                         scope)
            if state.rendezvous.abort_error is not None:  # a one-way push refused after its
                raise _rdv.remote_call_error(state.rendezvous.abort_error)  # Recvs took theirs
        except BaseException as exc:
            self.status.step_done(request.step_id, time.perf_counter() - started, failed=True)
            self._step_failed(state, exc)
            state.rendezvous.release()  # (not by the error: its frames hold this state)
            raise
        finally:
            wg.running -= 1
            wg.lease_expires = trio.current_time() + self._graph_lease_s
            state.running = False
            state.ran = True
            state.rendezvous.count_into(self.counters)
        self.counters.steps_run += 1
        self.status.step_done(request.step_id, time.perf_counter() - started, trace)
        tensors = self._fetched(wg, values)
        self._maybe_done(state)
        stats = StepStats([_node_stats(s) for s in trace]) if request.trace else None
        return RunGraphReply(tensors, stats)

    def _fetched(self, wg, values):
        return self._entries(wg, self._sent(values))

    def _sent(self, values):
        """The fetched ``values`` as host arrays, their bytes counted as sent."""
        sent, host = 0, []
        for value in values:
            value = _host(value)
            sent += value.nbytes
            host.append(value)
        self.counters.bytes_sent += sent
        return host

    @staticmethod
    def _entries(wg, values):
        return [TensorEntry(name, value) for name, value in zip(wg.fetch_names, values)]

    def prepare_run_graph(self, fields, ids, tensors):
        """A ``PlainStep`` for the RunGraphs of one frame template (its fixed ``fields``,
        its volatile ``ids``' names, per feed ``(key, numpy dtype, shape)``), or None where
        they are not a plain graph's untraced steps with the registered fetches and feeds of
        their placeholders' dtypes and shapes (their frames then take the full path, which
        gives each its answer): ``transports.service.WorkerServiceProtocol``."""
        wg = self._graphs.get(fields.get("graph_handle"))
        if wg is None or not wg.plain or fields.get("trace", False) is not False \
                or ids != ("step_id", "request_id") \
                or list(fields.get("fetch_keys", ())) != wg.fetch_names \
                or [key for key, _, _ in tensors] != wg.feed_names:
            return None
        nbytes = 0
        for (_, dtype, shape), (_, expected, dims, _) in zip(tensors, wg.feed_checks):
            if dtype != expected or dims is not None and (len(dims) != len(shape) or any(
                    d is not None and d != n for d, n in zip(dims, shape))):
                return None
            nbytes += math.prod(shape) * dtype.itemsize
        timeout_ms = fields.get("timeout_ms")
        if timeout_ms is not None and type(timeout_ms) is not int:
            return None
        return PlainStep(self, wg, timeout_ms, nbytes)

    def _plain_state(self, step_id, wg):
        """A new state for a plain step of ``step_id`` (``_run_plain``), or None where the
        full path must take the step: its id already known here (a tombstone, an abort mark,
        the state a pull or a push made), pushes parked, its trace wanted, no room for it."""
        if step_id in self._steps or step_id in self._tombstones \
                or step_id in self._abort_marks or self._parked \
                or self.status.wants_trace(step_id):
            return None
        if self._steps:
            self._sweep()
            if len(self._steps) >= self._max_steps:
                return None
        state = self._steps[step_id] = _StepState(step_id, self._device_set,
                                                  trio.current_time(), wg.binding)
        return state

    async def _run_plain(self, state, wg, feed_values, step_id, timeout_ms, scope):
        """RunGraph of a plain partition (one plan without Sends or Recvs, ``wg.plain``),
        untraced, in the transport's call scope (``scope``, else one of the step's own): the
        full path's step less what it does for transfers: no ``StepRendezvous`` (made only if
        a pull, a push or an abort of its id comes while it runs, or it fails), the plan run with no
        rendezvous as a local step runs, the step's deadline and cancel on ``scope`` without
        ``_execute``'s levels; a failure is answered as the full path answers it
        (``plain_steps`` counts these steps). Returns the fetched values, host arrays."""
        deadline = math.inf
        if timeout_ms:
            deadline = trio.current_time() + timeout_ms / 1000
            if deadline < scope.deadline:
                scope.deadline = deadline
        state.scope = scope
        state.running = True
        wg.running += 1
        wg.runs += 1
        self.plain_steps += 1
        started = time.perf_counter()
        try:
            values = await wg.compiled.runner.run(feed_values, Step(step_id))
            made = state.made
            if made is not None and made.abort_error is not None:  # aborted as it ended
                raise _rdv.remote_call_error(made.abort_error)
        except BaseException as exc:
            error = self._plain_error(state, exc, timeout_ms, deadline)
            self.status.step_done(step_id, time.perf_counter() - started, failed=True)
            self._step_failed(state, error)
            state.rendezvous.release()
            if error is exc:
                raise
            try:
                raise error from None
            finally:
                del error  # (this frame is in its traceback: no cycle)
        finally:
            wg.running -= 1
            wg.lease_expires = trio.current_time() + self._graph_lease_s
            state.running = False
            state.ran = True
            if state.made is not None:
                state.made.count_into(self.counters)
        self.counters.steps_run += 1
        self.status.step_done(step_id, time.perf_counter() - started)
        values = self._sent(values)
        self._maybe_done(state)
        return values

    def _plain_error(self, state, exc, timeout_ms, deadline):
        """What a plain step that raised ``exc`` answers: what ``_run_step`` and
        ``_execute`` raise for it in the full path."""
        if isinstance(exc, errors.OpError):
            return _rdv.remote_call_error(exc)
        if _only_cancelled(exc) and ((state.made is not None and state.made.aborted)
                                     or trio.current_time() >= deadline):
            return self._stopped_error(state, timeout_ms)
        return exc

    async def _execute(self, state, wg, feed_values, step, timeout_ms, lent=None):
        deadline = trio.current_time() + timeout_ms / 1000 if timeout_ms else float("inf")
        if lent is not None:  # the call's scope: its deadline lowered to the step's
            if deadline < lent.deadline:
                lent.deadline = deadline
            state.scope = lent
            try:
                return await self._run_step(state, wg, feed_values, step)
            except BaseException as exc:  # our cancel (AbortStep, Reset, the step's deadline)
                if _only_cancelled(exc) and (state.rendezvous.aborted  # answers as the scope
                                             or trio.current_time() >= deadline):  # of its own
                    self._stopped(state, timeout_ms)  # did below; the transport's (client
                raise  # gone, closing) goes on up to the transport
        with trio.CancelScope(deadline=deadline) as scope:
            state.scope = scope
            return await self._run_step(state, wg, feed_values, step)
        self._stopped(state, timeout_ms)

    async def _run_step(self, state, wg, feed_values, step):
        failure = None
        try:
            if wg.binding.declarations or wg.binding.pushed:  # pulls and pushes: a nursery
                values = await self._run_with_pulls(state, wg, feed_values, step)
            else:
                values = await wg.compiled.runner.run(feed_values, step)
        except errors.OpError as exc:
            failure = exc
        if failure is not None:
            try:
                raise _rdv.remote_call_error(failure) from None
            finally:
                del failure  # (this frame is in its traceback: no cycle)
        return values

    def _stopped(self, state, timeout_ms):
        """Raise what a step whose scope was cancelled answers: aborted, or past its deadline."""
        raise self._stopped_error(state, timeout_ms)

    def _stopped_error(self, state, timeout_ms):
        if state.rendezvous.aborted:
            reason = state.rendezvous.abort_error  # a Reset says so itself; an AbortStep is derived
            if reason is not None and not _rdv.is_derived(reason):
                return RemoteCallError("ABORTED", reason.message)
            return RemoteCallError("ABORTED", f"step {state.step_id} was aborted on {self.task}",
                                   derived=True)
        return RemoteCallError("DEADLINE_EXCEEDED", f"step {state.step_id} ran past its "
                               f"{timeout_ms} ms deadline on {self.task}")

    @staticmethod
    async def _run_with_pulls(state, wg, feed_values, step):
        """Run the step with a nursery for its pulls (a task per request, none per edge: see
        ``StepRendezvous.subscribe``); pulls left when the step ends (it failed) are cancelled."""
        failure = None
        async with trio.open_nursery() as pulls:
            state.rendezvous.spawn = pulls.start_soon
            try:
                values = await wg.compiled.runner.run(feed_values, step)
                await state.rendezvous.flush_pushes()  # answered once its pushes landed
            except errors.OpError as exc:
                failure = exc  # (raised outside the nursery: never an ExceptionGroup)
            finally:
                state.rendezvous.spawn = None
                pulls.cancel_scope.cancel()
        if failure is not None:
            try:
                raise failure
            finally:
                del failure  # (this frame is in its traceback: no cycle)
        return values

    def _step_failed(self, state, exc):
        self.counters.steps_failed += 1
        if isinstance(exc, RemoteCallError):
            error = _rdv.from_remote(exc)
        elif _only_cancelled(exc):
            error = _rdv.derived(errors.CancelledError(
                None, None, f"step {state.step_id} was cancelled on {self.task}"))
        else:
            error = errors.InternalError(None, None, f"{type(exc).__name__}: {exc}")
        state.rendezvous.abort(error)
        op = exc.op if isinstance(exc, RemoteCallError) else ""
        self.status.error(state.step_id, errors.error_code_name(error), op, error.message,
                          _rdv.is_derived(error))
        level = logging.INFO if _rdv.is_derived(error) else logging.WARNING
        _log.log(level, "%s step %d failed: %s", self.task, state.step_id,
                 error.message.splitlines()[0])
        self._drop(state.step_id, "failed")


class PlainStep:
    """The RunGraphs of one frame template of a plain graph (``prepare_run_graph``), run from
    their ids and feed arrays without a message (the bare server's short path,
    ``transports/http/bare_calls.py``): the checks that the template's fixed fields decide
    were made once; each step is admitted (its request id) and run as ``_run_plain`` runs a
    plain step, or, where ``_plain_state`` refuses it, by the full path.

    It holds its worker and graph weakly: the template it is kept on is the process's
    (``transports.frame_templates``, until its next ``forget_all``), and must keep neither a
    stopped worker (its graphs, sessions and variables) nor a dropped graph alive."""

    __slots__ = ("_service", "_wg", "handle", "timeout_ms", "nbytes", "fetch_keys")

    def __init__(self, service, wg, timeout_ms, nbytes):
        self._service, self._wg = weakref.ref(service), weakref.ref(wg)
        self.handle, self.timeout_ms, self.nbytes = wg.handle, timeout_ms, nbytes
        self.fetch_keys = tuple(wg.fetch_names)

    def live(self):
        """Whether its worker is there and its graph still registered (else its frames take
        the full path)."""
        service, wg = self._service(), self._wg()
        return service is not None and wg is not None and wg.plain \
            and service._graphs.get(self.handle) is wg

    def begin(self, ids):
        """The step's new state, its request id admitted (after ``live()``); None where the
        full path must run it (``run_full``).

        Raises:
            RemoteCallError: its request id refused, as the full path refuses it.
        """
        service, wg = self._service(), self._wg()
        step_id, request_id = ids
        service.counters.bytes_received += self.nbytes
        _admit(service, wg, step_id, request_id)
        return service._plain_state(step_id, wg)

    def run(self, state, arrays, scope):
        """The plain step of ``begin``'s ``state`` (a coroutine: its fetched host arrays)."""
        return self._service()._run_plain(state, self._wg(), arrays, state.step_id,
                                          self.timeout_ms, scope)

    async def run_full(self, ids, arrays, scope):
        """The step that ``begin`` left to the full path: its RunGraphReply."""
        service, wg = self._service(), self._wg()
        request = RunGraph(wg.handle, ids[0], [
            TensorEntry(name, value) for name, value in zip(wg.feed_names, arrays)],
            list(wg.fetch_names), self.timeout_ms, False, ids[1])
        return await service.run_graph_in_scope(request, scope, (wg, arrays))


def _admit(service, wg, step_id, request_id):
    refused = wg.replay.admit(request_id)
    if refused is not None:
        _fail("INVALID_ARGUMENT" if request_id <= 0 else "ABORTED",
              f"RunGraph of step {step_id} on {service.task}: {refused}")


def _feed_checks(names, placeholders):
    """Per feed ``(name, numpy dtype, static dims or None, placeholder)``, computed once per
    registered graph so that a RunGraph's feed validation is a few comparisons."""
    return [(name, object if t.dtype.is_string else t.dtype.np, t.shape.dims, t)
            for name, t in zip(names, placeholders)]


def _only_cancelled(exc):
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def _node_stats(stats):
    return NodeExecStats(stats.node_name, stats.op_type, stats.device, int(stats.start_us),
                         int(stats.end_us))
