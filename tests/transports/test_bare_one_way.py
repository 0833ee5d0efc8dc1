"""One-way calls over the bare same-host protocol (``bare.ONE_WAY``): written whole, never
answered; a failure goes to the handler's ``one_way_failed``; a connection is not closed with a
one-way call unread (its reading is shut first: the writer's later calls fail, EPIPE, and are
made again on a fresh connection). Real Unix sockets on this host.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket

import numpy as np
import pytest
import trio
import trio.testing
from transport_fakes import FakeWorker

from transports.http import bare, bare_io, same_host
from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server
from transports.messages import Health, PushTensors, RemoteCallError, TensorEntry
from transports.service import RPCS, TransportDeadlineExceeded
from transports.wire import encode

KEY = "/job:ps/replica:0/task:0/device:CPU:0;1;/job:w/replica:0/task:0/device:CPU:0;t;0:0"


class _Pushes(FakeWorker):
    """Takes pushes (refuses those of step 0) and records the one-way failures."""

    def __init__(self) -> None:
        super().__init__()
        self.pushed: list[int] = []
        self.failed: list[tuple] = []

    async def push_tensors(self, request: PushTensors) -> None:
        if request.step_id == 0:
            raise RemoteCallError("INVALID_ARGUMENT", f"step 0: key {request.tensors[0].key}")
        await trio.lowlevel.checkpoint()
        self.pushed.append(request.step_id)

    def one_way_failed(self, method, fields, error) -> None:
        self.failed.append((method, None if fields is None else fields["step_id"], error.code,
                            error.message))


@contextlib.asynccontextmanager
async def _one_pushed(worker):
    """A server of ``worker`` and a channel that pushed step 7 one way, both idle again:
    (server, channel, value pushed, the server's connection, the channel's)."""
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            channel.one_way = frozenset({"push_tensors"})
            value = np.ones(2, np.float32)
            await channel.push_tensors(PushTensors(7, [TensorEntry(KEY, value)]))
            await trio.testing.wait_all_tasks_blocked()
            (served,) = server._bare._open
            (conn,) = channel._bare_idle
            yield server, channel, value, served, conn


def _shut_as_the_sweep_does(served) -> None:
    served.closing = True  # as ``_sweep_idle`` does
    bare_io.shut_reading(served.stream.socket)
    trio.lowlevel.notify_closing(served.stream.socket)


async def test_a_one_way_call_is_not_answered_and_its_failure_goes_to_the_handler():
    worker = _Pushes()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            channel.one_way = frozenset({"push_tensors"})
            value = np.arange(4, dtype=np.float32)
            for step_id in (5, 0, 6):
                assert await channel.push_tensors(PushTensors(step_id, [
                    TensorEntry(KEY, value)])) is None
            await channel.health()  # answered after the three on the same connection
            stats = server.statistics()
            assert worker.pushed == [5, 6] and stats.one_way_calls == 3
            assert stats.same_host_calls == 4 and channel.bare_calls == 4
            assert len(channel._bare_idle) == 1  # one connection carried them all
            assert worker.failed == [("push_tensors", 0, "INVALID_ARGUMENT", f"step 0: key {KEY}")]
            channel.one_way = frozenset()  # answered: its error comes back to the caller
            with pytest.raises(RemoteCallError, match="step 0"):
                await channel.push_tensors(PushTensors(0, [TensorEntry(KEY, value)]))
            assert len(worker.failed) == 1


async def test_a_one_way_call_to_a_connection_its_server_closed_goes_on_a_fresh_one():
    worker = _Pushes()
    async with _one_pushed(worker) as (server, channel, value, served, conn):
        _shut_as_the_sweep_does(served)  # the server drops it
        await trio.testing.wait_all_tasks_blocked()
        await channel.push_tensors(PushTensors(8, [TensorEntry(KEY, value)]))
        await trio.testing.wait_all_tasks_blocked()
        assert worker.pushed == [7, 8] and channel._bare_idle[0] is not conn


def test_shut_reading_fails_the_writers_next_write_and_keeps_what_came_before():
    # What the idle sweep relies on (Linux Unix stream sockets): once the server shuts its
    # reading, the client's write fails (EPIPE: its call was not sent, it may call again),
    # and the bytes written before can still be read, to be served.
    server, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with server, client:
        client.send(b"before")
        bare_io.shut_reading(server)
        with pytest.raises(OSError) as info:
            client.send(b"after")
        assert info.value.errno == errno.EPIPE
        server.setblocking(False)
        assert bare_io.late_call(server) == b"before"
        assert bare_io.late_call(server) == b""


async def test_every_call_written_before_the_idle_sweep_shut_a_connection_is_served():
    # Two one-way calls queued on an idle connection as the sweep shuts its reading: both
    # were written whole (the client was told nothing), so both are served before it closes.
    worker = _Pushes()
    async with _one_pushed(worker) as (server, channel, value, served, conn):
        for step_id in (8, 9):  # (no checkpoint: the server's task does not run between)
            await channel.push_tensors(PushTensors(step_id, [TensorEntry(KEY, value)]))
        assert channel._bare_idle == [conn]  # both on the connection the server shuts
        _shut_as_the_sweep_does(served)
        await trio.testing.wait_all_tasks_blocked()
        assert worker.pushed == [7, 8, 9] and worker.failed == []
        assert not server._bare._open  # then closed


async def test_calls_read_with_a_damaged_one_way_call_are_reported_dropped():
    # A damaged one-way push and a good one behind it, come in one read: the connection is
    # closed after the damaged one (its end is not to be trusted), so the good one is
    # dropped unread, and the handler is told so (no step id: fields None).
    worker = _Pushes()
    async with open_http_server(worker) as server:
        stream = await trio.open_unix_socket(server.bare_path)
        assert await bare.handshake(stream, None)
        index = next(i for i, rpc in enumerate(RPCS) if rpc.method == "push_tensors")
        calls = []
        for step_id in (11, 12):
            frame = bytearray(b"".join(bytes(b) for b in encode(
                PushTensors(step_id, [TensorEntry(KEY, np.ones(2, np.float32))]))))
            if step_id == 11:
                frame[-8] ^= 0x10  # a bit of the tensor (its checksum then differs)
            calls.append(bare.REQUEST.pack(len(frame), step_id, index, bare.ONE_WAY, 10.0)
                         + bytes(frame))
        await stream.send_all(b"".join(calls))
        assert await stream.receive_some(1024) == b""  # no answer: closed
        await stream.aclose()
        assert worker.pushed == []
        assert [(step_id, code) for _, step_id, code, _ in worker.failed] == [
            (11, "DATA_LOSS"), (None, "UNAVAILABLE")]
        assert "dropped unread" in worker.failed[1][3]


async def test_a_call_queued_behind_a_one_way_call_when_the_sweep_shuts_is_answered():
    # A one-way push and then an answered call written on an idle connection as the sweep
    # shuts its reading: both are served, the answered one unwatched (the shut reading is the
    # server's own, not its client leaving: watched, it would be cancelled unanswered).
    class _SlowHealth(_Pushes):
        async def health(self, request):
            await trio.testing.wait_all_tasks_blocked()  # (every other task runs meanwhile)
            return await super().health(request)

    worker = _SlowHealth()
    async with _one_pushed(worker) as (server, channel, value, served, conn):
        big = np.ones(1 << 15, np.float32)  # (past the first read's 64 KiB)
        await channel.push_tensors(PushTensors(8, [TensorEntry(KEY, big)]))
        frame = b"".join(bytes(b) for b in encode(Health()))
        index = next(i for i, rpc in enumerate(RPCS) if rpc.method == "health")
        os.write(conn.sock.fileno(), bare.REQUEST.pack(len(frame), 99, index, 0, 10.0)
                 + frame)  # (no checkpoint since the push: the server has read neither)
        _shut_as_the_sweep_does(served)
        with trio.fail_after(10):
            await trio.lowlevel.wait_readable(conn.sock)  # (the answer)
        assert worker.pushed == [7, 8]
        answer = os.read(conn.sock.fileno(), 65536)
        assert bare.REPLY.unpack_from(answer)[1:3] == (99, bare.FRAME), answer
        assert server._by_status["health", 200] == 1, dict(server._by_status)


class _Stuck(_Pushes):
    """Its first push's handler waits until ``release`` is set: the server reads nothing more
    on that connection meanwhile, so a large call behind it fills the socket."""

    def __init__(self) -> None:
        super().__init__()
        self.release = trio.Event()

    async def push_tensors(self, request: PushTensors) -> None:
        if not self.pushed:
            await self.release.wait()
        await super().push_tensors(request)


async def test_a_one_way_call_with_a_timeout_enters_no_scope_when_written_at_once(monkeypatch):
    # A push's timeout is kept without a cancel scope of its own (~10 us a call): written
    # whole by one writev, nothing waits. An answered call with a timeout still enters one.
    entered = []
    real = trio.CancelScope

    def counting(*args, **kwargs):
        entered.append(kwargs.get("deadline"))
        return real(*args, **kwargs)

    async with _one_pushed(_Pushes()) as (server, channel, value, served, conn):
        monkeypatch.setattr(trio, "CancelScope", counting)
        assert await channel.push_tensors(PushTensors(8, [TensorEntry(KEY, value)]),
                                          timeout=60.0) is None
        assert entered == [] and channel._bare_idle == [conn]
        channel.one_way = frozenset()
        due = trio.current_time() + 60.0
        await channel.push_tensors(PushTensors(9, [TensorEntry(KEY, value)]), timeout=60.0)
        assert [d for d in entered if d == pytest.approx(due, abs=1)]  # (and its answer's)


@contextlib.asynccontextmanager
async def _behind_a_stuck_push():
    """A channel with one small push (7) answered and its connection pooled, to a worker
    whose handler waits for its ``release``: ``(worker, server, channel, small, big, conn)``
    (``big``: 4 MiB, more than the socket's buffers hold)."""
    worker = _Stuck()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            channel.one_way = frozenset({"push_tensors"})
            small, big = np.ones(2, np.float32), np.ones(1 << 20, np.float32)
            await channel.push_tensors(PushTensors(7, [TensorEntry(KEY, small)]))
            (conn,) = channel._bare_idle
            yield worker, server, channel, small, big, conn


async def test_a_one_way_calls_write_that_must_wait_ends_at_its_timeout(autojump_clock):
    # The server reads nothing behind a push whose handler waits: a 4 MiB push behind it
    # fills the socket, and its write ends at the call's timeout (the connection closed, as
    # any call ended midway), as a scope of its own would end it.
    async with _behind_a_stuck_push() as (worker, server, channel, small, big, conn):
        start = trio.current_time()
        with pytest.raises(TransportDeadlineExceeded,
                           match=f"push_tensors to {server.address} got no answer within "
                                 "5.0 s"), trio.fail_after(100):  # (unbounded: fails)
            await channel.push_tensors(PushTensors(8, [TensorEntry(KEY, big)]),
                                       timeout=5.0)
        assert trio.current_time() - start == pytest.approx(5.0)
        assert conn.sock.fileno() < 0 and not channel._bare_idle and not channel._busy
        worker.release.set()
        await channel.push_tensors(PushTensors(9, [TensorEntry(KEY, small)]), timeout=5.0)
        await trio.testing.wait_all_tasks_blocked()
        assert worker.pushed == [7, 9]  # (8 cut short: its frame's end never came)


async def test_a_one_way_calls_fresh_connection_ends_at_its_timeout(autojump_clock, monkeypatch):
    # Its pooled connection shut by the server, a push with a timeout connects afresh: a
    # handshake that never comes ends at the push's timeout (as the call's own scope ended
    # it), not at the channel's connect_timeout (5 s) with TransportUnavailable.
    worker = _Pushes()
    async with _one_pushed(worker) as (server, channel, value, served, conn):
        _shut_as_the_sweep_does(served)
        await trio.testing.wait_all_tasks_blocked()
        monkeypatch.setattr(bare, "handshake", lambda stream, token: trio.sleep_forever())
        start = trio.current_time()
        with pytest.raises(TransportDeadlineExceeded,
                           match=f"push_tensors to {server.address} got no answer within "
                                 "1.0 s"), trio.fail_after(100):
            await channel.push_tensors(PushTensors(8, [TensorEntry(KEY, value)]), timeout=1.0)
        assert trio.current_time() - start == pytest.approx(1.0)
        assert not channel._bare_idle and not channel._busy


async def test_a_one_way_calls_http_fallback_ends_at_its_timeout(autojump_clock):
    # Its pooled connection shut and the bare socket hanging up on a fresh one, a push with a
    # timeout goes over HTTP, answered there: a handler that never returns ends it at the
    # push's timeout; the next push goes on, over HTTP.
    class _Hangs(_Pushes):
        async def push_tensors(self, request: PushTensors) -> None:
            if request.step_id == 8:
                await trio.sleep_forever()
            await super().push_tensors(request)

    async def hang_up(stream):
        await stream.aclose()

    worker = _Hangs()
    async with _one_pushed(worker) as (server, channel, value, served, conn):
        same_host.unlink(server.bare_path)
        listener, path = same_host.listen(server.port, "bare")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, hang_up, [listener])
            _shut_as_the_sweep_does(served)
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
            with pytest.raises(TransportDeadlineExceeded,
                               match=f"push_tensors to {server.address} got no answer within "
                                     "1.0 s"), trio.fail_after(100):
                await channel.push_tensors(PushTensors(8, [TensorEntry(KEY, value)]),
                                           timeout=1.0)
            assert trio.current_time() - start == pytest.approx(1.0) and not channel._bare
            await channel.push_tensors(PushTensors(9, [TensorEntry(KEY, value)]), timeout=1.0)
            assert worker.pushed == [7, 9]
            nursery.cancel_scope.cancel()
        same_host.unlink(path)


async def test_a_one_way_call_cancelled_mid_write_leaves_its_connection_closed(autojump_clock):
    # An enclosing scope ends a push whose large frame is half written: its connection is
    # closed, not pooled (a frame's end never came: no call may follow it there).
    async with _behind_a_stuck_push() as (worker, server, channel, small, big, conn):
        with trio.move_on_after(2) as cut:
            await channel.push_tensors(PushTensors(8, [TensorEntry(KEY, big)]),
                                       timeout=60.0)
        assert cut.cancelled_caught
        assert conn.sock.fileno() < 0 and not channel._bare_idle and not channel._busy
        worker.release.set()
        await channel.push_tensors(PushTensors(9, [TensorEntry(KEY, small)]), timeout=5.0)
        await trio.testing.wait_all_tasks_blocked()
        assert worker.pushed == [7, 9]
