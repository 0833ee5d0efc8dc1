"""TCP ports on 127.0.0.1, reserved for this process, for tests that must know a worker's
address before it starts.

Import from tests as ``from loopback_ports import free_ports`` (pytest puts the tests directory on
``sys.path``); ``tests/cluster/killable_workers.py`` and ``tests/distribute/cli_workers.py``
re-export it for their tests.

A port is chosen before anything listens on it: the test writes it into a ClusterSpec, then
starts the server (a CLI worker takes a second or more to import and bind), and the restart
tests stop a worker and bind its port again. In those windows the port is free, and a check
by binding proves nothing to another process choosing ports at the same moment: two test
processes (pytest-xdist workers, or several suites run at once on one machine) could both
draw it, and one server's bind then fails with EADDRINUSE. Two draws in one process could
also name the same port twice in one spec. So every port handed out is *reserved*: an
exclusive ``lockf`` lock on the byte at offset ``port`` of one lock file per user under the
system's temp directory, held until this process exits (the kernel drops it then, however
the process ends). Every process drawing through this module skips a port another holds,
and this process never hands out a port twice. Only then is the port checked free by a bind
(something outside the tests may use it).

The ports come from below the kernel's ephemeral range (``ip_local_port_range``) where it can
be read. A worker killed and restarted on its port (the chaos and restart tests) must bind it
again; a port in the ephemeral range can meanwhile become the source port of any outgoing
connection on the machine (the master's health checks to the dead worker open several a
second), and the restart then fails with EADDRINUSE. The kernel never picks a port below
that range for a connection, so only an explicit bind can take one.
"""
from __future__ import annotations

import errno
import os
import random
import socket
import tempfile
import threading

try:
    import fcntl
except ImportError:  # (no fcntl: reservations within this process only)
    fcntl = None

_LOWEST = 10_000  # below: ports services commonly claim
_TRIES = 200
_random = random.SystemRandom()  # tests that seed ``random`` do not make every run pick alike

_guard = threading.Lock()
_held: set[int] = set()  # the ports this process (or its parent, before a fork) reserved:
# lockf does not exclude its own process, nor a forked child from its parent's ports
_lock = {"fd": None, "pid": None}  # the lock file, opened once per process


def lock_path() -> str:
    """The file whose byte ``port`` a process locks to reserve ``port``."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"asyncflow-test-ports-{uid}.lock")


def _lock_fd():
    """The lock file's descriptor, or None where it cannot be used or its file system takes
    no locks (then reservations hold within this process only). Opened once per process (a
    forked child holds none of its parent's locks: it opens the file again, and keeps its
    parent's ports in ``_held``, never handing them out). Never closed: closing any
    descriptor of the file would drop every lock this process holds on it."""
    if _lock["pid"] != os.getpid():
        _lock["pid"], _lock["fd"] = os.getpid(), None
        if fcntl is not None:
            flags = (os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0))
            try:
                _lock["fd"] = os.open(lock_path(), flags, 0o600)
            except OSError:
                pass
    return _lock["fd"]


def reserve(port: int) -> bool:
    """Reserve ``port`` for this process's life; False if this or another process holds it."""
    with _guard:
        fd = _lock_fd()
        if port in _held:
            return False
        if fd is not None:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port, os.SEEK_SET)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):  # another process holds it
                    return False
                _lock["fd"] = None  # (no locks on this file system: this process only)
        _held.add(port)
        return True


def _release(port: int) -> None:
    with _guard:
        if port in _held:
            _held.discard(port)
            fd = _lock_fd()
            if fd is not None:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, port, os.SEEK_SET)


def _ephemeral_low(path="/proc/sys/net/ipv4/ip_local_port_range"):
    """The first port the kernel hands out for outgoing connections, or None if unknown."""
    try:
        with open(path, encoding="ascii") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def bindable(port):
    """True if nothing on this machine holds ``port`` on 127.0.0.1 now (a plain bind, no
    SO_REUSEADDR: a port with connections lingering in TIME_WAIT counts as taken)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count):
    """``count`` distinct TCP ports on 127.0.0.1, reserved for this process until it exits
    (no test process drawing here gets them, before or after a server bound them) and free a
    moment ago; below the ephemeral range where the kernel says what it is."""
    low = _ephemeral_low()
    ports = []
    for attempt in range(_TRIES + 100 * count):  # (random ports first, then the kernel's)
        if len(ports) == count:
            return ports
        if low is None or low - _LOWEST < 1000 or attempt >= _TRIES:
            with socket.socket() as sock:  # any free port the kernel picks
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
        else:
            port = _random.randrange(_LOWEST, low)
        if reserve(port) and bindable(port):
            ports.append(port)
    if len(ports) == count:
        return ports
    raise RuntimeError(f"found {len(ports)} of {count} free loopback ports to reserve")


def consecutive_ports(count):
    """The first of ``count`` consecutive ports, all reserved as ``free_ports`` reserves one
    and free a moment ago: for a launcher that numbers its tasks' ports from a base (Slurm's
    ``--port-base``), below the ephemeral range where the kernel says what it is."""
    low = _ephemeral_low()
    if low is None or low - _LOWEST < 1000:
        low = 32768  # (the kernel's usual start of its range)
    for _ in range(_TRIES):
        base = _random.randrange(_LOWEST, low - count)
        run = range(base, base + count)
        taken = [port for port in run if reserve(port)]
        if len(taken) == count and all(bindable(port) for port in run):
            return base
        for port in taken:  # (a run with a port in use: give the others back)
            _release(port)
    raise RuntimeError(f"found no {count} consecutive free loopback ports to reserve")
