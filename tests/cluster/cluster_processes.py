"""Loopback cluster specs and real worker processes for the distributed tests.

A plain module (not ``conftest``), so that a test module imports it by a name no other test
directory's conftest shares; ``conftest.py`` here makes fixtures of it.
"""
import json
import os
import select
import subprocess
import sys
import tempfile
import time

from loopback_ports import free_ports

LISTEN_DEADLINE_S = 60.0
# Worker processes share the machine's cores: one BLAS thread each (spinning pools starve).
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def free_port():
    """A free loopback port below the ephemeral range (``tests/loopback_ports.py`` says why)."""
    return free_ports(1)[0]


def loopback_spec(jobs):
    """``{"ps": 1, "worker": 2}`` -> a cluster dict on free loopback ports."""
    return {job: [f"127.0.0.1:{free_port()}" for _ in range(count)]
            for job, count in jobs.items()}


class WorkerProcesses:
    def __init__(self):
        self.procs = {}

    def start(self, spec, tasks, env=None, flags=True, extra=()):
        """Start ``tasks`` (``[(job, index)]``) of ``spec``; returns their listening lines.

        With ``flags=False`` the command has no --cluster/--job/--task (``env`` supplies
        ``ASYNCFLOW_CONFIG``); ``extra``: more command-line arguments for each worker.
        """
        lines = {}
        for job, index in tasks:
            where = ["--cluster", json.dumps(spec), "--job", job, "--task", str(index)]
            proc = subprocess.Popen(
                [sys.executable, "-m", "asyncflow", "worker", *(where if flags else []),
                 "--log-level", "WARNING", "--data-dir", tempfile.gettempdir(), *extra],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**os.environ, **ONE_BLAS_THREAD, **(env or {})})
            self.procs[(job, index)] = proc
        deadline = time.monotonic() + LISTEN_DEADLINE_S
        try:
            for key, proc in self.procs.items():
                if key in tasks:
                    lines[key] = self._wait_listening(proc, deadline, key)
        except BaseException:  # (a port taken meanwhile): none of them outlives the test
            for key in tasks:
                self.kill(*key)
            raise
        return lines

    @staticmethod
    def _wait_listening(proc, deadline, key):
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
            if not ready:
                proc.kill()
                raise TimeoutError(f"worker {key} did not start listening in time")
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {key} exited: {proc.wait()} {proc.stderr.read()}")
            if "listening on" in line:
                return line.strip()

    def kill(self, job, index):
        proc = self.procs.pop((job, index))
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def stop_all(self):
        for proc in self.procs.values():
            proc.kill()
        for proc in self.procs.values():
            proc.wait()
        self.procs.clear()
