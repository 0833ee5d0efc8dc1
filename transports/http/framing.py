"""HTTP/1.1 framing by llhttp (through httptools), sans-IO: what the trio server and client read.

A :class:`MessageReader` is one connection's reading side. It is fed the bytes as they arrive
(:meth:`~MessageReader.feed`) and hands out, in order, each message's head
(:meth:`~MessageReader.next_head`: a :class:`RequestHead` on a server, a :class:`ResponseHead`
on a client) and its body (:meth:`~MessageReader.read_body`, copied into the caller's buffer).
llhttp does the framing: request and status lines, header lines, ``Content-Length`` and chunked
bodies, pipelined messages one after another, and the smuggling forms (``Content-Length`` with
``Transfer-Encoding``, two ``Content-Length`` s, bad chunk sizes, obs-fold, bare LF) are its
errors, raised as :class:`~transports.wire.RemoteProtocolError` at their place in the stream:
the messages before a broken one are still handed out.

**Zero copy.** When a ``Content-Length`` body is not complete in what was fed,
:meth:`~MessageReader.read_body` returns None and :attr:`~MessageReader.body_left` says how many
body bytes are still due: the caller may receive them straight from the socket into their
destination (the codec's arrays), telling the reader with :meth:`~MessageReader.skipped`. Those
bytes never pass through llhttp; when the body ends, the reader starts a fresh parser for the
next message. Chunked bodies (no client of the project sends one) go through llhttp.

What llhttp accepts and this protocol does not is refused on top: a request target not in
origin form (``/path?query``), an HTTP version other than 1.0 and 1.1, a ``Transfer-Encoding``
other than ``chunked``, trailers, upgrades, a response with neither ``Content-Length`` nor
chunked encoding; and the bounds: a head longer than :data:`MAX_HEAD` bytes, one of its lines
longer than :data:`MAX_LINE`, more than :data:`MAX_HEADERS` header lines
(:class:`HeadTooLarge`: the server answers 431). A head up to ``MAX_HEAD`` bytes is always
accepted; one is refused once more than ``MAX_HEAD`` of its bytes came after the piece it began
in (so the bound is exact up to one read, and what a head can hold is bounded either way).

Header names are lower-cased; values are latin-1 (bytes 0x80-0xff kept); a repeated header's
values are joined with ``", "``. Nothing here knows about asyncflow.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Final

import httptools

from transports.wire import RemoteProtocolError

__all__ = ["MAX_HEAD", "MAX_HEADERS", "MAX_LINE", "HeadTooLarge", "MessageReader",
           "RequestHead", "ResponseHead"]

MAX_HEAD: Final = 64 * 1024  # bytes of one head (see the module docstring for the exact rule)
MAX_LINE: Final = 8190       # bytes in the request target or one header line
MAX_HEADERS: Final = 128     # header lines in one head
_END: Final = object()       # the end of a message's body, in the event queue


class HeadTooLarge(RemoteProtocolError):
    """A head, one of its lines or its number of headers is over the bound."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A request head.

    Attributes:
        method: the method token, e.g. ``"POST"``.
        target: the request target as sent (origin form: path and query).
        path: the target's path, not yet percent-decoded.
        minor_version: 1 for HTTP/1.1, 0 for HTTP/1.0.
        headers: lower-cased name -> value (latin-1); repeated headers joined with ``", "``.
    """

    method: str
    target: str
    path: str
    minor_version: int
    headers: dict[str, str]

    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request after this one."""
        connection = self.headers.get("connection", "").lower()
        if self.minor_version == 0:
            return "keep-alive" in connection
        return "close" not in connection


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """A response head: the status and the lower-cased headers (as :class:`RequestHead`)."""

    status: int
    headers: dict[str, str]


class MessageReader:
    """The reading side of one HTTP/1.1 connection (see the module docstring).

    Args:
        response: read responses (a client) rather than requests (a server).
        max_head: the head bound (431 past it on a server).
    """

    __slots__ = ("_response", "_max_head", "_events", "_parser", "_failed", "_in_head",
                 "_head_fed", "_url", "_headers", "_lines", "_piece", "body_left")

    def __init__(self, *, response: bool = False, max_head: int = MAX_HEAD) -> None:
        self._response, self._max_head = response, max_head
        self._events: deque = deque()  # heads, body pieces (memoryview), _END, an error
        self._failed = False  # an error was queued: nothing fed after it is parsed
        self._piece: memoryview | None = None  # the rest of a body piece read in part
        self.body_left: int | None = 0
        self._new_parser()

    def _new_parser(self) -> None:
        callbacks = SimpleNamespace(
            on_message_begin=self._on_message_begin, on_url=self._on_url,
            on_header=self._on_header, on_headers_complete=self._on_headers_complete,
            on_body=self._on_body, on_message_complete=self._on_message_complete)
        kind = httptools.HttpResponseParser if self._response else httptools.HttpRequestParser
        self._parser = kind(callbacks)
        self._in_head, self._head_fed = False, 0
        self._url, self._headers, self._lines = b"", {}, 0

    # -- fed bytes --------------------------------------------------------------------------

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Parse ``data``, the next bytes of the connection; what they complete is queued.

        An error is queued at its place (raised by :meth:`next_head` or :meth:`read_body` once
        the messages before it were taken); bytes fed after it are ignored.
        """
        if self._failed:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(RemoteProtocolError("protocol upgrades (and CONNECT) are not supported"))
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            self._fail(cause if isinstance(cause, RemoteProtocolError)
                       else RemoteProtocolError(str(exc) or type(exc).__name__))
        else:
            if self._in_head and self._head_fed < 0:  # it began in this piece: not counted
                self._head_fed = 0
            elif self._in_head:
                self._head_fed += len(data)
                if self._head_fed > self._max_head:
                    what = "response" if self._response else "request"
                    self._fail(HeadTooLarge(f"{what} head longer than {self._max_head} bytes"))

    def _fail(self, error: RemoteProtocolError) -> None:
        self._failed = True
        self._events.append(error)

    @property
    def pending(self) -> bool:
        """Whether bytes past the message being read were fed (a pipelined request)."""
        return bool(self._events) or self._in_head

    @property
    def in_head(self) -> bool:
        """Whether a message began and its head is not complete yet."""
        return self._in_head

    # -- what the caller takes --------------------------------------------------------------

    def _next(self) -> object:
        event = self._events.popleft()
        if isinstance(event, RemoteProtocolError):
            self._events.appendleft(event)  # it stays the connection's state
            raise event
        return event

    def next_head(self) -> RequestHead | ResponseHead | None:
        """The next message's head; None until enough was fed.

        The end of the previous message (a bodiless one) is passed over. Call it once the
        previous message's body was read to its end.

        Raises:
            RemoteProtocolError: the stream broke the protocol here (HeadTooLarge: a bound).
        """
        while self._events:
            event = self._next()
            if event is not _END:
                if not isinstance(event, (RequestHead, ResponseHead)):
                    raise RuntimeError("next_head() before the previous body was read")
                return event
        return None

    def read_body(self, view: memoryview) -> int | None:
        """Copy fed body bytes into ``view``: their count, 0 at the end of the body, or None
        when none were fed (then :attr:`body_left` bytes may be received straight into place).

        Raises:
            RemoteProtocolError: the body broke the protocol here.
        """
        if self._piece is None:
            if not self._events:
                return None
            if self._events[0] is _END:
                self._events.popleft()
                return 0
            self._piece = self._next()
        piece = self._piece
        n = min(len(view), len(piece))
        view[:n] = piece[:n]
        self._piece = piece[n:] if n < len(piece) else None
        return n

    def skipped(self, n: int) -> None:
        """The caller received ``n`` bytes of the current ``Content-Length`` body itself
        (after :meth:`read_body` returned None); at its end the next message gets a fresh
        parser."""
        if self.body_left is None or not 0 < n <= self.body_left or self._events:
            raise RuntimeError(f"skipped({n}) with {self.body_left} body bytes due")
        self.body_left -= n
        if self.body_left == 0:
            self._new_parser()
            self._events.append(_END)

    # -- llhttp's callbacks -----------------------------------------------------------------

    def _on_message_begin(self) -> None:
        self._in_head, self._head_fed = True, -1  # -1: began in the piece being fed
        self._url, self._headers, self._lines = b"", {}, 0

    def _on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_LINE:
            raise HeadTooLarge(f"request target longer than {MAX_LINE} bytes")

    def _on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head:
            raise RemoteProtocolError("trailers are not accepted")
        self._lines += 1
        if self._lines > MAX_HEADERS:
            raise HeadTooLarge(f"more than {MAX_HEADERS} header lines")
        if len(name) + len(value) > MAX_LINE:
            raise HeadTooLarge(f"header line of {len(name) + len(value)} bytes, longer than "
                               f"{MAX_LINE}")
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers = self._headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def _on_headers_complete(self) -> None:
        self._in_head = False
        headers, parser = self._headers, self._parser
        if parser.should_upgrade():
            raise RemoteProtocolError("protocol upgrades (and CONNECT) are not supported")
        encoding = headers.get("transfer-encoding")
        if encoding is not None and encoding.strip().lower() != "chunked":
            raise RemoteProtocolError(f"unsupported Transfer-Encoding {encoding[:40]!r} (only "
                                      "chunked)")
        length = headers.get("content-length")
        self.body_left = None if encoding is not None else int(length or 0)
        if self._response:
            status = parser.get_status_code()
            if length is None and encoding is None and not (status < 200 or status in (204, 304)):
                raise RemoteProtocolError("response has neither Content-Length nor chunked "
                                          "encoding")
            self._events.append(ResponseHead(status, headers))
            return
        version = parser.get_http_version()
        target = self._url.decode("latin-1")
        if version not in ("1.1", "1.0") or not target.startswith("/"):
            raise RemoteProtocolError(f"bad request line: {parser.get_method().decode()[:20]} "
                                      f"{target[:60]!r} HTTP/{version}")
        self._events.append(RequestHead(parser.get_method().decode("ascii"), target,
                                        target.partition("?")[0], int(version[-1]), headers))

    def _on_body(self, body: bytes) -> None:
        if self.body_left is not None:
            self.body_left -= len(body)
        self._events.append(memoryview(body))

    def _on_message_complete(self) -> None:
        self.body_left = 0
        self._events.append(_END)
