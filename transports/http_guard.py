"""The HTTP server's connection guard and rate-limited logs (used by :mod:`transports.http`).

A worker must keep answering Health while peers misbehave at the connection level: idle or
slow-drip connections, headers or bodies that never finish, more connections than the process
has file descriptors. :class:`_GuardedProtocol` wraps each of aiohttp's connection protocols and
reports to one :class:`ConnectionGuard` per server, which times out a head that is not complete
``header_timeout_s`` after its first byte, a body that stalls for ``body_timeout_s``, a connection
idle for ``idle_timeout_s``, and at ``max_connections`` (default: the file limit less an eighth)
drops the longest-idle connection so that a complete request still gets in
(:class:`ConnectionLimits`). :func:`rate_limit_logs` keeps a flood of such events from writing
megabytes of log lines.

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import typing
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["DEFAULT_CONNECTION_LIMITS", "ConnectionLimits", "rate_limit_logs"]

_log = logging.getLogger("transports.http")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a server waits for a peer, and how many connections it holds.

    Attributes:
        header_timeout_s: a request's headers must be complete this long after its first byte.
        body_timeout_s: longest wait for the next bytes of a request body.
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


class _Connection:
    __slots__ = ("transport", "active", "idle_since", "partial_since")

    def __init__(self, transport: asyncio.Transport, now: float) -> None:
        self.transport = transport
        self.active = 0  # requests being handled
        self.idle_since = now  # end of the last response (or the connection's start)
        self.partial_since: float | None = None  # first byte of a request still being read


class _GuardedProtocol(asyncio.Protocol):
    """Forwards to aiohttp's protocol; tells the guard when bytes arrive."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard, self._inner = guard, inner
        self._connection: _Connection | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._connection = self._guard.opened(typing.cast(asyncio.Transport, transport))
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        connection = self._connection
        if connection is not None and not connection.active and connection.partial_since is None:
            connection.partial_since = self._guard.loop.time()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.closed(self._connection)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class ConnectionGuard:
    """Counts connections, evicts idle ones at the limit, closes slow and idle ones (asyncio)."""

    def __init__(self, limits: ConnectionLimits, loop: asyncio.AbstractEventLoop) -> None:
        self.limits, self.loop = limits, loop
        self.max_connections = limits.connection_limit()
        self.connections: dict[asyncio.Transport, _Connection] = {}
        self.evicted = self.refused = self.timed_out = 0
        self._sweeper: asyncio.TimerHandle | None = None

    def factory(self, inner: Any) -> Any:
        return lambda: _GuardedProtocol(self, inner())

    def start(self) -> None:
        self._sweeper = self.loop.call_later(1.0, self._sweep)

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()

    def opened(self, transport: asyncio.Transport) -> _Connection:
        if len(self.connections) >= self.max_connections:
            idle = [c for c in self.connections.values() if not c.active]
            if idle:
                self.evicted += 1
                victim = min(idle, key=lambda c: c.partial_since or c.idle_since)
                self._drop(victim)
            else:
                self.refused += 1
                _log.warning("connection limit of %d reached with every connection busy; "
                             "closing a new one", self.max_connections)
                transport.abort()
        connection = _Connection(transport, self.loop.time())
        self.connections[transport] = connection
        return connection

    def closed(self, connection: _Connection | None) -> None:
        if connection is not None:
            self.connections.pop(connection.transport, None)

    def request_started(self, transport: Any) -> None:
        connection = self.connections.get(transport)
        if connection is not None:
            connection.active += 1
            connection.partial_since = None

    def request_finished(self, transport: Any) -> None:
        connection = self.connections.get(transport)
        if connection is not None:
            connection.active = max(0, connection.active - 1)
            connection.idle_since = self.loop.time()

    def _drop(self, connection: _Connection) -> None:
        self.connections.pop(connection.transport, None)
        connection.transport.abort()

    def _sweep(self) -> None:
        now, limits = self.loop.time(), self.limits
        for connection in list(self.connections.values()):
            if connection.active:
                continue
            if connection.partial_since is not None:
                late = now - connection.partial_since > limits.header_timeout_s
            else:
                late = now - connection.idle_since > limits.idle_timeout_s
            if late:
                self.timed_out += 1
                self._drop(connection)
        self._sweeper = self.loop.call_later(1.0, self._sweep)


class _RateLimit(logging.Filter):
    """Lets through a burst of records per message template, then about one a second.

    A flood of failing connections (``Too many open files`` from asyncio's accept loop, or
    aiohttp's per-request errors) must not write megabytes of log: the first suppressed
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


_RATE_LIMITED_LOGGERS: Final = ("asyncio", "aiohttp.server", "aiohttp.web", "aiohttp.internal",
                                "aiohttp.access", "transports.http")


def rate_limit_logs(*names: str) -> None:
    """Rate-limit the loggers ``names`` (and the transport's) with one shared filter each."""
    for name in (*_RATE_LIMITED_LOGGERS, *names):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RateLimit) for f in logger.filters):
            logger.addFilter(_RateLimit())
