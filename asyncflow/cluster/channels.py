"""How asyncflow reaches a worker address: HTTP, or an in-process service for tests.

An address ``host:port`` is an HTTP worker, spoken to from trio directly
(``transports.http.client.TrioHttpChannel``: keep-alive connections, no thread hop), with the
shared token of ``ASYNCFLOW_TOKEN`` when set. The host ``inprocess`` (``inprocess:7``) names a
worker service living in this process (``af.Server`` with such an address registers itself
here instead of binding a socket): the same protocol and codec through
``transports.inprocess.InProcessChannel``, so one test suite runs over both transports.
"""
from __future__ import annotations

import os

import trio

from asyncflow import errors
from asyncflow.cluster.spec import ClusterSpec
from transports.inprocess import InProcessChannel
from transports.messages import RemoteCallError, Reset
from transports.service import TransportDeadlineExceeded, TransportError, TransportUnavailable
from transports.wire import ChecksumMismatch, RemoteProtocolError

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


def call_error(what, task, exc, run_deadline=False):
    """The error a failed control call (``what``: Health, RegisterGraph) to ``task`` raises
    (``exc``: one of :data:`CALL_FAILURES`); ``run_deadline``: the call's timeout was what
    was left of the run's, so its expiry is the run's DeadlineExceededError."""
    if isinstance(exc, ChecksumMismatch):  # damaged in transit: never retried
        return damaged_reply(what, task.address, exc)
    if isinstance(exc, RemoteCallError):
        return errors.from_code(exc.code, f"{what}: {exc.message}")
    if run_deadline and isinstance(exc, TransportDeadlineExceeded):
        return errors.DeadlineExceededError(None, None, f"{what}: no answer within the run's "
                                            f"timeout (RunOptions.timeout_in_ms): {exc}")
    return unavailable(task, exc)  # no answer, or garbage


async def run_call_error(what, task, exc, deadline, run_deadline):
    """:func:`call_error` of a control call made inside a run, ``run_deadline`` when its
    timeout was what was left of ``deadline``, the run's. A call cut by that deadline first
    lets the scope that set it claim it: a caller's ``move_on_after`` ends in its own cancel,
    not in an error; the session's ``RunOptions.timeout_in_ms`` scope in its
    DeadlineExceededError (the error returned here only if no scope claims it)."""
    if run_deadline and isinstance(exc, TransportDeadlineExceeded):
        await trio.sleep_until(deadline)  # (at most the clocks' rounding: it has passed)
    return call_error(what, task, exc, run_deadline)


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
