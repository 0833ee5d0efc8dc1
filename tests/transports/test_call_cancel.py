"""A ``CallCancel`` lent to a step's RunGraph in place of an entered cancel scope
(``transports.service``): on a pooled same-host connection the call enters no trio scope and
the cancel closes the connection its answer is awaited on; anywhere else (HTTP, no pooled
connection) the channel enters a scope the cancel reaches; a cancel from another thread acts
in the call's trio run. Either way the call raises
TransportUnavailable, never retried, and the worker's handler is cancelled; a cancel before the
call sends nothing; a pooled connection the server closed while idle is called again."""

from __future__ import annotations

import numpy as np
import pytest
import trio
from transport_fakes import FakeWorker

from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server
from transports.messages import RegisterGraph
from transports.run_graph_step import RunGraphStep, StepCall
from transports.service import CallCancel, TransportUnavailable

GENEROUS = 20


class _BlockingWorker(FakeWorker):
    """A graph ``{"block": True}`` waits in its RunGraph until cancelled (``arrived``, then
    ``cancelled`` set)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = trio.Event()
        self.cancelled = trio.Event()

    async def run_graph(self, request):
        if self.graphs.get(request.graph_handle, {}).get("block"):
            self.calls.append("run_graph")
            self.arrived.set()
            try:
                await trio.sleep_forever()
            finally:
                self.cancelled.set()
        return await super().run_graph(request)


async def _registered(channel, block):
    handle = (await channel.register_graph(RegisterGraph({"nodes": [], "block": block}, "s"))
              ).graph_handle
    return RunGraphStep(handle, ("x:0",), ("x:0",))


def _call(step, request_id):
    return StepCall(step, 2 * request_id + 1, request_id, [np.arange(3, dtype=np.float32)])


@pytest.mark.parametrize("where", ["task", "thread"])
@pytest.mark.parametrize("bare", [True, False], ids=["bare", "http"])
async def test_a_cancel_ends_a_waiting_step_call_and_its_handler(bare, where):
    handler = _BlockingWorker()
    async with open_http_server(handler) as server:
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(server.address, bare=bare) as channel:
                step = await _registered(channel, block=True)
                assert bool(channel._bare_idle) == bare  # (pooled by the registration)
                cancel, outcome = CallCancel(), []

                async def call():
                    with pytest.raises(TransportUnavailable, match="run_graph .*was cancelled"):
                        await channel.run_graph_step(_call(step, 1), scope=cancel, entered=True)
                    outcome.append("cancelled")

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call)
                    await handler.arrived.wait()
                    assert channel._in_flight == ({cancel} if bare else {cancel._scope})
                    # bare: no scope, the connection the answer is awaited on; else a scope
                    assert (cancel._socket is not None, cancel._scope is None) == (bare, bare)
                    if where == "task":
                        cancel.cancel()
                    else:  # (a session closed from another thread: acts in the call's run)
                        await trio.to_thread.run_sync(cancel.cancel)
                await handler.cancelled.wait()  # the worker saw its client go
                assert outcome == ["cancelled"] and not channel._in_flight
                assert cancel._socket is None and cancel._scope is None
                assert not channel._busy and not channel._bare_idle  # closed, not pooled
                assert (await channel.health()).incarnation == 7  # the channel serves on
                assert channel.bare_calls == (2 if bare else 0)


@pytest.mark.parametrize("bare", [True, False], ids=["bare", "http"])
async def test_a_cancel_before_the_call_sends_nothing(bare):
    handler = _BlockingWorker()
    async with open_http_server(handler) as server:
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(server.address, bare=bare) as channel:
                step = await _registered(channel, block=False)
                cancel = CallCancel()
                cancel.cancel()
                with pytest.raises(TransportUnavailable, match="was cancelled"):
                    await channel.run_graph_step(_call(step, 1), scope=cancel, entered=True)
                assert "run_graph" not in handler.calls and not channel._in_flight
                reply = await channel.run_graph_step(_call(step, 2), scope=CallCancel(),
                                                     entered=True)
                np.testing.assert_array_equal(reply.tensors[0].value, np.arange(3))
                assert handler.calls.count("run_graph") == 1


async def test_a_pooled_connection_the_server_closed_while_idle_is_called_again():
    handler = _BlockingWorker()
    async with open_http_server(handler) as server:
        with trio.fail_after(GENEROUS):
            async with TrioHttpChannel(server.address) as channel:
                step = await _registered(channel, block=False)
                (served,) = server._bare._open  # the server's end of the pooled connection
                sock = served.stream.socket
                trio.lowlevel.notify_closing(sock)
                sock.close()
                while server._bare._open:  # (its task sees the close and ends)
                    await trio.sleep(0.001)
                cancel = CallCancel()
                reply = await channel.run_graph_step(_call(step, 1), scope=cancel, entered=True)
                np.testing.assert_array_equal(reply.tensors[0].value, np.arange(3))
                assert handler.calls.count("run_graph") == 1 and not cancel.cancel_called
                assert cancel._socket is None and cancel._scope is None
                assert len(channel._bare_idle) == 1  # the new connection, pooled
