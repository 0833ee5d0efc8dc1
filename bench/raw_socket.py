"""The raw loopback baseline of the distributed benchmarks: bytes moved by a plain TCP socket.

``raw_socket_mib_s(size, rounds)`` starts a sink process that ``recv_into``s a preallocated
buffer and acknowledges each round with one byte, sends it ``size`` bytes with ``sendall``
``rounds`` times and returns the median MiB/s. Imports numpy only (never asyncflow or
tensorflow), so both sides of ``bench_vs_tf1.py`` can import it. Used by
``bench_distributed.py`` and ``bench_vs_tf1.py``; not a benchmark of its own.
"""
from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time

import numpy as np

MIB = 1 << 20

_SINK = """
import socket, sys
import numpy as np
size = int(sys.argv[1]); rounds = int(sys.argv[2])
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
buffer = np.empty(size, np.uint8); view = memoryview(buffer)
for _ in range(rounds):
    got = 0
    while got < size:
        got += conn.recv_into(view[got:], size - got)
    conn.sendall(b"k")
"""


def raw_socket_mib_s(size, rounds):
    """Median MiB/s of moving ``size`` bytes to another process over a loopback socket."""
    sink = subprocess.Popen([sys.executable, "-c", _SINK, str(size), str(rounds)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(sink.stdout.readline())
        payload = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
        times = []
        with socket.create_connection(("127.0.0.1", port)) as conn:
            for _ in range(rounds):
                start = time.perf_counter()
                conn.sendall(memoryview(payload))
                conn.recv(1)
                times.append(time.perf_counter() - start)
        sink.wait(timeout=60)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    return size / MIB / statistics.median(times)
