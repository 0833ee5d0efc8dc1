"""HTTP/1.1 conformance of a real ``asyncflow worker`` process (its framing is llhttp's).

One worker (the real CLI, ``killable_workers.WorkerProcess``) for the module; every case is raw
bytes on fresh loopback connections and checks the answers, read with the client's own
:class:`~transports.http.framing.MessageReader`: request smuggling forms (``Content-Length``
with ``Transfer-Encoding``, two ``Content-Length`` s, bad chunk sizes, obs-fold, bare LF),
pipelining, HTTP/1.0, ``Expect: 100-continue``, bad and oversized heads, a chunked body.
After each case the worker still answers Health on a new connection. Socket waits are bounded.
"""
from __future__ import annotations

import socket

import pytest

from killable_workers import WorkerProcess
from test_hostile_input import frame
from transports import wire
from transports.http.framing import MAX_HEAD, MessageReader

TIMEOUT_S = 20.0
HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: w\r\n\r\n"
ABORT = frame(wire.AbortStep(5, "CANCELLED", "conformance"))
ABORT_HEAD = b"POST /v1/steps/5/abort HTTP/1.1\r\nHost: w\r\n"


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    process = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0,
                            data_dir=tmp_path_factory.mktemp("data")).start()
    yield process
    process.kill()


class Conversation:
    """A raw connection to the worker; answers are read with the client's framing."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.reader = MessageReader(response=True)

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _feed(self) -> None:
        data = self.sock.recv(1 << 16)
        assert data, "the worker closed the connection before the end of an answer"
        self.reader.feed(data)

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        while (head := self.reader.next_head()) is None:
            self._feed()
        body, view = bytearray(), memoryview(bytearray(1 << 16))
        while (n := self.reader.read_body(view)) != 0:
            if n is None:
                self._feed()
            else:
                body += view[:n]
        return head.status, head.headers, bytes(body)

    def closed(self) -> bool:
        """Whether the worker closed the connection (after what was read)."""
        try:
            return self.sock.recv(1) == b"" and not self.reader.pending
        except ConnectionResetError:
            return True


def still_serving(address: str) -> None:
    with Conversation(address) as conversation:
        conversation.send(HEALTH)
        status, _, body = conversation.answer()
    assert status == 200 and isinstance(wire.decode(body), wire.HealthReply)


@pytest.mark.parametrize("request_bytes, status, text", [
    (ABORT_HEAD + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(ABORT) + ABORT,
     400, b"Transfer-Encoding can't be present with Content-Length"),
    (ABORT_HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", 400,
     b"Content-Length can't be present with Transfer-Encoding"),
    (ABORT_HEAD + b"Content-Length: %d\r\nContent-Length: 1\r\n\r\n" % len(ABORT) + ABORT, 400,
     b"Duplicate Content-Length"),
    (ABORT_HEAD + b"Content-Length: 1, %d\r\n\r\n" % len(ABORT) + ABORT, 400,
     b"Invalid character in Content-Length"),
    (ABORT_HEAD + b"Transfer-Encoding: chunked\r\n\r\n-10\r\n" + ABORT, 400,
     b"Invalid character in chunk size"),
    (ABORT_HEAD + b"Transfer-Encoding: chunked\r\n\r\n1" + b"0" * 16 + b"\r\n" + ABORT, 400,
     b"Chunk size overflow"),
    (ABORT_HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(ABORT) + ABORT + b"XX0\r\n\r\n",
     400, b"Expected LF after chunk data"),
    (ABORT_HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400, b"only chunked"),
    (b"GET /v1/health HTTP/1.1\r\nHost: w\r\n folded: x\r\n\r\n", 400,
     b"Unexpected whitespace after header value"),
    (b"GET /v1/health HTTP/1.1\nHost: w\n\n", 400, b"CRLF"),
    (b"GET /v1/health HTTP/1.1\r\nHost : w\r\n\r\n", 400, b"Invalid header token"),
    (b"GET /v1/health HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400, b"Invalid header value char"),
    (b"GET http://w/v1/health HTTP/1.1\r\n\r\n", 400, b"bad request line"),
    (b"GET /v1/health HTTP/2.0\r\n\r\n", 400, b"bad request line"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, b"Invalid method"),
    (b"GET /v1/health HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", 400,
     b"upgrades"),
    (b"GET /v1/health HTTP/1.1\r\n" + b"X: 1\r\n" * 200 + b"\r\n", 431, b"header lines"),
    (b"GET /v1/health HTTP/1.1\r\nX-Big: " + b"y" * 3 * MAX_HEAD, 431, b"head longer than"),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 431, b"request target longer"),
], ids=["cl_te", "te_cl", "double_cl", "cl_list", "negative_chunk", "chunk_overflow",
        "chunk_without_crlf", "te_gzip", "obs_fold", "bare_lf", "space_before_colon",
        "control_char", "absolute_form", "http2_version", "tls_hello", "upgrade",
        "too_many_headers", "head_too_long", "target_too_long"])
def test_smuggling_forms_and_bad_heads_are_refused_and_the_worker_keeps_serving(
        worker, request_bytes, status, text):
    with Conversation(worker.address) as conversation:
        try:
            conversation.send(request_bytes)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before all of it was read: the answer is still there
        got, headers, body = conversation.answer()
        assert (got, headers.get("connection")) == (status, "close") and text in body, body
        assert conversation.closed()
    still_serving(worker.address)


def test_pipelined_requests_are_answered_in_order(worker):
    abort = ABORT_HEAD + b"Content-Length: %d\r\n\r\n" % len(ABORT) + ABORT
    chunked = (ABORT_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"7\r\n" + ABORT[:7]
               + b"\r\n%x;ext=1\r\n" % (len(ABORT) - 7) + ABORT[7:] + b"\r\n0\r\n\r\n")
    with Conversation(worker.address) as conversation:
        # Three requests in one write; a stray CRLF between two of them is allowed.
        conversation.send(HEALTH + abort + b"\r\n" + chunked + HEALTH)
        kinds = []
        for _ in range(4):
            status, headers, body = conversation.answer()
            assert status == 200 and "connection" not in headers, body
            kinds.append(type(wire.decode(body)).__name__)
        assert kinds == ["HealthReply", "Ack", "Ack", "HealthReply"]
        conversation.send(HEALTH)  # and the connection is still open
        assert conversation.answer()[0] == 200


def test_http_1_0_is_answered_and_closed_keep_alive_1_0_stays(worker):
    with Conversation(worker.address) as conversation:
        conversation.send(b"GET /v1/health HTTP/1.0\r\n\r\n")
        status, headers, body = conversation.answer()
        assert (status, headers["connection"]) == (200, "close")
        assert isinstance(wire.decode(body), wire.HealthReply) and conversation.closed()
    with Conversation(worker.address) as conversation:
        for _ in range(2):
            conversation.send(b"GET /v1/health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            assert conversation.answer()[0] == 200


def test_expect_100_continue_comes_before_the_body_is_sent(worker):
    with Conversation(worker.address) as conversation:
        conversation.send(ABORT_HEAD + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                          % len(ABORT))
        assert conversation.answer()[0] == 100
        conversation.send(ABORT)
        status, _, body = conversation.answer()
        assert status == 200 and isinstance(wire.decode(body), wire.Ack)
    # A body too large for the limits is refused before it is asked for.
    with Conversation(worker.address) as conversation:
        conversation.send(ABORT_HEAD + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                          % (1 << 60))
        status, headers, body = conversation.answer()
        assert (status, headers["connection"]) == (413, "close") and b"exceeds" in body
    still_serving(worker.address)


def test_a_body_dripped_a_byte_at_a_time_is_served(worker):
    data = ABORT_HEAD + b"Content-Length: %d\r\n\r\n" % len(ABORT) + ABORT
    with Conversation(worker.address) as conversation:
        conversation.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for index in range(len(data)):
            conversation.send(data[index:index + 1])
        status, _, body = conversation.answer()
    assert status == 200 and isinstance(wire.decode(body), wire.Ack)
