"""The HTTP server's connection guard and rate-limited logs (used by :mod:`transports.http.server`).

A worker must keep answering Health while peers misbehave at the connection level: idle or
slow-drip connections, headers or bodies that never finish, more connections than the process
has file descriptors. :class:`ConnectionLimits` says how long the server waits: a head must be
complete ``header_timeout_s`` after its first byte, a body may stall at most ``body_timeout_s``,
a connection may idle ``idle_timeout_s``; each connection task enforces these as its own trio
deadlines. :class:`ConnectionGuard` holds what spans connections: at ``max_connections``
(default: the file limit less an eighth) a new connection evicts the longest-idle one that has
no request in progress, so that a complete request still gets in, and when every connection is
busy the new one is refused. :class:`BearerToken` checks each request's token and logs the
first refusal from each peer host. :func:`rate_limit_logs` keeps a flood of such events from
writing megabytes of log lines.

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import hmac
import logging
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any, Final

import trio

__all__ = ["DEFAULT_CONNECTION_LIMITS", "BearerToken", "ConnectionGuard", "ConnectionLimits", "GuardedConnection",
           "rate_limit_logs"]

_log = logging.getLogger("transports.http")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a server waits for a peer, and how many connections it holds.

    Attributes:
        header_timeout_s: a request's headers must be complete this long after its first byte.
        body_timeout_s: longest wait for the next bytes of a request body, and for the client
            to take more bytes of an answer.
        idle_timeout_s: a connection with no request for this long is closed.
        max_connections: most open connections; None: the process's file limit
            (``RLIMIT_NOFILE``) less an eighth (at least 64) for files, peers and logs. At the
            limit a new connection evicts the longest-idle one (no request in progress), so a
            flood of idle or slow connections cannot lock out a client that sends a whole
            request; when every connection is busy the new one is closed.
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 60.0
    max_connections: int | None = None

    def connection_limit(self) -> int:
        if self.max_connections is not None:
            return self.max_connections
        try:
            import resource
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            if soft == resource.RLIM_INFINITY:
                soft = 65_536
        except (ImportError, OSError, ValueError):  # no rlimits on this platform
            soft = 1024
        return max(16, soft - max(64, soft // 8))


DEFAULT_CONNECTION_LIMITS: Final = ConnectionLimits()


class GuardedConnection:
    """One accepted connection as the guard sees it (fields set by the server's task)."""

    __slots__ = ("stream", "scope", "active", "idle_since", "partial_since")

    def __init__(self, stream: Any, now: float) -> None:
        self.stream = stream
        self.scope = trio.CancelScope()  # cancelled to drop the connection (eviction, shutdown)
        self.active = False  # a request is being handled (head read, answer not yet sent)
        self.idle_since = now  # end of the last answer (or the connection's start)
        self.partial_since: float | None = None  # first byte of a head still being read


class ConnectionGuard:
    """Counts a server's connections and evicts idle ones at the limit (trio, one run).

    The timeouts are the connection task's own deadlines (it knows when a head started and a
    body stalled); the guard does the bookkeeping that spans connections.
    """

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.max_connections = limits.connection_limit()
        self.connections: dict[GuardedConnection, None] = {}  # insertion-ordered set
        self.evicted = self.refused = self.timed_out = 0
        self.empty = trio.Event()
        self.empty.set()

    def admit(self, connection: GuardedConnection) -> bool:
        """Register a new connection; at the limit evict the longest-idle one, or refuse it."""
        if len(self.connections) >= self.max_connections:
            idle = [c for c in self.connections if not c.active]
            if not idle:
                self.refused += 1
                _log.warning("connection limit of %d reached with every connection busy; "
                             "closing a new one", self.max_connections)
                return False
            self.evicted += 1
            self.drop(min(idle, key=lambda c: c.partial_since or c.idle_since))
        self.connections[connection] = None
        self.empty = trio.Event() if self.empty.is_set() else self.empty
        return True

    def drop(self, connection: GuardedConnection) -> None:
        """Forget ``connection`` now and cancel its task (which closes the socket)."""
        self.closed(connection)
        connection.scope.cancel()

    def closed(self, connection: GuardedConnection) -> None:
        if self.connections.pop(connection, False) is None and not self.connections:
            self.empty.set()


class BearerToken:
    """The token every request must carry (``Authorization: Bearer <token>``), compared in
    constant time; the first refusal from each peer host is logged (at most 1,024 hosts, so a
    misconfigured client retrying cannot flood the log)."""

    MAX_LOGGED_HOSTS: Final = 1024

    def __init__(self, token: str | None) -> None:
        self.authorization = None if token is None else f"Bearer {token}".encode()
        self._logged_hosts: set[str] = set()

    def admits(self, method: str, path: str, offered: str, conn: Any) -> bool:
        """Whether a request with the ``Authorization`` value ``offered`` may go on."""
        if self.authorization is None:
            return True
        offered_bytes = offered.encode("latin-1")
        if hmac.compare_digest(offered_bytes, self.authorization):
            return True
        peer = peer_address(conn)
        host = peer.rpartition(":")[0] or peer  # (over a Unix socket: one entry per process)
        if host not in self._logged_hosts and len(self._logged_hosts) < self.MAX_LOGGED_HOSTS:
            self._logged_hosts.add(host)
            _log.warning("401 for %s %s from %s: %s bearer token (the worker's ASYNCFLOW_TOKEN); "
                         "later ones from this address are not logged", method, path, peer,
                         "wrong" if offered_bytes else "missing")
        return False


def peer_address(conn: Any) -> str:
    """A connection's client as ``host:port``, or ``pid N on this host`` over a same-host Unix
    socket (whose peer has no address; the kernel says its process), ``?`` when neither is known.
    """
    sock = conn.stream.socket
    try:
        if sock.family == socket.AF_UNIX:
            pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      struct.calcsize("3i")))[0]
            return f"pid {pid} on this host"
        peer = sock.getpeername()
    except (OSError, AttributeError):  # (no SO_PEERCRED outside Linux)
        return "?"
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer) or "?"


class _RateLimit(logging.Filter):
    """Lets through a burst of records per message template, then about one a second.

    A flood of failing connections (``Too many open files`` from the accept loop, or
    per-connection events) must not write megabytes of log: the first suppressed
    record after a quiet period says how many were dropped.
    """

    BURST: Final = 10
    PER_SECOND: Final = 1.0

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, object], list[float]] = {}  # [tokens, time, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        now = record.created
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) > 1000:
                    self._buckets.clear()
                bucket = self._buckets[key] = [float(self.BURST), now, 0]
            bucket[0] = min(self.BURST, bucket[0] + (now - bucket[1]) * self.PER_SECOND)
            bucket[1] = now
            if bucket[0] < 1:
                bucket[2] += 1
                return False
            bucket[0] -= 1
            dropped, bucket[2] = bucket[2], 0
        if dropped:
            record.msg = f"{record.msg} ({int(dropped)} similar messages suppressed)"
        return True


_RATE_LIMITED_LOGGERS: Final = ("asyncio", "trio.serve_listeners", "transports.http")


def rate_limit_logs(*names: str) -> None:
    """Rate-limit the loggers ``names`` (and the transport's) with one shared filter each."""
    for name in (*_RATE_LIMITED_LOGGERS, *names):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RateLimit) for f in logger.filters):
            logger.addFilter(_RateLimit())
