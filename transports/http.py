"""HTTP transport: aiohttp server and client on one asyncio thread, bridged to trio.

Theory of operation
-------------------
trio owns the process. aiohttp cannot run inside trio, so every aiohttp object lives on one daemon
thread running an ``asyncio.SelectorEventLoop`` (:func:`transports.aio_bridge.aio_thread`, started lazily, one per
process, with one ``ClientSession`` whose connector pools connections to every worker). The two
worlds meet at two documented thread-safe calls:

* trio -> asyncio (:func:`transports.aio_bridge.run_on_loop`): ``asyncio.run_coroutine_threadsafe`` starts the
  coroutine; its done-callback wakes the trio task through ``TrioToken.run_sync_soon``. If the trio
  task is cancelled, it cancels the asyncio task and waits (shielded, bounded) for it to unwind, so
  no asyncio work outlives its caller and arrays being sent stay owned until they are sent.
* asyncio -> trio (:meth:`HttpServer._call_in_trio`): the aiohttp handler asks the server's trio
  run (the TrioToken captured by :func:`open_http_server`) to start the worker handler in the
  server's nursery, inside a cancel scope of its own, and awaits an asyncio future that the trio
  task settles with an ``outcome``. When aiohttp cancels the request (the client disconnected or
  gave up: ``handler_cancellation=True``), the trio scope is cancelled too, so a ``recv_tensors``
  waiting for a producer does not leak.

Bodies are single frames of :mod:`transports.wire`. Readers feed ``readchunk()`` chunks to a
:class:`~transports.wire.Decoder`, which validates the header before allocating and copies each
chunk straight into its destination array (socket -> chunk -> array; aiohttp's
``client_max_size`` does not apply, the codec's :class:`~transports.wire.Limits` do). Writers send
the encoder's buffers as 256 KiB memoryview slices with an explicit Content-Length (small frames
as one ``bytes``): no copy of tensor data, and no large unsent remainder copied by the transport.

The server's connection guard (read timeouts, the connection limit, rate-limited logs) is
:mod:`transports.http_guard`. Routes come from :data:`transports.service.RPCS`; ``docs/protocol.md`` lists routes, statuses and
the optional bearer token. Nothing here knows about asyncflow.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import logging
import threading
import typing
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import outcome
import trio
from aiohttp import web

from transports.aio_bridge import aio_thread, run_on_loop
from transports.http_guard import (
    DEFAULT_CONNECTION_LIMITS, ConnectionLimits, ConnectionGuard, rate_limit_logs,
)
from transports.http_protocol import (
    FRAME_CONTENT_TYPE, MAX_TEXT, PATH_FIELDS, parse_address, request_path, text_error,
)
from transports.messages import ErrorReply, Message, RemoteCallError
from transports.service import (
    METRICS_PATH, RPCS, Channel, Rpc, TransportDeadlineExceeded, TransportUnavailable,
    WorkerServiceProtocol, error_reply_for, reply_for_result,
)
from transports.wire import (
    CLOSED, DEFAULT_LIMITS, NEED_DATA, SMALL_HEADER_BYTES, Decoder, FrameTooLarge, Limits,
    LocalProtocolError, RemoteProtocolError, encode, frame_size,
)

__all__ = ["DEFAULT_CONNECTION_LIMITS", "FRAME_CONTENT_TYPE", "ConnectionLimits", "HttpChannel",
           "HttpServer", "HttpServerStatistics", "open_http_server", "rate_limit_logs",
           "serve_http"]

_SLICE: Final = 256 * 1024
# Canonical code -> HTTP status (the grpc-gateway mapping); the way back, for text-only
# answers, is http_protocol.TEXT_STATUS_CODE.
_HTTP_STATUS: Final = {
    "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404, "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501,
    "INTERNAL": 500, "UNAVAILABLE": 503, "DATA_LOSS": 500, "UNAUTHENTICATED": 401,
}
_LOOPBACK: Final = frozenset({"127.0.0.1", "::1", "localhost"})
_log = logging.getLogger(__name__)


class _ReadTimeout(Exception):
    """A peer stopped sending a body it announced."""


_decode_lock = threading.Lock()
_decoders: concurrent.futures.ThreadPoolExecutor | None = None
_DECODE_THREADS: Final = 2  # large headers decoded at once (each bounded by Limits)


def _decode_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _decoders
    with _decode_lock:
        if _decoders is None:
            _decoders = concurrent.futures.ThreadPoolExecutor(
                _DECODE_THREADS, thread_name_prefix="asyncflow-decode")
        return _decoders


def _slices(buffers: list[bytes | memoryview]) -> Iterator[memoryview]:
    for buffer in buffers:
        view = memoryview(buffer)
        for start in range(0, len(view), _SLICE):
            yield view[start:start + _SLICE]


async def _aslices(buffers: list[bytes | memoryview]) -> AsyncIterator[memoryview]:
    for piece in _slices(buffers):
        yield piece


async def _read_frame(content: aiohttp.StreamReader, limits: Limits,
                      read_timeout: float | None = None) -> Message:
    """Read a body that must hold exactly one frame, decoding as chunks arrive.

    ``readchunk`` hands over aiohttp's buffered chunks one by one; ``readany`` would join them
    (a copy) whenever the decoder falls behind the socket. The bytes of a header larger than
    :data:`~transports.wire.SMALL_HEADER_BYTES` are fed from a worker thread (at most
    :data:`_DECODE_THREADS` at once), since decoding it takes long: the loop keeps answering
    other requests (health) meanwhile. ``read_timeout`` bounds the wait for each chunk.
    """
    decoder, message = Decoder(limits), None
    while True:
        try:
            async with asyncio.timeout(read_timeout):
                chunk, end_of_http_chunk = await content.readchunk()
        except TimeoutError:
            raise _ReadTimeout(f"no body bytes for {read_timeout} s") from None
        if not chunk and end_of_http_chunk and not content.at_eof():
            continue  # a chunked-encoding boundary, not the end (aiohttp's EMPTY_PAYLOAD
            # answers (b"", True) forever once read: without the at_eof check this spins)
        if decoder.header_bytes_pending > SMALL_HEADER_BYTES:
            await asyncio.get_running_loop().run_in_executor(
                _decode_pool(), decoder.receive_data, chunk)
        else:
            decoder.receive_data(chunk)
        try:
            while (event := decoder.next_event()) is not NEED_DATA and event is not CLOSED:
                if message is not None:
                    raise RemoteProtocolError("body holds more than one frame")
                message = event
        except RemoteProtocolError as exc:
            if message is None:
                raise
            raise RemoteProtocolError(f"bytes after the frame: {exc}") from exc
        if not chunk:
            if message is None:
                raise RemoteProtocolError("empty body: expected one frame")
            return message


# ----------------------------------------------------------------------------- server


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


class _TrioCall:
    """One handler call as seen from both threads; ``cancel`` runs in trio."""

    __slots__ = ("scope", "cancelled")

    def __init__(self) -> None:
        self.scope: trio.CancelScope | None = None
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()


class _BadRequest(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status, self.text = status, text


class HttpServer:
    """A running worker server; obtain one from :func:`open_http_server` or :func:`serve_http`.

    Attributes:
        host: the bound host.
        port: the bound port (the real one when 0 was asked for).
    """

    def __init__(self, handler: WorkerServiceProtocol, *, token: str | None, limits: Limits,
                 nursery: trio.Nursery, loop: asyncio.AbstractEventLoop | None = None,
                 connection_limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS) -> None:
        self._handler, self._limits, self._nursery = handler, limits, nursery
        self._connection_limits = connection_limits
        self._guard: ConnectionGuard | None = None
        self._listener: asyncio.Server | None = None
        self._loop = loop  # None: the transport's own asyncio thread
        self._authorization = None if token is None else f"Bearer {token}".encode()
        self._trio_token = trio.lowlevel.current_trio_token()
        self._calls: set[_TrioCall] = set()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._by_status: Counter[tuple[str, int]] = Counter()
        self._in_flight = self._bytes_received = self._bytes_sent = 0
        self.host, self.port = "", 0

    @property
    def address(self) -> str:
        """``host:port`` as :class:`HttpChannel` takes it."""
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
            bytes_sent=self._bytes_sent,
            connections=0 if guard is None else len(guard.connections),
            connections_closed=0 if guard is None else
            guard.evicted + guard.refused + guard.timed_out)

    # -- lifecycle (trio side) ------------------------------------------------------------------

    async def _start(self, host: str, port: int) -> None:
        self.host, self.port = await run_on_loop(self._aio_start(host, port), self._loop)
        if self._authorization is None and host not in _LOOPBACK:
            _log.warning("worker server on %s accepts requests from the network without a token; "
                         "it runs any graph it is sent: use a trusted network or set a token",
                         self.url)

    async def _stop(self) -> None:
        self._closing = True
        for call in list(self._calls):
            call.cancel()
        await run_on_loop(self._aio_stop(), self._loop)

    def _spawn(self, call: _TrioCall, fn: Any, args: tuple, report: Any) -> None:
        if self._closing:
            report(outcome.Error(RemoteCallError("UNAVAILABLE", "server is shutting down")))
            return
        self._calls.add(call)
        self._nursery.start_soon(self._run_call, call, fn, args, report)

    async def _run_call(self, call: _TrioCall, fn: Any, args: tuple, report: Any) -> None:
        result = None
        with trio.CancelScope() as call.scope:
            if call.cancelled:
                call.scope.cancel()
            try:
                result = outcome.Value(await fn(*args))
            except Exception as exc:  # noqa: BLE001 -- the client gets it as an ErrorReply
                result = outcome.Error(exc)
            finally:
                self._calls.discard(call)
                if result is None:  # cancelled: the client left, or the server is going away
                    client_left = call.cancelled and not self._closing
                    report(outcome.Error(RemoteCallError(
                        "CANCELLED" if client_left else "UNAVAILABLE",
                        "request cancelled" if client_left else "server is shutting down")))
        if result is not None:
            report(result)

    # -- asyncio side ---------------------------------------------------------------------------

    async def _aio_start(self, host: str, port: int) -> tuple[str, int]:
        app = web.Application(middlewares=[self._middleware()])
        for rpc in RPCS:
            app.router.add_route(rpc.http_method, _route_pattern(rpc), self._route(rpc),
                                 name=rpc.method)
        app.router.add_route("GET", METRICS_PATH, self._serve_metrics, name="metrics")
        self._runner = web.AppRunner(app, read_bufsize=1 << 20, handler_cancellation=True,
                                     access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        self._guard = ConnectionGuard(self._connection_limits, loop)
        try:
            self._listener = await loop.create_server(
                self._guard.factory(self._runner.server), host, port, reuse_address=True)
        except BaseException:
            await self._runner.cleanup()
            raise
        self._guard.start()
        rate_limit_logs()
        bound_host, bound_port = self._listener.sockets[0].getsockname()[:2]
        return bound_host, bound_port

    async def _aio_stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        if self._guard is not None:
            self._guard.stop()
        if self._runner is not None:
            await self._runner.cleanup()

    def _middleware(self) -> Any:
        @web.middleware
        async def authenticate_and_count(request: web.Request, handler: Any) -> Any:
            route = request.match_info.route.name or "unmatched"
            self._in_flight += 1
            if self._guard is not None:
                self._guard.request_started(request.transport)
            status = 500
            try:
                # surrogateescape: header bytes that are not UTF-8 compare unequal, not crash
                if self._authorization is not None and not hmac.compare_digest(
                        request.headers.get("Authorization", "").encode("utf-8", "surrogateescape"),
                        self._authorization):
                    response = web.Response(
                        status=401, headers={"WWW-Authenticate": 'Bearer realm="asyncflow"'},
                        text="missing or wrong bearer token: send 'Authorization: Bearer <token>'")
                else:
                    response = await handler(request)
                status = response.status
                return response
            except web.HTTPException as exc:
                status = exc.status
                raise
            except asyncio.CancelledError:
                status = 499  # the client went away
                raise
            finally:
                self._in_flight -= 1
                self._by_status[route, status] += 1
                if self._guard is not None:
                    self._guard.request_finished(request.transport)
        return authenticate_and_count

    def _route(self, rpc: Rpc) -> Any:
        async def serve(request: web.Request) -> web.StreamResponse:
            return await self._serve(rpc, request)
        return serve

    async def _serve(self, rpc: Rpc, request: web.Request) -> web.StreamResponse:
        try:
            message = await self._read_request(rpc, request)
        except _BadRequest as bad:
            return web.Response(status=bad.status, text=bad.text)
        try:
            result = await self._call_in_trio(getattr(self._handler, rpc.method),
                                              () if message is None else (message,))
            status, buffers = 200, encode(reply_for_result(rpc, result), self._limits)
        except Exception as exc:  # noqa: BLE001 -- handler failures and unsendable replies
            error = error_reply_for(exc)
            status, buffers = _HTTP_STATUS[error.code], encode(error, self._limits)
        return await self._send_frame(request, status, buffers)

    async def _read_request(self, rpc: Rpc, request: web.Request) -> Message | None:
        where = f"{request.method} {request.path}"
        path_fields = {name: int(value) if PATH_FIELDS[rpc.method][name] is int else value
                       for name, value in request.match_info.items()}
        if not rpc.has_body:
            if request.body_exists:
                raise _BadRequest(400, f"{where} takes no body")
            if rpc.request is None:
                return None
            message = rpc.request(**path_fields)
            try:  # the same field checks a body would get
                encode(message, self._limits)
            except LocalProtocolError as exc:
                raise _BadRequest(400, f"{where}: {exc}") from exc
            return message
        length = request.content_length
        if length is not None and length > self._limits.max_frame_bytes:
            raise _BadRequest(413, f"{where}: body of {length} bytes exceeds the limit of "
                                   f"{self._limits.max_frame_bytes}")
        try:
            message = await _read_frame(request.content, self._limits,
                                        self._connection_limits.body_timeout_s)
        except _ReadTimeout as exc:
            raise _BadRequest(408, f"{where}: {exc}") from exc
        except FrameTooLarge as exc:
            raise _BadRequest(413, f"{where}: frame too large: {exc}") from exc
        except RemoteProtocolError as exc:
            raise _BadRequest(400, f"{where}: bad body: {exc}") from exc
        self._bytes_received += length or 0
        if not isinstance(message, rpc.request):
            raise _BadRequest(400, f"{where} takes a {rpc.request.__name__} frame, "
                                   f"got {type(message).__name__}")
        for name, value in path_fields.items():
            if getattr(message, name) != value:
                raise _BadRequest(400, f"{where}: the path says {name}={value!r} but the body "
                                       f"says {getattr(message, name)!r}")
        return message

    async def _send_frame(self, request: web.Request, status: int,
                          buffers: list[bytes | memoryview]) -> web.StreamResponse:
        size = frame_size(buffers)
        self._bytes_sent += size
        if size < _SLICE:
            return web.Response(status=status, body=b"".join(buffers),
                                content_type=FRAME_CONTENT_TYPE)
        response = web.StreamResponse(status=status,
                                      headers={"Content-Type": FRAME_CONTENT_TYPE})
        response.content_length = size
        await response.prepare(request)
        for piece in _slices(buffers):
            await response.write(piece)
        await response.write_eof()
        return response

    async def _serve_metrics(self, request: web.Request) -> web.StreamResponse:
        try:
            text = await self._call_in_trio(self._handler.metrics_text, ())
        except Exception as exc:  # noqa: BLE001 -- reported to the scraper as a 500
            return web.Response(status=500, text=error_reply_for(exc).message)
        return web.Response(text=text + self._transport_metrics(),
                            content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})

    def _transport_metrics(self) -> str:
        stats = self.statistics()
        lines = ["# HELP asyncflow_transport_requests_total HTTP requests answered.",
                 "# TYPE asyncflow_transport_requests_total counter"]
        lines += [f'asyncflow_transport_requests_total{{route="{route}",status="{status}"}} {n}'
                  for (route, status), n in sorted(self._by_status.items())]
        for name, kind, value in (("in_flight", "gauge", stats.in_flight),
                                  ("connections", "gauge", stats.connections),
                                  ("connections_closed_total", "counter",
                                   stats.connections_closed),
                                  ("received_bytes_total", "counter", stats.bytes_received),
                                  ("sent_bytes_total", "counter", stats.bytes_sent)):
            lines += [f"# TYPE asyncflow_transport_{name} {kind}",
                      f"asyncflow_transport_{name} {value}"]
        return "\n" + "\n".join(lines) + "\n"

    async def _call_in_trio(self, fn: Any, args: tuple) -> Any:
        """Run ``await fn(*args)`` in the server's trio run; cancelling this cancels it there."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        call = _TrioCall()

        def report(result: outcome.Outcome) -> None:  # trio thread
            with contextlib.suppress(RuntimeError):  # loop already closed: nobody is waiting
                loop.call_soon_threadsafe(_settle, future, result)

        try:
            self._trio_token.run_sync_soon(self._spawn, call, fn, args, report)
        except trio.RunFinishedError:
            raise RemoteCallError("UNAVAILABLE", "server is shutting down") from None
        try:
            result = await future
        except asyncio.CancelledError:
            with contextlib.suppress(trio.RunFinishedError):
                self._trio_token.run_sync_soon(call.cancel)
            raise
        return result.unwrap()


def _settle(future: asyncio.Future, result: outcome.Outcome) -> None:
    if not future.done():
        future.set_result(result)


def _route_pattern(rpc: Rpc) -> str:
    """The aiohttp pattern of an rpc's path: integer fields only match integers."""
    pattern = rpc.path
    for name, annotation in PATH_FIELDS[rpc.method].items():
        if annotation is int:
            pattern = pattern.replace(f"{{{name}}}", f"{{{name}:-?[0-9]+}}")
    return pattern


@contextlib.asynccontextmanager
async def open_http_server(handler: WorkerServiceProtocol, host: str = "127.0.0.1",
                           port: int = 0, *, token: str | None = None,
                           limits: Limits = DEFAULT_LIMITS,
                           loop: asyncio.AbstractEventLoop | None = None,
                           connection_limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
                           ) -> AsyncIterator[HttpServer]:
    """Serve ``handler`` over HTTP for the duration of the ``async with`` block.

    Handler methods run in the calling trio run, in a nursery owned by the server. Leaving the
    block stops accepting, cancels handler calls in flight (their clients get UNAVAILABLE) and
    closes every connection.

    Args:
        handler: the worker service implementation (trio methods).
        host: interface to bind; keep the default unless the network is trusted.
        port: TCP port; 0 picks a free one (read it from ``server.port``).
        token: when set, every request must carry ``Authorization: Bearer <token>`` (else 401).
        limits: codec limits for request bodies and replies.
        loop: the asyncio loop aiohttp serves on: by default the transport's own thread; the
            loop hosting this trio run as a guest (``trio.lowlevel.start_guest_run``) makes
            the server part of that application's loop.
        connection_limits: read timeouts and the connection limit (:class:`ConnectionLimits`).

    Returns:
        An async context manager yielding the running :class:`HttpServer`.

    Raises:
        OSError: the address cannot be bound.
    """
    async with trio.open_nursery() as nursery:
        server = HttpServer(handler, token=token, limits=limits, nursery=nursery, loop=loop,
                            connection_limits=connection_limits)
        await server._start(host, port)
        try:
            yield server
        finally:
            with trio.CancelScope(shield=True):
                await server._stop()


async def serve_http(handler: WorkerServiceProtocol, host: str = "127.0.0.1", port: int = 0, *,
                     token: str | None = None, limits: Limits = DEFAULT_LIMITS,
                     task_status: trio.TaskStatus[HttpServer] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; ``await nursery.start(serve_http, handler)`` returns the server.

    Args and Raises are those of :func:`open_http_server`.
    """
    async with open_http_server(handler, host, port, token=token, limits=limits) as server:
        task_status.started(server)
        await trio.sleep_forever()


# ----------------------------------------------------------------------------- client


class HttpChannel(Channel):
    """A channel to a worker's HTTP server (see :class:`~transports.service.Channel`).

    Args:
        address: ``"host:port"`` (IPv6 hosts in brackets).
        token: bearer token to send, if the server requires one.
        connect_timeout: seconds to establish a connection before TransportUnavailable.
        limits: codec limits for replies (and the requests this side builds).

    Raises:
        ValueError: ``address`` is not ``host:port``.
    """

    def __init__(self, address: str, *, token: str | None = None, connect_timeout: float = 5.0,
                 limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__()
        parse_address(address)
        self.address = address
        self._base_url = f"http://{address}"
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._connect_timeout = connect_timeout
        self._limits = limits

    async def _exchange(self, rpc: Rpc, request: Message | None) -> Message:
        path = request_path(rpc, request)
        # Bodiless requests are encoded too: the same field checks, whatever the route.
        buffers = None if request is None else encode(request, self._limits)
        if not rpc.has_body:
            buffers = None
        return await run_on_loop(self._aio_request(
            rpc.http_method, path, buffers, self._read_reply, self._total_timeout()))

    async def _exchange_metrics(self) -> str:
        return await run_on_loop(self._aio_request(
            "GET", METRICS_PATH, None, self._read_text, self._total_timeout()))

    def _total_timeout(self) -> float | None:
        # A backstop for the asyncio side; the trio deadline normally cancels the call first.
        remaining = trio.current_effective_deadline() - trio.current_time()
        return None if remaining == float("inf") else max(remaining, 0.0) + 1.0

    async def _aio_request(self, method: str, path: str, buffers: list | None,
                           read: Any, total: float | None) -> Any:
        headers = dict(self._headers)
        data: Any = None
        if buffers is not None:
            size = frame_size(buffers)
            headers["Content-Type"] = FRAME_CONTENT_TYPE
            if size < _SLICE:
                data = b"".join(buffers)
            else:  # explicit length, or aiohttp would switch to chunked encoding
                data, headers["Content-Length"] = _aslices(buffers), str(size)
        timeout = aiohttp.ClientTimeout(total=total, sock_connect=self._connect_timeout)
        what = f"{method} {path} to {self.address}"
        try:
            async with aio_thread().session().request(
                    method, self._base_url + path, data=data, headers=headers,
                    timeout=timeout) as response:
                return await read(response)
        except aiohttp.ConnectionTimeoutError as exc:
            raise TransportUnavailable(f"{what}: no connection within "
                                       f"{self._connect_timeout} s") from exc
        except TimeoutError as exc:
            raise TransportDeadlineExceeded(f"{what}: deadline exceeded") from exc
        except aiohttp.ClientConnectorError as exc:
            raise TransportUnavailable(f"{what}: cannot connect: {exc.os_error}") from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise TransportUnavailable(f"{what}: connection lost: {exc}") from exc

    async def _read_reply(self, response: aiohttp.ClientResponse) -> Message:
        if response.content_type != FRAME_CONTENT_TYPE:
            await self._raise_for_text(response)
        reply = await _read_frame(response.content, self._limits)
        if response.status != 200 and not isinstance(reply, ErrorReply):
            raise RemoteProtocolError(f"HTTP {response.status} with a {type(reply).__name__} "
                                      "frame instead of an ErrorReply")
        return reply

    async def _read_text(self, response: aiohttp.ClientResponse) -> str:
        if response.status != 200:
            await self._raise_for_text(response)
        return (await response.content.read(self._limits.max_header_bytes)).decode("utf-8")

    async def _raise_for_text(self, response: aiohttp.ClientResponse) -> typing.NoReturn:
        raise text_error(response.status, self.address, await response.content.read(MAX_TEXT))
