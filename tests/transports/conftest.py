"""Transport fixtures: a fake worker behind each transport."""

from __future__ import annotations

import pytest
from aiohttp_channel import HttpChannel
from transport_fakes import FakeWorker

from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server
from transports.inprocess import InProcessChannel


@pytest.fixture(params=["inprocess", "http", "http-trio", "bare"])
async def worker_and_channel(request):
    """(FakeWorker, channel to it) over each transport ("http-trio": HTTP over the same-host
    Unix socket; "bare": the same-host bare-frame protocol, ``transports.http.bare``)."""
    worker = FakeWorker()
    if request.param == "inprocess":
        async with InProcessChannel(worker) as channel:
            yield worker, channel
        return
    async with open_http_server(worker) as server:
        if request.param == "http":
            channel = HttpChannel(server.address)
        else:
            channel = TrioHttpChannel(server.address, bare=request.param == "bare")
        async with channel:
            yield worker, channel
            if request.param == "bare":  # it did not fall back to HTTP
                assert channel._bare
