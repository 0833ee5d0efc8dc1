"""In-process transport specifics; all waits are inside trio, so time is virtual (autojump)."""

from __future__ import annotations

import numpy as np
import pytest
import trio
from transport_fakes import FakeWorker, WrongReplyWorker

from transports import wire
from transports.inprocess import InProcessChannel
from transports.service import TransportDeadlineExceeded
from transports.wire import Limits, RemoteCallError, TensorEntry


async def test_timeout_expires_in_virtual_time_and_cancels_the_handler(autojump_clock):
    worker = FakeWorker()
    channel = InProcessChannel(worker, address="worker:0")
    start = trio.current_time()
    with pytest.raises(TransportDeadlineExceeded,
                       match="recv_tensors to worker:0 got no answer within 600 s"):
        await channel.recv_tensors(wire.RecvTensors(1, ["k"]), timeout=600)
    assert trio.current_time() - start == pytest.approx(600)
    assert worker.recv_cancelled.is_set() and worker.waiting == 0


async def test_recv_without_deadline_waits_as_long_as_it_takes(autojump_clock):
    worker = FakeWorker()
    channel = InProcessChannel(worker)
    handle = (await channel.register_graph(wire.RegisterGraph({"nodes": []}, "s"))).graph_handle
    got = []
    async with trio.open_nursery() as nursery:
        async def receive() -> None:
            got.append(await channel.recv_tensors(wire.RecvTensors(2, ["k"])))

        nursery.start_soon(receive)
        await trio.sleep(3600)
        await trio.testing.wait_all_tasks_blocked()
        assert worker.waiting == 1 and not got
        await channel.run_graph(wire.RunGraph(handle, 2, [TensorEntry("k", np.ones(2))], []))
    assert got[0].tensors == [TensorEntry("k", np.ones(2))]


async def test_handler_bugs_are_reported_as_internal():
    channel = InProcessChannel(WrongReplyWorker())
    with pytest.raises(RemoteCallError, match="INTERNAL: LocalProtocolError: handler health "
                                              "returned Ack, expected HealthReply"):
        await channel.health()


async def test_limits_apply_to_requests_locally_and_to_replies_as_internal_errors():
    class BigReplyWorker(FakeWorker):
        async def run_graph(self, request: wire.RunGraph) -> wire.RunGraphReply:
            return wire.RunGraphReply([TensorEntry("x", np.zeros(300))])

    channel = InProcessChannel(BigReplyWorker(), limits=Limits(max_tensor_bytes=1024))
    with pytest.raises(wire.LocalProtocolError, match="'x' is 2400 bytes, over the limit of 1024"):
        await channel.run_graph(wire.RunGraph("g", 1, [TensorEntry("x", np.zeros(300))], []))
    with pytest.raises(RemoteCallError, match="INTERNAL: .*'x' is 2400 bytes, over the limit"):
        await channel.run_graph(wire.RunGraph("g", 1, [], []))


async def test_a_group_of_one_remote_call_error_keeps_its_code():
    class GroupWorker(FakeWorker):
        async def reset(self, request: wire.Reset) -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._fail)

        async def _fail(self) -> None:
            raise RemoteCallError("FAILED_PRECONDITION", "container busy")

    with pytest.raises(RemoteCallError, match="FAILED_PRECONDITION: container busy"):
        await InProcessChannel(GroupWorker()).reset(wire.Reset(None))
