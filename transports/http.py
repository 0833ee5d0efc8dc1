"""HTTP transport: aiohttp server and client on one asyncio thread, bridged to trio.

Theory of operation
-------------------
trio owns the process. aiohttp cannot run inside trio, so every aiohttp object lives on one daemon
thread running an ``asyncio.SelectorEventLoop`` (:func:`_aio_thread`, started lazily, one per
process, with one ``ClientSession`` whose connector pools connections to every worker). The two
worlds meet at two documented thread-safe calls:

* trio -> asyncio (:func:`_run_on_loop`): ``asyncio.run_coroutine_threadsafe`` starts the
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

Routes come from :data:`transports.service.RPCS`; ``docs/protocol.md`` lists routes, statuses and
the optional bearer token. Nothing here knows about asyncflow.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hmac
import logging
import os
import string
import threading
import typing
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import aiohttp
import outcome
import trio
from aiohttp import web

from transports.messages import ErrorReply, Message, RemoteCallError
from transports.service import (
    METRICS_PATH, RPCS, Channel, Rpc, TransportDeadlineExceeded, TransportUnavailable,
    WorkerServiceProtocol, error_reply_for, reply_for_result,
)
from transports.wire import (
    CLOSED, DEFAULT_LIMITS, NEED_DATA, Decoder, FrameTooLarge, Limits, LocalProtocolError,
    RemoteProtocolError, encode, frame_size,
)

__all__ = ["FRAME_CONTENT_TYPE", "HttpChannel", "HttpServer", "HttpServerStatistics",
           "open_http_server", "serve_http"]

FRAME_CONTENT_TYPE: Final = "application/x-asyncflow-frame"
_SLICE: Final = 256 * 1024
_MAX_TEXT: Final = 64 * 1024  # the most of a text error body a client reads
_CANCEL_GRACE: Final = 5.0  # seconds a cancelled trio caller waits for its asyncio task to unwind
# Canonical code -> HTTP status (the grpc-gateway mapping), and back for text-only answers.
_HTTP_STATUS: Final = {
    "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404, "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501,
    "INTERNAL": 500, "UNAVAILABLE": 503, "DATA_LOSS": 500, "UNAUTHENTICATED": 401,
}
_TEXT_STATUS_CODE: Final = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED",
                            403: "PERMISSION_DENIED", 404: "UNIMPLEMENTED",
                            405: "UNIMPLEMENTED", 413: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}
_LOOPBACK: Final = frozenset({"127.0.0.1", "::1", "localhost"})
_log = logging.getLogger(__name__)
# rpc method -> {path field: its annotation}, e.g. {"step_id": int}
_PATH_FIELDS: Final = {rpc.method: {name: typing.get_type_hints(rpc.request)[name]
                                    for _, name, _, _ in string.Formatter().parse(rpc.path)
                                    if name} for rpc in RPCS}


# ----------------------------------------------------------------------------- the asyncio thread


class _AioThread:
    """The process's asyncio loop for aiohttp, running in a daemon thread."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.SelectorEventLoop()
        self._session: aiohttp.ClientSession | None = None
        threading.Thread(target=self.loop.run_forever, name="asyncflow-aiohttp",
                         daemon=True).start()

    def session(self) -> aiohttp.ClientSession:
        """The shared client session; call on the loop only."""
        if self._session is None:
            # limit=0: a long recv_tensors must never queue other calls behind a pool limit.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), auto_decompress=False,
                read_bufsize=1 << 20)
        return self._session

    def close(self) -> None:
        """Close the session and stop the loop (at interpreter exit)."""
        async def close_session() -> None:
            if self._session is not None:
                await self._session.close()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close_session(), self.loop).result(timeout=2)
            self.loop.call_soon_threadsafe(self.loop.stop)


_aio_lock = threading.Lock()
_aio: _AioThread | None = None


def _aio_thread() -> _AioThread:
    global _aio
    with _aio_lock:
        if _aio is None or _aio.pid != os.getpid():  # a forked child needs its own thread
            _aio = _AioThread()
            atexit.register(_aio.close)
        return _aio


async def _run_on_loop(coro: Coroutine[Any, Any, Any],
                       loop: asyncio.AbstractEventLoop | None = None) -> Any:
    """Run a coroutine on ``loop`` (default: the asyncio thread's) and wait for it in trio.

    ``loop`` may be the loop hosting this trio run as a guest (same thread): the calls used
    here are thread-safe, not thread-requiring.
    """
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def wake(_: object) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(done.set)

    future = asyncio.run_coroutine_threadsafe(coro, loop or _aio_thread().loop)
    future.add_done_callback(wake)
    try:
        await done.wait()
    except trio.Cancelled:
        future.cancel()
        with trio.CancelScope(shield=True, deadline=trio.current_time() + _CANCEL_GRACE):
            await done.wait()
        raise
    return future.result()


def _slices(buffers: list[bytes | memoryview]) -> Iterator[memoryview]:
    for buffer in buffers:
        view = memoryview(buffer)
        for start in range(0, len(view), _SLICE):
            yield view[start:start + _SLICE]


async def _aslices(buffers: list[bytes | memoryview]) -> AsyncIterator[memoryview]:
    for piece in _slices(buffers):
        yield piece


async def _read_frame(content: aiohttp.StreamReader, limits: Limits) -> Message:
    """Read a body that must hold exactly one frame, decoding as chunks arrive.

    ``readchunk`` hands over aiohttp's buffered chunks one by one; ``readany`` would join them
    (a copy) whenever the decoder falls behind the socket.
    """
    decoder, message = Decoder(limits), None
    while True:
        chunk, end_of_http_chunk = await content.readchunk()
        if not chunk and end_of_http_chunk and not content.at_eof():
            continue  # a chunked-encoding boundary, not the end (aiohttp's EMPTY_PAYLOAD
            # answers (b"", True) forever once read: without the at_eof check this spins)
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
                 nursery: trio.Nursery, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._handler, self._limits, self._nursery = handler, limits, nursery
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
        return HttpServerStatistics(
            requests=sum(self._by_status.values()),
            errors=sum(n for (_, status), n in self._by_status.items() if status >= 400),
            in_flight=self._in_flight, bytes_received=self._bytes_received,
            bytes_sent=self._bytes_sent)

    # -- lifecycle (trio side) ------------------------------------------------------------------

    async def _start(self, host: str, port: int) -> None:
        self.host, self.port = await _run_on_loop(self._aio_start(host, port), self._loop)
        if self._authorization is None and host not in _LOOPBACK:
            _log.warning("worker server on %s accepts requests from the network without a token; "
                         "it runs any graph it is sent: use a trusted network or set a token",
                         self.url)

    async def _stop(self) -> None:
        self._closing = True
        for call in list(self._calls):
            call.cancel()
        await _run_on_loop(self._aio_stop(), self._loop)

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
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            raise
        bound_host, bound_port = self._runner.addresses[0][:2]
        return bound_host, bound_port

    async def _aio_stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _middleware(self) -> Any:
        @web.middleware
        async def authenticate_and_count(request: web.Request, handler: Any) -> Any:
            route = request.match_info.route.name or "unmatched"
            self._in_flight += 1
            status = 500
            try:
                if self._authorization is not None and not hmac.compare_digest(
                        request.headers.get("Authorization", "").encode(), self._authorization):
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
        path_fields = {name: int(value) if _PATH_FIELDS[rpc.method][name] is int else value
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
            message = await _read_frame(request.content, self._limits)
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
    for name, annotation in _PATH_FIELDS[rpc.method].items():
        if annotation is int:
            pattern = pattern.replace(f"{{{name}}}", f"{{{name}:-?[0-9]+}}")
    return pattern


@contextlib.asynccontextmanager
async def open_http_server(handler: WorkerServiceProtocol, host: str = "127.0.0.1",
                           port: int = 0, *, token: str | None = None,
                           limits: Limits = DEFAULT_LIMITS,
                           loop: asyncio.AbstractEventLoop | None = None,
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

    Returns:
        An async context manager yielding the running :class:`HttpServer`.

    Raises:
        OSError: the address cannot be bound.
    """
    async with trio.open_nursery() as nursery:
        server = HttpServer(handler, token=token, limits=limits, nursery=nursery, loop=loop)
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
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"address must be 'host:port', got {address!r}")
        self.address = address
        self._base_url = f"http://{address}"
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._connect_timeout = connect_timeout
        self._limits = limits

    async def _exchange(self, rpc: Rpc, request: Message | None) -> Message:
        path = rpc.path.format(**{name: quote(str(getattr(request, name)), safe="")
                                  for name in _PATH_FIELDS[rpc.method]})
        # Bodiless requests are encoded too: the same field checks, whatever the route.
        buffers = None if request is None else encode(request, self._limits)
        if not rpc.has_body:
            buffers = None
        return await _run_on_loop(self._aio_request(
            rpc.http_method, path, buffers, self._read_reply, self._total_timeout()))

    async def _exchange_metrics(self) -> str:
        return await _run_on_loop(self._aio_request(
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
            async with _aio_thread().session().request(
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
        text = (await response.content.read(_MAX_TEXT)).decode("utf-8", "replace").strip()
        code = _TEXT_STATUS_CODE.get(response.status, "UNKNOWN")
        raise RemoteCallError(code, f"HTTP {response.status} from {self.address}: {text}")
