"""The mean softmax cross entropy and its gradients as one node (compile/fuse_softmax_xent.py,
kernels/softmax_xent_mean.py, issue 37): where the pass fires (an MLP's loss, the sparse form,
a loss without gradient) and where it does not (a fetched or otherwise read per-example loss,
a read backprop, a partial mean, the switch off); end to end the loss, the logits' and the
bias's gradients with the unfused kernels' bits (NaN, inf, -0, labels not summing to 1,
float32/float64, batch 1, more classes than the compiled pass takes), where the compiled pass
is off (the unfused kernels' own code, which a GPU runs), float16, and the gradient against
central differences."""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from special_values import assert_same_bits, special_arrays

import asyncflow as af
from asyncflow.compile import fuse_softmax_xent as fusion
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.compile.prune import prune
from asyncflow.kernels import jit
from gradcheck import check_gradients

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
DENSE, SPARSE = fusion.DENSE, fusion.SPARSE
CHAIN = {"SoftmaxCrossEntropyWithLogits", "Mean", "BroadcastToLike", "ExpandDimsMul"}


def node_graph(fetches, feeds=()):
    ops = prune(fetches, [], feeds)
    return NodeGraph.from_ops(ops, list(feeds), list(fetches), [], {op: CPU0 for op in ops})


def types(graph):
    return [n.type for n in graph.nodes]


def classifier(sparse=False, classes=10, dtype=af.float32):
    """An MLP's last layer and loss: ``(x, y, w, b, per_example, loss)``."""
    x = af.placeholder(dtype, [None, 4], name="x")
    y = af.placeholder(af.int64 if sparse else dtype, [None] if sparse else [None, classes],
                       name="y")
    w = af.Variable(np.full((4, classes), 0.25, dtype.np), name="w")
    b = af.Variable(np.zeros(classes, dtype.np), name="b")
    logits = af.matmul(x, w) + b
    if sparse:
        per_example = af.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
    else:
        per_example = af.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits)
    return x, y, w, b, per_example, af.reduce_mean(per_example, name="loss")


@pytest.mark.parametrize("sparse", [False, True])
def test_the_loss_and_its_gradients_read_one_node(sparse):
    with af.Graph().as_default():
        x, y, w, b, _, loss = classifier(sparse)
        grad_w, grad_b = af.gradients(loss, [w, b])
    before = node_graph([loss, grad_w, grad_b], feeds=[x, y])
    after = fusion.fuse_softmax_xent(before)
    (fused,) = [n for n in after.nodes if n.type == (SPARSE if sparse else DENSE)]
    assert after.changed and fused.name == loss.op.name and fused.attrs["bias_grad"]
    assert after.fetches[0] == (fused, 0) and after.fetches[2] == (fused, 2)
    (matmul_grad,) = [n for n in after.nodes if n.name == grad_w.op.name]
    assert (fused, 1) in matmul_grad.inputs
    left = set(types(after))
    assert not ({"Mean", "BroadcastToLike", "ExpandDimsMul", "Sum"} & left)
    assert not {"SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits"} & left
    assert {"Mean", "BroadcastToLike", "ExpandDimsMul", "Sum"} <= set(types(before))
    gone = {n for n in before.nodes if n.type in CHAIN | {"Sum"}}
    assert not any(p[0] in gone for n in after.nodes for p in n.inputs)


def test_the_bias_gradient_stays_a_sum_with_its_switch_off(monkeypatch):
    monkeypatch.setattr(fusion, "BIAS_GRAD", False)
    with af.Graph().as_default():
        x, y, w, b, _, loss = classifier()
        grads = af.gradients(loss, [w, b])
    after = fusion.fuse_softmax_xent(node_graph([loss, *grads], feeds=[x, y]))
    (fused,) = [n for n in after.nodes if n.type == DENSE]
    assert not fused.attrs["bias_grad"] and len(fused.out_specs) == 2
    assert "Sum" in types(after)


def test_the_loss_alone_fuses_without_a_gradient():
    with af.Graph().as_default():
        x, y, _, _, _, loss = classifier()
    after = fusion.fuse_softmax_xent(node_graph([loss], feeds=[x, y]))
    (fused,) = [n for n in after.nodes if n.type == DENSE]
    assert len(fused.inputs) == 2 and len(fused.out_specs) == 1
    assert not {"SoftmaxCrossEntropyWithLogits", "Mean"} & set(types(after))


def test_no_fusion_where_the_per_example_loss_or_backprop_has_another_use(monkeypatch):
    def fused_types(extra):
        graph = af.Graph()
        with graph.as_default():
            x, y, w, b, per_example, loss = classifier()
            fetches = [loss, *af.gradients(loss, [w, b])] + extra(per_example)
        return types(fusion.fuse_softmax_xent(node_graph(fetches, feeds=[x, y])))

    assert DENSE in fused_types(lambda per_example: [])
    # A fetched per-example loss, another reader of it, a fetched backprop: today's form.
    for extra in (lambda p: [p], lambda p: [af.reduce_max(p)], lambda p: [p.op.outputs[1]],
                  lambda p: [af.reduce_sum(p.op.outputs[1])]):
        left = fused_types(extra)
        assert DENSE not in left and CHAIN <= set(left)
    monkeypatch.setattr(fusion, "ENABLED", False)
    assert DENSE not in fused_types(lambda per_example: [])


def test_no_fusion_for_a_partial_mean_or_a_cast_between():
    with af.Graph().as_default():
        logits = af.placeholder(af.float32, [2, 3, 5])
        labels = af.placeholder(af.float32, [2, 3, 5])
        per_example = af.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        partial = af.reduce_mean(per_example, axis=1)
        half = af.placeholder(af.float16, [None, 5])
        half_loss = af.reduce_mean(af.nn.softmax_cross_entropy_with_logits(
            labels=af.placeholder(af.float16, [None, 5]), logits=half))
    after = fusion.fuse_softmax_xent(node_graph([partial, half_loss]))
    assert DENSE not in types(after) and not after.changed
    assert types(after).count("SoftmaxCrossEntropyWithLogits") == 2


async def run_steps(optimize_graph, logits_value, labels_value, sparse, dtype, steps=2):
    """The loss, the logits' and the bias's gradients over ``steps`` SGD steps, and the op
    types the last step ran."""
    with af.Graph().as_default():
        x = af.placeholder(dtype, logits_value.shape)
        y = af.placeholder(np.int64 if sparse else dtype, labels_value.shape)
        b = af.Variable(np.full(logits_value.shape[1:], 0.5, dtype), name="b")
        logits = x + b
        if sparse:
            per_example = af.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        else:
            per_example = af.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits)
        loss = af.reduce_mean(per_example)
        grad_x, grad_b = af.gradients(loss, [x, b])
        train = af.train.GradientDescentOptimizer(0.125).minimize(loss)
        config = af.ConfigProto(optimize_graph=optimize_graph)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            feed = {x: logits_value, y: labels_value}
            results = [await session.run([loss, grad_x, grad_b, train], feed)
                       for _ in range(steps)]
            metadata = af.RunMetadata()
            await session.run([loss, grad_b], feed, options=af.RunOptions(
                trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
    return [r[:3] for r in results], {s.op_type for s in metadata.step_stats}


def labels_for(rng, rows, classes, sparse):
    if sparse:
        return rng.integers(0, classes, rows)
    return np.eye(classes)[rng.integers(0, classes, rows)]


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("dtype, rows, classes", [
    (np.float32, 128, 10), (np.float64, 33, 7), (np.float32, 1, 10), (np.float32, 1, 1),
    (np.float32, 16, 100), (np.float16, 9, 4)])
async def test_fused_steps_match_the_unfused_chain(sparse, dtype, rows, classes):
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((rows, classes)) * 3).astype(dtype)
    labels = labels_for(rng, rows, classes, sparse)
    labels = labels if sparse else labels.astype(dtype)
    fused, fused_types = await run_steps(True, logits, labels, sparse, dtype)
    plain, plain_types = await run_steps(False, logits, labels, sparse, dtype)
    fused_type = SPARSE if sparse else DENSE
    if dtype is np.float16:  # TF1's builders compute in float32 and cast: no fusion
        assert fused_type not in fused_types
    else:
        assert fused_type in fused_types and "Mean" not in fused_types
    assert fused_type not in plain_types and "Mean" in plain_types
    assert_same_bits(fused, plain)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), rows=st.integers(1, 9), classes=st.integers(1, 12))
async def test_special_logits_and_labels_not_summing_to_one(data, rows, classes):
    # NaN, inf, -inf, -0, huge and tiny logits; labels of any sign and sum: the chain's bits.
    logits = data.draw(special_arrays((rows, classes)))
    labels = np.asarray(data.draw(st.lists(st.floats(-2, 2, width=32), min_size=rows * classes,
                                           max_size=rows * classes)),
                        np.float32).reshape(rows, classes)
    with np.errstate(all="ignore"):
        fused, fused_types = await run_steps(True, logits, labels, False, np.float32, steps=1)
        plain, _ = await run_steps(False, logits, labels, False, np.float32, steps=1)
    assert DENSE in fused_types
    assert_same_bits(fused, plain)


@pytest.mark.parametrize("sparse", [False, True])
async def test_without_the_compiled_pass_the_same_bits_as_the_chain(monkeypatch, sparse):
    # The unfused kernels' own code (what a GPU and a machine without numba run).
    monkeypatch.setattr(jit, "ENABLED", False)
    rng = np.random.default_rng(11)
    logits = rng.standard_normal((64, 10)).astype(np.float32)
    labels = labels_for(rng, 64, 10, sparse)
    labels = labels if sparse else labels.astype(np.float32)
    fused, fused_types = await run_steps(True, logits, labels, sparse, np.float32)
    plain, _ = await run_steps(False, logits, labels, sparse, np.float32)
    assert (SPARSE if sparse else DENSE) in fused_types
    for fused_step, plain_step in zip(fused, plain):
        for got, want in zip(fused_step, plain_step):
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


async def test_a_label_out_of_range_names_the_op():
    logits = np.zeros((3, 4), np.float32)
    with pytest.raises(af.errors.InvalidArgumentError, match="outside the valid range"):
        await run_steps(True, logits, np.array([0, 4, 1]), True, np.float32, steps=1)


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 4), classes=st.integers(2, 5), seed=st.integers(0, 2**16))
async def test_the_fused_gradient_against_central_differences(rows, classes, seed):
    # Labels summing to 1 per row: TF's kernel (and the unfused chain) gives the backprop
    # softmax - labels, the derivative only where they do.
    rng = np.random.default_rng(seed)
    labels = rng.random((rows, classes))
    labels /= labels.sum(axis=1, keepdims=True)
    bias = rng.standard_normal(classes)

    def build(logits):
        return af.reduce_mean(af.nn.softmax_cross_entropy_with_logits(
            labels=af.constant(labels), logits=logits + af.constant(bias)))
    await check_gradients(build, [rng.standard_normal((rows, classes))])


async def test_on_a_gpu_the_node_runs_the_chain_s_code_with_its_bits():
    # Under make test-gpu the fake GPU takes the loss: its kernel is the unfused kernels' code
    # on the GPU's array module, the same bits as the chain there.
    if os.environ.get("ASYNCFLOW_FAKE_GPU") != "1":
        pytest.skip("needs the fake GPU (make test-gpu)")
    rng = np.random.default_rng(13)
    logits = rng.standard_normal((32, 10)).astype(np.float32)
    labels = labels_for(rng, 32, 10, False).astype(np.float32)
    with af.Graph().as_default():
        x = af.placeholder(af.float32, logits.shape)
        y = af.placeholder(af.float32, labels.shape)
        b = af.Variable(np.zeros(10, np.float32))
        loss = af.reduce_mean(af.nn.softmax_cross_entropy_with_logits(labels=y, logits=x + b))
        grads = af.gradients(loss, [x, b])
        results = {}
        for optimize in (True, False):
            config = af.ConfigProto(optimize_graph=optimize)
            async with af.Session(config=config) as session:
                await session.run(af.global_variables_initializer())
                metadata = af.RunMetadata()
                results[optimize] = await session.run(
                    [loss, *grads], {x: logits, y: labels}, options=af.RunOptions(
                        trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
                if optimize:
                    (fused,) = [s for s in metadata.step_stats if s.op_type == DENSE]
                    assert "GPU" in fused.device
    for got, want in zip(results[True], results[False]):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


async def test_two_losses_each_in_the_other_s_gradient_fuse_without_a_cycle():
    # loss = mean1 * mean2: each mean's gradient reads the other mean. Fusing both would make
    # each fused node wait on the other's gradient (a cycle): the pass fuses the first only.
    rng = np.random.default_rng(5)
    feed = rng.standard_normal((8, 4)).astype(np.float32)
    results, fused_counts = {}, {}
    for optimize in (True, False):
        with af.Graph().as_default():
            x = af.placeholder(af.float32, [8, 4])
            w = af.Variable(np.full((4, 5), 0.25, np.float32))
            logits = af.matmul(x, w)
            means = [af.reduce_mean(af.nn.softmax_cross_entropy_with_logits(
                labels=af.constant(labels_for(rng, 8, 5, False).astype(np.float32)),
                logits=logits * scale)) for scale in (1.0, 2.0)]
            loss = means[0] * means[1]
            (grad_w,) = af.gradients(loss, [w])
            async with af.Session(config=af.ConfigProto(optimize_graph=optimize)) as session:
                await session.run(af.global_variables_initializer())
                metadata = af.RunMetadata()
                results[optimize] = await session.run(
                    [loss, grad_w], {x: feed}, options=af.RunOptions(
                        trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
                fused_counts[optimize] = [s.op_type for s in metadata.step_stats].count(DENSE)
        rng = np.random.default_rng(5)
        rng.standard_normal((8, 4))
    assert fused_counts == {True: 1, False: 0}
    for got, want in zip(results[True], results[False]):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
