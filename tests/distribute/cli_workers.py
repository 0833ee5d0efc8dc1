"""``asyncflow worker`` child processes started with any arguments and environment.

``CliWorker(args, env).start()`` runs ``python -m asyncflow worker ARGS`` (optionally under a
prefix such as ``ip netns exec NAME``), waits for its ``listening on`` line, and keeps every
line it prints; ``kill()`` SIGKILLs it by PID; ``wait(timeout)`` returns its exit status.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from loopback_ports import consecutive_ports, free_ports  # noqa: F401 (re-exported for the tests)

LISTEN_TIMEOUT_S = 90.0


class CliWorker:
    def __init__(self, args, env=None, prefix=(), command="worker"):
        self.argv = [*prefix, sys.executable, "-m", "asyncflow", command, *args]
        self.env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                        PYTHONUNBUFFERED="1", **(env or {}))
        # Checkpoints of the tests live under tmp_path: the workers' data directory holds it.
        self.env.setdefault("ASYNCFLOW_DATA_DIR", tempfile.gettempdir())
        self.proc = None
        self.lines = []
        self.address = None
        self._listening = threading.Event()

    def start(self, timeout=LISTEN_TIMEOUT_S):
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=self.env)

        def read(proc=self.proc):
            for line in proc.stdout:
                self.lines.append(line.rstrip())
                if " listening on " in line and not self._listening.is_set():
                    self.address = line.rsplit(" ", 1)[-1].strip()
                    self._listening.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{' '.join(self.argv[-8:])} did not start listening:\n"
                                   + "\n".join(self.lines[-30:]))
        return self

    def run_to_exit(self, timeout=LISTEN_TIMEOUT_S):
        """Run a command that should exit by itself; returns ``(status, output)``."""
        result = subprocess.run(self.argv, capture_output=True, text=True, env=self.env,
                                timeout=timeout)
        return result.returncode, result.stdout + result.stderr

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout):
        status = self.proc.wait(timeout)
        return status

    def kill(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
