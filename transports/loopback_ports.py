"""TCP ports on 127.0.0.1, reserved for this process, for tests and benchmarks that must know a
server's address before it starts (asyncflow itself never draws ports here).

The tests import it as ``from loopback_ports import free_ports`` (``tests/loopback_ports.py``
re-exports it), the benchmarks through ``bench/reserved_ports.py`` (this file by its path),
``demos/local_cluster.py`` (which the benchmarks use too) as
``from transports.loopback_ports import free_ports``: one reservation for all of them.

A port is chosen before anything listens on it: the caller writes it into a ClusterSpec, then
starts the server (a CLI worker takes a second or more to import and bind), and the restart
tests stop a worker and bind its port again. In those windows the port is free, and a check
by binding proves nothing to another process choosing ports at the same moment: two test
processes (pytest-xdist workers, a second suite, a benchmark run beside the suite, CI as root
beside a developer's own runs) could both draw it, and one server's bind then fails with
EADDRINUSE. Two draws in one process could also name the same port twice in one spec. So every
port handed out is *reserved*, until this process exits (the kernel drops the reservation
then, however the process ends), and this process never hands it out twice:

* on Linux, by binding a Unix socket to the abstract name ``asyncflow-loopback-port-<port>``:
  a second bind of that name fails with EADDRINUSE whichever user tries, and the abstract
  namespace belongs to the network namespace, exactly the scope of the TCP port itself. It
  has no file: nothing to create, own, squat, replace or clean up, no permissions to get
  right. The descriptors sit high (from half the ``RLIMIT_NOFILE`` soft limit, where it is
  above 4096), out of ``select()``'s range, and at most a quarter of that limit is spent on
  them; beyond it, or where binding such a name fails (not Linux, a security module that
  forbids it), reservations fall back to the next mechanism, with a warning on Linux;
* and always, where it can be used, by an exclusive ``lockf`` lock on the byte at offset
  ``port`` of one lock file per user under the temp directory (mode 0600: no other user can
  write or replace it). Without the abstract namespace, this is the whole reservation, and it
  then excludes only this user's processes; with it, it also keeps out processes of this user
  that run an earlier form of this module (the lock file alone).

Where neither can be used, reservations hold within this process (and its forked children)
only. ``scope()`` says which: "machine", "user" or "process".

The ports come from below the kernel's ephemeral range (``ip_local_port_range``) where it can
be read. A worker killed and restarted on its port (the chaos and restart tests) must bind it
again; a port in the ephemeral range can meanwhile become the source port of any outgoing
connection on the machine (the master's health checks to the dead worker open several a
second), and the restart then fails with EADDRINUSE. The kernel never picks a port below
that range for a connection, so only an explicit bind can take one. (A server that binds port
0 itself and reports the port it got needs none of this: it has no window.)
"""
from __future__ import annotations

import errno
import os
import random
import socket
import sys
import tempfile
import threading
import warnings

try:
    import fcntl
except ImportError:  # (no fcntl: no lock file, and the names' descriptors stay where they are)
    fcntl = None
try:
    import resource
except ImportError:
    resource = None

__all__ = ["bindable", "consecutive_ports", "free_ports", "lock_path", "release", "reserve",
           "reserved", "scope", "ScopeWarning"]

_LOWEST = 10_000  # below: ports services commonly claim
_TRIES = 200
_random = random.SystemRandom()  # tests that seed ``random`` do not make every run pick alike

ABSTRACT = sys.platform.startswith("linux")  # abstract Unix socket names: Linux only
PREFIX = "asyncflow-loopback-port-"  # + the port: the name a reservation binds

_guard = threading.Lock()
_held: set[int] = set()  # the ports this process (or its parent, before a fork) reserved:
# neither mechanism excludes its own process, nor a forked child from its parent's ports
_names: dict[int, int] = {}  # port -> descriptor of the socket bound to its name
_lock = {"fd": None, "pid": None}  # the lock file, opened once per process
_machine = {"pid": None, "ok": False, "why": "", "floor": None, "budget": 0}


class ScopeWarning(UserWarning):
    """Reservations reach less than every process on this machine (``scope()`` says how far)."""


def lock_path() -> str:
    """The file whose byte ``port`` a process locks to reserve ``port`` (one per user)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"asyncflow-test-ports-{uid}.lock")


def _lock_fd():
    """The lock file's descriptor, or None where it cannot be used or its file system takes
    no locks. Opened once per process (a forked child holds none of its parent's locks: it
    opens the file again, and keeps its parent's ports in ``_held``, never handing them out).
    Never closed: closing any descriptor of the file would drop every lock this process holds
    on it."""
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


def _bind_name(port):
    """A descriptor bound to ``port``'s abstract name; raises OSError (EADDRINUSE: held)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind("\0" + PREFIX + str(port))
    except BaseException:
        sock.close()
        raise
    return sock.detach()


def _machine_wide():
    """True if this process can reserve ports by abstract names (probed once per process: a
    forked child keeps its copies of its parent's, which keep those names taken)."""
    if _machine["pid"] != os.getpid():
        _machine.update(pid=os.getpid(), ok=False, why="" if ABSTRACT else "not Linux")
        if ABSTRACT:
            try:
                os.close(_bind_name(f"probe-{os.getpid()}-{_random.getrandbits(64):x}"))
                _machine["ok"] = True
            except (OSError, ValueError, AttributeError) as exc:  # (no AF_UNIX: AttributeError)
                _machine["why"] = f"binding an abstract Unix socket name failed: {exc}"
                _warn()
        soft = _soft_fd_limit()
        _machine["budget"] = soft // 4
        _machine["floor"] = soft // 2 if soft > 4096 and fcntl is not None else None
    return _machine["ok"]


def _soft_fd_limit():
    if resource is None:
        return 1024
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 16 if soft == resource.RLIM_INFINITY or soft > 1 << 16 else soft


_REACH = {"machine": "every process on this machine", "user": "this user's processes only",
          "process": "this process only"}


def _warn():
    if ABSTRACT:
        warnings.warn(f"loopback port reservations keep out {_REACH[scope_now()]}: "
                      f"{_machine['why']}", ScopeWarning, stacklevel=4)


def _claim_name(port):
    """(taken, descriptor): taken if another process holds ``port``'s name; the descriptor of
    this process's new hold on it, or None where names are not in use."""
    if not _machine_wide():
        return False, None
    if len(_names) >= _machine["budget"]:
        if _machine["why"] != "budget":
            _machine["why"] = "budget"
            warnings.warn(f"{len(_names)} loopback ports reserved by name, a quarter of the "
                          "descriptor limit: further ports are reserved by the lock file only",
                          ScopeWarning, stacklevel=4)
        return False, None
    try:
        fd = _bind_name(port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return True, None
        _machine["ok"], _machine["why"] = False, f"binding an abstract name failed: {exc}"
        _warn()
        return False, None
    if _machine["floor"] is not None:  # (out of select()'s way: tests select on pipes)
        try:
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _machine["floor"])
        except OSError:
            pass
        else:
            os.close(fd)
            fd = high
    return False, fd


def _lock_byte(port):
    """False if another process of this user holds ``port``'s byte of the lock file."""
    fd = _lock_fd()
    if fd is None:
        return True
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port, os.SEEK_SET)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):  # another process holds it
            return False
        _lock["fd"] = None  # (no locks on this file system)
    return True


def reserve(port: int) -> bool:
    """Reserve ``port`` for this process's life; False if this or another process holds it."""
    with _guard:
        if port in _held:
            return False
        taken, name = _claim_name(port)
        if taken:
            return False
        if not _lock_byte(port):
            if name is not None:
                os.close(name)
            return False
        if name is not None:
            _names[port] = name
        _held.add(port)
        return True


def release(port: int) -> None:
    """Give back a port this process reserved (its server is gone for good)."""
    with _guard:
        if port not in _held:
            return
        _held.discard(port)
        name = _names.pop(port, None)
        if name is not None:
            os.close(name)  # (a forked child's copy: its parent's hold stays)
        fd = _lock_fd()
        if fd is not None:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, port, os.SEEK_SET)


def reserved() -> frozenset:
    """The ports this process holds now (its own and, in a forked child, its parent's)."""
    with _guard:
        return frozenset(_held)


def scope_now() -> str:
    """``scope()`` without probing."""
    if _machine["ok"] and _machine["pid"] == os.getpid():
        return "machine"
    return "user" if _lock_fd() is not None else "process"


def scope() -> str:
    """Which processes a reservation made now keeps out: "machine" (every user's, in this
    network namespace), "user" (this user's) or "process" (none but this one's forked
    children, which also remember their parent's ports)."""
    with _guard:
        _machine_wide()
        return scope_now()


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
    (no process drawing here gets them, before or after a server bound them) and free a
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
        if reserve(port):
            if bindable(port):
                ports.append(port)
            else:  # (in use outside these reservations: not worth a descriptor)
                release(port)
    if len(ports) == count:
        return ports
    raise RuntimeError(f"found {len(ports)} of {count} free loopback ports to reserve "
                       f"(reservations keep out {_REACH[scope_now()]})")


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
            release(port)
    raise RuntimeError(f"found no {count} consecutive free loopback ports to reserve")
