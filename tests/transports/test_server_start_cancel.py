"""Cancelling ``open_http_server`` at every task step of its start, and of its first calls.

An instrument cancels the caller's scope before the N-th task step of the run (any task: the
caller, the server's, the client's), for N = 0, 1, ... until a run ends before its N-th step:
every schedule point of the start, and of a first call over the bare same-host socket and over
TCP, is hit once. The server's connections live in a shielded scope that only its stop ends, so
a start that left them behind would hang past any ``trio.fail_after``: each run has a thread of
its own, joined with a bound (``tests/bounded_threads.py``). Each run must also leave none of
its same-host files (sockets, lock files) behind.
"""

from __future__ import annotations

import os

import pytest
import trio
from bounded_threads import bounded
from transport_fakes import FakeWorker

from transports.http import same_host
from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server

GENEROUS = 20
MOST_STEPS = 400  # a run past this many task steps is a loop, not a start
HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


class _CancelAt(trio.abc.Instrument):
    """Cancels ``scope`` before the ``at``-th task step of the run."""

    def __init__(self, at: int, scope: trio.CancelScope) -> None:
        self.at, self.scope, self.steps = at, scope, 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.steps == self.at:
            self.scope.cancel()
        self.steps += 1


async def _first_calls(server) -> None:
    async with TrioHttpChannel(server.address) as channel:  # the bare socket first
        assert (await channel.health()).incarnation == 7
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    async with stream:
        await stream.send_all(HEALTH)
        answer = b""
        while data := await stream.receive_some():
            answer += data
    assert answer.startswith(b"HTTP/1.1 200 ")


def _run_cancelled_at(at: int, same: bool, calls: bool) -> tuple[bool, list[str]]:
    """One run cancelled at step ``at``: whether the cancel came, and the files left."""
    seen: dict = {}

    async def main() -> None:
        with trio.fail_after(GENEROUS), trio.CancelScope() as scope:
            instrument = _CancelAt(at, scope)
            trio.lowlevel.add_instrument(instrument)
            try:
                async with open_http_server(FakeWorker(), same_host=same) as server:
                    seen["port"] = server.port
                    if calls:
                        await _first_calls(server)
            finally:
                trio.lowlevel.remove_instrument(instrument)
        seen["cancelled"] = scope.cancel_called

    raised = bounded(lambda: trio.run(main), GENEROUS)
    assert raised is None, f"cancelled at step {at}: {raised!r}"
    port = seen.get("port")
    left = [] if port is None else [
        name for name in os.listdir(same_host.directory()) if f"-{port}-" in name
        or f"-{port}." in name]
    return seen["cancelled"], left


@pytest.mark.parametrize("same, calls", [(True, False), (False, False), (True, True)],
                         ids=["start", "start-tcp-only", "first-calls"])
def test_cancelled_at_any_step_it_stops_and_leaves_nothing(same, calls):
    for at in range(MOST_STEPS):
        cancelled, left = _run_cancelled_at(at, same, calls)
        assert not left, f"cancelled at step {at}: left {left}"
        if not cancelled:  # the run ended before its at-th step: every step was tried
            break
    else:
        pytest.fail(f"still cancelled at step {MOST_STEPS}")
    assert at > 2  # (the start has schedule points of its own: the cut came inside it)
