"""A session's steps on a worker over the bare same-host protocol (a real server on a loopback
port, in this process) encode their RunGraphs and the worker its replies from prepared
signatures (``wire.encode_prepared``): the values are a fresh encode's, and a feed of another
shape or dtype between steps is encoded in full and prepared again."""
import numpy as np
import pytest
import trio

import asyncflow as af
from loopback_ports import free_ports

W0 = "/job:worker/task:0"


@pytest.fixture
async def worker():
    spec = af.ClusterSpec({"worker": [f"127.0.0.1:{port}" for port in free_ports(1)]})
    async with trio.open_nursery() as nursery:
        server = await nursery.start(af.Server(spec, "worker", 0).serve)
        yield spec, server
        await server.stop()


async def test_steps_of_changing_shapes_and_dtypes_answer_their_own_values(worker):
    spec, server = worker
    graph = af.Graph()
    with graph.as_default(), af.device(W0):
        x = af.placeholder(af.float32, [None], name="x")
        n = af.placeholder(af.int64, None, name="n")
        doubled = x * 2.0
        plus = n + 1
    rng = np.random.default_rng(5)
    with trio.fail_after(60):
        async with af.Session(graph=graph, cluster=spec) as sess:
            for size in [3, 3, 3, 5, 5, 1, 3, 0, 3]:  # prepared, then other shapes between
                value = rng.random(size).astype(np.float32)
                got = await sess.run(doubled, {x: value})
                assert got.shape == (size,) and np.array_equal(got, value * 2)
            for shape in [(), (2,), (2, 2), (), (2, 2)]:  # another run: ranks change
                value = rng.integers(-9, 9, shape)
                assert np.array_equal(await sess.run(plus, {n: value}), value + 1)
            channel = next(iter(sess._target.master.tasks.values())).channel
            assert channel.bare_calls >= 14, "the steps did not take the bare protocol"
            assert len(channel._prepared) == 2  # one prepared signature per graph handle
            served = server.http._bare._open  # the worker's connections: a reply prepared
            assert any(conn.prepared is not None for conn in served)


async def test_an_op_failing_between_prepared_steps_fails_its_step_only(worker):
    """A step whose op fails on the worker answers its error (an ErrorReply, encoded in full)
    between steps of a prepared signature; the steps before and after answer their values."""
    spec, _ = worker
    graph = af.Graph()
    with graph.as_default(), af.device(W0):
        x = af.placeholder(af.float32, [None], name="x")
        pairs = af.reshape(x, [-1, 2]) * 2.0  # an odd length cannot be reshaped: the op fails
    with trio.fail_after(60):
        async with af.Session(graph=graph, cluster=spec) as sess:
            for length in [4, 4, 3, 4, 5, 2]:
                value = np.arange(length, dtype=np.float32)
                if length % 2:
                    with pytest.raises(af.errors.InvalidArgumentError):
                        await sess.run(pairs, {x: value})
                else:
                    got = await sess.run(pairs, {x: value})
                    assert np.array_equal(got, value.reshape(-1, 2) * 2)
