"""Start a cluster of ``asyncflow worker`` processes on this machine (for the demos).

``with local_cluster({"ps": 1, "worker": 2}) as spec:`` picks free loopback ports (reserved
for this process as the tests' are, ``transports/loopback_ports.py``), starts one
process per task with ``python -m asyncflow worker --cluster ... --job ... --task ...``, waits
for each one's "listening on" line, and kills them all when the block ends. Each worker gets one
BLAS thread (they share this machine's cores).
"""
from __future__ import annotations

import contextlib
import json
import select
import subprocess
import sys
import os
import time

from transports.loopback_ports import free_ports, release

# Several worker processes share this machine's cores: one BLAS thread each, or their
# spinning BLAS thread pools starve one another (measured: 8 ms instead of 0.05 ms per matmul).
_ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextlib.contextmanager
def local_cluster(jobs, deadline_s=60.0, data_dir=None):
    """Yield a cluster dict ``{job: ["127.0.0.1:port", ...]}`` served by worker processes.

    ``data_dir``: where the workers' Save/Restore/readers may touch files (their
    ``--data-dir``; default: the current directory).
    """
    drawn = free_ports(sum(jobs.values()))
    ports = iter(drawn)
    spec = {job: [f"127.0.0.1:{next(ports)}" for _ in range(count)]
            for job, count in jobs.items()}
    procs = []
    try:
        for job, addresses in spec.items():
            for index in range(len(addresses)):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "asyncflow", "worker", "--cluster", json.dumps(spec),
                     "--job", job, "--task", str(index), "--log-level", "WARNING",
                     *(["--data-dir", str(data_dir)] if data_dir is not None else [])],
                    stdout=subprocess.PIPE, text=True, env=_ENV))
        deadline = time.monotonic() + deadline_s
        for proc in procs:
            while True:
                ready, _, _ = select.select([proc.stdout], [], [],
                                            max(deadline - time.monotonic(), 0))
                line = proc.stdout.readline() if ready else ""
                if not line:
                    raise RuntimeError("a worker process failed to start")
                if "listening on" in line:
                    print(" ", line.strip())
                    break
        yield spec
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
        for port in drawn:  # (its servers are gone: a process starting cluster after cluster
            release(port)  # would otherwise hold a descriptor per port until it exits)
