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
not) find no socket and talk TCP. The sweep of dead files (below) looks at every namespace's: a
file lock is the file system's, not the namespace's, so a server's lock is seen from any other.

The sweep: a server that died without removing its files (killed) leaves them behind, and every
server's start removes such files of its directory, connecting to none of them. Before a server
renames its socket into place it makes (or opens) ``<socket>.lock`` beside it and takes an
exclusive ``flock`` on it, checks that the file it locked is still the one under that name (a
sweep may have removed it meanwhile), and holds it until it stops; the kernel drops it when the
process dies, however it dies. The sweep takes a non-blocking lock on each socket's lock file:
held means its server lives (or another sweep looks at it): the files stay; taken means its
server is gone: it removes the socket, if it is still the file it looked at (``os.lstat``
before and after) and the one its server wrote into the lock file once in place (another, an
older version's server that took the port under a dead server's lock file, is probed first),
then the lock file, while holding the lock. A server taking the same port
meanwhile waits for that lock (a few 1 ms tries, then TCP only) and renames its socket in only
after, so a live file is never removed (a probe's refusal followed by ``unlink`` could remove a
file renamed in between). A lock file alone (a server killed between removing its two files, or
between its lock and its rename) is removed the same way. A socket file with no lock file is an
older version's server's: only for those the sweep connects (a probe made and closed at once;
refused: nobody listens), under a lock file it makes for the look and removes after. Where there
is no ``fcntl`` (Windows) the sweep probes every socket as before. A child forked by a server
closes its copies of the lock descriptors (a lock lives while any copy is open). A server binds
its socket under a staging name, ``<socket>.<pid>.tmp``, holding the lock, and renames it into
place: one killed in between leaves that file, which the sweep removes once it can take the
lock (or there is no lock file) and the file is ``STALE_STAGING_S`` old (an older version's
writer takes no lock, even under a dead server's lock file), never a live writer's. A sweep
looks at ``SWEEP_MOST`` files at most (a socket with its lock file counts once), so a start
spends a bounded time on a directory of many.

``enabled(flag)``: the constructors' ``same_host`` argument; None reads the environment
variable ``ASYNCFLOW_SAME_HOST`` ("0" disables the path on both sides).

``ASYNCFLOW_SAME_HOST_DIR`` names another directory for the sockets (the same checks: the
user's, mode 0700; made so when missing); clients and servers meet only where they agree on it.
A socket bound without a lock file (a fake peer of a test) is still probed by the sweep, so a
group of processes that must not see those probes, each a test run's, keeps its own directory
(``tests/conftest.py``).

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import tempfile
import time
from typing import Final

import trio

try:
    import fcntl  # (file locks: the sweep's liveness test)
except ImportError:  # (Windows: the probe alone)
    fcntl = None  # type: ignore[assignment]

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
    directory that is not private, no Unix sockets, the lock file held): the server stays TCP
    only. Its lock file (``<path>.lock``) is held until ``unlink(path)``."""
    folder = directory()
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not _private(folder):
        return None
    path = socket_path(port, kind)
    _sweep(folder)
    lock = None
    if fcntl is not None:  # (held before the file is in place: a live server's lock is taken)
        lock = _hold(path + LOCK_SUFFIX)
        if lock is None:
            return None
    # Bound and listening under a temporary name, then renamed: a file under a port's name
    # always has a listener behind it or is a dead server's (what ``_sweep`` relies on).
    staging = f"{path}.{os.getpid()}.tmp"
    sock = None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # (EMFILE, no AF_UNIX: TCP)
        with contextlib.suppress(OSError):
            os.unlink(staging)
        sock.bind(staging)
        os.chmod(staging, 0o600)
        sock.listen(128)
        os.replace(staging, path)  # (the TCP port is ours: a file under its name is stale)
        if lock is not None:
            placed = os.lstat(path)
            os.ftruncate(lock, 0)  # (a dead server's lock file: its socket's name replaced)
            os.pwrite(lock, _named(placed), 0)
            _held[path] = (lock, _identity(placed))
    except OSError:
        if sock is not None:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(staging)
        if lock is not None:
            _release(lock, path + LOCK_SUFFIX)
        return None
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock)), path


LOCK_SUFFIX: Final = ".lock"
_HOLD_TRIES: Final = 8  # a lock file a sweep holds for a moment: tries 1 ms apart, then TCP only
_held: dict[str, tuple[int, tuple[int, int]]] = {}  # socket path -> (lock fd, socket's identity)


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _named(info: os.stat_result) -> bytes:
    """What a lock file holds: the socket its server put in place (its change time too: a
    file system reuses a removed file's inode number at once)."""
    return b"%x-%x-%x\n" % (*_identity(info), info.st_ctime_ns)


def _take(lock_path: str, create: bool) -> int | None:
    """A descriptor of ``lock_path`` locked exclusively (flock), or None: missing (``create``
    False) or present (``create`` True: made exclusively), held by someone, or no longer the
    file under that name once locked (a sweep removed it meanwhile)."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT | os.O_EXCL if create else 0)
    try:
        fd = os.open(lock_path, flags, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _identity(os.fstat(fd)) == _identity(os.lstat(lock_path)):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _hold(lock_path: str) -> int | None:
    """The server's lock: ``lock_path`` made or opened and locked, or None after ``_HOLD_TRIES``
    (held by a live process: another namespace's server cannot share the name, so a fork)."""
    for attempt in range(_HOLD_TRIES):
        with contextlib.suppress(OSError):
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            os.close(fd)  # (made if missing; ``_take`` then locks the file under the name)
        fd = _take(lock_path, create=False)
        if fd is not None:
            return fd
        if attempt + 1 < _HOLD_TRIES:
            time.sleep(0.001)  # (a sweep holds a lock for a few system calls)
    return None


def _release(fd: int, lock_path: str) -> None:
    """Remove ``lock_path`` if it is still the file ``fd`` locks, then drop the lock."""
    with contextlib.suppress(OSError):
        if _identity(os.lstat(lock_path)) == _identity(os.fstat(fd)):
            os.unlink(lock_path)
    os.close(fd)


SWEEP_MOST: int = 256  # a sweep's looks: a socket (its lock file with it), a staging file,
#                        a lock file alone: one look each (what a start may spend on it)
STAGING_SUFFIX: Final = ".tmp"  # ``<socket>.<pid>.tmp``: a socket bound before its rename
STALE_STAGING_S: float = 60.0  # a staging file whose lock is not held (an older server's
#   takes none) this old is dead: a live one lives for a bind, a chmod and a listen


def _staged_socket(name: str) -> str | None:
    """The socket name a staging file ``<socket>.<pid>.tmp`` is renamed to, else None."""
    head, _, pid = name[:-len(STAGING_SUFFIX)].rpartition(".")
    return head if name.endswith(STAGING_SUFFIX) and pid.isdigit() and \
        head.endswith(".sock") else None


def _sweep(folder: str, most: int | None = None) -> None:
    """Remove the files of servers that died without removing theirs (killed), connecting to
    none of them: a socket whose lock file can be locked has no server (the kernel drops a dead
    process's lock). A socket file without a lock file (a server of an older version) is probed
    as before, under a lock file made for the look. A staging file (a server killed between its
    bind and its rename) is removed when its socket's lock file can be locked (a writer of this
    version holds it from before the bind) or is missing, once ``STALE_STAGING_S`` old (an
    older version's writer takes no lock, also under a dead server's lock file). Every
    removal happens under the lock, of the file looked at (``os.lstat`` before and after). At
    most ``most`` looks (``SWEEP_MOST``): sockets first, then staging files, then lock files
    alone; a socket's lock file is looked at with it, not counted apart."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    sockets = [name for name in names if name.endswith(".sock")]
    present = set(sockets)
    staged = [name for name in names if _staged_socket(name) is not None]
    alone = [name for name in names if name.endswith(".sock" + LOCK_SUFFIX)
             and name[:-len(LOCK_SUFFIX)] not in present]
    looks = (sockets + staged + alone)[:SWEEP_MOST if most is None else most]
    for name in looks:
        path = os.path.join(folder, name)
        if name in present:
            if fcntl is not None:
                _sweep_socket(path)
            elif _refused(path):  # (no file locks: the probe alone, as before)
                with contextlib.suppress(OSError):
                    os.unlink(path)
        elif name.endswith(STAGING_SUFFIX):
            _sweep_staging(path, os.path.join(folder, _staged_socket(name)))
        elif fcntl is not None:  # a lock file alone: its server died
            fd = _take(path, create=False)  # (between removing its socket and its lock file)
            if fd is not None and not os.path.lexists(path[:-len(LOCK_SUFFIX)]):
                _release(fd, path)
            elif fd is not None:
                os.close(fd)


def _looked_at_socket(path: str) -> os.stat_result | None:
    """``os.lstat(path)`` where ``path`` is a socket file; None otherwise (gone, or another kind
    of file: a sweep removes no such thing)."""
    try:
        seen = os.lstat(path)
    except OSError:
        return None
    return seen if stat.S_ISSOCK(seen.st_mode) else None


def _sweep_staging(path: str, socket_file: str) -> None:
    """A staging file of ``socket_file``: removed if its writer is dead (see ``_sweep``)."""
    seen = _looked_at_socket(path)
    if seen is None:
        return
    lock_path, fd, made = socket_file + LOCK_SUFFIX, None, True  # (no fcntl: the age alone)
    if fcntl is not None:
        fd = _take(lock_path, create=False)
        made = fd is None and not os.path.lexists(lock_path)
        if made:  # (no lock file: an older server's; a lock made now keeps new servers out)
            fd = _take(lock_path, create=True)
        if fd is None:
            return  # (held: its writer, or the port's server, lives; or a sweep looks at it)
    try:
        # (a live writer of this version holds the lock; an older one takes no lock, under a
        # dead server's lock file too, and lives for a few calls: the age decides then)
        if _identity(os.lstat(path)) == _identity(seen) and \
                time.time() - seen.st_mtime > STALE_STAGING_S:
            os.unlink(path)
    except OSError:
        pass
    finally:
        if fd is not None and (made or not os.path.lexists(socket_file)):
            _release(fd, lock_path)  # (made for the look, or its server gone: no socket)
        elif fd is not None:
            os.close(fd)


def _sweep_socket(path: str) -> None:
    seen = _looked_at_socket(path)
    if seen is None:
        return
    lock_path = path + LOCK_SUFFIX
    fd = _take(lock_path, create=False)
    older = fd is None and not os.path.lexists(lock_path)
    if older:  # (no lock file: an older server's; a lock made now keeps new servers out)
        fd = _take(lock_path, create=True)
    if fd is None:
        return  # (held: its server lives, or another sweep looks at it)
    try:
        # The socket its lock file names is its dead server's; another (an older version's
        # server took the port, replacing the socket under a dead server's lock file, or one
        # killed before it wrote the name) is removed only when refused. A live server of this
        # version is never reached: it holds its lock.
        now = os.lstat(path)
        if _identity(now) == _identity(seen) and (
                (not older and os.pread(fd, 64, 0) == _named(seen)) or _refused(path)):
            os.unlink(path)
    except OSError:
        pass
    finally:
        _release(fd, lock_path)


def _refused(path: str) -> bool:
    """The older sweep's probe: True if connecting to ``path`` is refused (nobody listens)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except OSError:
        pass  # (a full backlog, EAGAIN: someone listens)
    finally:
        probe.close()
    return False


def unlink(path: str) -> None:
    """Remove a listener's socket file (the server stops): the file ``listen`` put there, if it
    still is, and then its lock file, dropping the lock."""
    held = _held.pop(path, None)
    if held is None:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    fd, identity = held
    with contextlib.suppress(OSError):
        if _identity(os.lstat(path)) == identity:
            os.unlink(path)
    _release(fd, path + LOCK_SUFFIX)


def _forget_locks() -> None:
    """In a forked child: close its copies of the server's lock descriptors (a lock lives as long
    as any copy), so that the parent's death frees them."""
    for fd, _ in _held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks)


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

