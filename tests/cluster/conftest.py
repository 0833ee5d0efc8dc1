"""Clusters for the distributed tests: in-process services, HTTP servers, CLI worker processes.

* ``cluster`` (parametrized ``inprocess``/``http``): a ps and two workers as ``af.Server``s in
  the test's trio run, reached through the in-process transport or HTTP on loopback ports.
* ``worker_processes.start(spec, tasks, env=None)``: real ``python -m asyncflow worker`` processes;
  waits (with a deadline) for each one's "listening on" line and kills them at teardown.
"""
import pytest
import trio

import asyncflow as af
from cluster_processes import WorkerProcesses, loopback_spec

_next_inprocess = iter(range(1000, 10**6))


@pytest.fixture(params=["inprocess", "http"])
async def cluster(request):
    """A ps and two workers in this trio run; yields ``(ClusterSpec, {task name: Server})``."""
    jobs = {"ps": 1, "worker": 2}
    if request.param == "inprocess":
        spec = {job: [f"inprocess:{next(_next_inprocess)}" for _ in range(n)]
                for job, n in jobs.items()}
    else:
        spec = loopback_spec(jobs)
    cluster = af.ClusterSpec(spec)
    servers = {}
    async with trio.open_nursery() as nursery:
        for job, index, _ in cluster.tasks():
            server = await nursery.start(af.Server(cluster, job, index).serve)
            servers[f"{job}:{index}"] = server
        yield cluster, servers
        nursery.cancel_scope.cancel()


@pytest.fixture
def worker_processes():
    """``worker_processes.start(spec, [(job, index), ...], env=None)`` starts CLI workers;
    ``.kill(job, index)`` kills one (SIGKILL); all die at teardown."""
    workers = WorkerProcesses()
    yield workers
    workers.stop_all()


@pytest.fixture(scope="module")
def process_cluster():
    """A ps and two workers as CLI processes, shared by a module; yields (spec, processes)."""
    workers = WorkerProcesses()
    spec = loopback_spec({"ps": 1, "worker": 2})
    workers.start(spec, [("ps", 0), ("worker", 0), ("worker", 1)])
    yield spec, workers
    workers.stop_all()


@pytest.fixture
def pulls_only(monkeypatch):
    """The master (in this process) marks no transfer as pushed: every edge is pulled, as for
    a tensor too large to push (tests of the pull path on small graphs)."""
    from asyncflow.compile import transfer_order
    monkeypatch.setattr(transfer_order, "PUSH_MAX_BYTES", 0)
