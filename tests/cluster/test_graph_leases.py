"""Leases that expire by themselves: the graphs of clients that registered, ran once and died
are dropped within their lease plus ``lease_check_period_s`` even when no request reaches the
worker, and its metrics show the count falling; a live session that idles past the lease
keeps working (the master registers again before the lease runs out)."""
import datetime
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import trio

import asyncflow as af
from asyncflow.cluster.master import Master
from killable_workers import WorkerProcess
from test_hostile_input import http
from transports.messages import Health, RunGraph, TensorEntry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_next_address = iter(range(5100, 5200))
_step_ids = iter(range(10**9, 10**9 + 1000))


def _graph(task):
    graph = af.Graph()
    with graph.as_default(), af.device(task):
        x = af.placeholder(af.float32, [None], name="x")
        y = x * 2.0
    return graph, x, y


async def _client_that_dies(spec):
    """Register ``y = x * 2``, run it once and vanish without deregistering (a client -9)."""
    graph, x, y = _graph("/job:worker/task:0")
    master = Master(spec, af.SessionConfig())
    await master.open()
    run = master.compile(graph, (x,), (y,), ())
    await master._register(run)
    (tg,) = run.task_graphs
    channel = master.tasks[tg.task].channel
    reply = await channel.run_graph(RunGraph(tg.handle, next(_step_ids), [TensorEntry(
        tg.options.feeds[0], np.ones(2, np.float32))], list(tg.options.fetches), request_id=1))
    np.testing.assert_array_equal(reply.tensors[0].value, [2.0, 2.0])
    for task in master.tasks.values():
        await task.channel.aclose()


def _metric(text, name):
    return int(re.search(rf"^{name}\{{[^}}]*\}} (\d+)$", text, re.M).group(1))


async def test_graphs_of_vanished_clients_expire_with_no_request_and_live_sessions_go_on(
        autojump_clock, cpu_only):
    # On the CPU: a GPU's stream events complete on another thread, and while the test waits
    # for them the autojump clock would jump to the next lease deadline (its waits must all be
    # inside trio).
    spec = af.ClusterSpec({"worker": [f"inprocess:{next(_next_address)}"]})
    async with trio.open_nursery() as nursery:
        server = await nursery.start(af.Server(spec, "worker", 0, graph_lease_s=5.0).serve)
        service = server.service
        assert service.lease_check_period_s == 1.25  # the documented margin: a quarter lease
        graph, x, y = _graph("/job:worker/task:0")
        async with af.Session(graph=graph, cluster=spec) as live:
            assert (await live.run(y, {x: [1.0]})).tolist() == [2.0]
            for _ in range(3):
                await _client_that_dies(spec)
            assert service.statistics().graphs == 4
            assert (await service.health(Health())).stats.graphs == 4
            assert _metric(await service.metrics_text(),
                           "asyncflow_worker_registered_graphs") == 4
            await trio.sleep(4.9)  # nothing reaches the worker meanwhile
            assert service.statistics().graphs == 4
            # Within the lease plus the margin (and a hair, for who wakes first at the bound).
            await trio.sleep(5.0 + service.lease_check_period_s + 0.01 - 4.9)
            assert service.statistics().graphs == 0  # dropped by the worker on its own
            assert _metric(await service.metrics_text(),
                           "asyncflow_worker_registered_graphs") == 0
            assert (await service.health(Health())).stats.graphs == 0
            await trio.sleep(60)
            # The live session idled past its lease: it registers again and runs.
            assert (await live.run(y, {x: [3.0]})).tolist() == [6.0]
            assert service.statistics().graphs == 1
        nursery.cancel_scope.cancel()


CLIENT = textwrap.dedent("""
    import os, signal, sys
    import numpy as np, trio
    import asyncflow as af

    async def main(address):
        graph = af.Graph()
        with graph.as_default(), af.device("/job:worker/task:0"):
            x = af.placeholder(af.float32, [None])
            y = x * 2.0
        sess = await af.Session(graph=graph, cluster={"worker": [address]}).__aenter__()
        assert (await sess.run(y, {x: [1.0]})).tolist() == [2.0]
        print("ran", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # dies without closing its session

    trio.run(main, sys.argv[1])
""")

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*")


def _when(line):
    return datetime.datetime.strptime(_STAMP.match(line).group(1), "%Y-%m-%d %H:%M:%S,%f")


def _wait_for_lines(worker, pattern, count, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for line in list(worker.log_lines) if pattern in line]
        if len(lines) >= count:
            return lines
        time.sleep(0.1)  # polling a child's log, bounded by the deadline
    raise AssertionError(f"{count} lines with {pattern!r} expected:\n"
                         + "\n".join(worker.log_lines[-30:]))


def test_three_killed_clients_leave_no_graph_behind_on_a_worker_process(tmp_path):
    lease = 2.0
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0,
                           data_dir=tmp_path, args=["--graph-lease-s", str(lease),
                                                    "--log-level", "INFO"]).start()
    try:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
                   OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        clients = [subprocess.Popen([sys.executable, "-c", CLIENT, worker.address], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for _ in range(3)]
        for client in clients:
            out, err = client.communicate(timeout=120)
            assert client.returncode == -signal.SIGKILL and "ran" in out, err
        registered = _wait_for_lines(worker, "registered graph", 3, 30)
        # No request reaches the worker from here on: it must drop the graphs by itself.
        dropped = _wait_for_lines(worker, "lease of 2 s expired", 3, 30)
        margin = lease / 4  # lease_check_period_s
        last_registration = max(_when(line) for line in registered)
        last_drop = max(_when(line) for line in dropped)
        # Each graph ran just after registering; a loaded machine may add a few seconds.
        assert (last_drop - last_registration).total_seconds() <= lease + margin + 5.0
        status, body = http(worker.address, "GET", "/metrics")
        assert status == 200
        assert _metric(body.decode(), "asyncflow_worker_registered_graphs") == 0
    finally:
        worker.kill()
