"""The tests' worker-process helpers leave no process behind when a start fails: a port taken
meanwhile by another program (another test run on the machine) made one worker exit, and the
ones already started kept running, holding their ports, after the test failed."""
import socket

import pytest

from cluster_processes import WorkerProcesses, loopback_spec


@pytest.fixture
def taken_port():
    """A loopback port some other program listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def test_a_failed_start_of_worker_processes_kills_the_ones_it_started(taken_port):
    spec = loopback_spec({"ps": 1, "worker": 1})
    spec["worker"].append(f"127.0.0.1:{taken_port}")
    workers = WorkerProcesses()
    with pytest.raises(RuntimeError, match="already in use"):
        workers.start(spec, [("ps", 0), ("worker", 0), ("worker", 1)])
    assert workers.procs == {}


def test_a_failed_start_of_the_chaos_cluster_kills_the_ones_it_started(taken_port, tmp_path):
    from test_chaos import Cluster
    cluster = Cluster(tmp_path)
    started = []
    real = type(cluster.procs["ps"]).start

    def start(proc, *args):
        started.append(proc)
        return real(proc, *args)

    for proc in cluster.procs.values():
        proc.start = start.__get__(proc)
    cluster.procs["worker1"].port = taken_port
    with pytest.raises(RuntimeError, match="did not start"):
        cluster.start()
    assert len(started) == 3 and not any(proc.alive() for proc in started)
