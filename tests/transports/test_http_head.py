"""transports.http_head, sans-IO: heads whole, byte by byte, with trailing bytes, and broken."""

from __future__ import annotations

import pytest

from transports.http_head import (
    MAX_HEADERS, MAX_LINE, HeadTooLarge, head_end, parse_chunk_size, parse_request_head,
    parse_response_head,
)
from transports.wire import RemoteProtocolError

REQUEST = (b"POST /v1/steps/7/run?x=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"
           b"Content-Length: 12\r\nAuthorization: Bearer \xff\xfe\r\nX-A: 1\r\nx-a: 2\r\n\r\n")


def test_a_request_head_whole():
    head = parse_request_head(REQUEST)
    assert (head.method, head.target, head.path, head.minor_version) == (
        "POST", "/v1/steps/7/run?x=1", "/v1/steps/7/run", 1)
    assert head.headers == {"host": "127.0.0.1:1", "content-length": "12",
                            "authorization": "Bearer \xff\xfe", "x-a": "1, 2"}
    assert head.keep_alive


def test_the_end_is_found_byte_by_byte_and_trailing_bytes_stay_outside():
    data = REQUEST + b"AFWF" + b"next request"
    buffer, searched, found = bytearray(), 0, -1
    for index in range(len(data)):
        buffer += data[index:index + 1]
        found = head_end(buffer, searched)
        if found >= 0:
            break
        searched = len(buffer)
    assert found == len(REQUEST) and bytes(buffer) == REQUEST
    assert head_end(data) == len(REQUEST)
    assert parse_request_head(data[:head_end(data)]) == parse_request_head(REQUEST)


@pytest.mark.parametrize("version, connection, keep", [
    (b"HTTP/1.1", b"", True), (b"HTTP/1.1", b"Connection: close\r\n", False),
    (b"HTTP/1.0", b"", False), (b"HTTP/1.0", b"Connection: Keep-Alive\r\n", True)])
def test_keep_alive_follows_the_version_and_connection_header(version, connection, keep):
    head = parse_request_head(b"GET / " + version + b"\r\n" + connection + b"\r\n")
    assert head.keep_alive is keep


@pytest.mark.parametrize("head, match", [
    (b"GET /v1/health\r\n\r\n", "bad request line"),
    (b"GET v1/health HTTP/1.1\r\n\r\n", "bad request line"),
    (b"GET /v1/health HTTP/2.0\r\n\r\n", "bad request line"),
    (b"G(T /v1/health HTTP/1.1\r\n\r\n", "bad request line"),
    (b"GET /a\x00b HTTP/1.1\r\n\r\n", "bad request line"),
    (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", "bad header line"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", "bad header line"),
    (b"GET / HTTP/1.1\r\nNoColon\r\n\r\n", "bad header line"),
    (b"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", "control character"),
    (b"GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", "control character"),
    (b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "Content-Length"),
    (b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
    (b"GET / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
     "both Content-Length and Transfer-Encoding"),
    (b"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", "only chunked"),
])
def test_broken_request_heads_are_named(head, match):
    with pytest.raises(RemoteProtocolError, match=match):
        parse_request_head(head)


def test_repeated_equal_content_lengths_are_one():
    head = parse_request_head(b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n")
    assert head.headers["content-length"] == "5"


def test_heads_past_the_bounds_are_too_large():
    lines = b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADERS + 1))
    with pytest.raises(HeadTooLarge, match="header lines"):
        parse_request_head(b"GET / HTTP/1.1\r\n" + lines + b"\r\n")
    with pytest.raises(HeadTooLarge, match="header line of"):
        parse_request_head(b"GET / HTTP/1.1\r\nX: " + b"y" * MAX_LINE + b"\r\n\r\n")
    with pytest.raises(HeadTooLarge, match="request line of"):
        parse_request_head(b"GET /" + b"a" * MAX_LINE + b" HTTP/1.1\r\n\r\n")


def test_response_heads_and_chunk_sizes():
    assert parse_response_head(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 3\r\n\r\n") \
        == (413, {"content-length": "3"})
    with pytest.raises(RemoteProtocolError, match="bad status line"):
        parse_response_head(b"SMTP ready\r\n\r\n")
    assert parse_chunk_size(b"1f;ext=1\r\n") == 31 and parse_chunk_size(b"0\r\n") == 0
    for bad in (b"\r\n", b"zz\r\n", b"-1\r\n", b"1" * 17 + b"\r\n"):
        with pytest.raises(RemoteProtocolError, match="bad chunk size"):
            parse_chunk_size(bad)
