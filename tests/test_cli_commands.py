"""Each ``asyncflow`` subcommand has its own usage and help; ``--token``/``--token-file``
stand in for ASYNCFLOW_TOKEN; a 401 names ASYNCFLOW_TOKEN and the worker logs it once per peer.

Real CLI processes on loopback.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import trio

import asyncflow as af

DEADLINE_S = 60
ENV = {k: v for k, v in os.environ.items() if k not in ("ASYNCFLOW_TOKEN", "ASYNCFLOW_CONFIG")}


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "asyncflow", *args], capture_output=True,
                          text=True, timeout=DEADLINE_S, env=ENV)


@pytest.mark.parametrize("command", ["worker", "shutdown"])
def test_a_misspelt_option_prints_the_commands_own_usage(command):
    result = run_cli(command, "--clustr", "x")
    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: asyncflow {command} "), result.stderr
    assert "unrecognized arguments: --clustr x" in result.stderr


def test_shutdown_help_says_what_it_does():
    result = run_cli("shutdown", "--help")
    assert result.returncode == 0
    assert "Tell tasks of a cluster to stop serving" in result.stdout
    for option in ("--token", "--token-file", "--job", "examples:"):
        assert option in result.stdout


def test_token_options_are_exclusive_and_a_missing_file_is_named(tmp_path):
    both = run_cli("shutdown", "--cluster", "{}", "--token", "a", "--token-file", "b")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    missing = run_cli("worker", "--cluster", json.dumps({"worker": ["127.0.0.1:0"]}),
                      "--job", "worker", "--task", "0", "--token-file",
                      str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and "nope.txt" in missing.stderr


def test_token_file_guards_the_worker_and_a_401_names_asyncflow_token(tmp_path):
    token_file = tmp_path / "token.txt"
    token_file.write_text("s3cret\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "asyncflow", "worker", "--cluster",
         json.dumps({"worker": ["127.0.0.1:0"]}), "--job", "worker", "--task", "0",
         "--data-dir", str(tmp_path), "--token-file", str(token_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        line = proc.stdout.readline()
        assert " listening on " in line, (line, proc.poll())
        address = line.rsplit(" ", 1)[1].strip()
        graph = af.Graph()
        with graph.as_default(), af.device("/job:worker/task:0"):
            y = af.constant(2.0) * 3.0

        async def without_token():
            async with af.Session(graph=graph, cluster={"worker": [address]}) as sess:
                await sess.run(y)

        for _ in range(2):  # two refusals, one log line
            with pytest.raises(af.errors.UnauthenticatedError, match="ASYNCFLOW_TOKEN"):
                trio.run(without_token)
        stopped = run_cli("shutdown", "--cluster", json.dumps({"worker": [address]}),
                          "--token", "s3cret")
        assert stopped.returncode == 0, stopped.stderr
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    refusals = [line for line in err.splitlines() if "401 for" in line]
    assert len(refusals) == 1, err
    # The client came over TCP, or over the same-host Unix socket (transports/http/same_host.py),
    # whose peer is named by its process.
    assert re.search(rf"from (127\.0\.0\.1:\d+|pid {os.getpid()} on this host):",
                     refusals[0]), refusals[0]
    assert "ASYNCFLOW_TOKEN" in refusals[0]
