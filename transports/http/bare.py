"""The same-host call protocol without HTTP: one bare frame per call on a Unix socket.

Why
---
A trivial distributed step spent ~110 us of CPU per side in the HTTP request/response machinery
(heads formatted and parsed, routes, cancel scopes, the disconnect watch, counters), where a bare
trio round trip over the same Unix socket costs ~21 us (``bench/bench_step_floor.py``). Between
two processes of one user on one host none of HTTP's generality is needed.

How
---
A worker server that has a same-host Unix socket (:mod:`transports.http.same_host`) listens on
a second one beside it, ``bare-<port>-net<namespace>.sock`` (same private directory, mode 0600;
see :func:`transports.http.same_host.socket_path`). A client channel to a loopback address
connects there first; when there is none (an older server,
``ASYNCFLOW_SAME_HOST=0`` on either side) it takes the HTTP path (Unix socket, then TCP) and
stays on it; a server that hangs up at the handshake (at its connection limit, or closing) is
spoken to over HTTP for a doubling back-off, then the bare socket is tried again
(:mod:`transports.http.client`). On a connection:

* **Handshake**, once: the client sends :data:`MAGIC`, a u32 length and the token (empty when
  none); the server compares it in constant time (as the HTTP server compares the bearer token)
  and answers one byte: :data:`ACCEPTED`, or :data:`REFUSED` and closes (the client raises
  ``UNAUTHENTICATED``). Anything else, or nothing within the header timeout, is closed.
* **A call** is :data:`REQUEST` (frame length, call id, the index of the rpc in
  :data:`transports.service.RPCS`, flags, the call's timeout in seconds, ``inf`` for none)
  followed by the request's :mod:`transports.wire` frame, checksums as on any path; the answer
  is :data:`REPLY` (length, the same call id, kind, flags) and one frame: the reply, an
  ``ErrorReply``, or (:data:`LENT`, asked for with the :data:`LEND` flag) a lent body of
  :mod:`transports.http.cross_memory`, the client's one-byte verdict and, when refused, the
  plain frame. One call at a time per connection; the client pools connections.

The server keeps what the HTTP server enforces: the connection guard and its timeouts (idle,
header, body; a client that reads no answer is dropped; the idle one by one sweep task, so that
waiting for a call costs no deadline: see ``BareService._sweep_idle``), the codec's frame
limits (a frame over ``max_frame_bytes`` is refused before a byte of it is read), a cancel
scope for each call's run that carries its deadline and is cancelled when the client leaves
(:class:`~transports.http.disconnect.DisconnectMonitor`, the connection attached to it once, not
per call) or the server closes (one scope for a connection's calls, entered again only after a
call was cancelled: :mod:`transports.http.call_scope`), and the same counters (requests by route and status, bytes,
in flight; ``same_host_calls`` counts these calls; a call's run in the scope, and the short path
of a prepared plain step's RunGraph, ``short_steps``: :mod:`transports.http.bare_calls`). Garbage (a wrong magic, a bad header, an
unknown rpc, a broken frame) gets an ``ErrorReply`` where the connection can still be read, and
is closed; the server serves on.

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import math
import os
import struct
from typing import Any, Final

import trio

from transports.http import bare_io as _bare_io, bulk_io, cross_memory
from transports.http.bare_io import CALLS as _CALLS, RECV as _RECV, RequestBody as _Body, \
    ServerConnection as _Connection, late_call as _late_call, one_way_failed as _one_way_failed, \
    prepared_reply as _reply, read_once as _read, read_whole as _read_whole, \
    reads_whole as _reads_whole, shut_reading as _shut_reading, \
    small_pieces as _small_pieces, write_now as _write_now, write_one as _write_one, \
    write_request as _write_request
from transports.http.bare_calls import answer as _answer, answer_step as _answer_step, \
    step_answer as _step_answer, step_reply as _step_reply, take_step as _take_step
from transports.http.body import BodyTimeout, PeerGone, read_frame
from transports.http.call_scope import step_preparer
from transports.http.bulk_io import BULK_BYTES, BulkReader
from transports.http.protocol import HTTP_STATUS, send_pieces, take_one_frame, \
    the_frame
from transports.messages import ErrorReply, Message, RemoteCallError
from transports.frame_templates import COPIED as _STEP_BYTES
from transports.service import RPCS, Rpc, TransportDeadlineExceeded, TransportUnavailable, \
    error_reply_for
from transports.wire import SMALL_HEADER_BYTES, ChecksumMismatch, Decoder, \
    FrameTooLarge, Limits, LocalProtocolError, RemoteProtocolError, decode_repeated, encode, \
    frame_size

__all__ = ["ACCEPTED", "MAGIC", "REFUSED", "REPLY", "REQUEST", "BareConnection", "BareService",
           "handshake"]

MAGIC: Final = b"AFBARE01"
ACCEPTED: Final = b"K"
REFUSED: Final = b"T"
MAX_TOKEN: Final = 4096
REQUEST: Final = struct.Struct("<QIHHd")  # frame length, call id, rpc index, flags, timeout s
REPLY: Final = struct.Struct("<QIHH")  # frame length, call id, kind, flags
LEND: Final = 1  # request flag: large reply segments may be lent (cross_memory)
ONE_WAY: Final = 2  # request flag: no answer is sent (its failure goes to the handler's hook)
FRAME, ERROR, LENT = 0, 1, 2  # reply kinds
_TOKEN_LENGTH: Final = struct.Struct("<I")
_MIN_SWEEP_S: Final = 0.01  # the idle sweep's shortest period (an idle timeout of 0 or near)
_BROKEN: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class _Garbage(Exception):
    """What the client sent breaks the protocol: answered (when it can be) and closed."""


# ------------------------------------------------------------------------------ the server's half


class BareService:
    """The bare protocol's half of an :class:`~transports.http.server.HttpServer`: it serves
    the connections of the server's bare same-host socket with the server's handler, token,
    limits, guard, disconnect monitor and counters."""

    def __init__(self, server: Any) -> None:
        self._server = server
        self.calls = 0
        self.one_way_calls = 0  # calls of them that were not answered (``ONE_WAY``)
        self.short_steps = 0  # RunGraphs of them taken by the short path (``bare_calls``)
        self._open: set[_Connection] = set()  # connections past admission, not yet closed
        self._sweeping = False  # the idle sweep's task runs (started with the first connection)
        self._sweep_wake: trio.Event | None = None  # set when the parked sweep must look again
        self.sweeps = 0  # times the idle sweep looked at the connections

    async def serve_connection(self, stream: trio.SocketStream) -> None:
        server = self._server
        guard, limits = server._guard, server._connection_limits
        conn = _Connection(stream, trio.current_time())
        if server._closing or not guard.admit(conn):
            stream.socket.close()
            return
        if not self._sweeping and limits.idle_timeout_s < math.inf:
            self._sweeping = True
            server._connections.start_soon(self._sweep_idle, limits.idle_timeout_s)
        self._open.add(conn)
        attached = False
        try:
            with conn.scope:
                if await self._handshake(conn, limits.header_timeout_s):
                    # watched for its client leaving for its whole life, not per call
                    attached = server._monitor.attach(stream.socket)
                    while not server._closing and await self._serve_calls(conn, limits):
                        pass
        except (*_BROKEN, PeerGone):
            pass  # the client went away
        finally:
            self._open.discard(conn)
            if attached:
                server._monitor.detach(stream.socket)
            if conn.scope.cancelled_caught and conn in guard.connections:
                guard.timed_out += 1
            guard.closed(conn)
            stream.socket.close()

    async def _sweep_idle(self, idle_timeout: float) -> None:
        """Close the connections that waited ``idle_timeout`` for their next call: one task for
        all of them, so that a call's wait for the next one registers no deadline (two trio
        deadline changes a call). Ends with the server.

        It sleeps until the earliest expiry of a connection waiting now, but no more often than
        every quarter of the timeout, :data:`_MIN_SWEEP_S` at least (so a connection is closed
        less than that late, and thousands of connections cost one pass each such period, not
        one per connection); while none waits it parks until one does (an idle or busy server
        is not woken). A connection is closed by waking its task's read with
        ``ClosedResourceError`` (``notify_closing``): a task already woken by a call's bytes is
        not waiting any more and serves the call."""
        period = max(idle_timeout / 4, _MIN_SWEEP_S)
        while True:
            self.sweeps += 1
            now = trio.current_time()
            earliest = math.inf
            for conn in self._open:  # (no checkpoint in this loop: the set cannot change)
                if conn.waiting:
                    expiry = conn.idle_since + idle_timeout
                    if expiry <= now:
                        conn.closing = True  # (a wait still spinning sees this)
                        _shut_reading(conn.stream.socket)
                        trio.lowlevel.notify_closing(conn.stream.socket)
                    elif expiry < earliest:
                        earliest = expiry
            if earliest == math.inf:  # none waits: until one does
                self._sweep_wake = wake = trio.Event()
                await wake.wait()
            else:
                await trio.sleep_until(max(earliest, now + period))

    async def _handshake(self, conn: _Connection, timeout: float) -> bool:
        deadline = trio.current_time() + timeout  # the whole handshake, from the connection
        start = await conn.receive_exactly(len(MAGIC) + _TOKEN_LENGTH.size, deadline)
        (length,) = _TOKEN_LENGTH.unpack_from(start, len(MAGIC))
        if start[:len(MAGIC)] != MAGIC or length > MAX_TOKEN:
            self._server._by_status["unmatched", 400] += 1
            return False
        offered = await conn.receive_exactly(length, deadline)
        # The HTTP server's check (constant time, the first refusal per peer logged).
        if not self._server._token.admits("same-host", "handshake", (
                "Bearer " + offered.decode("latin-1")) if offered else "", conn):
            self._server._by_status["handshake", 401] += 1
            await self._server._send_all(conn, REFUSED)
            return False
        await self._server._send_all(conn, ACCEPTED)
        return True

    async def _serve_calls(self, conn: _Connection, limits: Any) -> bool:
        """Answer calls in one cancel scope (``conn.calls``) until one is cancelled; returns
        whether the connection carries on (in a fresh scope: a cancelled one is spent). See
        :mod:`transports.http.call_scope`: one scope per run of calls, not per call. A cancelled
        call's answer is sent out of that scope, whole (each wait of its send would raise)."""
        server = self._server
        with trio.CancelScope() as conn.calls:
            while conn.unsent is None:  # (set by a cancelled call: the next gets a fresh scope)
                if server._closing or not await self._serve_call(conn, limits):
                    return False
        try:
            if conn.unsent:  # its answer (none for a one-way call)
                await self._send(conn, *conn.unsent)
        finally:
            conn.active, conn.unsent = False, None
        return not conn.calls.cancelled_caught  # (a Cancelled caught midway: closed)

    async def _serve_call(self, conn: _Connection, limits: Any) -> bool:
        """Answer one call; returns whether the connection carries on."""
        server = self._server
        conn.idle_since = trio.current_time()
        if not conn.pending:  # (one call at a time: the client is still reading our answer)
            conn.waiting = True  # until the idle timeout: ``_sweep_idle`` closes it then
            # (``closing`` stays: its reading shut, every call still read is a late one, not
            # watched for its client leaving, which the shut reading would look like.)
            wake = self._sweep_wake
            if wake is not None:  # the sweep is parked: this connection can expire
                self._sweep_wake = None
                wake.set()
            try:  # (waited for first: nothing can be there yet; a checkpoint every
                # NEXT_CALL_TRIES tries of its spin: ``bare_io``)
                conn.pending = await _read(conn.stream.socket, True, conn, 0,
                                           _bare_io.NEXT_CALL_TRIES)
            except trio.ClosedResourceError:  # the sweep: idle for the idle timeout
                conn.pending = _late_call(conn.stream.socket)  # (written before it shut)
                if not conn.pending:
                    if conn in server._guard.connections:
                        server._guard.timed_out += 1
                    return False
                # (The client's later writes fail: it calls again elsewhere. Its calls written
                # before are served, each in turn; then the shut reading's EOF closes it.)
            finally:
                conn.waiting = False
            if not conn.pending:
                return False  # the client closed an idle connection
        pending = conn.pending
        if len(pending) >= REQUEST.size:  # the usual case: the header came in the first read
            length, call_id, index, flags, timeout = REQUEST.unpack_from(pending)
            conn.pending = pending[REQUEST.size:]
        else:
            head = await conn.receive_exactly(REQUEST.size,
                                              trio.current_time() + limits.header_timeout_s)
            length, call_id, index, flags, timeout = REQUEST.unpack(head)
        conn.active = True
        server._in_flight += 1
        _CALLS.begin(conn)  # (a spin elsewhere in this process sits this call out)
        self.calls += 1
        name, status, keep = "unmatched", 500, True
        message = taken = None
        try:
            try:
                if index >= len(RPCS):
                    raise _Garbage(f"unknown rpc index {index}")
                rpc = RPCS[index]
                name = rpc.method
                if not timeout > 0:
                    raise _Garbage(f"{name}: timeout {timeout} is not positive")
                if index == _RUN_GRAPH and not flags & ONE_WAY and \
                        0 < length <= min(len(conn.pending), _STEP_BYTES):  # (bare_calls.py)
                    prepare = step_preparer(server._handler)
                    if prepare is not None:
                        taken = _take_step(server, conn, length, prepare)
                        self.short_steps += taken is not None
                if taken is None:
                    message = await self._read_request(conn, rpc, length,
                                                       limits.body_timeout_s)
            except PeerGone:
                status = 499  # the client left in the middle of its frame
                raise
            except (_Garbage, RemoteProtocolError, BodyTimeout) as exc:
                message = getattr(exc, "fields", None)  # (a damaged frame: whom it was for)
                keep = False  # the frame's end is unknown or unread: answer, then close
                code = "RESOURCE_EXHAUSTED" if isinstance(exc, FrameTooLarge) else (
                    "UNAVAILABLE" if isinstance(exc, BodyTimeout) else "DATA_LOSS"
                    if isinstance(exc, ChecksumMismatch) else "INVALID_ARGUMENT")
                text = str(exc)  # named by its rpc (once) where the index named one
                what = "" if name == "unmatched" or text.startswith(name) else f" {name}"
                reply, kind = ErrorReply(code, f"same-host call{what}: {text}"), ERROR
            else:
                reply = await (_answer(server, conn, rpc, message, timeout, flags & ONE_WAY)
                               if taken is None else _answer_step(server, conn, taken, timeout))
                kind = ERROR if isinstance(reply, ErrorReply) else FRAME
                if conn.calls.cancel_called:  # spent: the rest out of it (``_serve_calls``)
                    conn.unsent = ()
            if flags & ONE_WAY:  # no answer: a failure is the handler's to report
                self.one_way_calls += 1
                status = 200 if kind == FRAME else HTTP_STATUS[reply.code]
                if kind == ERROR:
                    _one_way_failed(server._handler, name, message, reply)
                    if not keep:  # closed: calls written after it, whose they are unknown
                        _shut_reading(conn.stream.socket)  # (the client's next ones: EPIPE)
                        if conn.pending or _late_call(conn.stream.socket):  # (read, or not)
                            _one_way_failed(server._handler, name, None, ErrorReply(
                                "UNAVAILABLE", f"same-host calls after a broken {name} "
                                "were dropped unread"))
                return keep
            whole = None  # a short step's answer, head and frame in one buffer
            try:
                if type(reply) is list:
                    whole = _step_answer(taken, reply, REPLY.size) \
                        if conn.unsent is None else None
                    buffers = _step_reply(conn, taken, reply, server._limits) \
                        if whole is None else None
                else:
                    buffers = _reply(conn, reply, server._limits) \
                        if kind == FRAME and index == _RUN_GRAPH else encode(
                            reply, server._limits, defer_checksums=kind == FRAME)
            except Exception as exc:  # noqa: BLE001 -- an unsendable reply is INTERNAL
                reply, kind, whole = error_reply_for(exc), ERROR, None
                buffers = encode(reply, server._limits)
            status = 200 if kind == FRAME else HTTP_STATUS[reply.code]
            if whole is not None:  # (16 KiB at most: never lent, ``_send``)
                size = len(whole) - REPLY.size
                REPLY.pack_into(whole, 0, size, call_id, FRAME, 0)
                server._bytes_sent += size
                rest = _write_one(conn.stream.socket, whole)
                if rest:
                    await server._send_all(conn, rest)
                return keep
            if conn.unsent is not None:  # (spent: sent out of it)
                conn.unsent = (call_id, kind, buffers, flags & LEND and kind == FRAME)
                return keep
            await self._send(conn, call_id, kind, buffers, flags & LEND and kind == FRAME)
            return keep
        except _BROKEN:
            status = 499
            raise
        finally:
            server._in_flight -= 1
            _CALLS.end()
            server._by_status[name, status] += 1
            conn.active = conn.unsent is not None  # (an answer still to send: not idle)

    async def _read_request(self, conn: _Connection, rpc: Rpc, length: int,
                            timeout: float) -> Message | None:
        server = self._server
        if length > server._limits.max_frame_bytes:
            raise FrameTooLarge(f"{rpc.method}: frame of {length} bytes exceeds the limit of "
                                f"{server._limits.max_frame_bytes}")
        if rpc.request is None:
            if length:
                raise _Garbage(f"{rpc.method} takes no frame")
            return None
        small = length <= min(len(conn.pending), SMALL_HEADER_BYTES)
        if small or _reads_whole(conn.pending, length):  # whole: decoded at once
            data = memoryview(conn.pending)[:length] if small else \
                await _read_whole(conn, length, timeout)  # (the rest read, whole)
            message = decode_repeated(data, server._limits) if length else None  # (one pass)
            if message is None:
                decoder = Decoder(server._limits)
                if length:
                    decoder.receive_data(data)
                decoder.receive_data(b"")
                message = take_one_frame(decoder, None)
            if small:
                conn.pending = conn.pending[length:]
            server._count_received(length)
            if message is None:
                raise _Garbage(f"{rpc.method}: an empty frame")
        else:
            body = _Body(conn, length, timeout)
            message = await read_frame(body, server._limits, server._decoders,
                                       server._count_received)
            if not body.done:
                raise _Garbage(f"{rpc.method}: the frame ended before its announced length")
        if not isinstance(message, rpc.request):
            raise _Garbage(f"{rpc.method} takes a {rpc.request.__name__} frame, got "
                           f"{type(message).__name__}")
        return message

    async def _send(self, conn: _Connection, call_id: int, kind: int, buffers: list,
                    lend: bool) -> None:
        server = self._server
        size = frame_size(buffers)
        server._bytes_sent += size
        if lend and size >= cross_memory.LEND_BYTES and cross_memory.lendable(buffers):
            timeout = server._connection_limits.body_timeout_s

            async def verdict() -> bytes:
                return await conn.receive(trio.current_time() + timeout)

            def leftover(data: bytes) -> None:
                conn.pending += data

            if await cross_memory.send_lent(
                    buffers, lambda n: REPLY.pack(n, call_id, LENT, 0),
                    lambda data: server._send_all(conn, data), verdict, leftover):
                return
            head = b""  # refused: the plain frame follows
        else:
            head = REPLY.pack(size, call_id, kind, 0)
            pieces = _small_pieces(head, buffers)
            if pieces is not None:  # the usual answer: one writev
                rest = _write_now(conn.stream.socket, pieces)
                if rest:
                    await server._send_all(conn, rest)
                return
        for piece in send_pieces(head, buffers):
            await server._send_all(conn, piece)


_CANCELLED: Final = object()
_RUN_GRAPH: Final = next(i for i, rpc in enumerate(RPCS) if rpc.method == "run_graph")
# ------------------------------------------------------------------------------ the client's half


async def handshake(stream: trio.SocketStream, token: str | None) -> bool:
    """Offer ``token``; True when accepted, False when the peer does not speak the protocol.

    Raises:
        RemoteCallError: UNAUTHENTICATED, the token was refused.
    """
    offered = b"" if token is None else token.encode("ascii")
    await bulk_io.send_all(stream.socket, memoryview(
        MAGIC + _TOKEN_LENGTH.pack(len(offered)) + offered))
    answer = await stream.receive_some(1)
    if answer == REFUSED:
        raise RemoteCallError("UNAUTHENTICATED", "same-host call refused (401): missing or "
                              "wrong token: set ASYNCFLOW_TOKEN on the client to the worker's")
    return answer == ACCEPTED


class BareConnection:
    """A client connection that passed the handshake; one call at a time."""

    __slots__ = ("stream", "sock", "peer", "bulk", "pending", "next_id", "reused", "answered",
                 "midway", "_lent_size", "waited", "warm", "began", "watch", "stall")
    closing = False  # (no idle sweep closes a client's connection: ``read_once``)

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream, self.sock = stream, stream.socket
        self.peer = cross_memory.peer_pid(self.sock)  # the server's pid, for lent replies
        self.bulk = BulkReader(self.sock)
        self.pending = b""
        self.next_id = 0
        self.reused = False  # it carried a complete call before this one
        self.answered = False  # a byte of this call's answer has arrived
        self.midway = False  # a call began and has not returned its reply (cancelled, failed)
        self._lent_size = 0
        self.waited = 0.0  # the recent answers' waits, estimated (``read_once``'s spin rule)
        self.warm = 0  # its waits so far, up to WARM_WAITS (``learn_wait``)
        self.began = -1  # CALLS.began when its last call began (the client's ``_bare_call``)
        self.watch = None  # a scope the answer's next byte is due in (``stall`` s), or None
        self.stall = math.inf  # (the client's channel sets its ``stall_timeout``)

    async def call(self, rpc_index: int, buffers: list | None, timeout: float, lend: bool,
                   limits: Limits, one_way: bool = False, deadline: float = math.inf,
                   decode: Any = decode_repeated) -> tuple[Message | Any, bool | None]:
        """Send one request and read its answer: (the reply, whether it was lent: True copied,
        False refused, None not lent); ``decode(view, limits)`` reads one whole in its first
        read (None: not so; the client's gives a step's fetches). A request the kernel does not
        take at once is written by ``deadline`` (trio time), else TransportDeadlineExceeded.

        Raises:
            RemoteProtocolError: also before anything is sent, when bytes no call asked for
                came after the last answer (a connection left so is not pooled: the client's
                ``_bare_call``); they are never taken for this call's answer.
            LocalProtocolError: the last call on this connection ended midway (cancelled or
                failed: the rest of its answer may still come); nothing is sent.
        """
        if self.midway:
            raise LocalProtocolError("the last call on this connection ended midway (cancelled "
                                     "or failed): it carries no other call")
        if self.pending:
            raise RemoteProtocolError(f"{len(self.pending)} bytes arrived after the last answer "
                                      "and before this call's request (an answer to no call)")
        if one_way and self.reused:  # a connection the server closed: told before sending
            try:
                if not os.read(self.sock.fileno(), _RECV):
                    raise TransportUnavailable("connection closed while idle")
                raise RemoteProtocolError("bytes arrived after the last answer and before "
                                          "this call's request (an answer to no call)")
            except BlockingIOError:
                pass
        self.midway = True
        self.next_id = call_id = (self.next_id + 1) & 0xFFFF_FFFF
        self.answered = False
        size = 0 if buffers is None else frame_size(buffers)
        head = REQUEST.pack(size, call_id, rpc_index, (LEND if lend and self.peer else 0) |
                            (ONE_WAY if one_way else 0), timeout)
        if not await _write_request(self.sock, head, buffers or [], deadline):
            raise TransportDeadlineExceeded("the request was not written by its deadline")
        if one_way:  # written whole: no answer comes
            self.midway = False
            return None, None
        if not self.pending:  # the answer's first bytes: waited for, not tried first
            await self._fill(eager=False)
        pending = self.pending
        if len(pending) >= REPLY.size:  # the usual answer: its head came with the first read
            length, answered_id, kind, _ = REPLY.unpack_from(pending)
            if answered_id != call_id:
                raise RemoteProtocolError(f"answer to call {answered_id} where {call_id} was "
                                          "due")
            if kind in (FRAME, ERROR) and 0 < length <= len(pending) - REPLY.size:  # here
                # whole: a repeated reply's frame decodes in one pass (any other kind is
                # refused by ``_rest``, as a frame the full decoder reads)
                start = REPLY.size
                message = decode(memoryview(pending)[start:start + length], limits)
                if message is not None:
                    self.pending = pending[start + length:]
                    if (kind == ERROR) != isinstance(message, ErrorReply):
                        raise RemoteProtocolError(f"answer of kind {kind} holds a "
                                                  f"{type(message).__name__}")
                    self.midway = False
                    return message, None
        # The rest of the answer, each next byte due within ``stall`` s of the last (a scope
        # only here: the usual answer, whole in its first read, enters none).
        with trio.CancelScope(deadline=trio.current_time() + self.stall) as self.watch:
            try:
                return await self._rest(call_id, limits)
            finally:
                self.watch = None
        raise TransportUnavailable(f"the answer stalled: no byte of it for {self.stall} s")

    async def _rest(self, call_id: int, limits: Limits) -> tuple[Message, bool | None]:
        """``call``'s answer where it did not come whole with its first read."""
        pending, start = self.pending, REPLY.size
        if len(pending) >= start:
            length, answered_id, kind, _ = REPLY.unpack_from(pending)
        else:
            length, answered_id, kind, _ = REPLY.unpack(await self._exactly(REPLY.size))
            pending, start = self.pending, 0
        if answered_id != call_id:
            raise RemoteProtocolError(f"answer to call {answered_id} where {call_id} was due")
        if start:
            self.pending = pending[start:]
        decoder, lent = Decoder(limits), None
        if kind == LENT and self.peer is not None:
            lent = await self._read_lent(decoder, length, limits)
            if lent is False:
                decoder = Decoder(limits)
                length = self._lent_size
                await self._read_frame(decoder, length, limits)
        elif kind in (FRAME, ERROR):
            await self._read_frame(decoder, length, limits)
        else:
            raise RemoteProtocolError(f"unknown answer kind {kind}")
        message = the_frame(decoder, "answer", length)
        if (kind == ERROR) != isinstance(message, ErrorReply):
            raise RemoteProtocolError(f"answer of kind {kind} holds a {type(message).__name__}")
        self.midway = False
        return message, lent

    async def _fill(self, eager: bool = True) -> None:
        if not eager:  # nothing can be there yet: the server has not seen the request run
            data = await _read(self.sock, True, self, 1, _bare_io.ANSWER_TRIES)  # (spinning
            # first where answers come soon and this call is the process's only one at work,
            # a checkpoint every ANSWER_TRIES tries: ``bare_io``)
        else:
            try:  # what is there already costs no scheduler pass
                data = os.read(self.sock.fileno(), _RECV)
            except BlockingIOError:
                data = await _read(self.sock)
        if not data:
            raise TransportUnavailable("connection closed before the answer ended")
        self.answered = True
        if self.watch is not None:
            self.watch.deadline = trio.current_time() + self.stall  # the next byte's due
        self.pending += data

    async def _exactly(self, n: int) -> bytes:
        while len(self.pending) < n:
            await self._fill()
        data, self.pending = self.pending[:n], self.pending[n:]
        return data

    async def _read_into(self, view: memoryview) -> int:
        if self.pending:
            n = min(len(view), len(self.pending))
            view[:n] = self.pending[:n]
            self.pending = self.pending[n:]
            return n
        n = await (self.bulk.receive_into(view) if len(view) >= BULK_BYTES
                   else self.sock.recv_into(view))
        if not n:
            raise TransportUnavailable("connection closed in the middle of the answer")
        if self.watch is not None:
            self.watch.deadline = trio.current_time() + self.stall
        return n

    async def _read_frame(self, decoder: Decoder, length: int, limits: Limits) -> None:
        if not 0 < length <= limits.max_frame_bytes:  # (an empty one: the decoder's end)
            raise RemoteProtocolError(f"answer of {length} bytes: a frame of 1 to "
                                      f"{limits.max_frame_bytes} bytes is due")
        if length <= len(self.pending):  # here whole (a small answer): decoded at once
            decoder.receive_data(memoryview(self.pending)[:length])
            self.pending = self.pending[length:]
            return
        while length:
            try:
                view = decoder.get_buffer()
            except LocalProtocolError:
                return  # the frame broke the protocol: next_event raises it
            n = await self._read_into(view[:length])
            decoder.buffer_updated(n)
            length -= n

    async def _read_lent(self, decoder: Decoder, length: int, limits: Limits) -> bool | None:
        left = length

        async def read_into(view: memoryview) -> int:
            nonlocal left
            if not left:
                return 0
            n = await self._read_into(view[:left])
            left -= n
            return n

        most = limits.max_header_bytes + limits.max_body_bytes + 16 + 68 * (
            limits.max_tensors + 1)
        try:
            copied, self._lent_size = await cross_memory.receive_lent(
                read_into, self.peer, decoder, 3 * limits.max_tensors + 2, most)
        except (EOFError, ValueError) as exc:
            raise RemoteProtocolError(f"lent answer: {exc}") from None
        if copied is None:
            return None
        if left:
            raise RemoteProtocolError("lent answer longer than its records")
        await bulk_io.send_all(self.sock, memoryview(
            cross_memory.COPIED if copied else cross_memory.RESEND))
        return copied
