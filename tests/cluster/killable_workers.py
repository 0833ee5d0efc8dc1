"""Worker processes for the fault-tolerance tests: ``asyncflow worker`` started, killed, measured.

A WorkerProcess runs the real CLI (``python -m asyncflow worker``) in a child process, waits for
its ``listening on HOST:PORT`` line, and can SIGKILL it, restart it on the same port, and read
its resident memory from ``/proc``. ``free_ports(n)`` picks ports for a fixed ClusterSpec (a
restarted worker must come back at the same address); ``health(address)`` asks a worker for
its Health over a fresh channel.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from loopback_ports import free_ports  # noqa: F401 (re-exported for the tests)

_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class WorkerProcess:
    """One ``asyncflow worker`` child process.

    Args:
        cluster: the cluster spec dict (this task's address gives the port unless ``port``).
        job: the job name.
        task: the task index.
        port: override the port (0: any free port).
        env: extra environment variables.
        cpus: logical CPU devices.
        cwd: the working directory of the process (where relative checkpoint paths land);
            default the test's own.
        data_dir: the worker's ``--data-dir`` (default: the system's temporary directory, which
            holds the tests' ``tmp_path`` checkpoints).
        args: more command-line arguments.
        preexec_fn: run in the child before it starts (e.g. resource limits).
    """

    def __init__(self, cluster, job, task=0, port=None, env=None, cpus=1, cwd=None,
                 data_dir=None, args=(), preexec_fn=None):
        self.cluster, self.job, self.task = cluster, job, task
        self.port, self.cpus, self.cwd = port, cpus, cwd
        self.data_dir = str(data_dir or tempfile.gettempdir())
        self.args, self.preexec_fn = list(args), preexec_fn
        # One BLAS thread per process: spinning pools starve the shared cores.
        self.env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", **(env or {}))
        if cwd is not None:  # the project must stay importable from another directory
            self.env["PYTHONPATH"] = os.pathsep.join(
                [_PROJECT_ROOT] + [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = None
        self.address = None
        self.spawned_at = None   # perf_counter() just before the process was spawned
        self.started_at = None   # perf_counter() when the listening line was read
        self.log_lines = []

    def start(self, timeout=60.0):
        """Start the process and wait until it listens; returns ``self``.

        Raises:
            RuntimeError: if it exits or does not listen within ``timeout`` seconds.
        """
        argv = [sys.executable, "-m", "asyncflow", "worker", "--cluster",
                json.dumps(self.cluster), "--job", self.job, "--task", str(self.task),
                "--cpus", str(self.cpus), "--log-level", "WARNING", "--data-dir", self.data_dir,
                *self.args]
        if self.port is not None:
            argv += ["--port", str(self.port)]
        self.spawned_at, self.started_at = time.perf_counter(), None
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=self.env, cwd=self.cwd,
                                     preexec_fn=self.preexec_fn)
        ready = threading.Event()

        def read_stdout(proc=self.proc):
            for line in proc.stdout:
                self.log_lines.append(line.rstrip())
                if " listening on " in line and not ready.is_set():
                    self.address = line.rsplit(" ", 1)[-1].strip()
                    self.started_at = time.perf_counter()
                    ready.set()

        def read_stderr(proc=self.proc):
            for line in proc.stderr:
                self.log_lines.append(line.rstrip())

        threading.Thread(target=read_stdout, daemon=True).start()
        threading.Thread(target=read_stderr, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"worker /job:{self.job}/task:{self.task} did not start:\n"
                                   + "\n".join(self.log_lines[-30:]))
        return self

    @property
    def startup_s(self):
        """Seconds from spawning the process to reading its listening line (its start-up on
        this machine at this moment: interpreter, imports, bind)."""
        return self.started_at - self.spawned_at

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL the process (no cleanup of any kind) and reap it."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def restart(self, timeout=60.0):
        """Start a new process on the same port (after a kill)."""
        self.kill()
        if self.address is not None:
            self.port = int(self.address.rsplit(":", 1)[1])
        return self.start(timeout)

    def rss_bytes(self):
        """Resident set size of the process, from ``/proc/<pid>/status``."""
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("VmRSS not found")


async def health(address):
    """The Health reply of the worker at ``address`` (a fresh channel, 5 s deadline)."""
    from asyncflow.cluster import channels
    channel = channels.connect(address)
    try:
        return await channel.health(timeout=5.0)
    finally:
        await channel.aclose()
