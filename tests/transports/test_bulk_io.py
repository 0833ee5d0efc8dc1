"""transports.http.bulk_io: large reads wake at the low-water mark, sends run in a row, both stay
cancellable and fair to other tasks. Real TCP sockets on 127.0.0.1 (``SO_RCVLOWAT`` is a TCP
behaviour); every wait is bounded."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import trio
import trio.testing

from transports.http import bulk_io
from transports.http.bulk_io import CALLS_PER_CHECKPOINT, BulkReader

GENEROUS = 20


@pytest.fixture
async def pair():
    """(reader side, writer side): two ends of one loopback TCP connection."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with listeners[0]:
        port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            accepted = []

            async def accept():
                accepted.append(await listeners[0].accept())

            nursery.start_soon(accept)
            client = await trio.open_tcp_stream("127.0.0.1", port)
    async with client, accepted[0] as server:
        yield client, server


def low_water(stream: trio.SocketStream) -> int:
    return stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)


async def test_a_parked_read_wakes_only_once_its_whole_view_has_arrived(pair):
    # 300 KiB owed (under LOW_WATER): the mark is the view's size, so three pieces sent with
    # pauses between them arrive as one read, where a plain trio read returns the first piece.
    reader, writer = pair
    view = memoryview(bytearray(300 * 1024))
    data = np.random.default_rng(0).integers(0, 256, len(view), dtype=np.uint8).tobytes()
    counts = []
    with trio.fail_after(GENEROUS):
        async with trio.open_nursery() as nursery:
            async def read():
                counts.append(await BulkReader(reader.socket).receive_into(view))

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            for start in range(0, len(data), 100 * 1024):
                await writer.send_all(data[start:start + 100 * 1024])
                await trio.testing.wait_all_tasks_blocked()
                if start + 100 * 1024 < len(data):
                    assert counts == []  # parked below the mark
    assert counts == [len(view)] and bytes(view) == data
    assert low_water(reader) == 1  # back to the default for whoever waits next


async def test_a_read_returns_what_is_queued_without_waiting_for_the_mark(pair):
    reader, writer = pair
    await writer.send_all(b"x" * 1000)
    await trio.testing.wait_all_tasks_blocked()
    view = memoryview(bytearray(1 << 20))
    with trio.fail_after(GENEROUS):
        await trio.lowlevel.wait_readable(reader.socket)
        assert await BulkReader(reader.socket).receive_into(view) == 1000


async def _peek(stream: trio.SocketStream) -> bytes:
    await trio.lowlevel.wait_readable(stream.socket)
    return await stream.socket.recv(1 << 20, socket.MSG_PEEK)


async def test_end_of_stream_while_parked_reads_zero(pair):
    reader, writer = pair
    with trio.fail_after(GENEROUS):
        async with trio.open_nursery() as nursery:
            counts = []

            async def read():
                counts.append(await BulkReader(reader.socket).receive_into(
                    memoryview(bytearray(4 << 20))))

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            await writer.aclose()
    assert counts == [0]


async def test_a_parked_read_is_cancellable_and_restores_the_mark(pair):
    reader, _ = pair
    with trio.move_on_after(0.05) as scope:
        await BulkReader(reader.socket).receive_into(memoryview(bytearray(4 << 20)))
    assert scope.cancelled_caught
    assert low_water(reader) == 1


async def test_reads_of_a_full_buffer_still_let_other_tasks_run(pair):
    reader, writer = pair
    view = memoryview(bytearray(1024))
    chunks = 4 * CALLS_PER_CHECKPOINT
    await writer.send_all(b"y" * (len(view) * chunks))
    ticks = []
    with trio.fail_after(GENEROUS):
        while len(await _peek(reader)) < len(view) * chunks:
            await trio.sleep(0.01)  # every byte queued, so no read below has to wait
        async with trio.open_nursery() as nursery:
            async def ticker():
                while True:
                    ticks.append(None)
                    await trio.sleep(0)

            nursery.start_soon(ticker)  # runs only when the reader below checkpoints
            bulk, got = BulkReader(reader.socket), 0
            while got < len(view) * chunks:
                got += await bulk.receive_into(view)
            ran = len(ticks)
            nursery.cancel_scope.cancel()
    assert ran  # the reader checkpointed on its way through the queued bytes


async def test_send_all_sends_every_byte_and_renews_before_each_wait(pair):
    reader, writer = pair
    data = np.random.default_rng(1).integers(0, 256, 16 << 20, dtype=np.uint8)
    waits, received = [], bytearray()
    with trio.fail_after(GENEROUS):
        async with trio.open_nursery() as nursery:
            async def drain():
                while len(received) < data.nbytes:
                    received.extend(await reader.receive_some(1 << 20))
                    await trio.sleep(0.001)  # slower than the sender: it must wait

            nursery.start_soon(drain)
            await bulk_io.send_all(writer.socket, memoryview(data), lambda: waits.append(None))
    assert bytes(received) == data.tobytes()
    assert waits  # 16 MiB is more than the socket buffers hold


async def test_send_all_to_a_closed_peer_raises_os_error(pair):
    reader, writer = pair
    await reader.aclose()
    with trio.fail_after(GENEROUS), pytest.raises(OSError):
        for _ in range(64):  # the first sends may be taken before the reset comes back
            await bulk_io.send_all(writer.socket, memoryview(bytes(1 << 20)))
