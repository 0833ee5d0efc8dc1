"""A medium message in one write, its body read without waits (``transports.http.bare_io``).

A request of at most ``ONE_WRITE_BYTES`` goes out in one ``writev`` whatever its buffers' sizes
(a RunGraph with a 64 KiB feed was three sends), its checksum trailers filled first; the
server's request body takes the bytes already on its socket without a timeout scope or a
scheduler pass, at most ``CALLS_PER_CHECKPOINT`` reads in a row, and waits as before otherwise.
"""

from __future__ import annotations

import socket

import numpy as np
import pytest
import trio
import trio.testing
from transport_fakes import FakeWorker

from transports.http import bare_io
from transports.http.body import PeerGone, read_frame
from transports.http.bulk_io import CALLS_PER_CHECKPOINT
from transports.http.client import TrioHttpChannel
from transports.http.protocol import JOIN_BYTES, send_pieces
from transports.http.server import open_http_server
from transports.messages import RegisterGraph, RunGraph, TensorEntry
from transports.wire import Decoder, Limits, encode

GENEROUS = 20
_LIMITS = Limits()


def _run_graph(batch: int) -> RunGraph:
    rng = np.random.default_rng(batch)
    x = rng.random((batch, 64), dtype=np.float32)  # batch 256: exactly JOIN_BYTES
    y = rng.integers(0, 10, batch).astype(np.int32)
    return RunGraph("g", 7, [TensorEntry("x", x), TensorEntry("y", y)], ["loss"])


def _bytes_of(pieces) -> bytes:
    return b"".join(bytes(piece) for piece in pieces)


def _decoded(data: bytes):
    decoder = Decoder(_LIMITS)
    decoder.receive_data(data)
    decoder.receive_data(b"")
    return decoder.next_event()


@pytest.mark.parametrize("checksums", [True, False])
def test_a_64_kib_feed_is_one_write_of_the_same_bytes(checksums):
    message = _run_graph(256)
    def buffers():
        return encode(message, _LIMITS, checksums=checksums, defer_checksums=True)

    pieces = bare_io.small_pieces(b"HEAD", buffers())
    assert pieces is not None and pieces[0] == b"HEAD"
    assert max(len(p) for p in pieces) >= JOIN_BYTES  # (the case send_pieces cut in three)
    joined = _bytes_of(pieces)
    assert len(joined) <= bare_io.ONE_WRITE_BYTES + 4
    # The bytes send_pieces writes in its three sends, trailers summed as it goes.
    assert joined == _bytes_of(send_pieces(b"HEAD", buffers()))
    decoded = _decoded(joined[4:])
    np.testing.assert_array_equal(decoded.feeds[0].value, message.feeds[0].value)
    np.testing.assert_array_equal(decoded.feeds[1].value, message.feeds[1].value)


def test_a_message_over_the_one_write_size_is_left_to_send_pieces():
    buffers = encode(_run_graph(600), _LIMITS, defer_checksums=True)  # 150 KiB of feed
    assert sum(map(len, buffers)) > bare_io.ONE_WRITE_BYTES
    assert bare_io.small_pieces(b"HEAD", buffers) is None
    # Many small buffers: one write as before, whatever their total.
    assert bare_io.small_pieces(b"HEAD", [b"x" * (JOIN_BYTES - 1)] * 3) is not None


def _small_buffer_pair():
    """A non-blocking Unix socket pair whose sender's buffer takes far less than 64 KiB."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours.setblocking(False)
    return ours, theirs


def _drain(sock: socket.socket) -> bytes:
    sock.setblocking(False)
    data = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return bytes(data)
        if not chunk:
            return bytes(data)
        data += chunk


@pytest.mark.parametrize("checksums", [True, False])
def test_a_short_write_of_a_one_write_message_leaves_exactly_the_rest(checksums):
    """A send buffer smaller than the message: the kernel takes part, ``write_now`` returns
    the bytes it did not take, and the two make the frame, trailers right."""
    message = _run_graph(256)
    pieces = bare_io.small_pieces(b"HEAD", encode(message, _LIMITS, checksums=checksums,
                                                  defer_checksums=True))
    assert pieces is not None
    ours, theirs = _small_buffer_pair()
    with ours, theirs:
        rest = bare_io.write_now(ours, pieces)
        taken = _drain(theirs)
        assert taken and rest and len(taken) + len(rest) == len(_bytes_of(pieces))
        joined = taken + bytes(rest)
    assert joined == _bytes_of(pieces)
    decoded = _decoded(joined[4:])
    np.testing.assert_array_equal(decoded.feeds[0].value, message.feeds[0].value)


def test_a_full_send_buffer_leaves_all_of_it_and_a_closed_peer_raises():
    pieces = bare_io.small_pieces(b"HEAD", encode(_run_graph(256), _LIMITS,
                                                  defer_checksums=True))
    ours, theirs = _small_buffer_pair()
    with ours, theirs:
        while True:  # fill the buffer: the next writev takes nothing (EAGAIN)
            try:
                ours.send(b"f" * 4096)
            except BlockingIOError:
                break
        assert bare_io.write_now(ours, pieces) == _bytes_of(pieces)
        theirs.close()
        with pytest.raises(OSError):  # (EPIPE, ECONNRESET: the caller's broken connection)
            bare_io.write_now(ours, pieces)


async def _body_pair(length: int):
    """A server connection's request body of ``length`` bytes, and the client's socket."""
    ours, theirs = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    conn = bare_io.ServerConnection(trio.SocketStream(ours), trio.current_time())
    return bare_io.RequestBody(conn, length, timeout=GENEROUS), theirs


async def test_a_frame_already_there_is_read_without_a_checkpoint():
    data = _bytes_of(encode(_run_graph(256), _LIMITS, checksums=True))
    body, client = await _body_pair(len(data))
    with client:
        assert await client.send(data) == len(data)  # (under the socket's buffer: all there)
        received = []
        with trio.testing.assert_no_checkpoints():
            message = await read_frame(body, _LIMITS, trio.CapacityLimiter(1), received.append)
        assert body.done and sum(received) == len(data)
        np.testing.assert_array_equal(message.feeds[0].value, _run_graph(256).feeds[0].value)


async def test_reads_in_a_row_checkpoint_every_so_often():
    body, client = await _body_pair(CALLS_PER_CHECKPOINT + 2)
    with client:
        assert await client.send(b"z" * (CALLS_PER_CHECKPOINT + 2)) == CALLS_PER_CHECKPOINT + 2
        one = memoryview(bytearray(1))
        with trio.testing.assert_no_checkpoints():
            for _ in range(CALLS_PER_CHECKPOINT):
                assert await body.read_into(one) == 1
        with trio.testing.assert_checkpoints():  # the next goes through the waiting read
            assert await body.read_into(one) == 1
        with trio.testing.assert_no_checkpoints():  # and the count starts again
            assert await body.read_into(one) == 1
        assert body.done


async def test_a_body_that_does_not_come_waits_and_times_out(autojump_clock):
    body, client = await _body_pair(10)
    with client:
        await client.send(b"abc")
        view = memoryview(bytearray(10))
        assert await body.read_into(view) == 3
        with pytest.raises(bare_io.BodyTimeout):
            await body.read_into(view[3:])


async def test_a_client_that_closes_mid_body_is_gone_on_either_read():
    body, client = await _body_pair(10)
    await client.send(b"abc")
    client.close()
    view = memoryview(bytearray(10))
    assert await body.read_into(view) == 3
    with pytest.raises(PeerGone):
        await body.read_into(view[3:])


async def test_a_64_kib_feed_crosses_a_bare_channel_intact():
    worker = FakeWorker()
    message = _run_graph(256)
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))
                          ).graph_handle
                for step in (1, 2):  # the second from the channel's prepared signature
                    reply = await channel.run_graph(RunGraph(handle, step, message.feeds,
                                                             ["x", "y"]))
                    np.testing.assert_array_equal(reply.tensors[0].value,
                                                  message.feeds[0].value)
                    np.testing.assert_array_equal(reply.tensors[1].value,
                                                  message.feeds[1].value)
            assert channel.bare_calls == 3


# -- a frame up to WHOLE_FRAME_BYTES read whole, then decoded in one pass (``read_whole``) --


def test_which_frames_are_read_whole():
    data = _bytes_of(encode(_run_graph(256), _LIMITS, checksums=True))  # just over 64 KiB
    assert bare_io.RECV < len(data) <= bare_io.WHOLE_FRAME_BYTES
    assert bare_io.reads_whole(data[:bare_io.RECV], len(data))
    assert not bare_io.reads_whole(data[:4], len(data))  # (its header's length not at hand)
    big = _bytes_of(encode(_run_graph(1100), _LIMITS))  # 275 KiB: streamed into its arrays
    assert len(big) > bare_io.WHOLE_FRAME_BYTES and not bare_io.reads_whole(big, len(big))
    long_header = bytearray(data[:16])
    long_header[4:8] = (bare_io.SMALL_HEADER_BYTES + 1).to_bytes(4, "little")
    assert not bare_io.reads_whole(bytes(long_header), len(data))  # (decoded off the loop)


async def test_a_frame_read_whole_waits_for_its_rest_and_decodes_the_same():
    message = _run_graph(256)
    data = _bytes_of(encode(message, _LIMITS, checksums=True))
    body, client = await _body_pair(len(data))
    conn = body._conn
    with client:
        conn.pending = data[:1000]  # (what came with its call's header)
        async with trio.open_nursery() as nursery:
            async def rest():
                await trio.testing.wait_all_tasks_blocked()  # the reader waits first
                await client.send(data[1000:])
            nursery.start_soon(rest)
            whole = await bare_io.read_whole(conn, len(data), GENEROUS)
        assert bytes(whole) == data and not conn.pending
    np.testing.assert_array_equal(_decoded(bytes(whole)).feeds[0].value, message.feeds[0].value)


async def test_a_frame_read_whole_ends_on_a_stall_or_its_client_gone(autojump_clock):
    body, client = await _body_pair(100_000)
    with client:
        await client.send(b"abc")
        with pytest.raises(bare_io.BodyTimeout):
            await bare_io.read_whole(body._conn, 100_000, GENEROUS)
    body, client = await _body_pair(100_000)
    await client.send(b"abc")
    client.close()
    with pytest.raises(PeerGone):
        await bare_io.read_whole(body._conn, 100_000, GENEROUS)


async def test_a_64_kib_feed_is_served_without_the_streaming_decoder(monkeypatch):
    from transports.http import bare

    def streamed(*args):
        raise AssertionError("a frame under WHOLE_FRAME_BYTES streamed through read_frame")

    monkeypatch.setattr(bare, "read_frame", streamed)
    worker, message = FakeWorker(), _run_graph(256)
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address) as channel:
            with trio.fail_after(GENEROUS):
                handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))
                          ).graph_handle
                for step in (1, 2, 3):  # the first decoded by the decoder, then by template
                    reply = await channel.run_graph(RunGraph(handle, step, message.feeds,
                                                             ["x", "y"]))
                    for got, fed in zip(reply.tensors, message.feeds):
                        np.testing.assert_array_equal(got.value, fed.value)
            assert channel.bare_calls == 4


def test_read_whole_is_the_modules_public_surface():
    assert {"WHOLE_FRAME_BYTES", "read_whole", "reads_whole"} <= set(bare_io.__all__)


@pytest.mark.parametrize("length, header, whole", [
    (bare_io.WHOLE_FRAME_BYTES, 100, True), (bare_io.WHOLE_FRAME_BYTES + 1, 100, False),
    (bare_io.RECV + 1, bare_io.SMALL_HEADER_BYTES, True),
    (bare_io.RECV + 1, bare_io.SMALL_HEADER_BYTES + 1, False)])
def test_the_read_whole_bounds_are_inclusive(length, header, whole):
    prefix = b"AFWC" + header.to_bytes(4, "little") + bytes(8)
    assert bare_io.reads_whole(prefix, length) is whole


async def test_a_frame_read_whole_is_the_same_wherever_its_first_read_ends():
    message = _run_graph(256)
    data = _bytes_of(encode(message, _LIMITS, checksums=True))
    for split in [*range(0, 20), bare_io.RECV - 1, bare_io.RECV, len(data) - 1]:
        body, client = await _body_pair(len(data))
        with client, body._conn.stream.socket:
            body._conn.pending = data[:split]
            await client.send(data[split:] + b"next call")  # (a call behind it: left unread)
            whole = await bare_io.read_whole(body._conn, len(data), GENEROUS)
            assert bytes(whole) == data and not body._conn.pending, split
