"""What the HTTP clients and the server of the worker protocol agree on, with no socket.

The tests' aiohttp ``HttpChannel`` (``tests/transports/aiohttp_channel.py``) and
:class:`~transports.http.client.TrioHttpChannel` (HTTP/1.1 straight from trio) speak the same
protocol to the same server (:mod:`transports.http.server`); the pieces of it that are not I/O
live here once (message framing is :mod:`transports.http.framing`):

* :data:`FRAME_CONTENT_TYPE`, the content type of a :mod:`transports.wire` frame body;
* :func:`parse_address`, a channel's ``"host:port"`` checked and split;
* :func:`request_path`, a route's path (from :data:`transports.service.RPCS`) with the
  request's path fields filled in, quoted; :data:`PATH_FIELDS` gives each route's fields and
  their annotations (the server parses them back with it);
* :func:`text_error`, the :class:`~transports.messages.RemoteCallError` for an answer that came
  as text rather than a frame (auth failures, unknown routes, the connection guard's 408), its
  canonical code read from the HTTP status by :data:`TEXT_STATUS_CODE`, or from the
  :data:`CODE_HEADER` the server adds where the status alone would misname it (a request frame
  damaged in transit: 400, but DATA_LOSS, see :func:`code_header`);
* :data:`HTTP_STATUS` and :data:`REASONS`, the server's status codes and reason phrases;
* :func:`send_pieces`, how the trio client and the server cut a message into ``send`` calls;
* :data:`ROUTES` (and :data:`LITERAL_ROUTES`, those without path fields, by method and path),
  the server's view of the same table: a :class:`Route` matches a decoded path and parses its
  fields back (integer fields only match integers).

Nothing here knows about asyncflow.
"""
from __future__ import annotations

import string
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from transports import checksum as _checksum
from transports.messages import Message, RemoteCallError
from transports.service import METRICS_PATH, RPCS, STATUS_PATH, Rpc
from transports.wire import (
    CLOSED, NEED_DATA, ChecksumMismatch, ChecksumTrailer, Decoder, RemoteProtocolError,
)

__all__ = ["FRAME_CONTENT_TYPE", "HTTP_STATUS", "REASONS", "take_one_frame", "the_frame", "JOIN_BYTES", "LITERAL_ROUTES", "MAX_TEXT", "PATH_FIELDS",
           "ROUTES", "TEXT_STATUS_CODE", "CODE_HEADER", "Route", "code_header",
           "parse_address", "request_path", "send_pieces",
           "text_error", "transport_metrics_text"]

FRAME_CONTENT_TYPE: Final = "application/x-asyncflow-frame"
MAX_TEXT: Final = 64 * 1024  # the most of a text error body a client reads
JOIN_BYTES: Final = 64 * 1024  # message buffers below this are joined into one send
# HTTP status of a text-only answer -> canonical code.
TEXT_STATUS_CODE: Final = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 408: "UNAVAILABLE",
                           403: "PERMISSION_DENIED", 404: "UNIMPLEMENTED",
                           405: "UNIMPLEMENTED", 413: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}
# The server's canonical code -> HTTP status (the grpc-gateway mapping); the way back, for
# text-only answers, is TEXT_STATUS_CODE.
HTTP_STATUS: Final = {
    "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404, "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501,
    "INTERNAL": 500, "UNAVAILABLE": 503, "DATA_LOSS": 500, "UNAUTHENTICATED": 401,
}
_HEADER_CODES: Final = frozenset({"DATA_LOSS"})  # the codes a CODE_HEADER may name
REASONS: Final = {
    200: "OK", 303: "See Other", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict", 413: "Content Too Large",
    429: "Too Many Requests", 431: "Request Header Fields Too Large", 499: "Client Closed Request",
    500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable",
    504: "Gateway Timeout",
}
# rpc method -> {path field: its annotation}, e.g. {"step_id": int}
PATH_FIELDS: Final = {rpc.method: {name: typing.get_type_hints(rpc.request)[name]
                                   for _, name, _, _ in string.Formatter().parse(rpc.path)
                                   if name} for rpc in RPCS}


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> (host without IPv6 brackets, port).

    Raises:
        ValueError: ``address`` is not ``host:port``.
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be 'host:port', got {address!r}")
    return (host[1:-1] if host.startswith("[") and host.endswith("]") else host), int(port)


def request_path(rpc: Rpc, request: Message | None) -> str:
    """``rpc``'s path with ``request``'s path fields filled in, each quoted as one segment."""
    return rpc.path.format(**{name: quote(str(getattr(request, name)), safe="")
                              for name in PATH_FIELDS[rpc.method]})


CODE_HEADER: Final = "x-asyncflow-code"  # a text answer's canonical code, where it has one


def code_header(exc: RemoteProtocolError) -> str:
    """The header line a 400 for a request frame that failed with ``exc`` carries: a
    ``ChecksumMismatch`` (damaged in transit) is DATA_LOSS, as a damaged reply is, not the
    INVALID_ARGUMENT of a malformed frame; other failures add nothing."""
    return "X-Asyncflow-Code: DATA_LOSS\r\n" if isinstance(exc, ChecksumMismatch) else ""


def text_error(status: int, address: str, body: bytes,
               code: str | None = None) -> RemoteCallError:
    """The error for a text answer with HTTP ``status`` from ``address`` (``body``: its start;
    ``code``: its :data:`CODE_HEADER`, used where it is a canonical code of a 4xx or 5xx)."""
    text = body.decode("utf-8", "replace").strip()
    if code not in _HEADER_CODES or status < 400:
        code = TEXT_STATUS_CODE.get(status, "UNKNOWN")
    return RemoteCallError(code, f"HTTP {status} from {address}: {text}")


SEND_CHUNK_BYTES: Final = 512 * 1024  # a large segment is handed to send_all in such chunks


def send_pieces(head: bytes, buffers: list[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    """What to ``send_all``, in order, for a message of ``head`` and a frame's ``buffers``.

    Consecutive buffers under :data:`JOIN_BYTES` (the frame's header, padding, checksum
    trailers) are joined with the head into one piece; a larger buffer (a view of a tensor) is
    handed out in views of :data:`SEND_CHUNK_BYTES`, so tensor bytes are never copied and a
    small message is one ``send``.

    A pending :class:`~transports.wire.ChecksumTrailer` (``encode(..., defer_checksums=True)``)
    is filled here, while its segment is written: each chunk is summed right after it was
    sent, while the kernel's copy has left it in the CPU's cache, so the checksum mostly reads
    cached bytes; summed before the send, it read the whole tensor from memory (about 5 ms of
    the sender's CPU per 64 MiB pull on the project's machine; bench/RESULTS.md). Iterate
    lazily: a trailer is only right once the pieces before it were taken.
    """
    small: list[bytes | memoryview] = [head]
    for index, buffer in enumerate(buffers):
        following = buffers[index + 1] if index + 1 < len(buffers) else None
        trailer = following if isinstance(following, ChecksumTrailer) and \
            following.pending and following.segment is buffer else None
        if len(buffer) < JOIN_BYTES:
            if trailer is not None:
                trailer.fill()
            small.append(buffer)
            continue
        if small:
            yield b"".join(small)
            small = []
        view, crc = memoryview(buffer), 0
        for start in range(0, len(view), SEND_CHUNK_BYTES):
            chunk = view[start:start + SEND_CHUNK_BYTES]
            yield chunk
            if trailer is not None:
                crc = _checksum.extend(crc, chunk)  # sent: the kernel's copy left it in cache
        if trailer is not None:
            trailer.set(crc)
    if small:
        yield b"".join(small)


@dataclass(frozen=True, slots=True)
class Route:
    """A route as the server matches it: the rpc (None for the text calls ``/metrics`` and
    ``/v1/status``), its path in segments."""

    rpc: Rpc | None
    name: str
    http_method: str
    segments: tuple[str, ...]  # literal segments, or "{field}"

    def match(self, segments: list[str]) -> dict[str, Any] | None:
        """The path fields when ``segments`` fit this route's path, else None."""
        if len(segments) != len(self.segments):
            return None
        fields: dict[str, Any] = {}
        for template, segment in zip(self.segments, segments):
            if not template.startswith("{"):
                if template != segment:
                    return None
                continue
            name = template[1:-1]
            if PATH_FIELDS[self.name][name] is int:
                digits = segment[1:] if segment.startswith("-") else segment
                if not digits.isascii() or not digits.isdigit():
                    return None
                fields[name] = int(segment)
            else:
                fields[name] = segment
        return fields


ROUTES: Final = tuple(Route(rpc, rpc.method, rpc.http_method, tuple(rpc.path.split("/")))
                       for rpc in RPCS) + (
    Route(None, "metrics", "GET", tuple(METRICS_PATH.split("/"))),
    Route(None, "status_json", "GET", tuple(STATUS_PATH.split("/"))))
# (method, path) -> route, for the routes without path fields: one lookup for most requests
LITERAL_ROUTES: Final = {(route.http_method, "/".join(route.segments)): route for route in ROUTES
                   if not any(segment.startswith("{") for segment in route.segments)}


def take_one_frame(decoder: Decoder, message: Message | None) -> Message | None:
    """The frames ``decoder`` has completed, checked to be one body's single frame.

    ``message`` is the frame taken by an earlier call for the same body (None if none yet);
    the result is the body's frame so far. Shared by the server's request reader and the
    aiohttp client's reply reader.

    Raises:
        RemoteProtocolError: a second frame, or bytes after the frame that do not decode.
    """
    try:
        while (event := decoder.next_event()) is not NEED_DATA and event is not CLOSED:
            if message is not None:
                raise RemoteProtocolError("body holds more than one frame")
            message = event
    except RemoteProtocolError as exc:
        if message is None:
            raise
        raise RemoteProtocolError(f"bytes after the frame: {exc}") from exc
    return message


def the_frame(decoder: Decoder, what: str, size: int) -> Message:
    """The single frame of a ``size``-byte ``what`` (an answer, a reply body) whose bytes have
    all been fed to ``decoder``; shared by the HTTP and the bare same-host clients.

    Raises:
        RemoteProtocolError: no complete frame, or more than one.
    """
    decoder.receive_data(b"")
    message = decoder.next_event()
    if message is NEED_DATA or message is CLOSED:
        raise RemoteProtocolError(f"empty or truncated {what} ({size} bytes)")
    if decoder.next_event() is not CLOSED:
        raise RemoteProtocolError(f"{what} holds more than one frame")
    return message


def transport_metrics_text(stats: Any, by_status: dict[tuple[str, int], int]) -> str:
    """The server's own lines of ``/metrics`` (Prometheus text): requests answered by route and
    status, and the connection and byte counts of ``stats`` (an ``HttpServerStatistics``)."""
    lines = ["# HELP asyncflow_transport_requests_total HTTP requests answered.",
             "# TYPE asyncflow_transport_requests_total counter"]
    lines += [f'asyncflow_transport_requests_total{{route="{route}",status="{status}"}} {n}'
              for (route, status), n in sorted(by_status.items())]
    for name, kind, value in (("in_flight", "gauge", stats.in_flight),
                              ("connections", "gauge", stats.connections),
                              ("connections_closed_total", "counter", stats.connections_closed),
                              ("received_bytes_total", "counter", stats.bytes_received),
                              ("sent_bytes_total", "counter", stats.bytes_sent),
                              ("same_host_calls_total", "counter",
                               getattr(stats, "same_host_calls", 0)),
                              ("short_steps_total", "counter", getattr(stats, "short_steps", 0))):
        lines += [f"# TYPE asyncflow_transport_{name} {kind}", f"asyncflow_transport_{name} {value}"]
    return "\n" + "\n".join(lines) + "\n"
