"""``asyncflow worker`` as an operator meets it: a busy port, Ctrl-C, SIGTERM, a token with
trailing whitespace, what it logs, and errors of ops that ran on it (issue 13, items 8 and 9).

Every test runs the real CLI in a child process on loopback.
"""
from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import trio

import asyncflow as af
from killable_workers import WorkerProcess

TASK = "/job:worker/replica:0/task:0"
DEADLINE_S = 60


def _argv(port=0, *extra):
    return [sys.executable, "-m", "asyncflow", "worker", "--cluster",
            json.dumps({"worker": [f"127.0.0.1:{port}"]}), "--job", "worker", "--task", "0",
            "--data-dir", tempfile.gettempdir(), *extra]


def _start(*extra, env=None):
    proc = subprocess.Popen(_argv(0, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})
    line = proc.stdout.readline()
    assert " listening on " in line, (line, proc.poll())
    return proc, line.rsplit(" ", 1)[1].strip()


def test_a_busy_port_is_one_line_naming_it_and_exit_1():
    first, address = _start()
    try:
        port = address.rsplit(":", 1)[1]
        busy = subprocess.run(_argv(port), capture_output=True, text=True, timeout=DEADLINE_S)
        assert busy.returncode == 1
        lines = busy.stderr.strip().splitlines()
        assert len(lines) == 1 and port in lines[0] and "in use" in lines[0], busy.stderr
    finally:
        first.kill()
        first.wait()


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_ctrl_c_and_sigterm_stop_cleanly(sig, status):
    proc, _ = _start()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == status, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err


def test_a_token_with_trailing_whitespace_works_and_one_with_spaces_is_refused(monkeypatch):
    monkeypatch.setenv("ASYNCFLOW_TOKEN", "s3cret\n")  # as read from a file
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0).start()
    try:
        graph = af.Graph()
        with graph.as_default(), af.device(TASK):
            y = af.constant(2.0) * 3.0

        async def main():
            async with af.Session(graph=graph, cluster={"worker": [worker.address]}) as sess:
                return await sess.run(y)
        assert trio.run(main) == 6.0
    finally:
        worker.kill()
    refused = subprocess.run(_argv(), capture_output=True, text=True, timeout=DEADLINE_S,
                             env={**os.environ, "ASYNCFLOW_TOKEN": "two words"})
    assert refused.returncode == 2 and "ASYNCFLOW_TOKEN" in refused.stderr, refused.stderr


def test_every_event_is_logged_once():
    proc, address = _start("--log-level", "INFO")
    try:
        graph = af.Graph()
        with graph.as_default(), af.device(TASK):
            x = af.placeholder(af.float32, [None])
            y = x + 1.0

        async def main():
            async with af.Session(graph=graph, cluster={"worker": [address]}) as sess:
                await sess.run(y, {x: [1.0]})
        trio.run(main)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=DEADLINE_S)
    events = [line.split(" ", 2)[2] for line in err.splitlines() if line[:2] == "20"]
    assert any("registered graph" in event for event in events), err
    assert len(events) == len(set(events)), err
    assert "listening on" not in err  # stdout says it, once
    assert out.count("listening on") == 0  # the first line was read by _start


def test_errors_of_remote_ops_name_the_users_line():
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0).start()
    try:
        graph = af.Graph()
        with graph.as_default(), af.device(TASK):
            x = af.placeholder(af.float32, [None])
            line = inspect.currentframe().f_lineno + 1
            y = af.reshape(x, [2, 2])

        async def main():
            async with af.Session(graph=graph, cluster={"worker": [worker.address]}) as sess:
                await sess.run(y, {x: np.ones(3, np.float32)})
        with pytest.raises(af.errors.InvalidArgumentError) as info:
            trio.run(main)
        message = str(info.value)
        assert f"{os.path.basename(__file__)}:{line}" in message, message
        assert "transports" not in message, message
    finally:
        worker.kill()
