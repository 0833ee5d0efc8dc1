"""The same-host fast path (``transports.http.same_host``): a loopback server also listens on a Unix
socket named after its port; a client to a loopback address uses it when it is there and falls
back to TCP when it is not (disabled, stale, not private)."""

from __future__ import annotations

import os
import socket
import tempfile

import numpy as np
import pytest
import trio
from loopback_ports import free_ports
from transport_fakes import FakeWorker

from transports.http import same_host
from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server
from transports.messages import RegisterGraph, RunGraph, TensorEntry

GENEROUS = 20


def _family(channel):
    (conn,) = channel._idle
    return conn.stream.socket.family


async def test_a_loopback_call_goes_through_the_unix_socket_with_its_token():
    async with open_http_server(FakeWorker(), token="s3cret") as server:
        path = server.same_host_path
        assert path == same_host.socket_path(server.port) and os.path.exists(path)
        assert os.stat(path).st_mode & 0o077 == 0
        async with TrioHttpChannel(server.address, token="s3cret", bare=False) as channel:
            with trio.fail_after(GENEROUS):
                reply = await channel.health()
            assert reply.task and _family(channel) == socket.AF_UNIX
        async with TrioHttpChannel(server.address, token="wrong", bare=False) as channel:
            with pytest.raises(Exception, match="401|nauthori"):
                await channel.health()
    assert not os.path.exists(path)  # removed when the server stops


async def test_bulk_tensors_cross_the_unix_socket_intact():
    worker = FakeWorker()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address, bare=False) as channel:
            big = np.arange(3 << 20, dtype=np.float32)  # 12 MiB: the bulk path
            with trio.fail_after(GENEROUS):
                handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))
                          ).graph_handle
                reply = await channel.run_graph(RunGraph(handle, 1, [TensorEntry("x", big)],
                                                         ["x"], request_id=1))
            assert _family(channel) == socket.AF_UNIX
    np.testing.assert_array_equal(reply.tensors[0].value, big)


async def test_without_the_socket_the_client_falls_back_to_tcp():
    async with open_http_server(FakeWorker(), same_host=False) as server:
        assert server.same_host_path is None
        assert not os.path.exists(same_host.socket_path(server.port))
        async with TrioHttpChannel(server.address, bare=False) as channel:
            with trio.fail_after(GENEROUS):
                await channel.health()
            assert _family(channel) == socket.AF_INET and not channel._same_host


async def test_a_stale_socket_file_falls_back_to_tcp():
    async with open_http_server(FakeWorker(), same_host=False) as server:
        path = same_host.socket_path(server.port)
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(path)  # a file nobody listens on: what a killed server leaves
        dead.close()
        try:
            async with TrioHttpChannel(server.address, bare=False) as channel:
                with trio.fail_after(GENEROUS):
                    await channel.health()
                    await channel.health()
                assert _family(channel) == socket.AF_INET
        finally:
            os.unlink(path)


async def test_the_environment_switch_and_a_shared_directory_disable_it(monkeypatch, tmp_path):
    assert same_host.ENV == "ASYNCFLOW_SAME_HOST"
    monkeypatch.setenv("ASYNCFLOW_SAME_HOST", "0")
    async with open_http_server(FakeWorker()) as server:
        assert server.same_host_path is None
    monkeypatch.delenv(same_host.ENV)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # others may write: a socket there could be anyone's
    monkeypatch.setattr(same_host, "directory", lambda: str(shared))
    async with open_http_server(FakeWorker()) as server:
        assert server.same_host_path is None
        assert await same_host.connect("127.0.0.1", server.port) is None
        async with TrioHttpChannel(server.address, bare=False) as channel:
            await channel.health()
            assert _family(channel) == socket.AF_INET


async def test_non_loopback_hosts_never_try_it():
    # (192.0.2.1: TEST-NET-1, a documentation address; nothing is sent to it)
    assert await same_host.connect("192.0.2.1", 80) is None
    assert not TrioHttpChannel("192.0.2.1:80")._same_host


async def test_a_new_server_sweeps_the_sockets_of_killed_servers():
    async with open_http_server(FakeWorker(), same_host=False) as server:
        stale = same_host.socket_path(server.port)  # this port's: no server listens there
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(stale)
        dead.close()
        async with open_http_server(FakeWorker()) as other:
            assert not os.path.exists(stale)  # swept by the other server's start
            assert os.path.exists(other.same_host_path)  # while its own stays


# -- network namespaces: the socket's name carries this process's namespace ---------------------

def test_the_socket_name_carries_the_network_namespace(monkeypatch):
    monkeypatch.setattr(same_host, "_namespace", "4-f0000001")
    first = same_host.socket_path(2222, "bare")
    assert os.path.basename(first) == "bare-2222-net4-f0000001.sock"
    assert same_host.socket_path(2222, "bare") == first  # the same within one namespace
    monkeypatch.setattr(same_host, "_namespace", "4-f0000002")
    assert same_host.socket_path(2222, "bare") != first
    assert same_host.socket_path(2222) != same_host.socket_path(2222, "bare")


def test_the_namespace_is_read_once_per_process(monkeypatch):
    reads = []

    def read():
        reads.append(1)
        return "4-abc"

    monkeypatch.setattr(same_host, "read_namespace_id", read)
    monkeypatch.setattr(same_host, "_namespace", same_host._UNREAD)
    assert same_host.namespace_id() == same_host.namespace_id() == "4-abc"
    assert len(reads) == 1


def test_without_the_namespace_file_the_name_is_the_ports_alone(monkeypatch, tmp_path):
    monkeypatch.setattr(same_host, "NET_NAMESPACE_FILE", str(tmp_path / "absent"))
    monkeypatch.setattr(same_host, "_namespace", same_host._UNREAD)
    assert same_host.read_namespace_id() is None
    assert os.path.basename(same_host.socket_path(2222)) == "http-2222.sock"


@pytest.mark.skipif(not os.path.exists("/proc/self/ns/net"), reason="no /proc/self/ns/net")
def test_on_linux_the_id_is_the_device_and_inode_of_the_namespace_file():
    info = os.stat("/proc/self/ns/net")
    assert same_host.read_namespace_id() == f"{info.st_dev:x}-{info.st_ino:x}"
    assert same_host.namespace_id() == same_host.read_namespace_id()


async def test_a_client_in_another_namespace_never_reaches_this_ones_server(monkeypatch):
    monkeypatch.setattr(same_host, "_namespace", "4-a")
    async with open_http_server(FakeWorker()) as server:
        ours = [same_host.socket_path(server.port, kind) for kind in ("http", "bare")]
        assert ours[0] == server.same_host_path and all(map(os.path.exists, ours))
        stream = await same_host.connect("127.0.0.1", server.port)  # the same namespace: found
        assert stream is not None
        await stream.aclose()
        monkeypatch.setattr(same_host, "_namespace", "4-b")  # as a client in namespace b
        assert await same_host.connect("127.0.0.1", server.port) is None
        assert await same_host.connect("127.0.0.1", server.port, "bare") is None
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                await channel.health()
            assert _family(channel) == socket.AF_INET and channel.bare_calls == 0
        # A server of namespace b on the same port (its own TCP port there) neither replaces
        # nor sweeps namespace a's files: both listen, each under its own name.
        for kind in ("http", "bare"):
            made = same_host.listen(server.port, kind)
            assert made is not None
            listener, theirs = made
            try:
                assert theirs == same_host.socket_path(server.port, kind) and theirs not in ours
                assert all(map(os.path.exists, [*ours, theirs]))
            finally:
                await listener.aclose()
                same_host.unlink(theirs)
        assert all(map(os.path.exists, ours))
        monkeypatch.setattr(same_host, "_namespace", "4-a")  # back in a: the server answers
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                await channel.health()
            assert channel.bare_calls == 1 and server.statistics().same_host_calls == 1


# -- a listener whose backlog is full --------------------------------------------------------------

async def test_a_full_backlog_is_waited_out_never_taken_for_a_connection(autojump_clock):
    """A non-blocking connect to a Unix socket whose backlog is full fails with EAGAIN and
    connects nothing; ``trio.open_unix_socket`` took that for a connect in progress and handed
    back a socket never connected (its first send: ENOTCONN, which a bare handshake took for a
    server hanging up). ``connect`` tries again until there is room, within its caller's
    deadline."""
    (port,) = free_ports(1)
    os.makedirs(same_host.directory(), mode=0o700, exist_ok=True)
    path = same_host.socket_path(port, "bare")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        try:
            listener.listen(0)  # room for one connection not yet accepted
            first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            first.connect(path)  # (it fills the backlog)
            got = []

            async def connect():
                got.append(await same_host.connect("127.0.0.1", port, "bare"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(connect)
                await trio.sleep(5)  # every retry meanwhile found the backlog full
                assert got == []
                accepted, _ = listener.accept()  # room for one more
            (stream,) = got
            await stream.send_all(b"hello")  # connected: the listener has it
            second, _ = listener.accept()
            second.settimeout(GENEROUS)
            assert second.recv(5) == b"hello"
            third = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            third.connect(path)  # full again, never accepted: the caller's deadline ends it
            with trio.move_on_after(3) as waited:
                await same_host.connect("127.0.0.1", port, "bare")
            assert waited.cancelled_caught
            for sock in (first, accepted, second, third, stream.socket):
                sock.close()
        finally:
            same_host.unlink(path)


def test_the_directory_is_the_environments_where_it_names_one(monkeypatch, tmp_path):
    monkeypatch.setenv(same_host.DIRECTORY_ENV, str(tmp_path / "sockets"))
    assert same_host.DIRECTORY_ENV == "ASYNCFLOW_SAME_HOST_DIR"
    assert same_host.socket_path(2222).startswith(str(tmp_path / "sockets") + os.sep)
    monkeypatch.delenv(same_host.DIRECTORY_ENV)
    assert same_host.directory() == os.path.join(tempfile.gettempdir(), f"asyncflow-{os.getuid()}")
