"""The same-host sweep (``transports.http.same_host._sweep``) without probes: a server holds a
lock on ``<socket>.lock`` for its lifetime; a server's start removes the files whose lock it can
take (their server died: the kernel dropped its lock) and connects to none of them. Only a socket
file without a lock file (an older server's) is probed, as before."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import pytest
import trio
from loopback_ports import free_ports
from transport_fakes import FakeWorker

from transports.http import same_host
from transports.http.server import open_http_server

pytestmark = pytest.mark.skipif(same_host.fcntl is None, reason="no file locks (fcntl)")

GENEROUS = 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _die(path: str, listener: trio.SocketListener) -> None:
    """What a killed server leaves: its socket closed, its lock dropped, both files in place."""
    listener.socket.close()
    fd, _ = same_host._held.pop(path)
    os.close(fd)


def _files(path: str) -> list[bool]:
    return [os.path.lexists(path), os.path.lexists(path + same_host.LOCK_SUFFIX)]


def _pending(listener: trio.SocketListener) -> int:
    """Connections made to ``listener`` and not yet accepted (each accepted here, and closed; a
    probe closed at once still waits in the backlog, and is counted)."""
    with socket.socket(fileno=listener.socket.dup().detach()) as raw:  # (the same listener)
        raw.setblocking(False)
        count = 0
        while True:
            try:
                conn, _ = raw.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1


async def test_a_dead_servers_files_are_swept():
    (port,) = free_ports(1)
    listener, path = same_host.listen(port)
    assert _files(path) == [True, True]
    same_host._sweep(same_host.directory())
    assert _files(path) == [True, True]  # its lock is held: alive
    _die(path, listener)
    async with open_http_server(FakeWorker()) as other:  # its start sweeps
        assert _files(path) == [False, False]
        assert _files(other.same_host_path) == [True, True]
    assert _files(other.same_host_path) == [False, False]  # removed when it stops


async def test_a_live_listener_is_never_swept_nor_connected_to_by_other_starts():
    (port,) = free_ports(1)
    listener, path = same_host.listen(port)
    try:
        for _ in range(20):
            async with open_http_server(FakeWorker()) as other:
                assert other.same_host_path is not None
        assert _files(path) == [True, True]
        assert _pending(listener) == 0  # (the probing sweep: 40 connections, one per start)
        stream = await same_host.connect("127.0.0.1", port)
        assert stream is not None and _pending(listener) == 1  # (what _pending counts)
        await stream.aclose()
    finally:
        await listener.aclose()
        same_host.unlink(path)
    assert _files(path) == [False, False]


@pytest.mark.parametrize("older", [False, True], ids=["locked", "older-without-lock"])
async def test_a_new_server_taking_the_port_between_the_look_and_the_unlink_keeps_its_file(
        monkeypatch, older):
    (port,) = free_ports(1)
    dead, path = same_host.listen(port)
    _die(path, dead)
    if older:  # an older server's file: no lock file
        os.unlink(path + same_host.LOCK_SUFFIX)
    take, sweep, new = same_host._take, same_host._sweep, []

    def take_after_a_new_server_started(lock_path, create):
        if lock_path == path + same_host.LOCK_SUFFIX and not new:
            # The sweep has looked at (lstat) the dead file; the port's new server starts now.
            # (Its own start's sweep is left out: the dead file is still there when it renames.)
            new.append(None)
            same_host._sweep = lambda folder: None
            try:
                new[0] = same_host.listen(port)
            finally:
                same_host._sweep = sweep
        return take(lock_path, create)

    monkeypatch.setattr(same_host, "_take", take_after_a_new_server_started)
    same_host._sweep(same_host.directory())
    monkeypatch.undo()
    ((listener, theirs),) = new
    try:
        assert theirs == path and _files(path) == [True, True]  # the live file survived
        stream = await same_host.connect("127.0.0.1", port)
        assert stream is not None
        await stream.aclose()
    finally:
        await listener.aclose()
        same_host.unlink(path)


async def test_a_sweep_holding_the_lock_keeps_a_new_server_out_until_it_is_done(monkeypatch):
    (port,) = free_ports(1)
    dead, path = same_host.listen(port)
    _die(path, dead)
    take, sweep, new = same_host._take, same_host._sweep, []

    def a_new_server_starts_once_the_lock_is_taken(lock_path, create):
        fd = take(lock_path, create)
        if lock_path == path + same_host.LOCK_SUFFIX and fd is not None and not new:
            new.append(None)
            same_host._sweep = lambda folder: None
            try:
                new[0] = same_host.listen(port)  # the lock is the sweep's: TCP only
            finally:
                same_host._sweep = sweep
        return fd

    monkeypatch.setattr(same_host, "_take", a_new_server_starts_once_the_lock_is_taken)
    monkeypatch.setattr(same_host, "_HOLD_TRIES", 2)
    same_host._sweep(same_host.directory())
    assert new == [None] and _files(path) == [False, False]
    monkeypatch.undo()
    listener, again = same_host.listen(port)  # (once the sweep let go)
    await listener.aclose()
    same_host.unlink(again)


_SERVER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from transports.http import same_host
    import trio
    async def main():
        listener, path = same_host.listen(int(sys.argv[2]))
        print(path, flush=True)
        await trio.sleep(120)
    trio.run(main)
""")


@contextlib.contextmanager
def _child(script, port, what):
    """A child process running ``script`` (it inherits the directory) for ``port``, and the
    first line it printed; killed at the end if it still lives."""
    child = subprocess.Popen([sys.executable, "-c", script, ROOT, str(port)],
                             stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([child.stdout], [], [], GENEROUS)
        assert ready, f"the {what} process did not start"
        yield child, child.stdout.readline().strip()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=GENEROUS)
        child.stdout.close()


def test_a_killed_processs_lock_is_released_by_the_kernel():
    (port,) = free_ports(1)
    with _child(_SERVER, port, "server") as (child, path):
        assert path == same_host.socket_path(port) and _files(path) == [True, True]
        same_host._sweep(same_host.directory())
        assert _files(path) == [True, True]  # its process holds the lock
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=GENEROUS) == -signal.SIGKILL
        assert _files(path) == [True, True]  # (killed: nothing removed them)
        same_host._sweep(same_host.directory())
        assert _files(path) == [False, False]


def test_a_lock_file_alone_is_swept_and_a_held_one_is_not():
    (port,) = free_ports(1)
    path = same_host.socket_path(port)
    os.makedirs(same_host.directory(), mode=0o700, exist_ok=True)
    lock_path = path + same_host.LOCK_SUFFIX
    fd = same_host._hold(lock_path)  # (a server between its lock and its rename)
    same_host._sweep(same_host.directory())
    assert _files(path) == [False, True]
    os.close(fd)  # (it died there)
    same_host._sweep(same_host.directory())
    assert _files(path) == [False, False]


async def test_without_file_locks_the_probe_alone_sweeps(monkeypatch):
    monkeypatch.setattr(same_host, "fcntl", None)  # (Windows)
    (port,) = free_ports(1)
    listener, path = same_host.listen(port)
    assert _files(path) == [True, False] and path not in same_host._held
    same_host._sweep(same_host.directory())
    assert _files(path) == [True, False]  # it accepts: alive
    listener.socket.close()
    same_host._sweep(same_host.directory())
    assert _files(path) == [False, False]  # refused: swept


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
async def test_a_forked_child_does_not_keep_its_parents_lock():
    (port,) = free_ports(1)
    listener, path = same_host.listen(port)
    done_r, done_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child (its fork hooks have run): says so, lives until the pipe closes
        try:
            os.close(done_w)
            os.write(ready_w, b"r")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    try:
        os.close(done_r)
        os.close(ready_w)
        assert os.read(ready_r, 1) == b"r"
        same_host._sweep(same_host.directory())
        assert _files(path) == [True, True]  # the parent holds it
        _die(path, listener)  # (the parent's copy closed; the child lives)
        same_host._sweep(same_host.directory())
        assert _files(path) == [False, False]
    finally:
        os.close(done_w)
        os.close(ready_r)
        os.waitpid(pid, 0)


async def test_a_listen_that_cannot_make_its_socket_gives_its_lock_back(monkeypatch):
    """No Unix socket to be had (EMFILE, no AF_UNIX): TCP only, as the docstring says, and the
    lock taken for it is dropped and its file removed (a lock kept would hold the name for the
    process's life: its sweep could never remove it, its next server there TCP only)."""
    (port,) = free_ports(1)
    path = same_host.socket_path(port)
    made = socket.socket

    def no_unix_socket(family=-1, *args, **kwargs):
        if family == socket.AF_UNIX:
            raise OSError(24, "Too many open files")
        return made(family, *args, **kwargs)

    monkeypatch.setattr(same_host.socket, "socket", no_unix_socket)
    assert same_host.listen(port) is None
    monkeypatch.undo()
    assert path not in same_host._held and _files(path) == [False, False]
    listener, again = same_host.listen(port)  # (the lock is free: same-host again)
    await listener.aclose()
    same_host.unlink(again)
    assert _files(path) == [False, False]


async def test_an_older_servers_live_socket_under_a_dead_servers_lock_file_is_not_swept():
    """A server killed leaves both files; an older version's server (no lock files: its own sweep
    probes ``.sock`` files alone, and its start ``os.replace``s the port's name) then takes the
    port, under the lock file nobody holds. Its socket is live: a taken lock is no proof there."""
    (port,) = free_ports(1)
    dead, path = same_host.listen(port)
    _die(path, dead)
    os.link(path, path + ".kept")  # (its inode kept in use: not the older socket's number)
    os.unlink(path)  # (the older server's sweep: refused)
    older = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        older.bind(path + ".older.tmp")
        older.listen(8)
        os.replace(path + ".older.tmp", path)
        assert _files(path) == [True, True]
        same_host._sweep(same_host.directory())
        assert os.path.lexists(path)  # (the lock file may go: the socket is then an older one's)
        same_host._sweep(same_host.directory())
        assert os.path.lexists(path)
    finally:
        older.close()
        os.unlink(path + ".kept")
    same_host._sweep(same_host.directory())
    assert _files(path) == [False, False]  # (its server gone: swept)


@pytest.fixture
def own_directory(monkeypatch):
    """A socket directory of the test's own (nothing else's files in the sweep's count)."""
    folder = tempfile.mkdtemp(prefix="af-sweep-")  # (mode 0700; short: a socket path's limit)
    monkeypatch.setenv(same_host.DIRECTORY_ENV, folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _dead_socket(path: str) -> None:
    """A socket file nobody listens on (bound, then closed)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(path)


async def test_the_cap_counts_sockets_not_their_lock_files(own_directory, monkeypatch):
    """``SWEEP_MOST`` (or ``most``) dead sockets are swept, each with its lock file: the lock
    files are not counted apart (they were: a cap of 256 names swept about 128 sockets)."""
    made = [os.path.join(own_directory, f"http-{900000 + i}.sock") for i in range(30)]
    for path in made:
        _dead_socket(path)
        open(path + same_host.LOCK_SUFFIX, "wb").close()  # (a dead server's, not locked)

    def left():
        return [path for path in made if os.path.lexists(path)]
    same_host._sweep(own_directory, most=10)
    assert len(left()) == 20
    assert [_files(path) for path in made] == [[path in left()] * 2 for path in made]
    monkeypatch.setattr(same_host, "SWEEP_MOST", 15)  # a start's sweep: the module's cap
    listener, placed = same_host.listen(free_ports(1)[0])  # (swept before its own is made)
    listener.socket.close()
    same_host.unlink(placed)
    assert len(left()) == 5
    same_host._sweep(own_directory)
    assert left() == [] and not [name for name in os.listdir(own_directory)
                                 if name.startswith("http-9")]


_STAGING_WRITER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from transports.http import same_host

    def killed_here(staging, path):  # bound and listening under its staging name
        print(staging, flush=True)
        time.sleep(120)
    os.replace = killed_here
    same_host.listen(int(sys.argv[2]))
""")


async def test_a_staging_file_of_a_killed_writer_is_swept_and_a_live_ones_is_not(own_directory):
    (port,) = free_ports(1)
    with _child(_STAGING_WRITER, port, "writer") as (child, staging):
        path = same_host.socket_path(port)
        assert staging == f"{path}.{child.pid}.tmp" and os.path.lexists(staging)
        old = os.lstat(staging).st_mtime - 2 * same_host.STALE_STAGING_S
        os.utime(staging, (old, old), follow_symlinks=False)  # (old: the lock decides)
        same_host._sweep(own_directory)
        assert os.path.lexists(staging) and _files(path) == [False, True]  # its writer lives
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=GENEROUS) == -signal.SIGKILL
        same_host._sweep(own_directory)
        assert not os.path.lexists(staging) and _files(path) == [False, False]
        listener, placed = same_host.listen(port)  # (the port's next server starts as ever)
        name = os.path.basename(path)
        assert placed == path and sorted(os.listdir(own_directory)) == [
            name, name + same_host.LOCK_SUFFIX]
        listener.socket.close()
        same_host.unlink(path)


def test_a_staging_file_without_a_lock_file_is_swept_only_once_stale(own_directory):
    """An older server's staging file (no lock file): kept while it could be a live writer's,
    removed once ``STALE_STAGING_S`` old; a file of another kind under such a name never."""
    staging = os.path.join(own_directory, "http-900001.sock.4242.tmp")
    other = os.path.join(own_directory, "http-900002.sock.4242.tmp")
    _dead_socket(staging)
    open(other, "wb").close()
    old = os.lstat(staging).st_mtime - 2 * same_host.STALE_STAGING_S
    os.utime(other, (old, old))
    same_host._sweep(own_directory)
    assert os.path.lexists(staging) and os.path.lexists(other)
    os.utime(staging, (old, old), follow_symlinks=False)
    same_host._sweep(own_directory)
    assert sorted(os.listdir(own_directory)) == [os.path.basename(other)]  # (no lock left)


def test_an_older_writers_staging_file_under_a_dead_servers_lock_file_is_kept(own_directory):
    """An older version's server takes no lock: its staging file (bound, not yet renamed) may
    lie under the lock file a killed server left, which any sweep can take. A taken lock is no
    proof of a dead writer there: the file is kept until ``STALE_STAGING_S`` old."""
    (port,) = free_ports(1)
    path = same_host.socket_path(port)
    open(path + same_host.LOCK_SUFFIX, "wb").close()  # (a dead server's, not locked)
    staging = f"{path}.{os.getpid()}.tmp"
    older = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        older.bind(staging)  # (the older writer, between its bind and its rename)
        older.listen(8)
        same_host._sweep(own_directory)
        assert os.path.lexists(staging)
        os.replace(staging, path)  # (its rename: in place, as it expects)
    finally:
        older.close()
    old = os.lstat(path).st_mtime - 2 * same_host.STALE_STAGING_S
    _dead_socket(staging)  # (one killed there: once stale, swept with the lock file free)
    os.utime(staging, (old, old), follow_symlinks=False)
    os.unlink(path)
    same_host._sweep(own_directory)
    assert os.listdir(own_directory) == []
