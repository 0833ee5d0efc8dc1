"""Tensors damaged on the wire are never returned as values: a proxy flips one bit of a
RunGraph answer (a fetch) or of a RecvTensors answer (an edge between workers) and the step
fails with DataLossError naming the peer and the tensor; running it again works."""
import numpy as np
import pytest
import trio

import asyncflow as af
from bitflip_proxy import BitFlipProxy
from loopback_ports import free_ports

ELEMENTS = 256 * 1024  # float32: 1 MiB, so a flip 300 kB into the answer hits tensor bytes


async def _serve(nursery, spec, job, port=0):
    return await nursery.start(af.Server(spec, job, 0, port=port).serve)


async def _worker_behind_a_proxy(nursery):
    """One worker reached through a BitFlipProxy: (proxy, spec)."""
    proxy = BitFlipProxy()
    await nursery.start(proxy.serve)
    spec = af.ClusterSpec({"worker": [f"127.0.0.1:{proxy.port}"]})
    server = await _serve(nursery, spec, "worker")
    proxy.target = server.address
    return proxy, spec


async def _ps_behind_a_proxy(nursery, elements=ELEMENTS):
    """A ps reached through a BitFlipProxy and a worker that pulls ``v`` (``elements`` ones,
    float32) from it to sum it: (proxy, spec, graph, v, total)."""
    proxy = BitFlipProxy()
    await nursery.start(proxy.serve)
    (worker_port,) = free_ports(1)
    spec = af.ClusterSpec({"ps": [f"127.0.0.1:{proxy.port}"],
                           "worker": [f"127.0.0.1:{worker_port}"]})
    ps = await _serve(nursery, spec, "ps")
    proxy.target = ps.address
    await _serve(nursery, spec, "worker", port=worker_port)
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            v = af.Variable(af.ones([elements], af.float32), name="v")
        with af.device("/job:worker/task:0"):
            total = af.reduce_sum(v * 2.0)
    return proxy, spec, graph, v, total


async def test_a_flipped_bit_in_a_fetched_tensor_fails_the_step_with_data_loss():
    async with trio.open_nursery() as nursery:
        proxy, spec = await _worker_behind_a_proxy(nursery)
        graph = af.Graph()
        with graph.as_default(), af.device("/job:worker/task:0"):
            v = af.Variable(np.arange(ELEMENTS, dtype=np.float32), name="v")
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(v.initializer)
            np.testing.assert_array_equal(await sess.run(v), np.arange(ELEMENTS))
            proxy.arm(300_000)
            with pytest.raises(af.errors.DataLossError) as info:
                await sess.run(v)
            assert proxy.flipped == 1
            message = str(info.value)
            assert "RunGraph on /job:worker/replica:0/task:0" in message
            assert f"127.0.0.1:{proxy.port}" in message and "'v" in message
            assert "Checksum does not match" in message and "not retried" in message
            # The client may retry: the next run gets the true value.
            np.testing.assert_array_equal(await sess.run(v), np.arange(ELEMENTS))
        nursery.cancel_scope.cancel()


async def test_a_flipped_bit_in_a_pulled_tensor_fails_the_step_with_data_loss():
    async with trio.open_nursery() as nursery:
        proxy, spec, graph, v, total = await _ps_behind_a_proxy(nursery)
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(v.initializer)
            assert await sess.run(total) == 2.0 * ELEMENTS
            proxy.arm(300_000)
            with pytest.raises(af.errors.DataLossError) as info:
                await sess.run(total)
            assert proxy.flipped == 1
            message = str(info.value)
            assert "RecvTensors from /job:ps/replica:0/task:0" in message
            assert "edge" in message and "Checksum does not match" in message
            assert await sess.run(total) == 2.0 * ELEMENTS
        nursery.cancel_scope.cancel()


BIG = 16 * 1024 * 1024  # float32: a 64 MiB pull, its tensor sent and summed in chunks
TAIL = 4 + 4 * BIG  # the tensor's bytes and its trailer end the RecvTensors frame


@pytest.mark.parametrize("where, back", [("first", TAIL), ("middle", TAIL - 2 * BIG),
                                         ("last", 5)])
async def test_a_flipped_bit_anywhere_in_a_pulled_64_mib_tensor_is_data_loss(where, back):
    """The chunked sums of a large tensor (the sender's per sent chunk, the receiver's per
    read) cover its first byte, a byte in the middle and its last byte over TCP."""
    async with trio.open_nursery() as nursery:
        proxy, spec, graph, v, total = await _ps_behind_a_proxy(nursery, BIG)
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(v.initializer)
            assert await sess.run(total) == 2.0 * BIG
            proxy.arm(-back, bit=5, in_body=True, path="/recv")  # the tensor's `where` byte
            with pytest.raises(af.errors.DataLossError) as info:
                await sess.run(total)
            message = str(info.value)
            assert proxy.flipped == 1 and "RecvTensors from /job:ps/replica:0/task:0" in message
            assert "edge '" in message and "Checksum does not match" in message, message
            assert "tensor '" in message and f"{4 * BIG} bytes" in message, message
            assert await sess.run(total) == 2.0 * BIG  # the client may retry: intact again
        nursery.cancel_scope.cancel()


async def test_without_checksums_the_same_flip_goes_unnoticed(monkeypatch):
    """What turning checksums off costs: the damaged value is returned as if it were true."""
    from transports import checksum
    monkeypatch.setattr(checksum, "_enabled", False)
    async with trio.open_nursery() as nursery:
        proxy, spec = await _worker_behind_a_proxy(nursery)
        graph = af.Graph()
        with graph.as_default(), af.device("/job:worker/task:0"):
            v = af.Variable(np.arange(ELEMENTS, dtype=np.float32), name="v")
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(v.initializer)
            await sess.run(v)
            proxy.arm(300_000)
            damaged = await sess.run(v)
            assert proxy.flipped == 1
            assert (damaged != np.arange(ELEMENTS)).sum() == 1
        nursery.cancel_scope.cancel()


async def test_a_flipped_bit_in_a_fetched_string_tensor_or_a_frame_header_fails_the_step():
    """String tensors travel in the frame's header: its CRC32C covers them, the descriptors
    and the prefix, so a flip there is DataLossError too, never a wrong string."""
    long_string = b"s" * 4000
    async with trio.open_nursery() as nursery:
        proxy, spec = await _worker_behind_a_proxy(nursery)
        graph = af.Graph()
        with graph.as_default(), af.device("/job:worker/task:0"):
            words = af.identity(af.constant([b"short", long_string]), name="words")
        async with af.Session(graph=graph, cluster=spec) as sess:
            assert (await sess.run(words)).tolist() == [b"short", long_string]
            for offset, part in ((2000, "frame header"), (6, "frame prefix"),
                                 (1, "frame magic")):
                proxy.arm(offset, in_body=True)  # into the string's bytes, the prefix, magic
                with pytest.raises(af.errors.DataLossError) as info:
                    await sess.run(words)
                message = str(info.value)
                assert proxy.flipped and f"the reply: {part}" in message, message
                assert f"127.0.0.1:{proxy.port}" in message and "not retried" in message
                assert (await sess.run(words)).tolist() == [b"short", long_string]
            assert proxy.flipped == 3
        nursery.cancel_scope.cancel()


async def test_a_flipped_bit_in_a_pulled_frames_header_names_the_edge():
    async with trio.open_nursery() as nursery:
        proxy, spec, graph, v, total = await _ps_behind_a_proxy(nursery)
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(v.initializer)
            assert await sess.run(total) == 2.0 * ELEMENTS
            proxy.arm(20, in_body=True, path="/recv")  # the header: the descriptors
            with pytest.raises(af.errors.DataLossError) as info:
                await sess.run(total)
            message = str(info.value)
            assert proxy.flipped == 1 and "RecvTensors from /job:ps/replica:0/task:0" in message
            assert "edge '" in message and "frame header" in message, message
            assert await sess.run(total) == 2.0 * ELEMENTS
        nursery.cancel_scope.cancel()


async def test_a_damaged_registration_or_health_reply_is_data_loss_not_a_crash():
    """Every reply is checked, not only tensors: a flip in RegisterGraph's or Health's answer
    fails the call with DataLossError naming the worker; the next run works."""
    async with trio.open_nursery() as nursery:
        proxy, spec = await _worker_behind_a_proxy(nursery)
        graph = af.Graph()
        with graph.as_default(), af.device("/job:worker/task:0"):
            doubled = af.constant(np.arange(10, dtype=np.float32)) * 2.0
        proxy.arm(20, in_body=True, path="/v1/health")
        with pytest.raises(af.errors.DataLossError, match="Health of /job:worker/replica:0/"
                           "task:0 at 127.0.0.1:.*the reply: frame header"):
            async with af.Session(graph=graph, cluster=spec) as sess:
                pass
        async with af.Session(graph=graph, cluster=spec) as sess:
            proxy.arm(20, in_body=True, path="/v1/graphs")
            with pytest.raises(af.errors.DataLossError) as info:
                await sess.run(doubled)
            message = str(info.value)
            assert "RegisterGraph on /job:worker/replica:0/task:0" in message, message
            assert "frame header" in message and "not retried" in message
            assert (await sess.run(doubled)).tolist() == list(range(0, 20, 2))
        assert proxy.flipped == 2
        nursery.cancel_scope.cancel()
