"""Same-host replies copied from the server's memory (``transports.http.cross_memory``): the bits
arrive intact, checked; a server whose memory cannot be read sends the frame again and the
channel stops asking; the switch turns it off; a peer that answers a lent frame with garbage
loses its connection and the server keeps serving."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import select
import socket
import struct
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import trio

from transports.http import cross_memory, same_host
from transports import wire
from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server

pytestmark = pytest.mark.skipif(not cross_memory.available(),
                                reason="no process_vm_readv on this system")

GENEROUS = 30
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _values():
    """A 24 MiB tensor (lent), a small one (in the body) and a 2 MiB one (lent)."""
    rng = np.random.default_rng(7)
    return [rng.random(6 << 20, dtype=np.float32), np.arange(5, dtype=np.int64),
            rng.integers(0, 255, 2 << 20, dtype=np.uint8)]


class _Holder:
    """Answers RecvTensors with the same three arrays (as a ps answers with a variable)."""

    def __init__(self) -> None:
        self.values = _values()

    async def recv_tensors(self, request: wire.RecvTensors) -> wire.RecvTensorsReply:
        return wire.RecvTensorsReply([wire.TensorEntry(f"t{i}", v)
                                      for i, v in enumerate(self.values)])

    async def health(self, request: wire.Health) -> wire.HealthReply:
        return wire.HealthReply(os.getpid(), "holder", [], wire.WorkerStatistics())


async def _pull(channel):
    with trio.fail_after(GENEROUS):
        reply = await channel.recv_tensors(wire.RecvTensors(1, ["t0", "t1", "t2"]))
    for got, want in zip(reply.tensors, _values()):
        assert got.value.dtype == want.dtype and got.value.tobytes() == want.tobytes()
    return reply


async def test_a_large_reply_is_copied_from_the_servers_memory_intact():
    async with open_http_server(_Holder()) as server:
        async with TrioHttpChannel(server.address, bare=False) as channel:
            for _ in range(3):
                await _pull(channel)
            (conn,) = channel._idle
            assert conn.stream.socket.family == socket.AF_UNIX and conn.peer == os.getpid()
            assert (channel.lent_replies, channel.lent_refused) == (3, 0)
            await channel.health()  # small answers stay plain frames on the same connection
            assert channel.lent_replies == 3


_SERVER = textwrap.dedent("""
    import ctypes, os, sys
    sys.path[:0] = [sys.argv[1], os.path.join(sys.argv[1], "tests", "transports")]
    import trio
    from test_cross_memory import _Holder
    from transports.http.server import open_http_server
    if sys.argv[2] == "private":  # not dumpable: no other process may read this one
        assert ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE
    async def main():
        async with open_http_server(_Holder()) as server:
            print(server.port, flush=True)
            await trio.sleep(120)
    trio.run(main)
""")


class _ServerProcess:
    """A server in a process of its own, stopped (by its pid) on exit."""

    def __init__(self, mode: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", _SERVER, ROOT, mode],
                                        stdout=subprocess.PIPE, text=True)

    def __enter__(self) -> str:
        ready, _, _ = select.select([self.process.stdout], [], [], GENEROUS)
        assert ready, "the server process did not start"
        return f"127.0.0.1:{int(self.process.stdout.readline())}"

    def __exit__(self, *exc_info) -> None:
        self.process.kill()
        self.process.wait(timeout=GENEROUS)
        self.process.stdout.close()


async def test_a_server_in_another_process_lends_its_arrays():
    with _ServerProcess("plain") as address:
        async with TrioHttpChannel(address, bare=False) as channel:
            await _pull(channel)
            await _pull(channel)
            (conn,) = channel._idle
            assert conn.peer not in (None, os.getpid())
            assert (channel.lent_replies, channel.lent_refused) == (2, 0)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may read a process that is not dumpable")
async def test_a_server_that_cannot_be_read_sends_the_frame_again():
    with _ServerProcess("private") as address:
        async with TrioHttpChannel(address) as channel:
            await _pull(channel)  # the copy is refused (EPERM): the plain frame follows
            assert (channel.lent_replies, channel.lent_refused) == (0, 1)
            await _pull(channel)  # then the channel no longer asks
            await channel.health()
            assert (channel.lent_replies, channel.lent_refused) == (0, 1)


async def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("ASYNCFLOW_CROSS_MEMORY", "0")  # (cross_memory.ENV)
    async with open_http_server(_Holder()) as server:
        async with TrioHttpChannel(server.address) as channel:
            await _pull(channel)
            assert (channel.lent_replies, channel.lent_refused) == (0, 0)


async def _raw_lent_call(path: str, verdict: bytes) -> bytes:
    """A RecvTensors asking for a lent answer over the Unix socket; answers ``verdict``."""
    body = b"".join(bytes(b) for b in wire.encode(wire.RecvTensors(1, ["t0"])))
    sock = trio.socket.socket(socket.AF_UNIX)
    await sock.connect(path)
    with sock:
        await sock.send(b"POST /v1/steps/1/recv HTTP/1.1\r\nHost: x\r\nX-Asyncflow-Lend: 1\r\n"
                        b"Content-Type: application/x-asyncflow-frame\r\nContent-Length: "
                        + str(len(body)).encode() + b"\r\n\r\n" + body)
        head = b""
        while b"\r\n\r\n" not in head:
            head += await sock.recv(1 << 16)
        assert cross_memory.CONTENT_TYPE.encode() in head
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        got = len(head.split(b"\r\n\r\n", 1)[1])
        while got < length:
            got += len(await sock.recv(1 << 16))
        await sock.send(verdict)
        return await sock.recv(1 << 16)


async def test_a_bad_verdict_closes_that_connection_and_the_server_keeps_serving():
    async with open_http_server(_Holder()) as server:
        path = same_host.socket_path(server.port)
        with trio.fail_after(GENEROUS):
            assert await _raw_lent_call(path, b"?") == b""  # closed, nothing sent
            async with TrioHttpChannel(server.address) as channel:
                await _pull(channel)
                assert channel.lent_replies == 1


async def _the_clients_request(listener) -> tuple:
    """The first connection that sends a request head, and that head: a connection that ends
    before one is passed over (another server starting on this host probes every socket in the
    same-host directory, this one too, to sweep dead files: ``same_host.listen``)."""
    while True:
        stream, request = await listener.accept(), b""
        while b"\r\n\r\n" not in request:
            data = await stream.receive_some(1 << 16)
            if not data:
                break
            request += data
        else:
            return stream, request
        await stream.aclose()


async def _lending_peer(listener, address: int | None, pid: int, verdicts: list,
                        bad_trailer: bool = False, extra: tuple = (), flags: int = 1) -> None:
    """Answer one RecvTensors with a lent body whose large record points at ``address`` (None:
    the real one) and names ``pid``, lent segments summed (flags 1; 0: not summed, their
    trailers not checked; with ``bad_trailer`` the first trailer is off by one bit); after a RESEND
    verdict, send the plain frame."""
    stream, request = await _the_clients_request(listener)
    async with stream:
        assert b"x-asyncflow-lend: 1" in request.lower()
        values = _values()
        buffers = wire.encode(wire.RecvTensorsReply([wire.TensorEntry(f"t{i}", v)
                                                     for i, v in enumerate(values)]))
        records, in_body = [], []
        for buffer in buffers:
            if len(buffer) >= cross_memory.LEND_BYTES:
                real = np.frombuffer(buffer, np.uint8).ctypes.data
                records.append(struct.pack("<QQ", real if address is None else address,
                                           len(buffer)))
            else:
                records.append(struct.pack("<QQ", 0, len(buffer)))
                in_body.append(bytes(buffer))
                if bad_trailer and len(in_body[-1]) == 4 and len(in_body) == 3:
                    in_body[-1] = bytes([in_body[-1][0] ^ 1]) + in_body[-1][1:]
        records += [struct.pack("<QQ", *record) for record in extra]  # declared, not sent
        body = struct.pack("<III", pid, len(records), flags) + b"".join(records + in_body)
        try:
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: " + cross_memory
                                  .CONTENT_TYPE.encode() + b"\r\nContent-Length: "
                                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        except trio.BrokenResourceError:
            assert extra  # the client refused the body before its end and closed
        if extra:
            return
        verdict = await stream.receive_some(1)
        verdicts.append(verdict)
        if verdict == cross_memory.RESEND:
            await stream.send_all(b"".join(bytes(b) for b in buffers))
        assert await stream.receive_some(1) == b""  # the client closes its channel



@contextlib.asynccontextmanager
async def _lent_channel(*peer_args, **peer_kwargs):
    """A channel to a ``_lending_peer(listener, *peer_args, **peer_kwargs)`` on a same-host
    socket of a reserved port: yields (channel, the peer's nursery, the port); the socket is
    closed and unlinked after the peer's task ends."""
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))
        port = reserved.getsockname()[1]
        listener, path = same_host.listen(port)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(functools.partial(_lending_peer, listener, *peer_args,
                                                     **peer_kwargs))
                async with TrioHttpChannel(f"127.0.0.1:{port}") as channel:
                    yield channel, nursery, port
        finally:
            await listener.aclose()
            same_host.unlink(path)


async def test_a_probe_of_the_peers_socket_before_the_call_is_not_taken_for_the_client():
    """Another server starting meanwhile connects to every same-host socket and hangs up (its
    sweep of dead files): the peer serves the channel's connection, not the probe's (taken for
    the client's, it left the call unanswered: the limits test's flake under -n 2)."""
    extra = ((0, 1),) * 200_000
    async with _lent_channel(None, os.getpid(), [], False, extra) as (channel, _, port):
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(same_host.socket_path(port))
        with pytest.raises(wire.RemoteProtocolError, match="over the limit"):
            with trio.fail_after(GENEROUS):
                await channel.recv_tensors(wire.RecvTensors(1, ["t0"]))


@pytest.mark.parametrize("address, pid", [(None, None), (8, None), (None, 1)],
                         ids=["real", "unmapped-address", "another-pid"])
async def test_a_copy_that_fails_falls_back_to_the_plain_frame(address, pid):
    """EFAULT from the kernel, or a body naming a process that is not the socket's peer: the
    client asks for the frame again and decodes it from the socket, intact."""
    verdicts = []
    async with _lent_channel(address, pid or os.getpid(), verdicts) as (channel, _, _):
        await _pull(channel)
        refused = (address, pid) != (None, None)
        assert (channel.lent_replies, channel.lent_refused) == (int(not refused), int(refused))
        assert channel._lend is not refused
    assert verdicts == [cross_memory.RESEND if refused else cross_memory.COPIED]


async def test_a_checked_lent_segment_that_differs_is_a_checksum_mismatch():
    """With lent segments summed (flag 1), a trailer that does not match the copied bytes fails
    the call as damage, naming the tensor."""
    async with _lent_channel(None, os.getpid(), [], True) as (channel, nursery, _):
        with pytest.raises(wire.ChecksumMismatch, match="t0"):
            await _pull(channel)
        nursery.cancel_scope.cancel()  # (the peer's send was cut short: not its case)


@pytest.mark.parametrize("mode", ["1", "checked"])
async def test_lent_segments_are_summed_only_when_asked(monkeypatch, mode):
    """By default a lent segment's trailer is zeros and not checked; ``checked`` sums both
    sides (the bits arrive intact either way)."""
    monkeypatch.setenv(cross_memory.ENV, mode)
    summed = []
    plain = cross_memory._checksum.extend
    monkeypatch.setattr(cross_memory._checksum, "extend",
                        lambda crc, data: summed.append(len(data)) or plain(crc, data))
    async with open_http_server(_Holder()) as server:
        async with TrioHttpChannel(server.address) as channel:
            await _pull(channel)
            assert channel.lent_replies == 1
    big = sum(n for n in summed if n >= cross_memory.COPY_CHUNK)
    assert big == (2 * ((24 << 20) + (2 << 20)) if mode == "checked" else 0)


@pytest.mark.parametrize("extra, message", [
    (((0, 1),) * 200_000, "lists 2000[0-9]+ buffers, over the limit"),
    (((8, 1 << 62),), "more than a frame within the limits"),
], ids=["records", "bytes"])
async def test_a_lent_body_over_the_limits_is_refused(extra, message):
    """More records than a frame within the limits can have, or more bytes: a protocol error
    naming the server, before anything is copied or allocated."""
    async with _lent_channel(None, os.getpid(), [], False, extra) as (channel, _, port):
        with pytest.raises(wire.RemoteProtocolError,
                           match=f"lent reply from 127.0.0.1:{port}.*{message}"):
            with trio.fail_after(GENEROUS):
                await channel.recv_tensors(wire.RecvTensors(1, ["t0"]))


@pytest.mark.parametrize("parts", [1, 2, 3])
async def test_a_copy_in_parts_on_threads_is_the_same_bytes(parts, monkeypatch):
    """read_remote_parts: every range copied once, none on the event loop's thread, an odd
    length split unevenly; a part the kernel refuses (an unmapped address) gives its errno."""
    source = np.random.default_rng(3).integers(0, 255, (9 << 20) + 7, dtype=np.uint8)
    target = np.zeros_like(source)
    threads, real = set(), cross_memory.read_remote

    def spy(pid, view, address):
        threads.add(threading.get_ident())
        return real(pid, view, address)

    monkeypatch.setattr(cross_memory, "read_remote", spy)
    assert await cross_memory.read_remote_parts(
        os.getpid(), memoryview(target), source.ctypes.data, parts) is None
    assert target.tobytes() == source.tobytes()
    assert len(threads) == parts and threading.get_ident() not in threads
    assert await cross_memory.read_remote_parts(
        os.getpid(), memoryview(target), 8, parts) == errno.EFAULT


def test_copy_threads_follow_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert cross_memory.copy_threads() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert cross_memory.copy_threads() == cross_memory.MAX_COPY_THREADS


@pytest.mark.parametrize("address", [None, 8], ids=["real", "unmapped-address"])
async def test_a_large_unsummed_segment_is_copied_off_the_loop_or_sent_again(address,
                                                                             monkeypatch):
    """An unsummed lent segment of THREAD_BYTES or more (the 24 MiB one) goes through
    read_remote_parts; one the kernel refuses there is asked for again and arrives intact."""
    calls, real = [], cross_memory.read_remote_parts

    async def spy(pid, view, source, parts=None):
        calls.append(len(view))
        return await real(pid, view, source, parts)

    monkeypatch.setattr(cross_memory, "read_remote_parts", spy)
    verdicts = []
    async with _lent_channel(address, os.getpid(), verdicts, flags=0) as (channel, _, _):
        await _pull(channel)
        assert channel.lent_replies == int(address is None)
    assert calls == [_values()[0].nbytes]  # the 2 MiB segment is copied on the loop
    assert verdicts == [cross_memory.COPIED if address is None else cross_memory.RESEND]


@pytest.mark.parametrize("when", ["before", "waiting-for-a-thread"])
async def test_a_cancelled_copy_in_parts_raises_trios_cancelled_and_leaves_no_thread_copying(
        when, monkeypatch):
    """Cancelled before its threads start (a step aborted, a deadline), or while a part waits
    for a worker thread, the copy raises a bare ``trio.Cancelled``, not a group of them: the
    executor lets ``trio.Cancelled`` through and reports anything else as the op's error. No
    started part is left copying when it raises."""
    source = np.random.default_rng(5).integers(0, 255, 9 << 20, dtype=np.uint8)
    target = np.zeros_like(source)
    running, real, scope, parts = [], cross_memory.read_remote, trio.CancelScope(), []

    def spy(pid, view, address):
        running.append(1)
        parts.append(len(view))
        try:
            if when != "before" and len(parts) == 1:  # the first part: cancel, copy on
                trio.from_thread.run_sync(scope.cancel)
            return real(pid, view, address)
        finally:
            running.pop()

    monkeypatch.setattr(cross_memory, "read_remote", spy)
    limiter, seen = trio.to_thread.current_default_thread_limiter(), []
    tokens = limiter.total_tokens  # (this run's own limiter)
    with scope:
        if when == "before":
            scope.cancel()
        else:  # one token: the second part waits for it while the first copies, cancelled
            limiter.total_tokens = 1
        try:
            await cross_memory.read_remote_parts(os.getpid(), memoryview(target),
                                                 source.ctypes.data, 2)
        except trio.Cancelled:
            seen.append("cancelled")
            raise
        except BaseException as exc:  # what the executor would report as the op's error
            seen.append(type(exc).__name__)
            raise
        finally:
            limiter.total_tokens = tokens
    assert scope.cancelled_caught and seen == ["cancelled"] and not running
    assert len(parts) == (0 if when == "before" else 1)  # the waiting part never started
