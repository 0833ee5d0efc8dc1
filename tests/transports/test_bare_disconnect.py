"""A bare same-host connection is watched for its client leaving once, for its whole life
(``DisconnectMonitor.attach``), not registered per call: a client that leaves in the middle of
any call on it (the first, or one after many) cancels that handler, a client that leaves between
calls or shuts its side behind a request is judged when the next call starts, and every
connection is let go of when it closes."""

from __future__ import annotations

import socket
import struct

import pytest
import trio
from transport_fakes import FakeWorker

from transports.http import bare
from transports.http.client import TrioHttpChannel
from transports.http.disconnect import DisconnectMonitor
from transports.http.server import open_http_server
from transports.messages import ErrorReply, Health, RecvTensors
from transports.service import RPCS
from transports.wire import Decoder, encode

GENEROUS = 20
_INDEX = {rpc.method: index for index, rpc in enumerate(RPCS)}


def _request(method: str, message, call_id: int = 1, timeout: float = 60.0) -> bytes:
    frame = b"".join(bytes(b) for b in encode(message))
    return bare.REQUEST.pack(len(frame), call_id, _INDEX[method], 0, timeout) + frame


async def _settled(server) -> None:
    """Until the server has closed every connection (bounded by the caller's deadline)."""
    while server._guard.connections:
        await trio.sleep(0.01)


async def test_a_client_that_leaves_after_many_calls_cancels_the_one_in_flight():
    worker = FakeWorker()
    async with open_http_server(worker) as server:
        monitor = server._monitor
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(server.address) as channel:
                for _ in range(5):
                    assert (await channel.health()).incarnation == 7
                assert len(monitor._attached) == 1  # attached once, for the connection
                assert list(monitor._attached.values()) == [None]  # no call in flight
                with trio.move_on_after(0.2):
                    await channel.recv_tensors(RecvTensors(1, ["never"]))
                await worker.recv_cancelled.wait()
                assert channel.bare_calls == 5  # the sixth was cut off, its connection closed
                assert monitor.cancelled == 1
                assert (await channel.health()).incarnation == 7  # on a new connection
            await _settled(server)
        assert monitor._attached == {} and monitor._fired == {} and monitor._watched == {}


@pytest.mark.parametrize("first", [True, False])
async def test_a_request_followed_by_the_clients_end_of_stream_is_cancelled(first):
    """The per-call registration cancelled such a call (shut, nothing queued); so does the
    connection's one-shot watch, whether it fires before the call starts or during it."""
    worker = FakeWorker()
    async with open_http_server(worker) as server:
        with trio.fail_after(GENEROUS):
            stream = await trio.open_unix_socket(server.bare_path)
            async with stream:
                await stream.send_all(bare.MAGIC + struct.pack("<I", 0))
                assert await stream.receive_some(1) == bare.ACCEPTED
                if not first:  # a call answered on it before
                    await stream.send_all(_request("health", Health(), call_id=1))
                    head = b""
                    while len(head) < bare.REPLY.size:
                        head += await stream.receive_some(65536)
                    length = bare.REPLY.unpack_from(head)[0]
                    while len(head) < bare.REPLY.size + length:
                        head += await stream.receive_some(65536)
                await stream.send_all(_request("recv_tensors", RecvTensors(1, ["never"]), 2))
                stream.socket.shutdown(socket.SHUT_WR)
                await worker.recv_cancelled.wait()
                answer = b""
                while data := await stream.receive_some(65536):
                    answer += data
            length, call_id, kind, _ = bare.REPLY.unpack_from(answer)
            assert (call_id, kind) == (2, bare.ERROR)
            decoder = Decoder()
            decoder.receive_data(answer[bare.REPLY.size:bare.REPLY.size + length])
            reply = decoder.next_event()
            assert isinstance(reply, ErrorReply) and reply.code == "CANCELLED"
            await _settled(server)
        assert server._monitor._attached == {} and server._monitor._fired == {}
        async with TrioHttpChannel(server.address) as channel:  # and it serves on
            with trio.fail_after(GENEROUS):
                assert (await channel.health()).incarnation == 7


async def test_a_call_on_a_connection_whose_client_reset_it_is_cancelled_at_its_start():
    monitor = DisconnectMonitor()
    if not monitor.available:
        pytest.skip("no epoll on this platform")
    a, b = socket.socketpair()
    try:
        class Sock:
            def fileno(self):
                return a.fileno()

        assert monitor.attach(Sock())
        monitor._fired[a.fileno()] = 0  # fired between calls: shut, with nothing queued
        scope = trio.CancelScope()
        monitor.call_started(a.fileno(), scope)
        assert scope.cancel_called and monitor.cancelled == 1
        b.send(b"x")  # bytes queued: a shut behind a request is not a leave
        monitor._fired[a.fileno()] = 0
        kept = trio.CancelScope()
        monitor.call_started(a.fileno(), kept)
        assert not kept.cancel_called and monitor.cancelled == 1
        monitor.detach(Sock())
        assert monitor._attached == {} and monitor._fired == {}
    finally:
        a.close()
        b.close()
        monitor._epoll.close()
