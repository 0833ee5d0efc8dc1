"""Real worker processes started through the CLI: steps, bad input, tokens, kill -9.

Processes run on loopback ports and real time; every wait has a deadline.
"""
import http.client
import json
import signal
import time

import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.cluster import channels
from transports.messages import AbortStep, CleanupStep, RecvTensors, RemoteCallError
from transports.service import RPCS
from transports.wire import encode

from cluster_processes import loopback_spec
from device_kinds import task_devices

TIMEOUT = af.RunOptions(timeout_in_ms=20000)


def _graph():
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            v = af.Variable(np.arange(4, dtype=np.float32), name="v")
        with af.device("/job:worker/task:0"):
            x = af.placeholder(af.float32, [4], name="x")
            s = v * x
        with af.device("/job:worker/task:1"):
            total = af.reduce_sum(s, name="total")
    return graph, v, x, total


_STEPS = 'asyncflow_worker_steps_total{task="/job:worker/replica:0/task:1"} '
_SAME_HOST_CALLS = "asyncflow_transport_same_host_calls_total "


def _count(text, prefix):
    """The counter whose line starts with ``prefix`` (its name and labels) in a task's
    metrics; 0 where it has no line yet."""
    return next((int(line[len(prefix):]) for line in text.splitlines()
                 if line.startswith(prefix)), 0)


async def test_cli_workers_run_a_step_and_export_metrics(process_cluster):
    # The cluster is the module's: its other tests may have run steps on it first (in another
    # order of the tests), so this step's counts are taken from before it.
    spec, _ = process_cluster
    graph, v, x, total = _graph()
    channel = channels.connect(spec["worker"][1])
    before = await channel.metrics_text(timeout=10)
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(v.initializer, options=TIMEOUT)
        assert await sess.run(total, {x: np.ones(4, np.float32)}, options=TIMEOUT) == 6.0
    text = await channel.metrics_text(timeout=10)
    assert _count(text, _STEPS) == _count(before, _STEPS) + 1
    assert "asyncflow_transport_requests_total" in text
    # The master's calls (and the pull from worker 0) took the bare same-host protocol.
    calls = _count(text, _SAME_HOST_CALLS) - _count(before, _SAME_HOST_CALLS)
    assert calls >= 2  # (RegisterGraph and RunGraph at least)
    await channel.aclose()


def _request(address, method, path, body=None, headers=None):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    except (ConnectionError, http.client.HTTPException) as exc:  # server may cut a huge body
        return 413, str(exc)
    finally:
        conn.close()


def _paths():
    for rpc in RPCS:
        yield rpc, rpc.path.format(step_id=1, graph_handle="x")
    yield None, "/metrics"


def _bad_requests(address):
    """(what, status, text) for garbage, truncated and oversized bodies on every route."""
    frame = b"".join(bytes(b) for b in encode(AbortStep(1, "ABORTED", "x")))
    results = []
    for rpc, path in _paths():
        method = rpc.http_method if rpc else "GET"
        cases = [("garbage", b"\x00garbage\xff" * 3, {}),
                 ("truncated", frame[: len(frame) // 2], {}),
                 ("oversized", b"", {"Content-Length": str(1 << 40)})]
        for what, body, headers in cases:
            status, text = _request(address, "POST" if method == "GET" else method, path,
                                    body, {"Content-Type": "application/x-asyncflow-frame",
                                           **headers})
            results.append((f"{method} {path} {what}", status, text))
    return results


async def test_garbage_to_every_route_is_4xx_and_loses_no_state(process_cluster):
    spec, _ = process_cluster
    graph, v, x, total = _graph()
    address = spec["worker"][0]
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(v.initializer, options=TIMEOUT)
        await sess.run(total, {x: np.ones(4, np.float32)}, options=TIMEOUT)
        channel = channels.connect(address)
        graphs_before = (await channel.health(timeout=10)).stats.graphs
        results = await trio.to_thread.run_sync(_bad_requests, address)
        for what, status, text in results:
            assert 400 <= status < 500, (what, status, text)
            assert text, what
        # Typed errors for unknown steps and handles through a proper client.
        with pytest.raises(RemoteCallError, match="NOT_FOUND"):
            await channel.cleanup_step(CleanupStep(12345), timeout=10)
        with pytest.raises(RemoteCallError, match="INVALID_ARGUMENT"):
            await channel.recv_tensors(RecvTensors(1, ["not;a;key"]), timeout=10)
        # Still serving, same registered graphs, and the session's step still runs.
        assert (await channel.health(timeout=10)).stats.graphs == graphs_before
        assert await sess.run(total, {x: np.full(4, 2, np.float32)}, options=TIMEOUT) == 12.0
        await channel.aclose()


async def test_token_is_required_when_set(worker_processes, monkeypatch):
    spec = loopback_spec({"worker": 2})
    worker_processes.start(spec, [("worker", 0), ("worker", 1)],
                           env={"ASYNCFLOW_TOKEN": "s3cret"})
    with af.Graph().as_default() as graph:
        with af.device("/job:worker/task:0"):
            four = af.constant(2.0) * 2.0
        with af.device("/job:worker/task:1"):
            out = four * 2.0  # worker 1 pulls from worker 0 with the token too
    monkeypatch.delenv("ASYNCFLOW_TOKEN", raising=False)
    with pytest.raises(af.errors.UnauthenticatedError, match="401"):
        async with af.Session(graph=graph, cluster=spec):
            pass
    monkeypatch.setenv("ASYNCFLOW_TOKEN", "wrong")
    with pytest.raises(af.errors.UnauthenticatedError):
        async with af.Session(graph=graph, cluster=spec):
            pass
    monkeypatch.setenv("ASYNCFLOW_TOKEN", "s3cret")
    async with af.Session(graph=graph, cluster=spec) as sess:
        assert await sess.run(out, options=TIMEOUT) == 8.0
    status, _ = await trio.to_thread.run_sync(_request, spec["worker"][0], "GET", "/metrics")
    assert status == 401


async def test_asyncflow_config_and_target_sessions(worker_processes):
    spec = loopback_spec({"worker": 1})
    config = {"cluster": spec, "task": {"type": "worker", "index": 0}}
    lines = worker_processes.start(spec, [("worker", 0)], env={"ASYNCFLOW_CONFIG": json.dumps(config)},
                          flags=False)
    assert lines[("worker", 0)] == (f"asyncflow worker /job:worker/task:0 listening on "
                                    f"{spec['worker'][0]}")
    with af.Graph().as_default() as graph:
        with af.device("/job:worker/task:0"):
            out = af.constant([1.0, 2.0]) * 3.0
    async with af.Session("grpc://" + spec["worker"][0], graph=graph) as sess:
        assert sess.list_devices() == task_devices("/job:worker/replica:0/task:0")
        np.testing.assert_array_equal(await sess.run(out, options=TIMEOUT), [3.0, 6.0])


def _step_blocked_on_task_1():
    """``(graph, out)``: ``out`` on task 0 waits for a dequeue on task 1 that nothing feeds."""
    with af.Graph().as_default() as graph:
        with af.device("/job:worker/task:1"):
            queue = af.FIFOQueue(1, [af.float32], shapes=[[]], name="q")
            item = queue.dequeue()
        with af.device("/job:worker/task:0"):
            out = item + 1.0
    return graph, out


async def test_kill_9_mid_step_fails_with_unavailable_quickly(worker_processes):
    spec = loopback_spec({"worker": 2})
    worker_processes.start(spec, [("worker", 0), ("worker", 1)])
    graph, out = _step_blocked_on_task_1()
    probe = channels.connect(spec["worker"][1])
    async with af.Session(graph=graph, cluster=spec) as sess:
        async with trio.open_nursery() as nursery:
            outcome = {}

            async def blocked_step():
                started = time.monotonic()
                try:
                    await sess.run(out, options=af.RunOptions(timeout_in_ms=60000))
                except af.errors.OpError as exc:
                    outcome["error"] = exc
                outcome["seconds"] = time.monotonic() - started

            nursery.start_soon(blocked_step)
            with trio.fail_after(20):
                while (await probe.health(timeout=10)).stats.steps_in_flight == 0:
                    await trio.sleep(0.05)
            worker_processes.kill("worker", 1)
        # Quickly means before the step's own 60 s deadline, which would have raised
        # DeadlineExceededError: the kill was noticed, not waited out (no wall-clock bound).
        assert isinstance(outcome["error"], af.errors.UnavailableError), outcome
        assert "task:1" in outcome["error"].message
    await probe.aclose()


async def test_a_hung_worker_is_declared_unavailable_by_the_health_watchdog(worker_processes):
    spec = loopback_spec({"worker": 2})
    worker_processes.start(spec, [("worker", 0), ("worker", 1)])
    graph, out = _step_blocked_on_task_1()
    config = af.SessionConfig(health_check_interval_s=0.5, worker_dead_after_s=2.0)
    probe = channels.connect(spec["worker"][1])
    hung = worker_processes.procs[("worker", 1)]
    async with af.Session(graph=graph, cluster=spec, config=config) as sess:
        # Only guards against a hang: the step has no deadline of its own (TF1) and the
        # stopped worker keeps its connections open, so nothing but the watchdog (2.5 s here)
        # can end it; its UnavailableError below is the behaviour, not how fast it came.
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                outcome = {}

                async def blocked_step():
                    try:
                        await sess.run(out)  # the watchdog decides
                    except af.errors.OpError as exc:
                        outcome["error"] = exc

                nursery.start_soon(blocked_step)
                with trio.fail_after(20):
                    while (await probe.health(timeout=10)).stats.steps_in_flight == 0:
                        await trio.sleep(0.05)
                hung.send_signal(signal.SIGSTOP)
        assert isinstance(outcome["error"], af.errors.UnavailableError), outcome
        assert "task:1" in outcome["error"].message
    hung.send_signal(signal.SIGCONT)
    await probe.aclose()
