"""Free TCP ports on 127.0.0.1 for tests that must know a worker's address before it starts.

Import from tests as ``from loopback_ports import free_ports`` (pytest puts the tests directory on
``sys.path``); ``tests/cluster/killable_workers.py`` and ``tests/distribute/cli_workers.py``
re-export it for their tests.

The ports come from below the kernel's ephemeral range (``ip_local_port_range``) where it can
be read. A worker killed and restarted on its port (the chaos and restart tests) must bind it
again; a port in the ephemeral range can meanwhile become the source port of any outgoing
connection on the machine (the master's health checks to the dead worker open several a
second), and the restart then fails with EADDRINUSE. The kernel never picks a port below
that range for a connection, so only an explicit bind can take one.
"""
from __future__ import annotations

import random
import socket

_LOWEST = 10_000  # below: ports services commonly claim
_TRIES = 200
_random = random.SystemRandom()  # tests that seed ``random`` do not make every run pick alike


def _ephemeral_low(path="/proc/sys/net/ipv4/ip_local_port_range"):
    """The first port the kernel hands out for outgoing connections, or None if unknown."""
    try:
        with open(path, encoding="ascii") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_ports(count):
    """``count`` distinct TCP ports that were free on 127.0.0.1 a moment ago, below the
    ephemeral range where the kernel says what it is (any free port otherwise)."""
    low = _ephemeral_low()
    sockets = []
    try:
        tries = 0
        while len(sockets) < count:
            sock = socket.socket()
            sockets.append(sock)
            if low is None or low - _LOWEST < 1000 or tries >= _TRIES:
                sock.bind(("127.0.0.1", 0))
                continue
            tries += 1
            try:
                sock.bind(("127.0.0.1", _random.randrange(_LOWEST, low)))
            except OSError:  # taken: try another
                sockets.pop().close()
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
