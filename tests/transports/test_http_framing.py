"""transports.http.framing, sans-IO: llhttp's framing fed whole, byte by byte, pipelined, broken,
and the zero-copy body path (bytes received past the parser)."""

from __future__ import annotations

import pytest

from transports.http.framing import (
    MAX_HEAD, MAX_HEADERS, MAX_LINE, HeadTooLarge, MessageReader, RequestHead, ResponseHead,
)
from transports.wire import RemoteProtocolError

REQUEST = (b"POST /v1/steps/7/run?x=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"
           b"Content-Length: 12\r\nAuthorization: Bearer \xff\xfe\r\nX-A: 1\r\nx-a: 2\r\n\r\n")
HEAD = RequestHead("POST", "/v1/steps/7/run?x=1", "/v1/steps/7/run", 1,
                   {"host": "127.0.0.1:1", "content-length": "12",
                    "authorization": "Bearer \xff\xfe", "x-a": "1, 2"})


def body_of(reader: MessageReader) -> bytes | None:
    """The fed body to its end (None: not all of it was fed)."""
    out, view = bytearray(), memoryview(bytearray(5))
    while (n := reader.read_body(view)) is not None:
        if n == 0:
            return bytes(out)
        out += view[:n]
    return None


@pytest.mark.parametrize("piece", [1, 7, 10_000])
def test_a_request_fed_in_pieces_then_a_pipelined_one(piece):
    data = REQUEST + b"hello world!" + b"\r\nGET /v1/health HTTP/1.1\r\n\r\n"
    reader, heads = MessageReader(), []
    for start in range(0, len(data), piece):
        reader.feed(data[start:start + piece])
    assert reader.next_head() == HEAD and HEAD.keep_alive
    assert body_of(reader) == b"hello world!" and reader.pending
    heads.append(reader.next_head())
    assert heads == [RequestHead("GET", "/v1/health", "/v1/health", 1, {})]
    assert reader.next_head() is None and not reader.pending


def test_a_content_length_body_received_past_the_parser():
    reader = MessageReader()
    reader.feed(REQUEST + b"hell")
    assert reader.next_head() == HEAD
    view = memoryview(bytearray(12))
    assert reader.read_body(view) == 4 and reader.read_body(view) is None
    assert reader.body_left == 8
    view[4:12] = b"o world!"  # what the caller received straight into its buffer
    reader.skipped(5)
    assert reader.read_body(view) is None and reader.body_left == 3
    reader.skipped(3)
    assert reader.read_body(view) == 0 and bytes(view) == b"hello world!"
    reader.feed(b"GET / HTTP/1.1\r\n\r\n")  # the next request goes to a fresh parser
    assert reader.next_head().path == "/"
    with pytest.raises(RuntimeError, match="skipped"):
        reader.skipped(1)


def test_chunked_bodies_are_decoded_and_trailers_refused():
    reader = MessageReader()
    reader.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
                b"7;ext=1\r\n world!\r\n0\r\n\r\n")
    assert reader.next_head().headers == {"transfer-encoding": "chunked"}
    assert body_of(reader) == b"hello world!"
    reader.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n")
    reader.next_head()
    with pytest.raises(RemoteProtocolError, match="trailers"):
        body_of(reader)


@pytest.mark.parametrize("version, connection, keep", [
    (b"HTTP/1.1", b"", True), (b"HTTP/1.1", b"Connection: close\r\n", False),
    (b"HTTP/1.0", b"", False), (b"HTTP/1.0", b"Connection: Keep-Alive\r\n", True)])
def test_keep_alive_follows_the_version_and_connection_header(version, connection, keep):
    reader = MessageReader()
    reader.feed(b"GET / " + version + b"\r\n" + connection + b"\r\n")
    assert reader.next_head().keep_alive is keep


@pytest.mark.parametrize("head, match", [
    (b"GET /v1/health\r\n\r\n", "HTTP/0.9"),
    (b"GET v1/health HTTP/1.1\r\n\r\n", "url schema"),
    (b"GET http://x/v1/health HTTP/1.1\r\n\r\n", "bad request line"),
    (b"GET /v1/health HTTP/2.0\r\n\r\n", "bad request line"),
    (b"G(T /v1/health HTTP/1.1\r\n\r\n", "method"),
    (b"GET /a\x00b HTTP/1.1\r\n\r\n", "URL|url"),
    (b"GET / HTTP/1.1\nHost: x\n\n", "CRLF|LF"),
    (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", "header token"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", "whitespace"),
    (b"GET / HTTP/1.1\r\nNoColon\r\n\r\n", "header token"),
    (b"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", "header value char"),
    (b"GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", "header value char"),
    (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "Duplicate"),
    (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", "Duplicate"),
    (b"POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n", "Content-Length"),
    (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
    (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
     "Transfer-Encoding can't be present with Content-Length"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
     "Content-Length can't be present with Transfer-Encoding"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", "Transfer-Encoding"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "only chunked"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", "chunk size"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 17 + b"\r\n",
     "Chunk size overflow"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY", "after chunk data"),
    (b"GET / HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", "upgrades"),
    (b"CONNECT x:1 HTTP/1.1\r\n\r\n", "upgrades|CONNECT"),
])
def test_broken_requests_are_named(head, match):
    reader = MessageReader()
    reader.feed(head)
    with pytest.raises(RemoteProtocolError, match=match):
        reader.next_head()
        body_of(reader)
    reader.feed(b"GET / HTTP/1.1\r\n\r\n")  # nothing after the error is parsed
    with pytest.raises(RemoteProtocolError, match=match):
        reader.next_head()


def test_the_requests_before_a_broken_one_are_handed_out_first():
    reader = MessageReader()
    reader.feed(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nX:\x01\r\n\r\n")
    assert reader.next_head().path == "/a"
    with pytest.raises(RemoteProtocolError):
        reader.next_head()


def test_heads_past_the_bounds_are_too_large():
    lines = b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADERS + 1))
    for head, match in ((b"GET / HTTP/1.1\r\n" + lines + b"\r\n", "header lines"),
                        (b"GET / HTTP/1.1\r\nX: " + b"y" * MAX_LINE + b"\r\n\r\n",
                         "header line of"),
                        (b"GET /" + b"a" * MAX_LINE + b" HTTP/1.1\r\n\r\n", "request target")):
        reader = MessageReader()
        reader.feed(head)
        with pytest.raises(HeadTooLarge, match=match):
            reader.next_head()


def test_the_head_bound_is_exact_up_to_the_piece_it_began_in():
    # A head of MAX_HEAD bytes (lines of MAX_LINE) is read, fed in any pieces.
    line = b"X: " + b"y" * (MAX_LINE - 8) + b"\r\n"
    start = b"GET / HTTP/1.1\r\n"
    count = (MAX_HEAD - len(start) - 2) // len(line)
    head = start + line * count + b"\r\n"
    assert MAX_HEAD - len(line) < len(head) <= MAX_HEAD
    for piece in (1000, 65536):
        reader = MessageReader()
        for offset in range(0, len(head), piece):
            reader.feed(head[offset:offset + piece])
        assert len(reader.next_head().headers["x"]) > MAX_HEAD - 2 * len(line)
    # One that never ends is refused once MAX_HEAD bytes came after its first piece.
    reader = MessageReader()
    reader.feed(start)
    fed = 0
    with pytest.raises(HeadTooLarge, match="request head longer than"):
        while reader.next_head() is None:
            reader.feed(line)
            fed += len(line)
    assert MAX_HEAD < fed <= MAX_HEAD + len(line)


def test_responses():
    reader = MessageReader(response=True)
    reader.feed(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
    assert reader.next_head() == ResponseHead(413, {"content-length": "3"})
    assert body_of(reader) == b"abc"
    assert reader.next_head().status == 200 and body_of(reader) == b"ok"
    for bad, match in ((b"SMTP ready\r\n\r\n", "HTTP|status|version|method"),
                       (b"HTTP/1.1 200 OK\r\n\r\nuntil close", "neither Content-Length")):
        reader = MessageReader(response=True)
        reader.feed(bad)
        with pytest.raises(RemoteProtocolError, match=match):
            reader.next_head()
