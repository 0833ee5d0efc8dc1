"""The server notices a client leaving while its handler runs (transports.http.disconnect):
a FIN or a reset cancels the handler, a pipelined request does not, and without epoll the
per-call watcher task does the same. Real server on 127.0.0.1; every wait is bounded."""

from __future__ import annotations

import socket
import struct

import pytest
import trio
import trio.testing
from transport_fakes import FakeWorker

from transports.http import disconnect
from transports import wire
from transports.http.disconnect import DisconnectMonitor
from transports.http.server import open_http_server
from transports.wire import encode

GENEROUS = 20
HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"


def waiting_recv() -> bytes:
    body = b"".join(encode(wire.RecvTensors(5, ["never"])))
    return (b"POST /v1/steps/5/recv HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
            % len(body) + body)


async def start_waiting_call(server):
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    await stream.send_all(waiting_recv())
    await server.worker.waiter_arrived.wait()
    return stream


@pytest.fixture(params=["epoll", "watcher task"])
async def server(request, monkeypatch):
    if request.param == "watcher task":
        monkeypatch.setattr(disconnect, "_EPOLL", None)
    worker = FakeWorker()
    async with open_http_server(worker) as running:
        running.worker = worker
        yield running


async def test_a_client_that_closes_cancels_its_waiting_handler(server):
    with trio.fail_after(GENEROUS):
        stream = await start_waiting_call(server)
        await stream.aclose()
        await server.worker.recv_cancelled.wait()
        assert server.worker.waiting == 0


async def test_a_client_that_resets_cancels_its_waiting_handler(server):
    with trio.fail_after(GENEROUS):
        stream = await start_waiting_call(server)
        stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()  # with SO_LINGER 0: a reset, not a FIN
        await server.worker.recv_cancelled.wait()


async def test_a_pipelined_request_behind_a_waiting_call_does_not_cancel_it(server):
    with trio.fail_after(GENEROUS):
        stream = await start_waiting_call(server)
        async with stream:
            await stream.send_all(HEALTH)  # read only once the waiting call is answered
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(0.05)  # time for the server to have seen the bytes
            assert not server.worker.recv_cancelled.is_set() and server.worker.waiting == 1
            step = server.worker._step(5)
            step.tensors["never"] = wire.TensorEntry("never", None)
            step.changed.set()
            answers = b""
            while answers.count(b"HTTP/1.1 200") < 2:
                data = await stream.receive_some()
                assert data, answers
                answers += data
    assert not server.worker.recv_cancelled.is_set()


async def test_calls_answered_normally_leave_nothing_watched(server):
    with trio.fail_after(GENEROUS):
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            for _ in range(3):
                await stream.send_all(HEALTH)
                data = b""
                while b"\r\n\r\n" not in data:
                    data += await stream.receive_some()
    assert server._monitor._watched == {}


async def test_the_monitor_cancels_only_the_call_whose_client_left():
    monitor = DisconnectMonitor()
    if not monitor.available:
        pytest.skip("no epoll on this platform")
    left, stays = socket.socketpair(), socket.socketpair()
    with left[0], left[1], stays[0], stays[1]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(monitor.run)
            scopes = [trio.CancelScope(), trio.CancelScope()]
            watched = [trio.socket.from_stdlib_socket(ours) for ours, _ in (left, stays)]
            for sock, scope in zip(watched, scopes):
                assert monitor.watch(sock, scope)
            left[1].close()
            with trio.fail_after(GENEROUS):
                while not scopes[0].cancel_called:
                    await trio.sleep(0.01)
            assert not scopes[1].cancel_called and monitor.cancelled == 1
            nursery.cancel_scope.cancel()


async def test_watch_and_attach_share_one_registration_and_its_answers():
    # One implementation (``DisconnectMonitor._register``) for both: a per-call watch and a
    # connection's attach each put the fd in the epoll set once, with their own events and
    # table; once the monitor closed, a watch says True (its call is being cancelled anyway)
    # and an attach False, neither registering; without epoll both say False.
    monitor = DisconnectMonitor()
    if not monitor.available:
        pytest.skip("no epoll on this platform")
    pairs = [socket.socketpair() for _ in range(4)]
    try:
        sockets = [trio.socket.from_stdlib_socket(ours) for ours, _ in pairs]
        scope = trio.CancelScope()
        assert monitor.watch(sockets[0], scope) and monitor.attach(sockets[1])
        assert monitor._watched == {sockets[0].fileno(): scope}
        assert monitor._attached == {sockets[1].fileno(): None}
        for sock in sockets[:2]:  # in the set already: a second registration is refused
            with pytest.raises(FileExistsError):
                monitor._epoll.register(sock.fileno())
        monitor.unwatch(sockets[0])
        monitor.detach(sockets[1])
        assert monitor._watched == {} and monitor._attached == {}
        monitor._closed = True
        assert monitor.watch(sockets[2], scope) is True and monitor.attach(sockets[3]) is False
        assert monitor._watched == {} and monitor._attached == {}
        for sock in sockets[2:]:  # (not registered: they may be)
            monitor._epoll.register(sock.fileno())
        bare = DisconnectMonitor()
        bare._epoll.close()
        bare._epoll = None
        assert bare.watch(sockets[2], scope) is False and bare.attach(sockets[3]) is False
        assert not bare.available
    finally:
        monitor._epoll.close()
        for ours, theirs in pairs:
            ours.close()
            theirs.close()
