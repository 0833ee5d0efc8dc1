"""How asyncflow reaches a worker address: HTTP, or an in-process service for tests.

An address ``host:port`` is an HTTP worker, spoken to from trio directly
(``transports.http.client.TrioHttpChannel``: keep-alive connections, no thread hop), with the
shared token of ``ASYNCFLOW_TOKEN`` when set. The host ``inprocess`` (``inprocess:7``) names a
worker service living in this process (``af.Server`` with such an address registers itself
here instead of binding a socket): the same protocol and codec through
``transports.inprocess.InProcessChannel``, so one test suite runs over both transports.
"""
from __future__ import annotations

import logging
import os

import outcome
import trio

from asyncflow import errors
from asyncflow.cluster.spec import ClusterSpec
from transports.inprocess import InProcessChannel
from transports.messages import DeregisterGraph, RemoteCallError, Reset
from transports.service import TransportError, TransportUnavailable
from transports.wire import ChecksumMismatch, RemoteProtocolError

_log = logging.getLogger(__name__)
TOKEN_ENV = "ASYNCFLOW_TOKEN"
INPROCESS_HOST = "inprocess"
_services = {}
# What a channel's call raises for its peer's fault: an error answer, an answer that is no
# valid reply (garbage, a cut frame; ChecksumMismatch among them), no answer.
CALL_FAILURES = (RemoteCallError, RemoteProtocolError, TransportError)
# The stall timeout of a worker's own channels to its peers (its pulls and pushes): a worker
# knows no session's ``worker_dead_after_s``, and a step with a run timeout is bounded by that
# first (its deadline travels with RunGraph); this bounds a stalled peer answer without one.
PEER_STALL_TIMEOUT_S = 10.0


def damaged_reply(call, address, exc):
    """The DataLossError for a reply that a ``transports.wire.ChecksumMismatch`` ``exc`` says
    was damaged in transit; ``call`` names the RPC and the worker, ``address`` where it is.
    Never retried (0 times): the caller may run it again."""
    return errors.DataLossError(None, None, (
        f"{call} at {address}: the reply: {exc.part}: {exc.detail}; the reply was damaged in "
        "transit and the call failed (not retried: run it again)"))


def damaged_step_reply(task, address, exc):
    """The DataLossError for a RunGraph reply of ``task`` that a ``ChecksumMismatch`` says was
    damaged in transit: a fetch's bytes, or the header's. Never retried here (the step may
    have side effects); the caller may run it again."""
    return errors.DataLossError(None, None, (
        f"RunGraph on {task.name} at {address}: "
        f"{f'fetch {exc.key!r}' if exc.key is not None else f'the reply: {exc.part}'}"
        f": {exc.detail}; the reply was damaged in transit and the step failed "
        "(not retried: run it again)"))


def unavailable(task, exc):
    """The UnavailableError for a master's ``task`` that ``exc`` says cannot be reached (or
    that answered with bytes that are no valid reply: it is no usable worker either)."""
    task.down_reported = True
    if isinstance(exc, RemoteProtocolError):
        exc = f"its answer is not a valid reply: {exc}"
    # A session target's task has no name until its Health answers.
    worker = f"worker {task.name} at {task.address}" if task.name else f"worker at {task.address}"
    return errors.UnavailableError(None, None, f"{worker} is unavailable: {exc}")


def call_error(what, task, exc):
    """The error a failed control call (``what``: Health, RegisterGraph) to ``task`` raises
    (``exc``: one of :data:`CALL_FAILURES`)."""
    if isinstance(exc, ChecksumMismatch):  # damaged in transit: never retried
        return damaged_reply(what, task.address, exc)
    if isinstance(exc, RemoteCallError):
        return errors.from_code(exc.code, f"{what}: {exc.message}")
    return unavailable(task, exc)  # no answer, or garbage


async def detached_call(call, abandoned, pending, name="a control call"):
    """A :class:`DetachedCall` of ``call`` begun now, unless the caller is already cancelled
    (then it starts nothing: a closing master waits only for the calls it saw begin)."""
    await trio.lowlevel.checkpoint_if_cancelled()
    return DetachedCall(call, abandoned, pending, name)


class DetachedCall:
    """``await call()`` (a control call bounded by its own timeout, whose effect on the peer
    must not be lost, such as a RegisterGraph) in a system task of its own; callers wait for
    it with ``result()``, one after another as each is cancelled (a step retried) or at once:
    a caller's cancel (a run's deadline, a ``move_on_after``) ends its wait at once, not the
    call. A result no caller was waiting for as it came goes to ``abandoned(result)`` (an
    async function that undoes it: a late registration's graph deregistered). ``pending``: a
    set that holds an Event per such call until it has ended (a closing master waits for
    them). A call's failure is raised to the callers that wait, else dropped. ``name`` (what
    the call is, on which task) names it in the log when undoing its result fails."""

    def __init__(self, call, abandoned, pending, name="a control call"):
        self.name = name
        self._answered, self._settled, self._ended = trio.Event(), trio.Event(), trio.Event()
        self._outcome, self._waiting, self._taken = None, 0, False
        pending.add(self._ended)
        trio.lowlevel.spawn_system_task(self._detached, call, abandoned, pending,
                                        name=f"asyncflow detached call: {name}")

    @property
    def answered(self):
        """Whether the call has ended (its result is taken or undone: wait for it no more)."""
        return self._answered.is_set()

    async def result(self):
        """The call's result, or its failure raised; only while not ``answered``."""
        assert not self.answered, "a detached call's result awaited after it came"
        self._waiting += 1
        try:
            await self._answered.wait()
            self._taken = True
        finally:  # (each waiter counted when the answer came runs this once more)
            self._waiting -= 1
            if not self._waiting and self.answered:
                self._settled.set()
        if isinstance(self._outcome, outcome.Error):
            raise self._outcome.error
        return self._outcome.value

    async def _detached(self, call, abandoned, pending):
        try:
            self._outcome = await outcome.acapture(call)
            self._answered.set()
            if self._waiting:  # rescheduled by the answer (taken) or by a cancel before it
                await self._settled.wait()
            if not self._taken and isinstance(self._outcome, outcome.Value):
                await abandoned(self._outcome.value)
        except Exception:  # noqa: BLE001 - a system task must not crash the run
            _log.exception("%s: undoing its result, answered after its caller left, failed",
                           self.name)
        finally:  # (every caller has read it: an error kept here would hold its frames)
            self._outcome = None
            pending.discard(self._ended)
            self._ended.set()


async def deregister(channel, handle):
    """Forget the graph ``handle`` on ``channel``'s worker (best effort: a worker gone or deaf
    keeps it until its lease runs out)."""
    try:
        await channel.deregister_graph(DeregisterGraph(handle), timeout=1.0)
    except CALL_FAILURES:
        pass


async def deregister_all(registered, pending):
    """Deregister the graphs ``registered()`` names (``(channel, handle)`` pairs): those known
    now, then those the calls of ``pending`` (:func:`detached_call`'s set) hand over as they
    end (an answer nobody took deregisters its own graph), all within ``CLOSE_S``, shielded:
    a registration never answered delays neither the known graphs nor the close past it."""
    done = set()
    with trio.CancelScope(shield=True, deadline=trio.current_time() + CLOSE_S):
        for ended in [None, *pending]:
            if ended is not None:
                await ended.wait()
            for channel, handle in registered():
                if handle not in done:
                    done.add(handle)
                    await deregister(channel, handle)


def is_inprocess(address):
    return address.rpartition(":")[0] == INPROCESS_HOST


def register_inprocess(address, service):
    """Make ``service`` reachable at ``address`` (``inprocess:N``) in this process.

    Raises:
        OSError: if another service holds the address (like a port in use).
    """
    if address in _services:
        raise OSError(f"in-process address {address} is already in use")
    _services[address] = service


def unregister_inprocess(address, service):
    if _services.get(address) is service:
        del _services[address]


class _InProcess(InProcessChannel):
    """Looks the service up per call, so a stopped (or restarted) worker behaves as over HTTP."""

    def __init__(self, address):
        super().__init__(None, address=address)

    async def _exchange(self, rpc, request):
        self._handler = _services.get(self.address)
        if self._handler is None:
            raise TransportUnavailable(f"no worker at {self.address} (connection refused)")
        return await super()._exchange(rpc, request)

    async def _exchange_text(self, method):
        self._handler = _services.get(self.address)
        if self._handler is None:
            raise TransportUnavailable(f"no worker at {self.address} (connection refused)")
        return await super()._exchange_text(method)


def target_address(target):
    """``host:port`` of a session target (``grpc://`` and ``http://`` prefixes accepted)."""
    for prefix in ("grpc://", "http://", "asyncflow://"):
        if target.startswith(prefix):
            target = target[len(prefix):]
    return target.rstrip("/")


def connect(address, token=None, connect_timeout=5.0, stall_timeout=PEER_STALL_TIMEOUT_S):
    """A transports Channel to the worker at ``address``.

    Args:
        address: ``host:port``, or ``inprocess:N``.
        token: the shared secret (default: ``ASYNCFLOW_TOKEN`` from the environment).
        connect_timeout: seconds to establish a connection.
        stall_timeout: seconds an answer that has begun may go without a byte (a peer stuck
            mid-send, a half-open connection) before the call fails as unavailable.
    """
    if is_inprocess(address):
        return _InProcess(address)
    from transports.http.client import TrioHttpChannel
    token = check_token(token if token is not None else (os.environ.get(TOKEN_ENV) or None))
    return TrioHttpChannel(address, token=token, connect_timeout=connect_timeout,
                           stall_timeout=stall_timeout)


def for_session(address, config):
    """A master's channel to ``address`` under a session's ``config``: its connect timeout,
    and an answer stalled mid-frame for ``worker_dead_after_s`` is a dead worker's."""
    return connect(address, connect_timeout=config.connect_timeout_s,
                   stall_timeout=config.worker_dead_after_s)


def check_token(token):
    """``token`` without surrounding whitespace; None and ``""`` mean no token.

    HTTP strips the whitespace around a header value, so a token read with its trailing
    newline (``ASYNCFLOW_TOKEN=$(cat file)`` keeps none, a file read in Python does) could
    never match; it is stripped on both sides.

    Raises:
        ValueError: the token is empty or holds characters an HTTP header cannot carry.
    """
    if token is None or token == "":
        return None
    stripped = token.strip()
    if not stripped or not all(33 <= ord(c) < 127 for c in stripped):
        raise ValueError(f"{TOKEN_ENV} must be printable ASCII without spaces (an HTTP header "
                         "carries it); generate one with: python -c \"import secrets; "
                         "print(secrets.token_urlsafe(32))\"")
    return stripped


async def reset(target, containers=None, config=None):
    """Clear resource containers on every task of ``target`` (a ClusterSpec, dict or address).

    Raises:
        UnavailableError: a task could not be reached.
    """
    from asyncflow.exec.options import SessionConfig
    config = config or SessionConfig()
    if isinstance(target, str):
        addresses = [target_address(target)]
    else:
        addresses = [address for _, _, address in ClusterSpec(target).tasks()]
    request = Reset(None if containers is None else list(containers))

    async def reset_one(address):
        channel = connect(address, connect_timeout=config.connect_timeout_s)
        try:
            await channel.reset(request, timeout=config.worker_dead_after_s)
        except TransportError as exc:
            raise errors.UnavailableError(None, None, f"worker at {address} is unavailable: "
                                          f"{exc}") from None
        except RemoteCallError as exc:
            raise errors.from_code(exc.code, f"Reset on {address}: {exc.message}") from None
        finally:
            await channel.aclose()

    async with trio.open_nursery() as nursery:
        for address in addresses:
            nursery.start_soon(reset_one, address)


CLOSE_S = 2.0  # a closing master's bound on each part of its cleanup (no dead peer waited for)


async def close_all(channels, monitor_ended=None):
    """Close every one of ``channels`` and wait for ``monitor_ended`` (an Event, or None),
    shielded and within ``CLOSE_S``: a channel whose close raises (a KeyboardInterrupt in it)
    leaves none of the others open; the first such exception is raised after."""
    first = None
    with trio.CancelScope(shield=True, deadline=trio.current_time() + CLOSE_S):
        for channel in channels:
            try:
                await channel.aclose()
            except trio.Cancelled:  # (shielded: this scope's bound, ended by the scope; the
                pass                # others are still closed, their sockets before a checkpoint)
            except BaseException as exc:  # noqa: BLE001 - raised below, once all are closed
                first = first or exc
        if monitor_ended is not None:
            await monitor_ended.wait()
    if first is not None:
        try:
            raise first
        finally:
            del first  # (this frame is in its traceback: kept, a cycle for the GC)


async def all_at_once(fn, items):
    """``fn(item)`` for every item at once; the first OpError cancels the rest and is raised."""
    failures = []

    async def one(item, nursery):
        try:
            await fn(item)
        except errors.OpError as exc:
            failures.append(exc)
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(one, item, nursery)
    if failures:
        raise failures[0]


async def each_shielded(fn, items, within):
    """``fn(item)`` for every item at once, shielded and within ``within`` seconds (a step's
    AbortSteps: sent whatever cancels the caller). A KeyboardInterrupt meeting the wait (a
    second Ctrl-C: trio delivers it to the main task where it waits, shield or not) is raised
    alone, as ``except KeyboardInterrupt`` expects (STYLE: never a bare ExceptionGroup)."""
    try:
        with trio.CancelScope(shield=True), trio.move_on_after(within):
            async with trio.open_nursery() as nursery:
                for item in items:
                    nursery.start_soon(fn, item)
    except BaseExceptionGroup as group:  # (the nursery's, of the interrupt)
        interrupt = group.subgroup(KeyboardInterrupt)
        if interrupt is None:
            raise
    else:
        return
    while isinstance(interrupt, BaseExceptionGroup):
        interrupt = interrupt.exceptions[0]
    try:
        raise interrupt  # (out of the handler: its context the step's own exception)
    finally:
        del interrupt  # (this frame is in its traceback: kept, a cycle for the GC)


def only_cancelled(exc):
    """Whether ``exc`` is trio's Cancelled, or a group of nothing else (a nursery's)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)
