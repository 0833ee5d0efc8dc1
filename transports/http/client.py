"""A trio-native HTTP/1.1 client channel for the worker protocol (no asyncio thread, no aiohttp).

Theory of operation
-------------------
An aiohttp client (the tests' ``HttpChannel``) runs every call on an asyncio thread: two thread
hops a call and aiohttp's own machinery, most of a small step's fixed cost.
:class:`TrioHttpChannel` speaks the same protocol to the same server (routes from
:data:`transports.service.RPCS`, bodies as single :mod:`transports.wire` frames, the same
statuses and bearer token) straight from the calling trio task:

* **Connections.** Keep-alive ``trio.SocketStream`` s (``TCP_NODELAY``) in a per-channel idle
  pool; each call checks one out (a long ``recv_tensors`` never queues another call) and
  returns it after a complete response. A call that fails or is cancelled midway closes its
  connection (the server cancels the handler). A reused connection the server closed while
  idle (EOF or a reset before any byte of the answer) is retried once on a fresh one;
  anything else is :class:`~transports.service.TransportUnavailable`.
* **Requests.** The head and the frame's small buffers in one ``send``; each tensor of 64 KiB
  or more from a view of its array, no copy (:func:`transports.http.protocol.send_pieces`).
* **Replies** are fed to the connection's :class:`~transports.http.framing.MessageReader`
  (llhttp through httptools, as on the server; a head of at most ``client_io.MAX_HEAD``
  bytes; a body with a ``Content-Length`` or chunked); the body's rest is received with ``recv_into``
  straight into the :class:`~transports.wire.Decoder` 's arrays, bounded by its
  :class:`~transports.wire.Limits`; tensors of :data:`~transports.http.bulk_io.BULK_BYTES` or
  more by :mod:`transports.http.bulk_io` (a parked read wakes per MiB, not per segment).
* **Same host.** To a loopback address every call but the two text ones first goes over the
  bare-frame protocol of :mod:`transports.http.bare` (no HTTP head, one frame each way, the
  token checked once per connection); where the server has no such socket, HTTP from then on.
  A server that hangs up at the handshake (at its connection limit, or closing) is spoken to
  over HTTP for a back-off (``_BARE_RETRY_S``, doubling to ``_BARE_RETRY_MAX_S``; admitted
  bare connections serve on), then the bare socket is tried again.
* **Deadlines** are trio's: :class:`~transports.service.Channel` wraps each call in a cancel
  scope (but a same-host call with no timeout of its own on a pooled connection, which enclosing
  scopes bound and ``aclose`` ends by closing its connection, as a lent
  :class:`~transports.service.CallCancel` does: a step's RunGraph; and a one-way one, whose
  timeout bounds only a write that must wait: ``bare_io.write_request``); connecting has its own
  ``connect_timeout``. An answer that has begun must go on: ``stall_timeout`` seconds without a
  byte of it (a peer stuck mid-send, a half-open connection) is TransportUnavailable, however
  long the call may take before its first byte (a long step is no stall).

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import math
import typing
from typing import Any, Final

import trio

from transports.http import bare, cross_memory, same_host as _same_host
from transports.http.bare_io import CALLS
from transports.http.client_io import Body as _Body, Connection as _Connection, \
    StaleConnection as _StaleConnection
from transports.http.protocol import (
    CODE_HEADER, FRAME_CONTENT_TYPE, MAX_TEXT, parse_address, request_path, send_pieces,
    text_error, the_frame,
)
from transports.frame_templates import COPIED, tensor_values
from transports.messages import Ack, DeregisterGraph, ErrorReply, Message, RunGraphReply
from transports.checksum import enabled as checksum_enabled
from transports.repeat_frames import forget as forget_template
from transports.run_graph_step import RunGraphStep, StepCall, StepImage
from transports.service import RPCS, TEXT_CALLS, CallCancel, Channel, Rpc, \
    TransportDeadlineExceeded, TransportUnavailable, result_for_reply
from transports.wire import (
    DEFAULT_LIMITS, Decoder, Limits, LocalProtocolError, RemoteProtocolError,
    decode_repeated, encode, encode_prepared, frame_size,
)

__all__ = ["TrioHttpChannel"]

_MAX_IDLE: Final = 16            # idle keep-alive connections kept per channel
_BARE_RETRY_S: Final = 0.5       # after a bare handshake was hung up on: HTTP for this long,
_BARE_RETRY_MAX_S: Final = 30.0  # doubling (to this) while the server keeps hanging up
_BROKEN = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class _Again(Exception):
    """A pooled connection the server closed while idle, under a CallCancel: call again."""

_RPC_INDEX: Final = {rpc.method: index for index, rpc in enumerate(RPCS)}
_RUN_GRAPH: Final = RPCS[_RPC_INDEX["run_graph"]]


def _step_values(view: memoryview, limits: Limits) -> Any:
    """A step's RunGraph reply whole in one read: its fetches' values (a list) where a frame
    template of it is kept (``frame_templates.tensor_values``), else ``decode_repeated``'s."""
    if len(view) <= COPIED:
        found = tensor_values(bytes(view), limits, RunGraphReply)
        if found is not None:
            return found
    return decode_repeated(view, limits)
_STEP_IDS: Final = ("step_id", "request_id")  # a RunGraph's volatile ids
_PREPARED_KEPT: Final = 64       # prepared RunGraph signatures kept per channel (by handle)


class TrioHttpChannel(Channel):
    """A channel to a worker's HTTP server, spoken from trio (see the module docstring).

    Args:
        address: ``"host:port"`` (IPv6 hosts in brackets).
        token: bearer token to send, if the server requires one.
        connect_timeout: seconds to establish a connection before TransportUnavailable.
        stall_timeout: seconds an answer that has begun may go without a byte before
            TransportUnavailable.
        limits: codec limits for replies (and the requests this side builds).
        same_host: reach a server on this host through its Unix socket when it has one
            (:mod:`transports.http.same_host`), falling back to TCP; None: unless the environment
            disables it.
        bare: on the same host, try the bare-frame protocol (:mod:`transports.http.bare`)
            before HTTP; None: whenever the same-host path is on.

    Raises:
        ValueError: ``address`` is not ``host:port``, or ``token`` could break the head.
    """

    calls_yield = True  # every answer is waited for on a socket (a trio checkpoint)

    def __init__(self, address: str, *, token: str | None = None, connect_timeout: float = 5.0,
                 limits: Limits = DEFAULT_LIMITS, same_host: bool | None = None,
                 bare: bool | None = None, stall_timeout: float = 10.0) -> None:
        super().__init__()
        self._host, self._port = parse_address(address)
        self.address = address
        if token is not None and not (token and all(32 < ord(c) < 127 for c in token)):
            raise ValueError("token must be printable ASCII without spaces: it is written into "
                             "the Authorization header")
        auth = "" if token is None else f"Authorization: Bearer {token}\r\n"
        self._fixed_headers = f"Host: {address}\r\n{auth}"
        self._connect_timeout, self._stall_timeout = connect_timeout, stall_timeout
        self._limits = limits
        self._token = token
        self._idle: list[_Connection] = []
        self._bare_idle: list[bare.BareConnection] = []
        self._busy: set = set()  # connections of calls in flight (closed by ``aclose``)
        self._prepared: dict = {}  # graph handle -> its RunGraphs' prepared signature
        # Try the server's same-host Unix socket first (``transports.http.same_host``) until a
        # connection to it fails; then TCP only.
        self._same_host = (_same_host.enabled(same_host)
                           and self._host in _same_host.LOOPBACK_HOSTS)
        # Over the Unix socket, ask for large tensors to be copied from the server's memory
        # (``transports.http.cross_memory``) until a copy is refused; then sockets only.
        self._lend = self._same_host and cross_memory.available()
        self.lent_replies = self.lent_refused = 0  # replies copied / refused and sent again
        # Calls go over the bare-frame protocol (``transports.http.bare``) while the server
        # has its socket; else HTTP.
        self._bare = self._same_host and bare is not False
        self.bare_calls = 0  # calls answered over it
        # The rpcs sent one-way over the bare protocol (no answer: the server's handler reports
        # a failure itself, ``bare.ONE_WAY``); over HTTP every call is answered.
        self.one_way: frozenset = frozenset()
        # Hung up on at the handshake: trio time after which to try it again (None: not
        # waiting), and the next wait.
        self._bare_again: float | None = None
        self._bare_backoff = _BARE_RETRY_S

    async def aclose(self) -> None:
        # Every pooled socket closed before the one checkpoint: a cancel or KeyboardInterrupt
        # there leaves none open. Calls in flight in a scope are cancelled (and close theirs);
        # then every call's connection is closed, which ends a call with no scope (``_call``).
        await super().aclose()
        idle, self._idle = self._idle, []
        bare_idle, self._bare_idle = self._bare_idle, []
        for conn in [*idle, *bare_idle]:
            conn.stream.socket.close()
        for conn in self._busy:
            sock = conn.stream.socket
            if sock.fileno() >= 0:
                trio.lowlevel.notify_closing(sock)  # (a wait on it raises ClosedResourceError)
                sock.close()
        self._busy.clear()
        await trio.lowlevel.checkpoint()

    async def _call(self, method: str, request: Message | None, timeout: float | None,
                    scope: trio.CancelScope | None = None) -> Any:
        # The usual same-host call, no timeout of its own, enters no cancel scope (~10 us of CPU
        # a call: ``call_scope``): enclosing scopes bound it, ``aclose`` closes its connection.
        # Nor does a one-way one (a push): its deadline bounds only a write that must wait
        # (``bare_io.write_request``), a fresh connection (``_bare_call``), an HTTP fallback.
        if scope is None and self._bare_idle and method in _RPC_INDEX and (
                timeout is None or method in self.one_way):
            if self._closed:
                raise TransportUnavailable(f"channel to {self.address} is closed")
            rpc = RPCS[_RPC_INDEX[method]]
            if timeout is None:
                return result_for_reply(rpc, await self._exchange(rpc, request))
            try:
                return result_for_reply(rpc, await self._exchange(
                    rpc, request, trio.current_time() + timeout))
            except TransportDeadlineExceeded:
                raise TransportDeadlineExceeded(f"{method} to {self.address} got no answer "
                                                f"within {timeout} s") from None
        return await super()._call(method, request, timeout, scope)

    async def _call_entered(self, method: str, request: Message | None, scope: Any) -> Any:
        # A step's RunGraph lent a CallCancel, on a pooled same-host connection: no trio scope;
        # the cancel closes that connection (``_bare_call``); one closed idle: again in a scope.
        if type(scope) is CallCancel and self._bare_idle and not self._closed:
            rpc = RPCS[_RPC_INDEX[method]]
            self._in_flight.add(scope)
            try:
                return result_for_reply(rpc, await self._exchange(rpc, request, cancel=scope))
            except _Again:
                pass
            finally:
                self._in_flight.discard(scope)
        return await super()._call_entered(method, request, scope)

    def _closed_during(self, what: str) -> TransportUnavailable:
        return TransportUnavailable(f"channel to {self.address} was closed during {what}")

    # -- calls ----------------------------------------------------------------------------------

    async def deregister_graph(self, request: DeregisterGraph, *,
                               timeout: float | None = None) -> None:
        # No RunGraph of the graph comes again: its prepared signature is dropped once the call
        # has ended, whatever its outcome (a RunGraph of it begun while the call was under way,
        # the worker running it still, kept one anew). (A handle that is no str: refused.)
        try:
            return await super().deregister_graph(request, timeout=timeout)
        finally:
            handle = getattr(request, "graph_handle", None)
            if type(handle) is str:
                self._forget_prepared(handle)

    async def run_graph_step(self, call: StepCall, *, timeout: float | None = None,
                             scope: trio.CancelScope | None = None,
                             entered: bool = False, values: bool = False) -> Any:
        # The StepCall itself goes down to ``_exchange`` (its frame built from the prepared
        # signature there), a RunGraph made of it only where that frame cannot be. The usual
        # step (a CallCancel lent, a pooled same-host connection, the prepared frame) goes
        # straight to ``_bare_call``, as ``_call_entered`` and ``_exchange`` would send it;
        # with ``values``, its reply read by its frame template into the fetches' values (a
        # list, ``_step_values``) where it can be.
        if not entered:
            return await self._call("run_graph", call, timeout, scope)
        if type(scope) is CallCancel and self._bare_idle and not self._closed:
            buffers = self._encode_step(call)
            if buffers is None:
                return await self._call_entered("run_graph", call, scope)
            self._in_flight.add(scope)
            try:
                reply = await self._bare_call(_RUN_GRAPH, buffers, False, math.inf, scope,
                                              _step_values if values else decode_repeated)
                return reply if type(reply) is list else result_for_reply(_RUN_GRAPH, reply)
            except _Again:  # (closed idle: again in a scope, as ``_call_entered`` does)
                pass
            finally:
                self._in_flight.discard(scope)
            return await super()._call_entered("run_graph", call, scope)
        return await self._call_entered("run_graph", call, scope)

    async def _exchange(self, rpc: Rpc, request: Message | None,
                        deadline: float = math.inf,
                        cancel: CallCancel | None = None) -> Message:
        # Bodiless requests are encoded too: the same field checks, whatever the route.
        # (``deadline``: an unscoped one-way call's; ``cancel``: ``_call_entered``'s.)
        if rpc.method == "run_graph":
            if type(request) is StepCall:
                buffers = self._encode_step(request)
                if buffers is None:
                    step, request = request.step, request.message()
                    buffers = self._encode_run_graph(request)
                    step.prepared = self._step_signature(step)
                elif not (self._bare or self._bare_idle or self._bare_again is not None):
                    request = request.message()  # (HTTP: its path names the handle)
            else:
                buffers = self._encode_run_graph(request)
        else:
            buffers = None if request is None else encode(request, self._limits,
                                                          defer_checksums=True)
        if self._bare or self._bare_idle or self._bare_again is not None:
            reply = await self._bare_call(rpc, buffers, rpc.method in self.one_way, deadline,
                                          cancel)
            if reply is not None:
                return reply
        if type(request) is StepCall:  # (the server spoke no bare protocol after all)
            request = request.message()
        path, body = request_path(rpc, request), buffers if rpc.has_body else None
        if deadline == math.inf:
            return await self._request(rpc.http_method, path, body, self._read_reply)
        with trio.CancelScope(deadline=deadline):
            return await self._request(rpc.http_method, path, body, self._read_reply)
        raise TransportDeadlineExceeded(f"{rpc.method}: no answer by its deadline")

    def _encode_step(self, call: StepCall) -> list | None:
        """A step's RunGraph buffers from its signature's prepared frame, only its ids and
        feeds' bytes filled in; None where there is none (the first step, another handle's
        signature kept since) or a feed is not of it (dtype, shape, layout): the caller
        encodes the message in full, and the signature it keeps is the step's."""
        step = call.step
        kept = step.prepared
        if kept is None:
            return None
        prepared, ids_first, image = kept
        if self._prepared.get(step.graph_handle) is not prepared:
            step.prepared = None
            return None
        ids = (call.step_id, call.request_id) if ids_first else (call.request_id, call.step_id)
        checksums = checksum_enabled()
        if image:  # a small frame's image (``run_graph_step.StepImage``): patched in place
            buffers = image.frame(ids, call.values, checksums)
            if buffers is not None:
                return buffers
        buffers = prepared.encode_step(ids, call.values, checksums, True)
        if buffers is not None and image is not False:  # (learnt anew for other id widths)
            step.prepared = (prepared, ids_first, StepImage.learn(
                prepared.encode_step, prepared.volatile_names(), ids, call.values,
                checksums) or False)  # (False: none; never tried again for this signature)
        return buffers

    def _step_signature(self, step: RunGraphStep) -> tuple | None:
        """What ``_encode_step`` keeps of ``step``, its RunGraph just encoded in full: the
        prepared signature this channel keeps now for its handle (that message's own, its
        fields ``step``'s), whether its ids are in (step_id, request_id) order, and its
        ``StepImage`` (None: not learnt yet; False: none)."""
        prepared = self._prepared.get(step.graph_handle)
        if prepared is None:
            return None
        names = prepared.volatile_names()
        if names == _STEP_IDS:
            return prepared, True, None
        return (prepared, False, None) if names == _STEP_IDS[::-1] else None

    def _encode_run_graph(self, request: Message) -> list:
        """A RunGraph's buffers, from its graph's prepared signature where it is of it (a
        step of a registered graph: only its ids and feeds' bytes differ from the last's),
        else as ``encode`` encodes it, its own signature kept for the next steps."""
        handle = getattr(request, "graph_handle", None)
        if type(handle) is not str:
            return encode(request, self._limits, defer_checksums=True)
        prepared = self._prepared.get(handle)
        buffers, now = encode_prepared(prepared, request, self._limits, defer_checksums=True)
        if now is not prepared:
            if now is None:
                del self._prepared[handle]
            else:
                if prepared is None and len(self._prepared) >= _PREPARED_KEPT:
                    self._prepared.clear()
                self._prepared[handle] = now
        return buffers

    def _forget_prepared(self, handle: object) -> None:
        """Drop the prepared signature of graph ``handle``'s RunGraphs, and its kept template
        (a deregistered graph's: a client that registers and drops many graphs keeps none of
        theirs; one registered again under the handle is encoded in full and prepared anew)."""
        prepared = self._prepared.pop(handle, None)
        if prepared is not None:
            forget_template(prepared)

    async def _bare_call(self, rpc: Rpc, buffers: list | None, one_way: bool = False,
                         deadline: float = math.inf, cancel: CallCancel | None = None,
                         decode: Any = decode_repeated) -> Message | None:
        """The call over the bare protocol; None when the server does not speak it. ``cancel``
        (``_call_entered``'s) closes the connection; one closed idle raises ``_Again``.
        ``decode``: ``BareConnection.call``'s."""
        timeout = max(min(trio.current_effective_deadline(), deadline) - trio.current_time(), 1e-3)
        for attempt in (0, 1):
            if self._bare_idle and not attempt:  # the usual call: an idle connection
                conn = self._bare_idle.pop()
            else:  # (a one-way call's deadline, no scope of its own: bounds connecting too)
                with trio.CancelScope(deadline=deadline) as connecting:
                    conn = await self._bare_checkout(self._bare_what(rpc), fresh=attempt > 0)
                if connecting.cancelled_caught:
                    raise TransportDeadlineExceeded(f"{self._bare_what(rpc)}: not connected")
                if conn is None:
                    return None
            done = False
            self._busy.add(conn)
            try:  # (a stalled answer, as _request's: the connection's own scope, see ``call``)
                if self._closed:  # (closed while it connected)
                    raise self._closed_during(rpc.method)
                if cancel is not None:
                    if cancel.cancel_called:
                        raise TransportUnavailable(f"{rpc.method} to {self.address} was "
                                                   "cancelled")
                    cancel.waits_on(conn.stream.socket)
                conn.stall, conn.bulk.patience = self._stall_timeout, self._stall_timeout / 4
                CALLS.begin(conn)  # (counted for the same-host spin's rule: ``bare_io``)
                try:
                    reply, lent = await conn.call(_RPC_INDEX[rpc.method], buffers, timeout,
                                                  self._lend, self._limits, one_way, deadline,
                                                  decode)
                finally:
                    CALLS.end()
                done = True
            except (*_BROKEN, TransportUnavailable) as exc:
                if cancel is not None and cancel.cancel_called:  # ours: never retried
                    raise TransportUnavailable(f"{rpc.method} to {self.address} was "
                                               "cancelled") from None
                if self._closed:  # ``aclose`` closed it: not a peer's doing, not retried
                    raise self._closed_during(rpc.method) from None
                if conn.reused and not conn.answered and attempt == 0:
                    if cancel is not None:  # (again in a scope the cancel can reach)
                        raise _Again() from None
                    continue  # the server closed it while idle: say it again on a new one
                raise TransportUnavailable(f"{self._bare_what(rpc)}: connection lost: "
                                           f"{exc}") from None
            finally:
                if cancel is not None:
                    cancel.waits_on(None)
                self._busy.discard(conn)
                if not done:
                    conn.stream.socket.close()
            if lent is not None:
                self.lent_replies += lent
                self.lent_refused += not lent
                self._lend = self._lend and lent
            self.bare_calls += 1  # (bytes after the answer: a broken peer, not pooled)
            if reply is None:  # a one-way call: written whole, no answer comes
                reply = Ack()
            if not conn.pending and not self._closed and len(self._bare_idle) < _MAX_IDLE:
                conn.reused = True
                self._bare_idle.append(conn)
            else:
                await conn.stream.aclose()
            return reply
        raise TransportUnavailable(f"{self._bare_what(rpc)}: the connection closed before "
                                   "the answer")

    def _bare_what(self, rpc: Rpc) -> str:
        return f"{rpc.method} to {self.address} (same-host call)"

    async def _bare_checkout(self, what: str, fresh: bool) -> bare.BareConnection | None:
        if self._bare_idle and not fresh:
            return self._bare_idle.pop()
        if not self._bare and (self._bare_again is None or trio.current_time() < self._bare_again):
            return None  # off, or backing off: connections already admitted serve meanwhile
        stream, accepted = None, False
        try:
            with trio.fail_after(self._connect_timeout):
                stream = await _same_host.connect(self._host, self._port, "bare")
                if stream is not None:
                    accepted = await bare.handshake(stream, self._token)
        except trio.TooSlowError:
            raise TransportUnavailable(f"{what}: no handshake within "
                                       f"{self._connect_timeout} s") from None
        except _BROKEN:
            pass  # (closed at the handshake: it does not speak the protocol)
        finally:
            if stream is not None and not accepted:
                stream.socket.close()
        if not accepted:
            self._bare = False
            if stream is None:  # an older server, or none on the socket: HTTP from now on
                self._bare_again = None
            else:  # hung up on (at its connection limit, closing): HTTP for a while
                self._bare_again = trio.current_time() + self._bare_backoff
                self._bare_backoff = min(2 * self._bare_backoff, _BARE_RETRY_MAX_S)
            return None
        self._bare, self._bare_again, self._bare_backoff = True, None, _BARE_RETRY_S
        return bare.BareConnection(stream)

    async def _exchange_text(self, method: str) -> str:
        return await self._request("GET", TEXT_CALLS[method], None, self._read_metrics)

    async def _request(self, method: str, path: str, buffers: list | None, read: Any) -> Any:
        what = f"{method} {path} to {self.address}"
        for attempt in (0, 1):
            conn = await self._checkout(what, fresh=attempt > 0)
            conn.answered, done = False, False
            self._busy.add(conn)
            try:
                if self._closed:  # (closed while it connected)
                    raise self._closed_during(what)
                await self._send(conn, method, path, buffers)
                with trio.CancelScope() as conn.watch:  # no deadline until a byte arrives
                    conn.stall = self._stall_timeout
                    conn.bulk.patience = self._stall_timeout / 4  # (a slow link: see bulk_io)
                    status, headers = await conn.receive_head()
                    result = await read(conn, status, headers)
                    done = True
                if not done:
                    raise TransportUnavailable(
                        f"the answer stalled: no byte of it for {self._stall_timeout} s")
            except _StaleConnection:
                continue  # the server closed it while idle; say it again on a new one
            except _BROKEN as exc:
                if self._closed:  # ``aclose`` closed it: not retried
                    raise self._closed_during(what) from None
                if conn.reused and not conn.answered and attempt == 0:
                    continue  # reset while idle (the send or the first read saw it)
                raise TransportUnavailable(f"{what}: connection lost: {exc}") from exc
            except TransportUnavailable as exc:
                if self._closed:
                    raise self._closed_during(what) from None
                raise TransportUnavailable(f"{what}: {exc}") from None
            finally:
                self._busy.discard(conn)
                if not done:
                    conn.stream.socket.close()
            await self._pool(self._idle, conn,
                             headers.get("connection", "").lower() != "close")
            return result
        raise TransportUnavailable(f"{what}: the connection closed before the answer")

    async def _pool(self, idle: list, conn: Any, keep: bool = True) -> None:
        """Return ``conn`` after a complete answer to its ``idle`` pool (HTTP or bare), or
        close it: asked to (``Connection: close``), the pool full, or the channel closed."""
        if keep and not self._closed and len(idle) < _MAX_IDLE:
            conn.reused = True
            idle.append(conn)
        else:
            await conn.stream.aclose()

    async def _checkout(self, what: str, fresh: bool) -> _Connection:
        if self._idle and not fresh:
            return self._idle.pop()
        try:
            with trio.fail_after(self._connect_timeout):
                stream = None
                if self._same_host:
                    stream = await _same_host.connect(self._host, self._port)
                    self._same_host = stream is not None
                if stream is None:
                    stream = await trio.open_tcp_stream(self._host, self._port)
        except trio.TooSlowError:
            raise TransportUnavailable(f"{what}: no connection within "
                                       f"{self._connect_timeout} s") from None
        except OSError as exc:
            raise TransportUnavailable(f"{what}: cannot connect: {exc}") from None
        return _Connection(stream)

    async def _send(self, conn: _Connection, method: str, path: str,
                    buffers: list | None) -> None:
        lend = "X-Asyncflow-Lend: 1\r\n" if self._lend and conn.peer is not None else ""
        if buffers is None:
            head = f"{method} {path} HTTP/1.1\r\n{self._fixed_headers}{lend}\r\n"
            await conn.send_all(head.encode("latin-1"))
            return
        size = frame_size(buffers)
        head = (f"{method} {path} HTTP/1.1\r\n{self._fixed_headers}{lend}Content-Type: "
                f"{FRAME_CONTENT_TYPE}\r\nContent-Length: {size}\r\n\r\n").encode("latin-1")
        for piece in send_pieces(head, buffers):
            await conn.send_all(piece)

    # -- replies --------------------------------------------------------------------------------

    async def _read_reply(self, conn: _Connection, status: int,
                          headers: dict[str, str]) -> Message:
        body = _Body(conn)
        kind = headers.get("content-type", "").split(";")[0].strip()
        decoder, received = Decoder(self._limits), 0
        if kind == cross_memory.CONTENT_TYPE and conn.peer is not None:
            decoder = await self._read_lent(conn, body, decoder)
        elif kind != FRAME_CONTENT_TYPE:
            await self._raise_for_text(body, status, headers.get(CODE_HEADER))
        while kind == FRAME_CONTENT_TYPE:
            try:
                view = decoder.get_buffer()
            except LocalProtocolError:
                break  # the body broke the protocol: next_event raises it below
            n = await body.read_into(view)
            if not n:
                break
            received += n
            decoder.buffer_updated(n)
        message = the_frame(decoder, "reply body", received)
        if status != 200 and not isinstance(message, ErrorReply):
            raise RemoteProtocolError(f"HTTP {status} with a {type(message).__name__} frame "
                                      "instead of an ErrorReply")
        return message

    async def _read_lent(self, conn: _Connection, body: _Body, decoder: Decoder) -> Decoder:
        """A lent reply's frame: copied from the server's memory, or, where a copy is
        refused, sent again plainly after the body (``transports.http.cross_memory``)."""
        most = self._limits.max_header_bytes + self._limits.max_body_bytes + 16 + 68 * (
            self._limits.max_tensors + 1)  # prefix, header, tensors, padding and trailers
        try:
            copied, size = await cross_memory.receive_lent(
                body.read_into, conn.peer, decoder, 3 * self._limits.max_tensors + 2, most)
        except (EOFError, ValueError) as exc:
            raise RemoteProtocolError(f"lent reply from {self.address}: {exc}") from None
        if copied is None:
            return decoder  # it raises what broke the frame (the connection is not reused)
        if await body.read_into(memoryview(bytearray(1))):
            raise RemoteProtocolError(f"lent reply from {self.address} longer than its records")
        await conn.send_all(cross_memory.COPIED if copied else cross_memory.RESEND)
        if copied:
            self.lent_replies += 1
            return decoder
        self.lent_refused += 1
        self._lend = False  # this server's memory cannot be read from here: sockets only
        decoder = Decoder(self._limits)
        while size:  # the plain frame, with no head, past the parser
            n = await conn.receive_into(decoder.get_buffer()[:size])
            decoder.buffer_updated(n)
            size -= n
        return decoder

    async def _read_metrics(self, conn: _Connection, status: int, headers: dict[str, str]) -> str:
        body = _Body(conn)
        if status != 200:
            await self._raise_for_text(body, status)
        text = await body.read_text(self._limits.max_header_bytes)
        if await body.read_into(memoryview(bytearray(1))):
            raise RemoteProtocolError(f"text answer longer than {self._limits.max_header_bytes}")
        return text.decode("utf-8")

    async def _raise_for_text(self, body: _Body, status: int,
                              code: str | None = None) -> typing.NoReturn:
        raise text_error(status, self.address, await body.read_text(MAX_TEXT), code)
