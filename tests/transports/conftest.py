"""Transport fixtures: a fake worker behind each transport."""

from __future__ import annotations

import pytest
from aiohttp_channel import HttpChannel
from transport_fakes import FakeWorker

from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server
from transports.inprocess import InProcessChannel


@pytest.fixture(params=["inprocess", "http", "http-trio"])
async def worker_and_channel(request):
    """(FakeWorker, channel to it) over each transport."""
    worker = FakeWorker()
    if request.param == "inprocess":
        async with InProcessChannel(worker) as channel:
            yield worker, channel
        return
    channel_class = HttpChannel if request.param == "http" else TrioHttpChannel
    async with open_http_server(worker) as server:
        async with channel_class(server.address) as channel:
            yield worker, channel
