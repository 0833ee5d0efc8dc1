"""``Channel.run_graph(scope=...)``: the call runs in the caller's cancel scope (one scope per
step's call), with the channel's deadline and closing as for a scope of its own."""

from __future__ import annotations

import math

import pytest
import trio
from transport_fakes import FakeWorker

from transports import wire
from transports.inprocess import InProcessChannel
from transports.service import TransportDeadlineExceeded, TransportUnavailable


class StuckWorker(FakeWorker):
    """A RunGraph that never ends; counts the handlers that saw their cancellation."""

    def __init__(self) -> None:
        super().__init__()
        self.started = trio.Event()
        self.cancelled = 0

    async def run_graph(self, request: wire.RunGraph) -> wire.RunGraphReply:
        self.started.set()
        try:
            await trio.sleep_forever()
        finally:
            self.cancelled += 1


def _request(step_id: int = 1) -> wire.RunGraph:
    return wire.RunGraph("g", step_id, [], [], request_id=step_id)


async def test_cancelling_the_lent_scope_ends_the_call_with_none(autojump_clock):
    worker = StuckWorker()
    channel = InProcessChannel(worker, address="worker:0")
    scope = trio.CancelScope()
    results = []
    async with trio.open_nursery() as nursery:
        async def call() -> None:
            results.append(await channel.run_graph(_request(), timeout=600, scope=scope))

        nursery.start_soon(call)
        await worker.started.wait()
        assert scope.deadline == pytest.approx(trio.current_time() + 600)
        scope.cancel()
    assert results == [None] and worker.cancelled == 1
    assert not channel._in_flight


async def test_a_lent_scope_cancelled_before_the_call_cancels_it_at_once(autojump_clock):
    worker = StuckWorker()
    scope = trio.CancelScope()
    scope.cancel()
    start = trio.current_time()
    assert await InProcessChannel(worker).run_graph(_request(), scope=scope) is None
    assert worker.cancelled == 1 and trio.current_time() == start


async def test_the_deadline_of_a_lent_scope_is_the_calls_timeout(autojump_clock):
    worker = StuckWorker()
    channel = InProcessChannel(worker, address="worker:0")
    scope = trio.CancelScope()
    start = trio.current_time()
    with pytest.raises(TransportDeadlineExceeded,
                       match="run_graph to worker:0 got no answer within 30 s"):
        await channel.run_graph(_request(), timeout=30, scope=scope)
    assert trio.current_time() - start == pytest.approx(30) and worker.cancelled == 1
    # An earlier deadline of the caller's own is kept (and then it is the caller's: None).
    early = trio.CancelScope(deadline=trio.current_time() + 5)
    assert await channel.run_graph(_request(2), timeout=30, scope=early) is None
    unbounded = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: channel.run_graph(_request(3), scope=unbounded))
        await trio.sleep(3600)
        assert unbounded.deadline == math.inf
        unbounded.cancel()


async def test_closing_the_channel_ends_a_call_in_a_lent_scope_as_unavailable(autojump_clock):
    worker = StuckWorker()
    channel = InProcessChannel(worker, address="worker:0")
    failures = []
    async with trio.open_nursery() as nursery:
        async def call() -> None:
            with pytest.raises(TransportUnavailable, match="closed during run_graph") as info:
                await channel.run_graph(_request(), timeout=600, scope=trio.CancelScope())
            failures.append(info.value)

        nursery.start_soon(call)
        await worker.started.wait()
        await channel.aclose()
    assert len(failures) == 1 and worker.cancelled == 1


async def test_an_enclosing_cancellation_still_propagates_through_a_lent_scope(autojump_clock):
    worker = StuckWorker()
    channel = InProcessChannel(worker)
    with trio.move_on_after(10) as outer:
        await channel.run_graph(_request(), timeout=600, scope=trio.CancelScope())
        pytest.fail("the call returned under a cancelled enclosing scope")
    assert outer.cancelled_caught and worker.cancelled == 1
