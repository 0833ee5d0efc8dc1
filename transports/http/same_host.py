"""The same-host fast path: a Unix socket beside each loopback HTTP listener.

Theory of operation
-------------------
A worker server that listens on a loopback or wildcard address also listens on a Unix socket
named after its TCP port and network namespace (below), in a directory private to the user
(``<tmp>/asyncflow-<uid>/``, mode 0700, owned by the user: checked on both sides before use, so
another user cannot plant a socket there). A client channel to ``127.0.0.1:P`` (or
``localhost``, ``::1``) first tries that socket and speaks the same HTTP/1.1 to it, token
included; it falls back to TCP when there is none, or when connecting fails (a stale file of a
server that died, a server that could not bind one), and then stays on TCP. A second socket
beside it, ``bare-<port>...sock``, speaks the bare-frame protocol of :mod:`transports.http.bare`
(no HTTP), which a channel tries before this one. Nothing else changes: same frames, same
limits, the server treats the connection like any other. On Linux a Unix socket moves bulk
bytes faster than loopback TCP (no TCP/IP stack, no checksums; ``bench/bench_transport.py``).

Network namespaces: a Unix socket's path lives in the file system, a TCP port in the network
namespace. Two workers of one user on one port in two namespaces that share the temporary
directory (containers, ``ip netns exec``) would otherwise share one file, and a client dialling
its own namespace's loopback would reach the other namespace's worker. So the socket's name also
carries the namespace's identity, ``<kind>-<port>-net<dev>-<inode>.sock`` (the device and inode
of ``/proc/self/ns/net``, read once per process): client and server meet only within one
namespace, and a server's ``os.replace`` of a stale file under its name never touches another
namespace's. Where that file does not exist (not Linux, no /proc) the name is
``<kind>-<port>.sock`` as before; a client and server that disagree (one sees /proc, one does
not) find no socket and talk TCP. The sweep of dead files looks at every namespace's: a file is
removed only when nobody accepts on it, which holds whichever namespace it was bound in.

``enabled(flag)``: the constructors' ``same_host`` argument; None reads the environment
variable ``ASYNCFLOW_SAME_HOST`` ("0" disables the path on both sides).

``ASYNCFLOW_SAME_HOST_DIR`` names another directory for the sockets (the same checks: the
user's, mode 0700; made so when missing); clients and servers meet only where they agree on it.
Every server's start probes every socket of its directory (the sweep: a connection made and
closed at once), so a group of processes that must not see those probes, each a test run's, keeps
its own (``tests/conftest.py``).

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import tempfile
from typing import Final

import trio

ENV: str = "ASYNCFLOW_SAME_HOST"
DIRECTORY_ENV: str = "ASYNCFLOW_SAME_HOST_DIR"  # the sockets' directory instead of the default
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
SERVING_HOSTS = LOOPBACK_HOSTS | {"", "0.0.0.0", "::"}


def enabled(flag: bool | None = None) -> bool:
    """``flag``, or, when None, whether the environment allows the path (the default)."""
    if flag is not None:
        return bool(flag)
    return hasattr(socket, "AF_UNIX") and os.environ.get(ENV, "1") != "0"


def directory() -> str:
    """``ASYNCFLOW_SAME_HOST_DIR``, or ``<tmp>/asyncflow-<uid>`` (used only when private)."""
    return os.environ.get(DIRECTORY_ENV) or os.path.join(tempfile.gettempdir(),
                                                         f"asyncflow-{os.getuid()}")


NET_NAMESPACE_FILE: str = "/proc/self/ns/net"
_UNREAD: Final = object()
_namespace: object = _UNREAD  # this process's ``namespace_id()``, once read


def read_namespace_id() -> str | None:
    """The identity of this process's network namespace, ``"<dev>-<inode>"`` in hex of
    ``NET_NAMESPACE_FILE``, or None where there is no such file (not Linux, no /proc)."""
    try:
        info = os.stat(NET_NAMESPACE_FILE)
    except OSError:
        return None
    return f"{info.st_dev:x}-{info.st_ino:x}"


def namespace_id() -> str | None:
    """``read_namespace_id()``, read once per process (again in a forked child)."""
    global _namespace
    if _namespace is _UNREAD:
        _namespace = read_namespace_id()
    return _namespace  # type: ignore[return-value]


def _forget_namespace() -> None:
    global _namespace
    _namespace = _UNREAD


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_namespace)  # (a child may unshare its own)


def socket_path(port: int, kind: str = "http") -> str:
    """Where the server of TCP port ``port`` on this host and in this network namespace listens
    for same-host clients: ``kind`` "http" for HTTP, "bare" for the bare-frame protocol
    (:mod:`transports.http.bare`)."""
    namespace = namespace_id()
    suffix = "" if namespace is None else f"-net{namespace}"
    return os.path.join(directory(), f"{kind}-{int(port)}{suffix}.sock")


def _private(path: str) -> bool:
    """True if ``path`` is a real directory of this user that nobody else may write."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def listen(port: int, kind: str = "http") -> tuple[trio.SocketListener, str] | None:
    """A listener on ``socket_path(port, kind)`` and its path, or None when one cannot be made (a
    directory that is not private, no Unix sockets): the server stays TCP only."""
    folder = directory()
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not _private(folder):
        return None
    path = socket_path(port, kind)
    _sweep(folder)
    # Bound and listening under a temporary name, then renamed: a file under a port's name
    # always has a listener behind it or is a dead server's (what ``_sweep`` relies on).
    staging = f"{path}.{os.getpid()}.tmp"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        sock.bind(staging)
        os.chmod(staging, 0o600)
        sock.listen(128)
        os.replace(staging, path)  # (the TCP port is ours: a file under its name is stale)
    except OSError:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(staging)
        return None
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock)), path


def _sweep(folder: str, most: int = 256) -> None:
    """Remove the sockets of servers that died without removing theirs (killed): nobody
    accepts on them (a connection is refused). At most ``most`` files are looked at."""
    try:
        names = [name for name in os.listdir(folder) if name.endswith(".sock")][:most]
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.setblocking(False)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            with contextlib.suppress(OSError):
                os.unlink(path)
        except OSError:
            pass  # (a full backlog, EAGAIN: someone listens)
        finally:
            probe.close()


def unlink(path: str) -> None:
    """Remove a listener's socket file (the server stops)."""
    with contextlib.suppress(OSError):
        os.unlink(path)


async def connect(host: str, port: int, kind: str = "http") -> trio.SocketStream | None:
    """A stream to the same-host socket (``kind``) of ``host:port``, or None (not a loopback host, no
    private directory, nobody listening): the caller connects over TCP instead."""
    if host not in LOOPBACK_HOSTS or not _private(directory()):
        return None
    path = socket_path(port, kind)
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return None
        return await _connect_unix(path)
    except OSError:
        return None


_FULL_RETRY_S: Final = (0.001, 0.064)  # a full backlog's retries: the first wait, the longest


async def _connect_unix(path: str) -> trio.SocketStream:
    """A connected stream to the Unix socket ``path``; bound by the caller's deadline.

    Not ``trio.open_unix_socket``: a non-blocking connect to a Unix socket whose listener's
    backlog is full fails with EAGAIN and connects nothing (Linux; no EINPROGRESS, nothing to
    wait on), which trio takes for a connect in progress: it hands back a socket that was never
    connected, whose first send or receive fails (ENOTCONN; a bare handshake would take it for
    a server that hung up). A blocking connect waits for room; this one tries again, waiting
    1 ms, then twice as long each time up to 64 ms, until the caller's deadline."""
    wait = _FULL_RETRY_S[0]
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.connect(path)  # connected, refused, or EAGAIN (full): never in progress
        except BlockingIOError:
            sock.close()
            await trio.sleep(wait)
            wait = min(2 * wait, _FULL_RETRY_S[1])
            continue
        except BaseException:
            sock.close()
            raise
        await trio.lowlevel.checkpoint()
        return trio.SocketStream(trio.socket.from_stdlib_socket(sock))

