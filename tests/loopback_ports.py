"""Free TCP ports on 127.0.0.1 for tests that must know a worker's address before it starts.

Import from tests as ``from loopback_ports import free_ports`` (pytest puts the tests directory on
``sys.path``); ``tests/cluster/killable_workers.py`` and ``tests/distribute/cli_workers.py``
re-export it for their tests.
"""
from __future__ import annotations

import socket


def free_ports(count):
    """``count`` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
