"""Plans are built from the compile-time nodes alone, and errors name the user's op.

The compiler copies the pruned ops once into ``Node``s (``compile/node_graph.py``); passes rewrite
those, and the executor's plans and a worker's graph_defs are made from them: no second set
of ``Operation``s per compile. A node stands for the user's op through its public ``origin``,
which an ``OpError`` names, so a kernel failing in a fused, folded or partitioned node
points at the op (and line) the user wrote.
"""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.graph import graph as graph_module
from asyncflow.compile.node_graph import NodeGraph

TWO_CPUS = af.SessionConfig(device_count={"CPU": 2})


@pytest.fixture
def operations_made(monkeypatch):
    """Counts every Operation constructed while the test runs."""
    made = []
    original = graph_module.Operation.__init__

    def counting(self, *args, **kwargs):
        made.append(args[2])  # the op's name
        original(self, *args, **kwargs)
    monkeypatch.setattr(graph_module.Operation, "__init__", counting)
    return made


async def test_compiling_a_partitioned_and_rewritten_run_makes_no_operations(operations_made):
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32, [None, 3], name="x")
        w = af.constant(np.ones((3, 2), np.float32), name="w")
        with af.device("/device:CPU:0"):
            hidden = af.nn.relu(af.matmul(x, w) + af.constant([1.0, 2.0]) * 2.0, name="hidden")
        with af.device("/device:CPU:1"):
            out = af.reduce_sum(hidden * 3.0, name="out")
    built = list(operations_made)
    async with af.Session(graph=graph, config=TWO_CPUS) as sess:
        value = await sess.run(out, {x: np.ones((2, 3), np.float32)})
    assert value == pytest.approx(3 * 2 * ((3 + 2) + (3 + 4)))
    assert operations_made == built  # folding, fusion, partitioning: nodes only


async def test_a_fused_node_failing_names_the_users_op_and_line():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, None], name="x")
        w = af.constant(np.ones((3, 2), np.float32), name="w")
        b = af.constant(np.ones(2, np.float32), name="b")
        out = af.nn.relu(af.nn.bias_add(af.matmul(x, w), b), name="act")  # this line
        async with af.Session() as sess:
            with pytest.raises(af.errors.OpError) as info:
                await sess.run(out, {x: np.ones((2, 5), np.float32)})
            assert info.value.op is sess.graph.get_operation_by_name("act")
    assert "_FusedMatMul 'act'" in info.value.message
    assert f"{__file__}:" in info.value.message and "created at" in info.value.message


async def test_a_partitioned_node_failing_names_the_users_op():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None], name="x")
        with af.device("/device:CPU:1"):
            bad = af.reshape(x * 2.0, [3], name="bad_reshape")
        with af.device("/device:CPU:0"):
            out = af.identity(bad) + 1.0
        async with af.Session(config=TWO_CPUS) as sess:
            with pytest.raises(af.errors.InvalidArgumentError) as info:
                await sess.run(out, {x: np.ones(4, np.float32)})
            assert info.value.op is sess.graph.get_operation_by_name("bad_reshape")
    assert "device:CPU:1" in info.value.message and f"{__file__}:" in info.value.message


def test_a_node_answers_what_kernels_and_errors_read_of_an_op():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2, 3], name="x")
        y = af.matmul(x, x, transpose_b=True, name="t")
    ops = [x.op, y.op]
    nodes = NodeGraph.from_ops(ops, [], [y], [], {op: "/device:CPU:0" for op in ops}).nodes
    node = nodes[-1]
    assert node.origin is y.op and node.name == "t" and node.type == "MatMul"
    assert node.outputs[0].shape.as_list() == [2, 2] and node.outputs[0].name == "t:0"
    assert node.creation_site() == y.op.creation_site()
    assert node.get_attr("transpose_b") is True and node.inputs == [(nodes[0], 0)] * 2
    with pytest.raises(ValueError, match="'t' \\(MatMul\\) has no attr named 'nope'"):
        node.get_attr("nope")
    err = af.errors.InvalidArgumentError(None, node, "message")
    assert err.op is y.op  # an error names the user's op, never the compile-time node
