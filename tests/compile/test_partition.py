"""Partitioning as data, and partitioned runs compared with single-device runs."""
import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow import errors
from asyncflow.compile.partition import partition, set_transfer_compression
from asyncflow.compile.placement import place
from asyncflow.compile.prune import prune
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.kernels.registry import supported_device_kinds

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"
INCARNATIONS = {CPU0: 0x10, CPU1: 0x11}


def _partitioned(fetches, targets=(), feeds=(), compress=None, graph=None):
    ops = prune(fetches, targets, feeds)
    placed = place(ops, [CPU0, CPU1], supported_device_kinds)
    node_graph = NodeGraph.from_ops(ops, feeds, fetches, targets, placed.assignment)
    per_edge = graph.extensions.get("transfer_compression", {}) if graph else {}
    return partition(node_graph, [CPU0, CPU1], INCARNATIONS, compress, per_edge)


def _described(parts):
    """``{device: [(node name, type)]}`` of each partition."""
    return {p.device: [(n.name, n.type) for n in p.nodes] for p in parts.partitions}


def test_one_recv_per_tensor_and_destination():
    with af.Graph().as_default():
        with af.device("/device:CPU:0"):
            a = af.constant([1.0, 2.0], name="a")
            x = af.add(a, a, name="x")
        with af.device("/device:CPU:1"):
            y = af.multiply(x, 2.0, name="y")
            z = af.subtract(x, 1.0, name="z")
            out = af.add(y, z, name="out")
    parts = _partitioned([out])
    described = _described(parts)
    assert [n for n, t in described[CPU0] if t == "_Send"] == ["edge_0_x_0/_Send"]
    assert [n for n, t in described[CPU1] if t == "_Recv"] == ["edge_0_x_0/_Recv"]
    recv = next(n for n in parts.partitions[1].nodes if n.type == "_Recv")
    assert recv.attrs["tensor_name"] == "edge_0_x_0"
    assert recv.attrs["send_device"] == CPU0 and recv.attrs["recv_device"] == CPU1
    assert recv.attrs["send_device_incarnation"] == 0x10
    y_node = next(n for n in parts.partitions[1].nodes if n.name == "y")
    z_node = next(n for n in parts.partitions[1].nodes if n.name == "z")
    assert y_node.inputs[0][0] is recv and z_node.inputs[0][0] is recv
    assert parts.fetches[0][0] == 1


def test_control_edge_becomes_const_send_recv_identity():
    with af.Graph().as_default():
        with af.device("/device:CPU:0"):
            first = af.no_op(name="first")
        with af.device("/device:CPU:1"), af.control_dependencies([first]):
            second = af.constant(3.0, name="second")
    parts = _partitioned([second])
    cpu0 = {n.name: n for n in parts.partitions[0].nodes}
    cpu1 = {n.name: n for n in parts.partitions[1].nodes}
    const = next(n for n in cpu0.values() if n.type == "Const")
    assert const.control_inputs == [cpu0["first"]]
    identity = next(n for n in cpu1.values() if n.type == "Identity")
    assert identity.inputs[0][0].type == "_Recv"
    assert cpu1["second"].control_inputs == [identity]


def test_compression_attr_per_session_and_per_edge():
    with af.Graph().as_default() as graph:
        with af.device("/device:CPU:0"):
            f = af.constant([1.5], name="f")
            i = af.constant([1], name="i")
            g = af.identity(f, name="g")
        with af.device("/device:CPU:1"):
            out = [af.identity(f), af.identity(i), af.identity(g)]
        set_transfer_compression(g, "")
    parts = _partitioned(out, compress="round", graph=graph)
    modes = {n.inputs[0][0].name: n.attrs["compress"] for n in parts.partitions[0].nodes
             if n.type == "_Send"}
    assert modes == {"f": "round", "i": "", "g": ""}
    with pytest.raises(ValueError):
        set_transfer_compression(g, "zip")


def _chain_graph():
    graph = af.Graph()
    with graph.as_default():
        x = af.placeholder(af.float32, [3, 3], name="x")
        v = af.Variable(np.eye(3, dtype=np.float32), name="v")
        with af.device("/device:CPU:1"):
            h = af.matmul(x, v, name="h")
            h2 = af.tanh(h)
        with af.device("/device:CPU:0"):
            y = af.reduce_sum(h2 * x, axis=1)
        with af.device("/device:CPU:1"):
            step = af.assign_add(v, af.ones([3, 3]) * 0.1)
    return graph, x, v, y, step


@pytest.mark.parametrize("count", [1, 2])
async def test_spread_graph_computes_like_one_device(count):
    graph, x, v, y, step = _chain_graph()
    feed = np.arange(9, dtype=np.float32).reshape(3, 3) / 9
    # With one CPU the requests for CPU:1 are soft-placed on CPU:0 (soft placement is off
    # by default, as in TF1).
    config = af.SessionConfig(device_count={"CPU": count}, allow_soft_placement=True)
    async with af.Session(graph=graph, config=config) as sess:
        await sess.run(v.initializer)
        first = await sess.run(y, {x: feed})
        await sess.run(step)
        second = await sess.run([y, v], {x: feed})
    expected = np.sum(np.tanh(feed @ np.eye(3)) * feed, axis=1)
    np.testing.assert_allclose(first, expected, rtol=1e-6)
    np.testing.assert_allclose(second[0], np.sum(np.tanh(feed @ (np.eye(3) + 0.1)) * feed, axis=1),
                               rtol=1e-5)
    np.testing.assert_allclose(second[1], np.eye(3) + 0.1, rtol=1e-6)


async def test_failure_in_one_partition_is_the_root_cause_and_aborts_the_other():
    with af.Graph().as_default() as graph:
        with af.device("/device:CPU:0"):
            idx = af.placeholder(af.float32, None, name="idx")
            bad = af.reshape(idx, [3], name="bad")  # fails at run time
        with af.device("/device:CPU:1"):
            waits = af.identity(bad, name="waits")
            other = af.constant(1.0) + 1.0
    async with af.Session(graph=graph, config=af.SessionConfig(device_count={"CPU": 2})) as sess:
        with pytest.raises(errors.InvalidArgumentError) as info:
            await sess.run([waits, other], {idx: np.zeros((2, 2))})
        assert info.value.op is bad.op and "CPU:0" in str(info.value)
        # the session stays usable
        assert await sess.run(other) == 2.0


async def test_cancelling_a_partitioned_run_leaves_the_session_usable(autojump_clock):
    with af.Graph().as_default() as graph:
        with af.device("/device:CPU:0"):
            x = af.placeholder(af.float32, [], name="x")
            y = x + 1.0
        with af.device("/device:CPU:1"):
            z = y * 2.0
    async with af.Session(graph=graph, config=af.SessionConfig(device_count={"CPU": 2})) as sess:
        assert await sess.run(z, {x: 1.0}) == 4.0
        with trio.move_on_after(0):
            await sess.run(z, {x: 1.0})
        assert await sess.run(z, {x: 2.0}) == 6.0


def test_bfloat16_truncate_and_round_bits():
    import ml_dtypes
    from asyncflow.kernels.transfer import compress_bfloat16, decompress_bfloat16
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(1000).astype(np.float32) * 1e3,
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0 + 2 ** -8,
                                  1.0 + 3 * 2 ** -8, 3.4e38], np.float32)])
    truncated = decompress_bfloat16(np, compress_bfloat16(np, x, "truncate"))
    assert np.array_equal(truncated.view(np.uint32), x.view(np.uint32) & 0xFFFF0000)
    rounded = decompress_bfloat16(np, compress_bfloat16(np, x, "round"))
    expected = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(rounded, expected)   # NaN == NaN for assert_array_equal
    assert rounded[-3] == 1.0 and rounded[-2] == np.float32(1.0 + 4 * 2 ** -8)  # ties to even


@pytest.mark.parametrize("mode", ["truncate", "round"])
async def test_compressed_transfer_in_a_run(mode):
    with af.Graph().as_default() as graph:
        with af.device("/device:CPU:0"):
            x = af.placeholder(af.float32, [5], name="x")
            y = af.identity(x, name="y")
            n = af.constant([1, 2, 3], name="n")
        with af.device("/device:CPU:1"):
            out = af.identity(y, name="out")
            ints = af.identity(n, name="ints")
    value = np.array([1.0, 1.00390625, -3.14159, 1e-3, 65504.0], np.float32)
    config = af.SessionConfig(device_count={"CPU": 2}, compress_transfers=mode)
    async with af.Session(graph=graph, config=config) as sess:
        got, got_ints = await sess.run([out, ints], {x: value})
    bits = value.view(np.uint32)
    if mode == "truncate":
        want = (bits & 0xFFFF0000).view(np.float32)
    else:
        import ml_dtypes
        want = value.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_ints, [1, 2, 3])   # only float32 is compressed
    assert not np.array_equal(got, value)
