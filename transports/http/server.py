"""A trio-native HTTP/1.1 server for the worker protocol (no asyncio thread, no aiohttp).

Theory of operation
-------------------
Every connection is one trio task in the server's nursery, in the same trio run as the worker
service: a request's handler is awaited by the task that read the request, so there is no
thread hop between the socket and the handler. The task loops over requests on a keep-alive
connection:

1. **Head.** What arrives is fed to the connection's
   :class:`~transports.http.framing.MessageReader` (llhttp through httptools: heads, chunked
   bodies, pipelined requests, the smuggling forms refused) until it hands out a head: a head
   over :data:`MAX_HEAD` bytes is a 431, a broken one a 400, and the connection closes. A
   connection waits ``idle_timeout_s`` for a request's first byte and ``header_timeout_s`` from
   it for the whole head; past either it is closed without an answer.
2. **Route and token.** The route comes from :data:`transports.service.RPCS` (404 unknown, 405
   wrong method); with a token, ``Authorization: Bearer <token>`` is compared in constant time
   first (401 on every route). With a page handler, ``/``, ``/status`` and ``/status/...``
   are pages instead (:mod:`transports.http.pages`: a login form sets a session cookie).
3. **Body.** A ``Content-Length`` over the codec's limits is a 413 before any byte is read.
   Otherwise (after ``100 Continue`` when asked) the body bytes not already read with the head
   are received with ``recv_into`` straight into the :class:`~transports.wire.Decoder` 's
   destination arrays (llhttp only counts them; a chunked body goes through it), each wait bounded
   by ``body_timeout_s`` (408). A header over ``SMALL_HEADER_BYTES`` is fed from a worker
   thread (two at a time), so a huge RegisterGraph never stalls Health.
4. **Handler.** Awaited inside a cancel scope while the server's
   :class:`~transports.http.disconnect.DisconnectMonitor` watches the socket: EOF or a reset
   means the client left, and the scope is cancelled (a waiting ``recv_tensors`` does not
   leak). Closing the server cancels the scopes of calls in flight and answers them
   ``UNAVAILABLE``.
5. **Answer.** The head and the frame's small buffers go out in one ``send``; every large
   buffer (a view of a tensor) on its own: no copy of tensor bytes. All go by
   :func:`transports.http.bulk_io.send_all` (``send`` calls in a row, parking only when the kernel
   takes nothing, so a small answer costs no scheduler pass). A client that reads nothing of
   it for ``body_timeout_s`` is dropped.

A request whose body was not read to its end is answered with ``Connection: close``; the server
then shuts its side and drains what the client still sends for a moment (a lingering close), so
the client reads the answer instead of a reset. The connection guard and timeouts are
:mod:`transports.http.guard`; framing is :mod:`transports.http.framing`; bodies
:mod:`transports.http.body`; routes :data:`transports.http.protocol.ROUTES`. Nothing here knows
about asyncflow.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import socket
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

import outcome
import trio

from transports.http import bulk_io, cross_memory, same_host as _same_host
from transports.http.bare import BareService
from transports.http.body import BodyTimeout, BufferedConnection, PeerGone, RequestBody, \
    read_frame, read_small_body
from transports.http.disconnect import DisconnectMonitor, watch_for_disconnect
from transports.http.guard import (
    DEFAULT_CONNECTION_LIMITS, BearerToken, ConnectionGuard, ConnectionLimits, rate_limit_logs,
)
from transports.http.framing import MAX_HEAD, HeadTooLarge, RequestHead
from transports.http.pages import LOGIN_PATH, MAX_LOGIN_BODY, SECURITY_HEADERS, Page, PageGate, \
    PageHandler, is_page_path
from transports.http.protocol import FRAME_CONTENT_TYPE, LITERAL_ROUTES, ROUTES, Route, \
    code_header, send_pieces, transport_metrics_text
from transports.http.protocol import HTTP_STATUS as _HTTP_STATUS, REASONS as _REASONS
from transports.messages import Message, RemoteCallError
from transports.service import Rpc, WorkerServiceProtocol, error_reply_for, reply_for_result
from transports.wire import DEFAULT_LIMITS, FrameTooLarge, Limits, LocalProtocolError, \
    RemoteProtocolError, encode, frame_size

__all__ = ["DEFAULT_CONNECTION_LIMITS", "MAX_HEAD", "ConnectionLimits", "HttpServer",
           "HttpServerStatistics", "open_http_server", "serve_http"]

_RECV: Final = 64 * 1024
_LINGER_S: Final = 1.0  # how long a closing connection drains a body it did not read
_LINGER_BYTES: Final = 4 << 20
_SHUTDOWN_GRACE_S: Final = 1.0  # answers being written get this long when the server closes
_DECODE_THREADS: Final = 2  # large headers decoded at once (each bounded by Limits)
_ACCEPT_RETRY_S: Final = 0.1
_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_BROKEN: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
_LOOPBACK: Final = frozenset({"127.0.0.1", "::1", "localhost"})
_TEXT_CALLS_BY_ROUTE: Final = {"metrics": "metrics_text", "status_json": "status_json"}
_log = logging.getLogger("transports.http")


class _Reject(Exception):
    """A request answered with a text status instead of reaching a handler."""

    def __init__(self, status: int, text: str, headers: str = "") -> None:
        super().__init__(text)
        self.status, self.text, self.headers = status, text, headers


@dataclass(frozen=True, slots=True)
class HttpServerStatistics:
    """Counters of an :class:`HttpServer` (all since it started)."""

    requests: int  # answered, any status
    errors: int  # answered with a 4xx or 5xx status
    in_flight: int  # being served now
    bytes_received: int  # request frame bytes
    bytes_sent: int  # reply frame bytes
    connections: int = 0  # open now
    connections_closed: int = 0  # closed by the server: evicted at the limit, idle or too slow
    same_host_calls: int = 0  # calls over the bare same-host protocol (transports.http.bare)
    one_way_calls: int = 0  # of them, calls not answered (``bare.ONE_WAY``: pushes)
    short_steps: int = 0  # of them, RunGraphs of a prepared plain step (``bare_calls``)


class HttpServer:
    """A running worker server; obtain one from :func:`open_http_server` or :func:`serve_http`.

    Attributes:
        host: the bound host.
        port: the bound port (the real one when 0 was asked for).
    """

    def __init__(self, handler: WorkerServiceProtocol, *, token: str | None, limits: Limits,
                 nursery: trio.Nursery,
                 connection_limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
                 pages: PageHandler | None = None) -> None:
        self._handler, self._limits, self._nursery = handler, limits, nursery
        self._pages = pages
        self._connection_limits = connection_limits
        self._guard = ConnectionGuard(connection_limits)
        self._token = BearerToken(token)
        self._authorization = self._token.authorization
        self._gate = PageGate(self._authorization)
        self._calls: set[trio.CancelScope] = set()
        self._closing = False
        self._accepting: list[trio.CancelScope] = []  # one per listener's accept loop
        # Connections live in a nursery shielded from the caller's cancellation: only _stop
        # ends it, after answering the calls in flight (a cancelled caller still gets them
        # answered UNAVAILABLE rather than cut off).
        self._lifetime = trio.CancelScope(shield=True)
        self._connections: trio.Nursery | None = None
        self._decoders = trio.CapacityLimiter(_DECODE_THREADS)
        self._monitor = DisconnectMonitor()
        self._by_status: Counter[tuple[str, int]] = Counter()
        self._in_flight = self._bytes_received = self._bytes_sent = 0
        self.host, self.port = "", 0
        self.same_host_path: str | None = None  # the Unix socket beside the TCP listener
        self.bare_path: str | None = None  # and the bare-frame protocol's beside it
        self._bare, self._bare_listener = BareService(self), None

    @property
    def address(self) -> str:
        """``host:port`` as a channel takes it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{self.address}"

    def statistics(self) -> HttpServerStatistics:
        """A snapshot of the server's counters."""
        guard = self._guard
        return HttpServerStatistics(
            requests=sum(self._by_status.values()),
            errors=sum(n for (_, status), n in self._by_status.items() if status >= 400),
            in_flight=self._in_flight, bytes_received=self._bytes_received,
            bytes_sent=self._bytes_sent, connections=len(guard.connections),
            connections_closed=guard.evicted + guard.refused + guard.timed_out,
            same_host_calls=self._bare.calls, one_way_calls=self._bare.one_way_calls,
            short_steps=self._bare.short_steps)

    # -- lifecycle ------------------------------------------------------------------------------

    async def _start(self, host: str, port: int, same_host: bool | None = None) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host)
        self.host, self.port = listeners[0].socket.getsockname()[:2]
        if _same_host.enabled(same_host) and host in _same_host.SERVING_HOSTS:
            made = _same_host.listen(self.port)  # (None: TCP only; clients fall back)
            if made is not None:
                listeners.append(made[0])
                self.same_host_path = made[1]
                # (the bare protocol notices a client leaving through the monitor only)
                bare = _same_host.listen(self.port, "bare") if self._monitor.available else None
                if bare is not None:
                    self._bare_listener, self.bare_path = bare
                    listeners.append(bare[0])
        # Not ``start``: cancelled before ``_run``'s first step, it left ``_run`` under itself
        # and waited forever for the shielded ``_lifetime`` only ``_stop`` ends. No checkpoint
        # now between the listeners made and ``_stop``'s ``finally`` (it cancels ``_lifetime``).
        self._nursery.start_soon(self._run, listeners)
        rate_limit_logs()
        if self._authorization is None and host not in _LOOPBACK:
            _log.warning("worker server on %s accepts requests from the network without a token; "
                         "it runs any graph it is sent: use a trusted network or set a token",
                         self.url)

    async def _stop(self) -> None:
        """Stop accepting, cancel handlers (answered UNAVAILABLE), close every connection."""
        self._closing = True
        for scope in self._accepting:
            scope.cancel()
        for path in (self.same_host_path, self.bare_path):
            if path is not None:
                _same_host.unlink(path)
        for call in list(self._calls):
            call.cancel()
        for conn in list(self._guard.connections):
            if not conn.active:
                self._guard.drop(conn)
        with trio.move_on_after(_SHUTDOWN_GRACE_S):
            await self._guard.empty.wait()
        self._lifetime.cancel()

    async def _run(self, listeners: list[trio.SocketListener]) -> None:
        with self._lifetime:
            async with trio.open_nursery() as self._connections:
                self._connections.start_soon(self._monitor.run)
                for listener in listeners:
                    self._connections.start_soon(self._accept, listener)

    async def _accept(self, listener: trio.SocketListener) -> None:
        serve = (self._bare.serve_connection if listener is self._bare_listener
                 else self._serve_connection)
        async with listener:
            with trio.CancelScope() as scope:
                self._accepting.append(scope)
                while True:
                    try:
                        stream = await listener.accept()
                    except OSError as exc:
                        if exc.errno not in _CAPACITY_ERRNOS:
                            raise
                        _log.error("accepting a connection failed (%s); retrying in %s s",
                                   exc.strerror, _ACCEPT_RETRY_S)
                        await trio.sleep(_ACCEPT_RETRY_S)
                        continue
                    self._connections.start_soon(serve, stream)

    # -- one connection -------------------------------------------------------------------------

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        conn = BufferedConnection(stream, trio.current_time())
        if self._closing or not self._guard.admit(conn):
            stream.socket.close()
            return
        try:
            with conn.scope:  # cancelled: evicted, the server closing, or past a head deadline
                while not self._closing:
                    try:
                        head = await self._receive_head(conn)
                    except _Reject as reject:  # a head we cannot parse: answer, then close
                        self._by_status["unmatched", reject.status] += 1
                        await self._send_text(conn, reject.status, reject.text, keep=False)
                        await self._linger(conn)
                        break
                    if head is None or not await self._serve_request(conn, head):
                        break
        except _BROKEN:
            pass  # the client went away; nothing to answer
        finally:
            if conn.scope.cancelled_caught and conn in self._guard.connections:
                self._guard.timed_out += 1  # not dropped by the guard: its deadline passed
            self._guard.closed(conn)
            stream.socket.close()

    async def _receive_head(self, conn: BufferedConnection) -> RequestHead | None:
        """The next request's head; None at EOF or past the idle or header timeout."""
        limits, reader = self._connection_limits, conn.reader
        try:
            head = reader.next_head()
            if head is None:
                # The connection's own scope carries the deadline (no scope per read): when it
                # expires the task ends and _serve_connection counts a timeout.
                now = trio.current_time()
                conn.partial_since = now if reader.in_head else None
                conn.scope.deadline = now + (limits.header_timeout_s if reader.in_head
                                             else limits.idle_timeout_s)
            while head is None:
                data = await conn.stream.receive_some(_RECV)
                if not data:
                    return None
                reader.feed(data)
                if conn.partial_since is None and reader.in_head:
                    conn.partial_since = trio.current_time()
                    conn.scope.deadline = conn.partial_since + limits.header_timeout_s
                head = reader.next_head()
        except HeadTooLarge as exc:
            raise _Reject(431, str(exc)) from None
        except RemoteProtocolError as exc:
            raise _Reject(400, f"bad request head: {exc}") from None
        finally:
            conn.scope.deadline = math.inf
        return head

    async def _serve_request(self, conn: BufferedConnection, head: RequestHead) -> bool:
        """Answer one request; returns whether the connection may carry another."""
        conn.active, conn.partial_since = True, None
        self._in_flight += 1
        name, status, keep, body = "unmatched", 500, head.keep_alive, None
        try:
            if self._pages is not None and is_page_path(head.path.partition("?")[0]):
                name = "page"
                status, keep = await self._serve_page(conn, head, keep)
                return keep
            route, fields = self._route(head, conn)
            name = route.name
            self._check_token(head, conn)
            if route.rpc is None:
                if _has_body(head):
                    raise _Reject(400, f"{head.method} {head.path} takes no body")
                status, keep = await self._serve_text_call(conn, keep, route.name)
                return keep
            message, body = await self._read_request(conn, head, route.rpc, fields)
            result = await self._call(conn, getattr(self._handler, route.rpc.method),
                                      () if message is None else (message,))
            try:
                # Trailers are summed as the reply is written (send_pieces), not here.
                status, buffers = 200, encode(reply_for_result(route.rpc, result.unwrap()),
                                              self._limits, defer_checksums=True)
            except Exception as exc:  # noqa: BLE001 -- handler failures and unsendable replies
                error = error_reply_for(exc)
                status, buffers = _HTTP_STATUS[error.code], encode(error, self._limits)
            keep = keep and not self._closing
            await self._send_frame(conn, status, buffers, keep,
                                   cross_memory.wanted(head.headers, conn.stream.socket))
            return keep
        except _Reject as reject:
            status = reject.status
            consumed = not _has_body(head) if body is None else body.done
            keep = keep and consumed and status != 408 and not self._closing
            await self._send_text(conn, status, reject.text, keep, reject.headers)
            if not keep and not consumed:
                await self._linger(conn)
            return keep
        except _BROKEN:
            status = 499  # the client went away in the middle: nothing could be answered
            raise
        finally:
            self._in_flight -= 1
            self._by_status[name, status] += 1
            conn.active, conn.idle_since = False, trio.current_time()

    def _route(self, head: RequestHead, conn: BufferedConnection) -> tuple[Route, dict[str, Any]]:
        route = LITERAL_ROUTES.get((head.method, head.path))
        if route is not None:
            return route, {}
        segments = [unquote(segment) for segment in head.path.split("/")]
        allowed = []
        for route in ROUTES:
            fields = route.match(segments)
            if fields is None:
                continue
            if route.http_method == head.method:
                return route, fields
            allowed.append(route.http_method)
        self._check_token(head, conn)  # an unknown route without the token is a 401 too
        if allowed:
            raise _Reject(405, "405: Method Not Allowed", f"Allow: {', '.join(allowed)}\r\n")
        raise _Reject(404, "404: Not Found")

    def _check_token(self, head: RequestHead, conn: BufferedConnection) -> None:
        if not self._token.admits(head.method, head.path, head.headers.get("authorization", ""),
                                  conn):
            raise _Reject(401, "missing or wrong bearer token: set ASYNCFLOW_TOKEN (or pass "
                               "--token/--token-file) to the worker's token on the client, "
                               "which sends it as 'Authorization: Bearer <token>'",
                          'WWW-Authenticate: Bearer realm="asyncflow"\r\n')

    async def _read_request(self, conn: BufferedConnection, head: RequestHead, rpc: Rpc,
                            fields: dict[str, Any]) -> tuple[Message | None, RequestBody | None]:
        where = f"{head.method} {unquote(head.path)}"
        if not rpc.has_body:
            if _has_body(head):
                raise _Reject(400, f"{where} takes no body")
            if rpc.request is None:
                return None, None
            message = rpc.request(**fields)
            try:  # the same field checks a body would get (path fields: ints in range)
                if fields:
                    encode(message, self._limits)
            except LocalProtocolError as exc:
                raise _Reject(400, f"{where}: {exc}") from exc
            return message, None
        chunked = "transfer-encoding" in head.headers
        length = None if chunked else int(head.headers.get("content-length", "0"))
        if length is not None and length > self._limits.max_frame_bytes:
            raise _Reject(413, f"{where}: body of {length} bytes exceeds the limit of "
                               f"{self._limits.max_frame_bytes}")
        if length and head.headers.get("expect", "").lower() == "100-continue":
            await self._send_all(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
        body = RequestBody(conn, self._connection_limits.body_timeout_s)
        try:
            message = await read_frame(body, self._limits, self._decoders, self._count_received)
        except BodyTimeout as exc:
            raise _Reject(408, f"{where}: {exc}") from None
        except PeerGone as exc:
            raise _Reject(400, f"{where}: bad body: {exc}") from None
        except FrameTooLarge as exc:
            raise _Reject(413, f"{where}: frame too large: {exc}") from None
        except RemoteProtocolError as exc:  # (damaged in transit: the answer says DATA_LOSS)
            raise _Reject(400, f"{where}: bad body: {exc}", code_header(exc)) from None
        if not isinstance(message, rpc.request):
            raise _Reject(400, f"{where} takes a {rpc.request.__name__} frame, "
                               f"got {type(message).__name__}")
        for name, value in fields.items():
            if getattr(message, name) != value:
                raise _Reject(400, f"{where}: the path says {name}={value!r} but the body "
                                   f"says {getattr(message, name)!r}")
        return message, body

    def _count_received(self, nbytes: int) -> None:
        self._bytes_received += nbytes

    async def _call(self, conn: BufferedConnection, fn: Any, args: tuple) -> outcome.Outcome:
        """``await fn(*args)`` as an outcome; cancelled when the client leaves or we close."""
        if not self._monitor.available:
            return await self._call_with_watcher(conn, fn, args)
        result = None
        with trio.CancelScope() as call:  # cancelled by the monitor (client gone) or _stop
            self._calls.add(call)
            # A pipelined request is already here: a close behind it cannot be seen.
            watched = not conn.reader.pending and self._monitor.watch(conn.stream.socket, call)
            try:
                if self._closing:
                    call.cancel()
                try:
                    result = outcome.Value(await fn(*args))
                except Exception as exc:  # noqa: BLE001 -- the client gets an ErrorReply
                    result = outcome.Error(exc)
            finally:
                if watched:
                    self._monitor.unwatch(conn.stream.socket)
                self._calls.discard(call)
        return self._cancelled_result() if result is None else result

    def _cancelled_result(self) -> outcome.Outcome:
        """What a call cancelled because the client left, or the server is going away, gives."""
        return outcome.Error(
            RemoteCallError("UNAVAILABLE", "server is shutting down") if self._closing
            else RemoteCallError("CANCELLED", "request cancelled"))

    async def _call_with_watcher(self, conn: BufferedConnection, fn: Any,
                                 args: tuple) -> outcome.Outcome:
        """:meth:`_call` without epoll: a watcher task per call notices the client leaving."""
        result = None
        async with trio.open_nursery() as call:  # its scope: cancelled by the watcher or _stop
            self._calls.add(call.cancel_scope)
            try:
                if self._closing:
                    call.cancel_scope.cancel()
                call.start_soon(watch_for_disconnect, conn, call.cancel_scope)
                try:
                    result = outcome.Value(await fn(*args))
                except Exception as exc:  # noqa: BLE001 -- the client gets an ErrorReply
                    result = outcome.Error(exc)
                call.cancel_scope.cancel()  # stops the watcher
            finally:
                self._calls.discard(call.cancel_scope)
        return self._cancelled_result() if result is None else result

    async def _serve_text_call(self, conn: BufferedConnection, keep: bool,
                               name: str) -> tuple[int, bool]:
        """``/metrics`` (Prometheus text) or ``/v1/status`` (JSON): the handler's text."""
        metrics = name == "metrics"
        if (fn := getattr(self._handler, _TEXT_CALLS_BY_ROUTE[name], None)) is None:
            raise _Reject(404, "404: Not Found")  # a handler that predates the call
        result = await self._call(conn, fn, ())
        keep = keep and not self._closing
        try:
            text = result.unwrap() + (transport_metrics_text(self.statistics(), self._by_status)
                                      if metrics else "")
        except Exception as exc:  # noqa: BLE001 -- reported to the scraper as a 500
            await self._send_text(conn, 500, error_reply_for(exc).message, keep)
            return 500, keep
        if metrics:
            await self._send_text(conn, 200, text, keep, "X-Prometheus-Format: 0.0.4\r\n")
        else:
            await self._send_body(conn, 200, "application/json", text.encode("utf-8"), keep)
        return 200, keep

    async def _serve_page(self, conn: BufferedConnection, head: RequestHead,
                          keep: bool) -> tuple[int, bool]:
        """A page (``transports.http.pages``): the login, or what the page handler answers."""
        path, note = unquote(head.path.partition("?")[0]), ""
        if head.method == "POST" and path == LOGIN_PATH:
            length = int(head.headers.get("content-length", "0"))
            if "transfer-encoding" in head.headers or length > MAX_LOGIN_BODY:
                raise _Reject(413, f"a login form has a Content-Length of at most {MAX_LOGIN_BODY}")
            try:
                cookie = self._gate.login(await read_small_body(
                    RequestBody(conn, self._connection_limits.body_timeout_s), length))
            except (BodyTimeout, PeerGone) as exc:
                raise _Reject(408, f"POST {path}: {exc}") from None
            except RemoteProtocolError as exc:
                raise _Reject(400, f"POST {path}: bad body: {exc}") from None
            if cookie is not None:
                await self._send_body(conn, 303, "text/plain; charset=utf-8", b"logged in\n",
                                       keep, "Location: /status\r\n" + cookie)
                return 303, keep
            path, note = "/status", "wrong token"
        elif head.method != "GET" or _has_body(head):
            raise _Reject(405, "405: Method Not Allowed (pages take GET)", "Allow: GET\r\n")
        result = await self._call(conn, self._pages.page,
                                  (path, self._gate.admits(head.headers), note))
        keep = keep and not self._closing
        try:
            page = result.unwrap()
        except Exception as exc:  # noqa: BLE001 -- a page that failed is a 500, the server lives
            page = Page(500, "text/plain; charset=utf-8", error_reply_for(exc).message.encode())
        if page is None:
            raise _Reject(404, "404: Not Found")
        await self._send_body(conn, page.status, page.content_type, page.body, keep)
        return page.status, keep

    # -- answers --------------------------------------------------------------------------------

    async def _send_frame(self, conn: BufferedConnection, status: int, buffers: list[bytes | memoryview],
                          keep: bool, lend: bool = False) -> None:
        size = frame_size(buffers)
        self._bytes_sent += size
        head = _head(status, FRAME_CONTENT_TYPE, size, keep)
        if lend and cross_memory.lendable(buffers):  # same host: copied from our memory
            if await cross_memory.send_lent(  # the peer's verdict bounded like a body's read
                    buffers, lambda n: _head(status, cross_memory.CONTENT_TYPE, n, keep),
                    lambda data: self._send_all(conn, data), lambda: conn.receive_some(
                        self._connection_limits.body_timeout_s), conn.reader.feed):
                return
            head = b""  # refused: the plain frame follows
        for piece in send_pieces(head, buffers):
            await self._send_all(conn, piece)

    async def _send_text(self, conn: BufferedConnection, status: int, text: str, keep: bool,
                         headers: str = "") -> None:
        body = text.encode("utf-8")
        await self._send_all(
            conn, _head(status, "text/plain; charset=utf-8", len(body), keep, headers) + body)

    async def _send_body(self, conn: BufferedConnection, status: int, content_type: str,
                         body: bytes, keep: bool, headers: str = "") -> None:
        """A page or JSON answer, with the pages' security headers."""
        await self._send_all(conn, _head(status, content_type, len(body), keep,
                                         headers + SECURITY_HEADERS) + body)

    async def _send_all(self, conn: BufferedConnection, data: bytes | memoryview) -> None:
        """Send ``data`` whole; a client that takes none of it for ``body_timeout_s`` is
        dropped (the connection's own deadline, so a slow reader cannot hold an answer's
        arrays and its connection slot forever)."""
        timeout, renewed = self._connection_limits.body_timeout_s, False

        def renew() -> None:  # before each wait: a send the kernel takes whole sets none
            nonlocal renewed
            renewed = True
            conn.scope.deadline = trio.current_time() + timeout
        # Small answers too: a send the kernel takes whole costs no pass of trio's scheduler
        # (trio's own ``send`` yields after every call); the next request's read checkpoints.
        with memoryview(data) as view:
            try:
                await bulk_io.send_all(conn.stream.socket, view, renew)
            finally:
                if renewed:
                    conn.scope.deadline = math.inf

    async def _linger(self, conn: BufferedConnection) -> None:
        """Shut our side, then drain what the client still sends for a moment, so that it
        reads the answer rather than a reset (closing with unread bytes sends a reset)."""
        with contextlib.suppress(*_BROKEN), trio.move_on_after(_LINGER_S):
            conn.stream.socket.shutdown(socket.SHUT_WR)
            drained = 0
            while drained < _LINGER_BYTES:
                data = await conn.stream.receive_some(_RECV)
                if not data:
                    break
                drained += len(data)


def _has_body(head: RequestHead) -> bool:
    return "transfer-encoding" in head.headers or head.headers.get("content-length", "0") != "0"


def _head(status: int, content_type: str, length: int, keep: bool, headers: str = "") -> bytes:
    close = "" if keep else "Connection: close\r\n"
    return (f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\nContent-Type: "
            f"{content_type}\r\nContent-Length: {length}\r\n{headers}{close}\r\n"
            ).encode("latin-1")


@contextlib.asynccontextmanager
async def open_http_server(handler: WorkerServiceProtocol, host: str = "127.0.0.1",
                           port: int = 0, *, token: str | None = None,
                           limits: Limits = DEFAULT_LIMITS,
                           connection_limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
                           same_host: bool | None = None,
                           pages: PageHandler | None = None) -> AsyncIterator[HttpServer]:
    """Serve ``handler`` over HTTP for the duration of the ``async with`` block.

    Handler methods run in the calling trio run (in a guest run too: ``asyncflow.aio``), in a
    nursery owned by the server. Leaving the block stops accepting, cancels handler calls in
    flight (their clients get UNAVAILABLE) and closes every connection.

    Args:
        handler: the worker service implementation (trio methods).
        host: interface to bind; keep the default unless the network is trusted.
        port: TCP port; 0 picks a free one (read it from ``server.port``).
        token: when set, every request must carry ``Authorization: Bearer <token>`` (else 401).
        limits: codec limits for request bodies and replies.
        connection_limits: read timeouts and the connection limit (:class:`ConnectionLimits`).
        same_host: also listen on this port's same-host Unix socket (:mod:`transports.http.same_host`)
            when ``host`` is a loopback or wildcard address; None: unless the environment
            disables it.
        pages: serves ``/``, ``/status`` and ``/status/...`` to browsers and scripts
            (:mod:`transports.http.pages`: login form, session cookie); None: no pages.

    Returns:
        An async context manager yielding the running :class:`HttpServer`.

    Raises:
        OSError: the address cannot be bound.
    """
    async with trio.open_nursery() as nursery:
        server = HttpServer(handler, token=token, limits=limits, nursery=nursery,
                            connection_limits=connection_limits, pages=pages)
        await server._start(host, port, same_host)
        try:
            yield server
        finally:
            with trio.CancelScope(shield=True):
                await server._stop()


async def serve_http(handler: WorkerServiceProtocol, host: str = "127.0.0.1", port: int = 0, *,
                     token: str | None = None, limits: Limits = DEFAULT_LIMITS,
                     connection_limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
                     same_host: bool | None = None,
                     task_status: trio.TaskStatus[HttpServer] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; ``await nursery.start(serve_http, handler)`` returns the server.

    Args and Raises are those of :func:`open_http_server`.
    """
    async with open_http_server(handler, host, port, token=token, limits=limits,
                                connection_limits=connection_limits,
                                same_host=same_host) as server:
        task_status.started(server)
        await trio.sleep_forever()
