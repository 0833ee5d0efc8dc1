"""HTTP/1.1 message heads, sans-IO: what the trio client and server parse, with no socket.

A head is the bytes before the first empty line: a start line, then ``name: value`` header
lines. :func:`parse_request_head` (the server) and :func:`parse_response_head` (the client)
take those bytes whole (the caller finds the end with :func:`head_end` and bounds how much it
buffers) and return the parts with lower-cased header names; :func:`parse_chunk_size` reads a
chunked-encoding size line. Everything a peer can get wrong raises
:class:`~transports.wire.RemoteProtocolError` naming the line: the server answers it with a 400
(:class:`HeadTooLarge`: 431), the client reports it.

The rules are the strict subset of RFC 9112 that a worker needs: request targets in origin form
(``/path?query``), HTTP/1.0 or 1.1, header names that are tokens, values without control
characters (tab allowed; bytes 0x80-0xff kept, as latin-1), no line folding, no whitespace
before a colon, at most one ``Content-Length`` value, and no request carrying both
``Content-Length`` and ``Transfer-Encoding`` (the request-smuggling pair).

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from transports.wire import RemoteProtocolError

__all__ = ["MAX_HEADERS", "MAX_LINE", "HeadTooLarge", "RequestHead", "head_end",
           "parse_chunk_size", "parse_request_head", "parse_response_head"]

MAX_LINE: Final = 8190      # bytes in one request or header line (aiohttp's and nginx's bound)
MAX_HEADERS: Final = 128    # header lines in one head
_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CHUNK_SIZE: Final = re.compile(rb"[0-9A-Fa-f]{1,16}")


class HeadTooLarge(RemoteProtocolError):
    """A head, one of its lines or its number of headers is over the bound."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A parsed request head.

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


def head_end(buffer: bytes | bytearray, start: int = 0) -> int:
    """The index just past the head's empty line in ``buffer``, or -1 when it is incomplete.

    ``start`` is where to resume searching (a caller that buffers keeps it from the last call).
    """
    end = buffer.find(b"\r\n\r\n", max(0, start - 3))
    return -1 if end < 0 else end + 4


def _header_lines(lines: list[bytes]) -> dict[str, str]:
    if len(lines) > MAX_HEADERS:
        raise HeadTooLarge(f"{len(lines)} header lines, more than {MAX_HEADERS}")
    headers: dict[str, str] = {}
    for line in lines:
        if len(line) > MAX_LINE:
            raise HeadTooLarge(f"header line of {len(line)} bytes, longer than {MAX_LINE}")
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            raise RemoteProtocolError(f"bad header line {line[:80]!r}")
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value):
            raise RemoteProtocolError(f"control character in header {name[:40].decode()!r}")
        key, text = name.decode("ascii").lower(), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def parse_request_head(head: bytes | bytearray) -> RequestHead:
    """Parse a request head (the bytes up to and including its empty line).

    Raises:
        RemoteProtocolError: the head breaks the rules in the module docstring.
        HeadTooLarge: a line or the number of headers is over its bound.
    """
    request_line, *lines = bytes(head).rstrip(b"\r\n").split(b"\r\n")
    if len(request_line) > MAX_LINE:
        raise HeadTooLarge(f"request line of {len(request_line)} bytes, longer than {MAX_LINE}")
    parts = request_line.split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1].startswith(b"/") \
            or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0") or _BAD_VALUE.search(parts[1]):
        raise RemoteProtocolError(f"bad request line {request_line[:80]!r}")
    headers = _header_lines(lines)
    lengths = {value.strip() for value in headers.get("content-length", "").split(",")} - {""}
    if len(lengths) > 1 or (lengths and not next(iter(lengths)).isdigit()):
        raise RemoteProtocolError(f"bad Content-Length {headers['content-length'][:40]!r}")
    if lengths:
        headers["content-length"] = lengths.pop()
        if "transfer-encoding" in headers:
            raise RemoteProtocolError("both Content-Length and Transfer-Encoding")
    encoding = headers.get("transfer-encoding")
    if encoding is not None and encoding.lower() != "chunked":
        raise RemoteProtocolError(f"unsupported Transfer-Encoding {encoding[:40]!r} (only "
                                  "chunked)")
    target = parts[1].decode("latin-1")
    return RequestHead(parts[0].decode("ascii"), target, target.partition("?")[0],
                       1 if parts[2] == b"HTTP/1.1" else 0, headers)


def parse_response_head(head: bytes | bytearray) -> tuple[int, dict[str, str]]:
    """Parse a response head into (status, lower-cased headers).

    Raises:
        RemoteProtocolError: a bad status line or header line.
    """
    status_line, *lines = bytes(head).rstrip(b"\r\n").split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise RemoteProtocolError(f"bad status line {status_line[:80]!r}")
    return int(parts[1]), _header_lines(lines)


def parse_chunk_size(line: bytes | bytearray) -> int:
    """The size of a chunk from its size line (CRLF included; extensions ignored).

    Raises:
        RemoteProtocolError: not a hexadecimal size.
    """
    size = bytes(line).rstrip(b"\r\n").split(b";", 1)[0].strip(b" \t")
    if not _CHUNK_SIZE.fullmatch(size):
        raise RemoteProtocolError(f"bad chunk size {size[:20]!r}")
    return int(size, 16)
