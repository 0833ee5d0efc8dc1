"""One suite, every transport: the in-process channel and HTTP must behave the same.

Runs on real time because of the HTTP case; every wait is bounded by ``trio.fail_after``.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import trio
from transport_fakes import sample_arrays

from transports import wire
from transports.service import TransportDeadlineExceeded, TransportUnavailable
from transports.wire import LocalProtocolError, RemoteCallError, Status, TensorEntry

GENEROUS = 20  # seconds; a loaded 2-core CI machine is slow, a hang is still caught


async def register(channel, graph=None) -> str:
    reply = await channel.register_graph(wire.RegisterGraph(graph or {"nodes": [1, 2]}, "s"))
    return reply.graph_handle


async def test_health_devices_and_metrics(worker_and_channel):
    worker, channel = worker_and_channel
    with trio.fail_after(GENEROUS):
        health = await channel.health()
        assert health == wire.HealthReply(7, "/job:worker/task:0",
                                          ["/job:worker/task:0/device:CPU:0"],
                                          wire.WorkerStatistics())
        assert await channel.devices() == ["/job:worker/task:0/device:CPU:0"]
        assert "fake_calls_total 1\n" in await channel.metrics_text()
        assert json.loads(await channel.status_json()) == {"calls": 1, "text": "\u00e9t\u00e9"}


async def test_graph_lifecycle_and_error_codes(worker_and_channel):
    worker, channel = worker_and_channel
    with trio.fail_after(GENEROUS):
        handle = await register(channel)
        assert handle == "graph/0" and worker.graphs[handle] == {"nodes": [1, 2]}
        assert await channel.deregister_graph(wire.DeregisterGraph(handle)) is None
        with pytest.raises(RemoteCallError, match="NOT_FOUND: no graph 'graph/0'") as caught:
            await channel.deregister_graph(wire.DeregisterGraph(handle))
        assert caught.value.code == "NOT_FOUND"
        with pytest.raises(RemoteCallError) as caught:
            await channel.register_graph(wire.RegisterGraph({}, "s"))
        assert (caught.value.code, caught.value.message) == ("INVALID_ARGUMENT",
                                                             "graph has no 'nodes'")


async def test_run_graph_carries_every_dtype_and_layout(worker_and_channel):
    worker, channel = worker_and_channel
    feeds = [TensorEntry(name, value) for name, value in sample_arrays().items()]
    feeds += [TensorEntry("dead", None, is_dead=True),
              TensorEntry("err", None, error=Status("ABORTED", "x"))]
    with trio.fail_after(GENEROUS):
        handle = await register(channel)
        reply = await channel.run_graph(wire.RunGraph(
            handle, 3, feeds, [f.key for f in reversed(feeds)], timeout_ms=1000))
    assert reply == wire.RunGraphReply(feeds[::-1], wire.StepStats([
        wire.NodeExecStats("node0", "Fake", "cpu", 0, 1),
        wire.NodeExecStats("node1", "Fake", "cpu", 1, 2)]))
    for sent in feeds:  # the worker got copies, never the caller's arrays
        if sent.value is not None:
            assert not any(np.shares_memory(sent.value, got) for got in worker.received)


async def test_handler_failures_become_remote_call_errors(worker_and_channel):
    worker, channel = worker_and_channel
    with trio.fail_after(GENEROUS):
        handle = await register(channel, {"fail": "kernel exploded"})
        with pytest.raises(RemoteCallError, match="INTERNAL: ValueError: kernel exploded"):
            await channel.run_graph(wire.RunGraph(handle, 1, [], []))
        with pytest.raises(RemoteCallError, match="NOT_FOUND"):
            await channel.run_graph(wire.RunGraph("nope", 1, [], []))
        assert await channel.health()  # still serving


async def test_recv_waits_for_the_producer_and_keeps_key_order(worker_and_channel):
    worker, channel = worker_and_channel
    replies = []

    async def receive() -> None:
        replies.append(await channel.recv_tensors(wire.RecvTensors(5, ["b", "a"])))

    with trio.fail_after(GENEROUS):
        handle = await register(channel)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await worker.waiter_arrived.wait()
            assert not replies
            await channel.run_graph(wire.RunGraph(handle, 5, [
                TensorEntry("a", np.arange(3)), TensorEntry("b", np.array([b"z"], object))], []))
    assert replies == [wire.RecvTensorsReply([TensorEntry("b", np.array([b"z"], object)),
                                              TensorEntry("a", np.arange(3))])]


async def test_abort_wakes_a_waiting_recv(worker_and_channel):
    worker, channel = worker_and_channel
    with trio.fail_after(GENEROUS):
        async with trio.open_nursery() as nursery:
            async def receive() -> None:
                with pytest.raises(RemoteCallError, match="ABORTED: peer failed") as caught:
                    await channel.recv_tensors(wire.RecvTensors(8, ["k"]))
                assert caught.value.code == "ABORTED"

            nursery.start_soon(receive)
            await worker.waiter_arrived.wait()
            await channel.abort_step(wire.AbortStep(8, "ABORTED", "peer failed"))
        await channel.cleanup_step(wire.CleanupStep(8))
    assert 8 not in worker.steps and worker.waiting == 0


async def test_timeout_cancels_the_remote_handler(worker_and_channel):
    worker, channel = worker_and_channel
    with trio.fail_after(GENEROUS):
        with pytest.raises(TransportDeadlineExceeded, match="recv_tensors .* within 0.3 s"):
            await channel.recv_tensors(wire.RecvTensors(9, ["never"]), timeout=0.3)
        await worker.recv_cancelled.wait()
    assert worker.waiting == 0


async def test_enclosing_cancel_scope_cancels_the_remote_handler(worker_and_channel):
    worker, channel = worker_and_channel
    with trio.fail_after(GENEROUS):
        with trio.move_on_after(0.3) as scope:
            await channel.recv_tensors(wire.RecvTensors(9, ["never"]))
        assert scope.cancelled_caught
        await worker.recv_cancelled.wait()
    assert worker.waiting == 0


async def test_closing_the_channel_fails_calls_in_flight_and_later(worker_and_channel):
    worker, channel = worker_and_channel
    with trio.fail_after(GENEROUS):
        async with trio.open_nursery() as nursery:
            async def receive() -> None:
                with pytest.raises(TransportUnavailable, match="closed during recv_tensors"):
                    await channel.recv_tensors(wire.RecvTensors(9, ["never"]))

            nursery.start_soon(receive)
            await worker.waiter_arrived.wait()
            await channel.aclose()
        await worker.recv_cancelled.wait()
        with pytest.raises(TransportUnavailable, match="is closed"):
            await channel.health()


async def test_reset_cleanup_and_concurrent_calls(worker_and_channel):
    worker, channel = worker_and_channel
    results = {}

    async def run(i: int) -> None:
        value = np.full((i + 1, 3), i, dtype=np.int64)
        reply = await channel.run_graph(wire.RunGraph(handle, 100 + i,
                                                      [TensorEntry("x", value)], ["x"]))
        results[i] = reply.tensors[0].value

    with trio.fail_after(GENEROUS):
        handle = await register(channel)
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(run, i)
        await channel.reset(wire.Reset(None))
        await channel.reset(wire.Reset(["shared"]))
    assert worker.resets == [None, ["shared"]]
    for i in range(20):
        np.testing.assert_array_equal(results[i], np.full((i + 1, 3), i))


async def test_unsendable_requests_fail_locally(worker_and_channel):
    worker, channel = worker_and_channel
    with pytest.raises(LocalProtocolError, match="complex128"):
        await channel.run_graph(wire.RunGraph("g", 1, [TensorEntry("c", np.zeros(1, complex))],
                                              []))
    with pytest.raises(LocalProtocolError, match="step_id must be int"):
        await channel.cleanup_step(wire.CleanupStep("7"))
    assert worker.calls == []
