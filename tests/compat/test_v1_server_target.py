"""A ``tf.train.Server`` of another process as a session target (issue 36).

Process A is a TF1 program that starts ``tf.train.Server(cluster, job_name, task_index)`` and
calls ``server.join()``; this process (B) runs steps on it through ``tf.Session(target)`` and
``tf.train.MonitoredTrainingSession(master=target)``, with the ``grpc://host:port`` spelling
and the bare ``host:port``; then a Shutdown request ends A's ``join()`` and A exits cleanly.
An unreachable target fails within ``recovery_wait_secs``, naming its address.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import trio

import asyncflow as af
import asyncflow.compat.v1 as tf
from asyncflow.cluster.server import shutdown_cluster
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from loopback_ports import free_ports

START_TIMEOUT_S = 90
TOKEN = "server-target-test-token"

SERVER_PROGRAM = '''
import sys
import asyncflow.compat.v1 as tf

cluster = tf.train.ClusterSpec({"worker": [sys.argv[1]]})
server = tf.train.Server(cluster, job_name="worker", task_index=0)
print("serving", server.target, flush=True)
server.join()
print("joined", flush=True)
'''


@pytest.fixture
def server_process(monkeypatch):
    """Process A: a tf.train.Server that serves until a Shutdown request ends its join()."""
    monkeypatch.setenv("ASYNCFLOW_TOKEN", TOKEN)
    address = f"127.0.0.1:{free_ports(1)[0]}"
    root = os.path.dirname(os.path.dirname(af.__file__))
    env = dict(os.environ, PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", SERVER_PROGRAM, address], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, serving = [], threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("serving"):
                serving.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert serving.wait(START_TIMEOUT_S), "\n".join(lines)
        assert lines[0] == f"serving grpc://{address}"
        yield address, proc, lines, reader
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def test_sessions_of_another_process_run_on_its_server(server_process):
    address, proc, lines, reader = server_process
    with tf.device("/job:worker/task:0"):
        total = tf.Variable(0.0)
        bump = total.assign_add(1.0)
    for target in (f"grpc://{address}", address):
        with tf.Session(target) as sess:
            sess.run(total.initializer)
            assert [sess.run(bump) for _ in range(3)] == [1.0, 2.0, 3.0]
    with tf.device("/job:worker/task:0"):
        step = tf.train.get_or_create_global_step()
        advance = step.assign_add(1)
    hooks = [tf.train.StopAtStepHook(last_step=4)]
    with tf.train.MonitoredTrainingSession(master=f"grpc://{address}", hooks=hooks) as sess:
        seen = []
        while not sess.should_stop():
            seen.append(int(sess.run(advance)))
    assert seen == [1, 2, 3, 4]
    # The "job done" signal ends process A's server.join(); A exits by itself.
    statuses = trio.run(shutdown_cluster, {"worker": [address]})
    assert statuses == {"/job:worker/replica:0/task:0": "stopped"}
    assert proc.wait(30) == 0
    reader.join(10)
    assert lines[-1] == "joined"


def test_an_unreachable_target_fails_in_time_naming_its_address():
    address = f"127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    with tf.device("/job:worker/task:0"):
        tf.train.get_or_create_global_step()
    with pytest.raises(af.errors.UnavailableError, match=f"{address}.*recovery_wait_secs|"
                       f"recovery_wait_secs.*{address}"):
        with tf.train.MonitoredTrainingSession(master=f"grpc://{address}",
                                               recovery_wait_secs=0.5):
            pass
    with pytest.raises(af.errors.UnavailableError, match=address):
        tf.Session(f"grpc://{address}").run(tf.constant(1.0))
