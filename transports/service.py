"""The worker service contract that every transport carries, and the client side they share.

Theory of operation
-------------------
A worker implements :class:`WorkerServiceProtocol` in trio. A transport's server decodes a request,
calls the handler method named in :data:`RPCS`, and encodes what it returns
(:func:`reply_for_result`) or raises (:func:`error_reply_for`). A transport's client is a
:class:`Channel`: the typed methods here encode the request, hand it to the subclass's
``_exchange`` and turn the reply back into a result (:func:`result_for_reply`) or an exception.
The in-process and HTTP transports differ only in ``_exchange``, which is what makes the
conformance suite meaningful.

:data:`RPCS` is the one table of calls: handler method, request and reply message classes, and the
HTTP method and route. Path templates name request fields (``{step_id}``), so routing is derived
from the table too.

Errors a caller sees: :class:`~transports.messages.RemoteCallError` (the worker answered with a
status code), :class:`TransportUnavailable` (no answer: refused, reset, peer died mid-body,
channel closed) and :class:`TransportDeadlineExceeded` (the call's ``timeout`` expired). A trio
cancel scope around a call cancels it the trio way, and cancels the handler on the worker too.
A :class:`CallCancel` lent to a RunGraph in place of an entered scope cancels it without a trio
scope where the channel can (the same-host client closes the connection the answer is awaited
on): the call then raises TransportUnavailable, never retried. ``split`` makes one for each of
several calls made at once, all ended by the one they were split from.

This module must not know about asyncflow or HTTP libraries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Protocol

import trio

from transports.messages import (
    AbortStep, Ack, CleanupStep, DeregisterGraph, DevicesReply, ErrorReply, Health, HealthReply,
    Message, PushTensors, RecvTensors, RecvTensorsReply, RegisterGraph, RegisterGraphReply,
    RemoteCallError, Reset, RunGraph, RunGraphReply, Shutdown,
)
from transports.wire import LocalProtocolError, RemoteProtocolError

__all__ = [
    "RPCS", "CallCancel", "Channel", "Rpc", "TransportDeadlineExceeded", "TransportError",
    "TransportUnavailable", "WorkerServiceProtocol", "error_reply_for", "reply_for_result",
    "result_for_reply",
]


class TransportError(Exception):
    """A call got no answer from the worker."""


class TransportUnavailable(TransportError):
    """The worker could not be reached or the connection broke (TF's UNAVAILABLE)."""


class TransportDeadlineExceeded(TransportError):
    """The call's timeout expired before the worker answered (TF's DEADLINE_EXCEEDED)."""


class CallCancel:
    """A call's cancel without a trio cancel scope (entering one costs ~5-10 us of CPU),
    lent to ``run_graph_step(call, scope=it, entered=True)`` in place of an entered scope.

    ``cancel()`` (from any task, or another thread: then in the call's trio run) ends the call:
    it closes the socket the call's answer is awaited on (``waits_on``: the same-host client's
    usual call) or cancels the trio scope a channel entered for it instead (``lend``: any other
    call); cancelled before the call began, the call raises at once, nothing sent. The call
    raises TransportUnavailable then, never retried; the caller tells it from a peer's doing
    by ``cancel_called``.
    """

    __slots__ = ("cancel_called", "_socket", "_scope", "_token")
    deadline = math.inf  # (read as an entered scope's)

    def __init__(self) -> None:
        self.cancel_called = False
        self._socket: Any = None
        self._scope: trio.CancelScope | None = None
        self._token = trio.lowlevel.current_trio_token()  # the call's run: the cancel acts there

    def cancel(self) -> None:
        self.cancel_called = True
        try:
            here = trio.lowlevel.current_trio_token() is self._token
        except RuntimeError:  # (no trio run in this thread)
            here = False
        if here:
            self._end()
            return
        try:  # another thread (a session closed from its trio run): in the call's run
            self._token.run_sync_soon(self._end)
        except trio.RunFinishedError:
            pass

    def _end(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
        sock = self._socket
        if sock is not None and sock.fileno() >= 0:
            trio.lowlevel.notify_closing(sock)  # (a wait on it raises ClosedResourceError)
            sock.close()

    def waits_on(self, sock: Any) -> None:
        """The call now awaits its answer on ``sock`` (None: no longer)."""
        self._socket = sock

    def lend(self, scope: trio.CancelScope | None) -> None:
        """The call now runs in ``scope`` (None: no longer); cancelled already: so is it."""
        self._scope = scope
        if scope is not None and self.cancel_called:
            scope.cancel()

    def split(self, n: int) -> list[CallCancel]:
        """``n`` cancels, one for each of the calls a caller makes at once (a step's RunGraphs
        on several tasks): this one's ``cancel()`` ends them all; each ends its own call alone
        (a task's call its caller gives up). This one is lent to no call then."""
        calls = [CallCancel() for _ in range(n)]
        self.lend(_Calls(calls))
        return calls


class _Calls:
    """``CallCancel.split``'s cancels, cancelled together (in the calls' trio run)."""

    __slots__ = ("calls",)

    def __init__(self, calls: list[CallCancel]) -> None:
        self.calls = calls

    def cancel(self) -> None:
        for call in self.calls:
            call.cancel()


class WorkerServiceProtocol(Protocol):
    """What a worker implements; every method is called in trio.

    Raise :class:`~transports.messages.RemoteCallError` to answer with a status code; any other
    exception becomes ``INTERNAL`` with its message. A cancelled call (client gone, deadline,
    server closing) sees ``trio.Cancelled``.

    Optional: ``async def run_graph_in_scope(request, scope)``, RunGraph run in the transport's
    own cancel scope of the call (a transport that runs each call in one, the bare same-host
    one, lends it instead of the handler entering a second; ``scope`` has a cancel scope's
    ``deadline``, ``cancel()`` and ``cancel_called``, acting on the call's scope only while
    the call runs: :class:`transports.http.call_scope.LentScope`): the handler may lower its
    deadline and cancel it, and must re-raise a cancellation it did not cause. It is used only
    where it is defined no less derived than ``run_graph`` (an override of ``run_graph``
    alone, in a subclass or on an instance, is what such a transport calls).

    Optional with it: ``prepare_run_graph(fields, ids, tensors)``, a *step* for the RunGraphs
    of one frame template (its fixed ``fields``, its volatile ids' names, per feed ``(key,
    numpy dtype, shape)``) or None; the bare server then runs such frames without a message
    (``live()``, ``begin(ids)``, ``run(state, arrays, scope)``, ``run_full(ids, arrays,
    scope)``, ``fetch_keys``: :mod:`transports.http.bare_calls`), where the class that defines
    the handler's RunGraph defines it too (:func:`transports.http.call_scope.step_preparer`).
    The templates are the process's: the handler is held weakly there (it must take a weak
    reference), and so must its step hold it.
    """

    async def register_graph(self, request: RegisterGraph) -> RegisterGraphReply: ...
    async def deregister_graph(self, request: DeregisterGraph) -> None: ...
    async def run_graph(self, request: RunGraph) -> RunGraphReply: ...
    async def recv_tensors(self, request: RecvTensors) -> RecvTensorsReply: ...
    async def push_tensors(self, request: PushTensors) -> None: ...
    async def abort_step(self, request: AbortStep) -> None: ...
    async def cleanup_step(self, request: CleanupStep) -> None: ...
    async def health(self, request: Health) -> HealthReply: ...
    async def reset(self, request: Reset) -> None: ...
    async def shutdown(self, request: Shutdown) -> None: ...
    async def devices(self) -> list[str]: ...
    async def metrics_text(self) -> str: ...
    async def status_json(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Rpc:
    """One call of the worker service.

    Attributes:
        method: the handler (and channel) method name.
        request: the request message class, or None when the handler takes no argument.
        reply: the reply message class on the wire (Ack when the handler returns None).
        http_method: the HTTP verb; GET and DELETE carry no body (fields come from the path).
        path: the route; ``{name}`` stands for the request field ``name``.
    """

    method: str
    request: type | None
    reply: type
    http_method: str
    path: str

    @property
    def has_body(self) -> bool:
        return self.http_method not in ("GET", "DELETE")


RPCS: Final[tuple[Rpc, ...]] = (
    Rpc("register_graph", RegisterGraph, RegisterGraphReply, "POST", "/v1/graphs"),
    Rpc("deregister_graph", DeregisterGraph, Ack, "DELETE", "/v1/graphs/{graph_handle}"),
    Rpc("run_graph", RunGraph, RunGraphReply, "POST", "/v1/steps/{step_id}/run"),
    Rpc("recv_tensors", RecvTensors, RecvTensorsReply, "POST", "/v1/steps/{step_id}/recv"),
    Rpc("abort_step", AbortStep, Ack, "POST", "/v1/steps/{step_id}/abort"),
    Rpc("cleanup_step", CleanupStep, Ack, "DELETE", "/v1/steps/{step_id}"),
    Rpc("health", Health, HealthReply, "GET", "/v1/health"),
    Rpc("reset", Reset, Ack, "POST", "/v1/reset"),
    Rpc("shutdown", Shutdown, Ack, "POST", "/v1/shutdown"),
    Rpc("devices", None, DevicesReply, "GET", "/v1/devices"),
    Rpc("push_tensors", PushTensors, Ack, "POST", "/v1/steps/{step_id}/push"),
)
_BY_METHOD: Final = {rpc.method: rpc for rpc in RPCS}
METRICS_PATH: Final = "/metrics"  # Prometheus text; outside the message protocol
STATUS_PATH: Final = "/v1/status"  # the task's live status as JSON; outside it too
# The calls answered with text (a path each) rather than a frame.
TEXT_CALLS: Final = {"metrics_text": METRICS_PATH, "status_json": STATUS_PATH}


def reply_for_result(rpc: Rpc, result: Any) -> Message:
    """Wrap what a handler returned as the rpc's reply message.

    Raises:
        LocalProtocolError: the handler returned the wrong type.
    """
    if rpc.reply is Ack and result is None:
        return Ack()
    if rpc.reply is DevicesReply and isinstance(result, list):
        return DevicesReply(result)
    if isinstance(result, rpc.reply):
        return result
    expected = {Ack: "None", DevicesReply: "list[str]"}.get(rpc.reply, rpc.reply.__name__)
    raise LocalProtocolError(f"handler {rpc.method} returned {type(result).__name__}, "
                             f"expected {expected}")


def result_for_reply(rpc: Rpc, reply: Message) -> Any:
    """Unwrap a reply message into what the channel method returns.

    Raises:
        RemoteCallError: the reply is an ErrorReply.
        RemoteProtocolError: the reply is of a kind that does not answer this rpc.
    """
    if isinstance(reply, ErrorReply):
        raise reply.error()
    if not isinstance(reply, rpc.reply):
        raise RemoteProtocolError(f"{rpc.method} was answered with {type(reply).__name__}, "
                                  f"expected {rpc.reply.__name__}")
    if isinstance(reply, Ack):
        return None
    if isinstance(reply, DevicesReply):
        return reply.devices
    return reply


def error_reply_for(exc: BaseException) -> ErrorReply:
    """The ErrorReply for an exception a handler raised.

    RemoteCallError keeps its code, op and derived flag; an exception group holding exactly one
    exception is judged by that one; MemoryError is RESOURCE_EXHAUSTED; anything else is
    INTERNAL, naming the exception type and message.
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, RemoteCallError):
        return exc.reply()
    if isinstance(exc, MemoryError):
        return ErrorReply("RESOURCE_EXHAUSTED", f"out of memory: {exc}")
    return ErrorReply("INTERNAL", f"{type(exc).__name__}: {exc}")


class Channel:
    """Client side of the worker service; subclasses implement ``_exchange``.

    Every method takes ``timeout`` (seconds, None for none): on expiry the call is cancelled and
    :class:`TransportDeadlineExceeded` raised. Enclosing trio deadlines apply as usual (they
    raise ``trio.Cancelled``). Use as ``async with`` or call :meth:`aclose`.

    Raises (every method):
        RemoteCallError: the worker answered with an error code.
        TransportUnavailable: no answer (see the module docstring), or the channel is closed.
        TransportDeadlineExceeded: ``timeout`` expired.
        RemoteProtocolError: the worker's answer was not a valid reply.
        LocalProtocolError: the request cannot be encoded (wrong field types, dtypes, sizes).
    """

    address: str
    # Whether every call gives the event loop back at least once (it waits on a socket): a
    # caller that counts time slices may take the call for a checkpoint. False here: a
    # subclass may answer in the caller's task without one (the in-process channel).
    calls_yield: bool = False

    def __init__(self) -> None:
        self._closed = False
        self._in_flight: set[trio.CancelScope] = set()

    async def register_graph(self, request: RegisterGraph, *,
                             timeout: float | None = None) -> RegisterGraphReply:
        """Install a graph partition; returns its handle."""
        return await self._call("register_graph", request, timeout)

    async def deregister_graph(self, request: DeregisterGraph, *,
                               timeout: float | None = None) -> None:
        """Forget a graph partition."""
        return await self._call("deregister_graph", request, timeout)

    async def run_graph(self, request: RunGraph, *, timeout: float | None = None,
                        scope: trio.CancelScope | None = None,
                        entered: bool = False) -> RunGraphReply | None:
        """Run a partition for one step; returns the fetched tensors.

        ``scope``: a fresh cancel scope of the caller's, which the call runs in instead of one
        of its own (one scope per call: a step's RunGraph is the hot path). Cancelling it
        cancels the call, which then returns None; its deadline and closing are as above.
        ``entered``: ``scope`` is one the caller has entered already (``timeout`` is not used:
        the caller's scopes bound the call); the call runs in it and closing the channel
        cancels it, but the ``Cancelled`` is the caller's to catch (no second scope).
        """
        if entered:
            return await self._call_entered("run_graph", request, scope)
        return await self._call("run_graph", request, timeout, scope)

    async def run_graph_step(self, call: Any, *, timeout: float | None = None,
                             scope: trio.CancelScope | None = None, entered: bool = False,
                             values: bool = False) -> RunGraphReply | list | None:
        """``run_graph`` of a :class:`transports.run_graph_step.StepCall` (a graph's RunGraph
        of one step: its fixed fields, ids and feed values); a channel that keeps prepared
        frames builds its frame without a message, this one sends ``call.message()``.
        ``values``: the fetches' values (a list) may be returned for the reply, where the
        channel reads them without one (the HTTP client's same-host step); this one never."""
        if entered:
            return await self.run_graph(call.message(), scope=scope, entered=True)
        return await self.run_graph(call.message(), timeout=timeout, scope=scope)

    async def recv_tensors(self, request: RecvTensors, *,
                           timeout: float | None = None) -> RecvTensorsReply:
        """Fetch rendezvous keys; waits until the producer has sent every one."""
        return await self._call("recv_tensors", request, timeout)

    async def push_tensors(self, request: PushTensors, *, timeout: float | None = None) -> None:
        """Hand a step's tensors to the worker that receives them (it deposits them)."""
        return await self._call("push_tensors", request, timeout)

    async def abort_step(self, request: AbortStep, *, timeout: float | None = None) -> None:
        """Abort a step on the worker."""
        return await self._call("abort_step", request, timeout)

    async def cleanup_step(self, request: CleanupStep, *, timeout: float | None = None) -> None:
        """Drop a step's state on the worker."""
        return await self._call("cleanup_step", request, timeout)

    async def health(self, request: Health | None = None, *,
                     timeout: float | None = None) -> HealthReply:
        """Ask the worker for its incarnation, task, devices and stats."""
        return await self._call("health", Health() if request is None else request, timeout)

    async def reset(self, request: Reset, *, timeout: float | None = None) -> None:
        """Clear resource containers on the worker."""
        return await self._call("reset", request, timeout)

    async def shutdown(self, request: Shutdown, *, timeout: float | None = None) -> None:
        """Ask the worker to stop serving (it answers first, then exits)."""
        return await self._call("shutdown", request, timeout)

    async def devices(self, *, timeout: float | None = None) -> list[str]:
        """The worker's device names."""
        return await self._call("devices", None, timeout)

    async def metrics_text(self, *, timeout: float | None = None) -> str:
        """The worker's metrics in Prometheus text format."""
        return await self._call("metrics_text", None, timeout)

    async def status_json(self, *, timeout: float | None = None) -> str:
        """The worker's live status, a JSON document (its fields: the worker's docs)."""
        return await self._call("status_json", None, timeout)

    async def aclose(self) -> None:
        """Close the channel: calls in flight and later calls raise TransportUnavailable."""
        self._closed = True
        for scope in self._in_flight:
            scope.cancel()

    async def __aenter__(self) -> Channel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _call(self, method: str, request: Message | None, timeout: float | None,
                    scope: trio.CancelScope | None = None) -> Any:
        if self._closed:
            raise TransportUnavailable(f"channel to {self.address} is closed")
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        lent = scope is not None  # the caller's: it may cancel it too
        if lent:
            if deadline < scope.deadline:
                scope.deadline = deadline
        else:
            scope = trio.CancelScope(deadline=deadline)
        with scope:
            self._in_flight.add(scope)
            try:
                if method in TEXT_CALLS:
                    return await self._exchange_text(method)
                rpc = _BY_METHOD[method]
                return result_for_reply(rpc, await self._exchange(rpc, request))
            finally:
                self._in_flight.discard(scope)
        if self._closed:
            raise TransportUnavailable(f"channel to {self.address} was closed during {method}")
        if lent and trio.current_time() < deadline:
            return None  # the caller cancelled its scope
        raise TransportDeadlineExceeded(
            f"{method} to {self.address} got no answer within {timeout} s")

    async def _call_entered(self, method: str, request: Message,
                            scope: trio.CancelScope | CallCancel) -> Any:
        if self._closed:
            raise TransportUnavailable(f"channel to {self.address} is closed")
        if type(scope) is CallCancel:  # a scope of the call's own, cancelled by it
            if scope.cancel_called:  # (before the call: nothing sent)
                raise TransportUnavailable(f"{method} to {self.address} was cancelled")
            with trio.CancelScope() as own:
                scope.lend(own)
                try:
                    return await self._call_entered(method, request, own)
                finally:
                    scope.lend(None)
            raise TransportUnavailable(f"{method} to {self.address} was cancelled")
        self._in_flight.add(scope)
        try:
            rpc = _BY_METHOD[method]
            return result_for_reply(rpc, await self._exchange(rpc, request))
        finally:
            self._in_flight.discard(scope)

    async def _exchange(self, rpc: Rpc, request: Message | None) -> Message:
        """Deliver ``request`` (None for rpcs without one) and return the decoded reply."""
        raise NotImplementedError

    async def _exchange_text(self, method: str) -> str:
        """The text answer of a call of :data:`TEXT_CALLS` (``GET`` of its path)."""
        raise NotImplementedError
