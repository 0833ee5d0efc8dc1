"""Graph passes as data: CSE, constant folding, ALAP Recv scheduling; and semantics kept."""
import numpy as np

import asyncflow as af
from asyncflow.compile import optimize
from asyncflow.compile.partition import partition
from asyncflow.compile.prune import prune
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.kernels.registry import get_kernel

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


def _node_graph(fetches, feeds=(), targets=(), devices=None):
    ops = prune(fetches, targets, feeds)
    placement = {op: (devices or {}).get(op.name, CPU0) for op in ops}
    return NodeGraph.from_ops(ops, list(feeds), list(fetches), list(targets), placement)


def _evaluate(nodes, ports):
    class Ctx:
        def __init__(self, node):
            self.attrs, self.name, self.xp = node.attrs, node.name, np
            self.output_dtypes = tuple(t.dtype.np for t in node.outputs)
            self.prepared = None  # no prepare hook ran: kernels take their small-node path

        def device_constant(self, value):
            return value
    values = {}
    for node in nodes:
        outs = get_kernel(node.type, "CPU").fn(Ctx(node), *[values[p] for p in node.inputs])
        values.update(((node, i), value) for i, value in enumerate(outs))
    return [values[p] for p in ports]


def test_cse_merges_duplicates_and_commutative_inputs():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2], name="x")
        y = af.placeholder(af.float32, [2], name="y")
        a = af.add(x, y, name="a")
        b = af.add(y, x, name="b")
        c = af.subtract(x, y, name="c")
        d = af.subtract(y, x, name="d")
        out = af.add_n([a, b, c, d], name="out")
    before = _node_graph([out, b], feeds=[x, y])
    after = optimize.eliminate_common_subexpressions(before)
    assert [n.name for n in after.nodes] == ["a", "c", "d", "out"]
    assert [p[0].name for p in after.nodes[-1].inputs] == ["a", "a", "c", "d"]
    assert after.fetches[1][0].name == "a" and after.changed
    assert [n.name for n in before.nodes] == ["a", "b", "c", "d", "out"]  # input untouched


def test_cse_skips_stateful_and_other_devices():
    with af.Graph().as_default():
        r1 = af.random_uniform([2], seed=1, name="r1")
        r2 = af.random_uniform([2], seed=1, name="r2")
        one = af.constant([1.0, 1.0], name="one")
        a = af.add(one, one, name="a")
        b = af.add(one, one, name="b")
        out = af.add_n([r1, r2, a, b])
    graph = _node_graph([out], devices={"b": CPU1})
    names = [n.name for n in optimize.eliminate_common_subexpressions(graph).nodes]
    assert "r1" in names and "r2" in names and "a" in names and "b" in names


def test_constant_folding_replaces_subgraph_and_keeps_fetch():
    with af.Graph().as_default():
        two = af.constant(2.0, name="two")
        three = af.constant(3.0, name="three")
        six = af.multiply(two, three, name="six")
        x = af.placeholder(af.float32, [], name="x")
        out = af.add(six, x, name="out")
    folded = optimize.fold_constants(_node_graph([out, six], feeds=[x]), _evaluate)
    nodes = {n.name: n for n in folded.nodes}
    assert set(nodes) == {"six", "out"} and nodes["six"].type == "Const"
    assert float(nodes["six"].attrs["value"]) == 6.0
    assert folded.fetches[1][0] is nodes["six"]


def test_constant_folding_respects_device_boundaries_and_size():
    with af.Graph().as_default():
        two = af.constant(2.0, name="two")
        moved = af.multiply(two, two, name="moved")
        big = af.fill([1024, 1024], 1.0, name="big")
        total = af.add(big, moved, name="total")
    graph = _node_graph([total], devices={"moved": CPU1})
    folded = optimize.fold_constants(graph, _evaluate, max_bytes=1 << 16)
    nodes = {n.name: n for n in folded.nodes}
    assert nodes["moved"].type == "Mul"       # its input lives on another device
    assert nodes["big"].type == "Fill"        # the result would be too big


def test_alap_recv_waits_for_the_consumers_other_input():
    with af.Graph().as_default():
        with af.device("/device:CPU:0"):
            early = af.constant(np.ones(4, np.float32), name="early")
        with af.device("/device:CPU:1"):
            slow = af.exp(af.tanh(af.constant(np.ones(4, np.float32))), name="slow")
            out = af.add(slow, early, name="out")
    ops = prune([out], [], [])
    node_graph = NodeGraph.from_ops(ops, [], [out], [], {op: op.device and (
        CPU1 if "CPU:1" in op.device else CPU0) or CPU0 for op in ops})
    parts = partition(node_graph, [CPU0, CPU1], {CPU0: 1, CPU1: 2})
    optimize.schedule_recvs(parts)
    cpu1 = parts.partitions[1].nodes
    recv = next(n for n in cpu1 if n.type == "_Recv")
    assert [c.name for c in recv.control_inputs] == ["slow"]
    order = [n.name for n in cpu1]
    assert order.index("slow") < order.index(recv.name) < order.index("out")


def test_alap_edges_keep_partitions_acyclic():
    with af.Graph().as_default():
        with af.device("/device:CPU:0"):
            a = af.constant(1.0, name="a")
        with af.device("/device:CPU:1"):
            b = af.add(a, 1.0, name="b")
        with af.device("/device:CPU:0"):
            c = af.add(b, 1.0, name="c")
        with af.device("/device:CPU:1"):
            d = af.add(c, af.identity(b, name="b2"), name="d")  # b2 depends on the first Recv
    ops = prune([d], [], [])
    placement = {op: CPU1 if "CPU:1" in op.device else CPU0 for op in ops}
    parts = partition(NodeGraph.from_ops(ops, [], [d], [], placement), [CPU0, CPU1],
                      {CPU0: 1, CPU1: 2})
    optimize.schedule_recvs(parts)
    recv_c = next(n for n in parts.partitions[1].nodes
                  if n.type == "_Recv" and n.attrs["tensor_name"].startswith("edge_2"))
    assert [c.name for c in recv_c.control_inputs] == ["b2"]
    order = [n.name for n in parts.partitions[1].nodes]
    assert order.index("b2") < order.index(recv_c.name) < order.index("d")


async def test_optimized_and_plain_runs_agree():
    graph = af.Graph()
    with graph.as_default():
        x = af.placeholder(af.float32, [3], name="x")
        k = af.constant([1.0, 2.0, 3.0]) * 2.0
        with af.device("/device:CPU:1"):
            y = af.square(x + k) + af.square(k + x)
        z = af.reduce_sum(y) + af.reduce_sum(k)
    feed = {x: np.array([0.5, -1.0, 2.0], np.float32)}
    results = []
    for optimize_graph in (True, False):
        config = af.SessionConfig(device_count={"CPU": 2}, optimize_graph=optimize_graph)
        async with af.Session(graph=graph, config=config) as sess:
            results.append(await sess.run([z, k, y], feed))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want)
