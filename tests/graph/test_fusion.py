"""The fusion pass (TF's remapper, issue 37): Conv2D+BiasAdd[+Relu] and MatMul+BiasAdd/Add
[+Relu|Sigmoid|Tanh] become one node where the intermediates have no other use; as data
(the rewritten NodeGraph) and end to end (a session's results, bit for bit the unfused run's,
forward and training step)."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.compile import optimize
from asyncflow.compile.prune import prune
from asyncflow.compile.node_graph import NodeGraph

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def node_graph(fetches, feeds=(), targets=()):
    ops = prune(fetches, targets, feeds)
    placement = {op: CPU0 for op in ops}
    return NodeGraph.from_ops(ops, list(feeds), list(fetches), list(targets), placement)


def dense(x, units_in, units_out, activation, use_bias_add, seed):
    rng = np.random.default_rng(seed)
    w = af.constant(rng.standard_normal((units_in, units_out)).astype(np.float32) * 0.3)
    b = af.constant(rng.standard_normal(units_out).astype(np.float32))
    product = af.matmul(x, w, name=f"mm{seed}")
    biased = (af.nn.bias_add(product, b, name=f"bias{seed}") if use_bias_add
              else af.add(product, b, name=f"bias{seed}"))
    return activation(biased, name=f"act{seed}") if activation else biased


@pytest.mark.parametrize("activation, fused_ops", [
    (af.nn.relu, ("BiasAdd", "Relu")), (af.sigmoid, ("BiasAdd", "Sigmoid")),
    (af.tanh, ("BiasAdd", "Tanh")), (None, ("BiasAdd",))])
@pytest.mark.parametrize("use_bias_add", [True, False])
def test_matmul_bias_activation_becomes_one_node(activation, fused_ops, use_bias_add):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 5], name="x")
        out = dense(x, 5, 3, activation, use_bias_add, 1)
    before = node_graph([out], feeds=[x])
    after = optimize.fuse_activations(before)
    fused = [n for n in after.nodes if n.type == "_FusedMatMul"]
    assert len(fused) == 1 and after.changed
    assert fused[0].name == out.op.name and fused[0].attrs["fused_ops"] == fused_ops
    assert after.fetches == [(fused[0], 0)]
    assert not any(n.type in ("MatMul", "BiasAdd", "Add") for n in after.nodes)
    assert any(n.type == "MatMul" for n in before.nodes)  # the input graph is untouched


def test_conv_bias_relu_becomes_one_node():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 6, 6, 2], name="x")
        f = af.constant(np.ones((3, 3, 2, 4), np.float32))
        b = af.constant(np.ones(4, np.float32))
        out = af.nn.relu(af.nn.bias_add(af.nn.conv2d(x, f, [1, 1, 1, 1], "SAME"), b),
                         name="relu")
    after = optimize.fuse_activations(node_graph([out], feeds=[x]))
    (fused,) = [n for n in after.nodes if n.type == "_FusedConv2D"]
    assert fused.name == "relu" and fused.attrs["fused_ops"] == ("BiasAdd", "Relu")
    assert fused.attrs["padding"] == "SAME" and len(fused.inputs) == 3


def test_no_fusion_where_an_intermediate_is_used_elsewhere():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [4, 5], name="x")
        product = af.matmul(x, af.constant(np.ones((5, 3), np.float32)), name="mm")
        biased = af.add(product, af.constant(np.ones(3, np.float32)), name="biased")
        out = af.nn.relu(biased, name="relu")
        also = af.reduce_sum(product, name="also")       # a second reader of the product
        fetched_mid = af.nn.relu(af.add(af.matmul(x, af.constant(np.ones((5, 2), np.float32)),
                                                  name="mm2"), 1.0, name="scalar_add"))
        with af.control_dependencies([biased]):
            after_control = af.identity(x, name="after")
    # A second reader of the product, or a scalar added (not a 1-D bias over the last dim):
    # nothing fuses.
    for fetches in ([out, also], [fetched_mid]):
        graph = optimize.fuse_activations(node_graph(fetches, feeds=[x]))
        assert not any(n.type == "_FusedMatMul" for n in graph.nodes), fetches
    # The biased sum fetched, or a control input: MatMul+Add fuse under its name, the Relu
    # stays and reads it, the control edge leaves the fused node.
    graph = optimize.fuse_activations(node_graph([out, biased], feeds=[x]))
    (fused,) = [n for n in graph.nodes if n.type == "_FusedMatMul"]
    assert fused.name == "biased" and fused.attrs["fused_ops"] == ("BiasAdd",)
    (relu,) = [n for n in graph.nodes if n.type == "Relu"]
    assert relu.inputs == [(fused, 0)] and graph.fetches == [(relu, 0), (fused, 0)]
    graph = optimize.fuse_activations(node_graph([out, after_control], feeds=[x]))
    (fused,) = [n for n in graph.nodes if n.type == "_FusedMatMul"]
    assert fused.attrs["fused_ops"] == ("BiasAdd",)
    assert next(n for n in graph.nodes if n.name == "after").control_inputs == [fused]


def test_a_fetched_activation_is_read_from_the_fused_node_and_control_edges_follow():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [4, 5], name="x")
        out = dense(x, 5, 3, af.nn.relu, False, 2)
        with af.control_dependencies([out]):
            later = af.identity(x, name="later")
    after = optimize.fuse_activations(node_graph([later, out], feeds=[x]))
    fused = next(n for n in after.nodes if n.type == "_FusedMatMul")
    later_node = next(n for n in after.nodes if n.name == "later")
    assert later_node.control_inputs == [fused]
    assert after.nodes.index(fused) < after.nodes.index(later_node)


def convnet_training_step(x, labels):
    rng = np.random.default_rng(3)
    conv = af.Variable((rng.standard_normal((3, 3, 2, 8)) * 0.2).astype(np.float32))
    conv_bias = af.Variable(np.full(8, 0.01, np.float32))
    hidden = af.nn.relu(af.nn.bias_add(af.nn.conv2d(x, conv, [1, 1, 1, 1], "SAME"),
                                       conv_bias))
    pooled = af.nn.max_pool(hidden, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    flat = af.reshape(pooled, [-1, 4 * 4 * 8])
    w1 = af.Variable((rng.standard_normal((128, 16)) * 0.1).astype(np.float32))
    b1 = af.Variable(np.zeros(16, np.float32))
    dense_out = af.sigmoid(af.matmul(flat, w1) + b1)
    w2 = af.Variable((rng.standard_normal((16, 3)) * 0.1).astype(np.float32))
    b2 = af.Variable(np.zeros(3, np.float32))
    logits = af.nn.bias_add(af.matmul(dense_out, w2), b2)
    loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    train = af.train.AdamOptimizer(0.01).minimize(loss)
    return loss, train, [conv, conv_bias, w1, b1, w2, b2]


async def run_training(optimize_graph, steps=3):
    rng = np.random.default_rng(4)
    images = rng.standard_normal((10, 8, 8, 2)).astype(np.float32)
    labels = rng.integers(0, 3, size=10).astype(np.int64)
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 8, 8, 2])
        y = af.placeholder(af.int64, [None])
        loss, train, params = convnet_training_step(x, y)
        config = af.ConfigProto(optimize_graph=optimize_graph)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            losses = []
            for _ in range(steps):
                losses.append((await session.run([loss, train], {x: images, y: labels}))[0])
            metadata = af.RunMetadata()
            await session.run(loss, {x: images, y: labels}, options=af.RunOptions(
                trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
            return losses, await session.run(params), {s.op_type for s in metadata.step_stats}


async def test_fused_training_gives_the_same_bits_as_unfused():
    fused_losses, fused_params, fused_types = await run_training(True)
    plain_losses, plain_params, plain_types = await run_training(False)
    # (the two dense layers' ``_FusedMatMul`` nodes, narrow, one after the other: one
    # ``_FusedMatMulChain`` on CPU, compile/fuse_matmul_chain.py; a GPU keeps the two)
    assert "_FusedConv2D" in fused_types
    assert len({"_FusedMatMul", "_FusedMatMulChain"} & fused_types) == 1
    assert not {"_FusedConv2D", "_FusedMatMul", "_FusedMatMulChain"} & plain_types
    np.testing.assert_array_equal(fused_losses, plain_losses)
    for a, b in zip(fused_params, plain_params):
        np.testing.assert_array_equal(a, b)


def two_conv_gradients():
    """A conv's input and filter gradients on one output gradient (the second layer's)."""
    rng = np.random.default_rng(8)
    x = af.placeholder(af.float32, [None, 7, 6, 3], name="x")
    first = af.Variable((rng.standard_normal((3, 3, 3, 4)) * 0.3).astype(np.float32))
    second = af.Variable((rng.standard_normal((5, 5, 4, 6)) * 0.3).astype(np.float32))
    hidden = af.nn.relu(af.nn.conv2d(x, first, 1, "SAME"))
    loss = af.reduce_sum(af.nn.conv2d(hidden, second, 1, "SAME") ** 2)
    return x, loss, af.gradients(loss, [first, second])


def test_a_convs_two_gradients_become_one_node():
    with af.Graph().as_default():
        x, _, grads = two_conv_gradients()
    before = node_graph(grads, feeds=[x])
    after = optimize.fuse_activations(before)
    (fused,) = [n for n in after.nodes if n.type == "_FusedConv2DBackprop"]
    assert len(fused.inputs) == 5 and after.changed
    assert not any(n.type == "Conv2DBackpropInput" for n in after.nodes)
    # The first conv's filter gradient has no input-gradient partner: it stays.
    assert [n.type for n in after.nodes].count("Conv2DBackpropFilter") == 1
    assert after.fetches[1] == (fused, 1)  # the second filter's gradient
    readers = [n for n in after.nodes if (fused, 0) in n.inputs]
    assert readers  # the first layer's ReluGrad reads the input gradient
    assert any(n.type == "Conv2DBackpropInput" for n in before.nodes)  # input untouched


def test_backprop_fusion_keeps_fetches_and_leaves_targets():
    with af.Graph().as_default():
        x, loss, grads = two_conv_gradients()
        input_grad = af.get_default_graph().get_tensor_by_name(
            "gradients/Conv2D_1_grad/Conv2DBackpropInput:0")
    after = optimize.fuse_activations(node_graph(grads + [input_grad], feeds=[x]))
    (fused,) = [n for n in after.nodes if n.type == "_FusedConv2DBackprop"]
    assert after.fetches[1:] == [(fused, 1), (fused, 0)]
    targeted = optimize.fuse_activations(node_graph(grads, feeds=[x],
                                                    targets=[input_grad.op]))
    assert not any(n.type == "_FusedConv2DBackprop" for n in targeted.nodes)


async def test_fused_backprops_give_the_same_bits_as_unfused():
    """Small shapes take the direct kernels: the fused node runs the same two kernels."""
    rng = np.random.default_rng(9)
    images = rng.standard_normal((5, 7, 6, 3)).astype(np.float32)
    results = {}
    for optimize_graph in (True, False):
        with af.Graph().as_default():
            x, loss, grads = two_conv_gradients()
            config = af.ConfigProto(optimize_graph=optimize_graph)
            async with af.Session(config=config) as session:
                await session.run(af.global_variables_initializer())
                metadata = af.RunMetadata()
                values = await session.run([loss] + grads, {x: images}, options=af.RunOptions(
                    trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
                results[optimize_graph] = values, {s.op_type for s in metadata.step_stats}
    assert "_FusedConv2DBackprop" in results[True][1]
    assert "_FusedConv2DBackprop" not in results[False][1]
    for a, b in zip(results[True][0], results[False][0]):
        np.testing.assert_array_equal(a, b)
