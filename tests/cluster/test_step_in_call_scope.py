"""A RunGraph served over the bare same-host protocol runs its step in the call's own cancel
scope (``run_graph_in_scope``: one scope per call instead of two), and still answers as a
step with a scope of its own did: an AbortStep's code, its deadline's DEADLINE_EXCEEDED, and a
client that leaves cancels it. Real servers on loopback ports, in this process."""
import numpy as np
import pytest
import trio

import asyncflow as af
from hand_registration import register_partitions
from loopback_ports import free_ports
from transports.http.call_scope import LentScope
from transports.messages import AbortStep, RemoteCallError, RunGraph, TensorEntry
from transports.service import TransportError


@pytest.fixture(params=["lent", "own"])
async def ps_and_worker(request, pulls_only):
    """(spec, {job: WorkerService}, {job: scopes lent to run_graph_in_scope}) on loopback;
    ``own``: the handler given no scope (a scope of the step's own, as over HTTP), the same
    answers expected."""
    lend = request.param == "lent"
    ps_port, worker_port = free_ports(2)
    spec = af.ClusterSpec({"ps": [f"127.0.0.1:{ps_port}"],
                           "worker": [f"127.0.0.1:{worker_port}"]})
    services, lent = {}, {}
    async with trio.open_nursery() as nursery:
        for job in ("ps", "worker"):
            server = await nursery.start(af.Server(spec, job, 0).serve)
            service = services[job] = server.service
            service.test_server = server  # (a test stops it)
            lent[job] = []
            original = service.run_graph_in_scope

            async def in_scope(request, scope, original=original, seen=lent[job]):
                seen.append(scope)
                return await original(request, scope if lend else None)

            service.run_graph_in_scope = in_scope
        yield spec, services, lent
        nursery.cancel_scope.cancel()


async def _registered(spec):
    """The ps computes three parts of ``x`` that the worker adds (three pulled edges)."""
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            x = af.placeholder(af.float32, [3], name="x")
            parts = [af.multiply(x, float(i), name=f"part{i}") for i in range(3)]
        with af.device("/job:worker/task:0"):
            total = af.add_n(parts, name="total")
    return await register_partitions(spec, graph, (x,), (total,))


def _worker_step(handles, step_id, **kwargs):
    _, handle, options = handles["worker"]
    return RunGraph(handle, step_id, [], list(options.fetches), request_id=step_id, **kwargs)


async def test_a_step_runs_in_the_calls_scope_and_an_abort_answers_its_code(ps_and_worker):
    spec, services, lent = ps_and_worker
    with trio.fail_after(30):
        handles = await _registered(spec)
        w_channel = handles["worker"][0]
        outcome = {}

        async def worker_step():
            try:
                await w_channel.run_graph(_worker_step(handles, 9))
            except RemoteCallError as exc:
                outcome["error"] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker_step)
            while 9 not in services["worker"]._steps or not services["worker"]._steps[
                    9].running:  # bounded by fail_after: the RunGraph crosses a real socket
                await trio.sleep(0.001)
            await w_channel.abort_step(AbortStep(9, "CANCELLED", "the client went away"))
        assert outcome["error"].code == "ABORTED" and outcome["error"].derived
        assert "step 9 was aborted on /job:worker" in outcome["error"].message
        assert w_channel.bare_calls > 0 and len(lent["worker"]) == 1
        assert isinstance(lent["worker"][0], LentScope)  # (the call's share of its scope)
        assert not lent["worker"][0].cancel_called  # (its call ended: it acts on nothing)
        assert not services["worker"]._steps
        # The server serves on: a whole step of both tasks.
        ps_channel, ps_handle, ps_options = handles["ps"]
        values = np.arange(3, dtype=np.float32)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ps_channel.run_graph, RunGraph(
                ps_handle, 10, [TensorEntry(ps_options.feeds[0], values)],
                list(ps_options.fetches), request_id=10))
            reply = await w_channel.run_graph(_worker_step(handles, 10))
        np.testing.assert_array_equal(reply.tensors[0].value, 3 * values)


async def test_a_step_past_its_deadline_answers_deadline_exceeded(ps_and_worker):
    spec, services, lent = ps_and_worker
    with trio.fail_after(30):
        handles = await _registered(spec)
        w_channel = handles["worker"][0]
        with pytest.raises(RemoteCallError, match="ran past its 200 ms deadline") as caught:
            await w_channel.run_graph(_worker_step(handles, 11, timeout_ms=200))
        assert caught.value.code == "DEADLINE_EXCEEDED"
        assert len(lent["worker"]) == 1 and not services["worker"]._steps
        assert services["worker"].counters.steps_failed == 1


async def test_a_client_that_leaves_cancels_the_step(ps_and_worker):
    spec, services, lent = ps_and_worker
    with trio.fail_after(30):
        handles = await _registered(spec)
        w_channel = handles["worker"][0]
        with trio.CancelScope() as gone:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(w_channel.run_graph, _worker_step(handles, 12))
                while 12 not in services["worker"]._steps:
                    await trio.sleep(0.001)
                gone.cancel()
        worker = services["worker"]
        while worker._steps or worker.counters.steps_failed != 1:  # the server sees it go
            await trio.sleep(0.001)
        assert worker._tombstones[12] == "failed" and len(lent["worker"]) == 1


async def test_a_server_stopping_under_a_step_answers_unavailable(ps_and_worker):
    """The worker's server stops while its step waits for the ps: the call is answered
    UNAVAILABLE (or its connection ends, which a channel reports as UNAVAILABLE too), as
    a step in a scope of its own is; the step's state is dropped as failed."""
    spec, services, lent = ps_and_worker
    with trio.fail_after(30):
        handles = await _registered(spec)
        w_channel = handles["worker"][0]
        worker = services["worker"]
        outcome = {}

        async def worker_step():
            try:
                await w_channel.run_graph(_worker_step(handles, 13))
            except RemoteCallError as exc:
                outcome["error"] = exc
            except TransportError as exc:
                outcome["transport"] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker_step)
            while 13 not in worker._steps or not worker._steps[13].running:
                await trio.sleep(0.001)
            await worker.test_server.stop()
        error = outcome.get("error") or outcome.get("transport")
        assert error is not None and getattr(error, "code", "UNAVAILABLE") == "UNAVAILABLE", \
            outcome
        assert len(lent["worker"]) == 1 and not worker._steps
        assert worker._tombstones[13] == "failed" and worker.counters.steps_failed == 1
