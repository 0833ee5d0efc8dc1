"""The mean squared error fusion (compile/fuse_squared_error.py, issue 37): ``Mean(Square(Sub))``
over every axis becomes one ``_FusedMeanSquaredError`` and its gradient's BroadcastToLike and
two Muls one ``_FusedMeanSquaredErrorGrad``, only where no intermediate has another use; as
data (the rewritten NodeGraph) and end to end (the same bits as the unfused ops, NaN, inf and
-0 included; the gradient against central differences)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncflow as af
from asyncflow.compile import fuse_squared_error as fuse_squared_error_module
from asyncflow.compile.fuse_squared_error import fuse_squared_error
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.compile.prune import prune
from gradcheck import check_gradients
from special_values import assert_same_bits, special_arrays

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
FUSED = {"_FusedMeanSquaredError", "_FusedMeanSquaredErrorGrad"}
CHAIN = {"Sub", "Square", "Mean", "BroadcastToLike"}


def node_graph(fetches, feeds=(), targets=()):
    ops = prune(fetches, targets, feeds)
    placement = {op: CPU0 for op in ops}
    return NodeGraph.from_ops(ops, list(feeds), list(fetches), list(targets), placement)


def types(graph):
    return [n.type for n in graph.nodes]


def mse_graph(shape=(None, 6), dtype=af.float32):
    x = af.placeholder(dtype, shape, name="x")
    w = af.Variable(np.ones(shape[1:], dtype.np), name="w")
    h = af.sigmoid(x * w)
    loss = af.reduce_mean(af.square(h - x), name="loss")
    (grad,) = af.gradients(loss, [w])
    return x, h, loss, grad


def test_the_loss_and_its_gradient_read_two_fused_nodes(monkeypatch):
    # (The sigmoid's gradient not fused too: tests/ops/test_squared_error_sigmoid.py.)
    monkeypatch.setattr(fuse_squared_error_module, "SIGMOID_GRAD", False)
    with af.Graph().as_default():
        x, _, loss, grad = mse_graph()
    before = node_graph([loss, grad], feeds=[x])
    after = fuse_squared_error(before)
    (forward,) = [n for n in after.nodes if n.type == "_FusedMeanSquaredError"]
    (backward,) = [n for n in after.nodes if n.type == "_FusedMeanSquaredErrorGrad"]
    assert after.changed and forward.name == loss.op.name
    assert after.fetches[0] == (forward, 0)
    assert backward.inputs[1] == (forward, 1) and backward.inputs[2] == (forward, 0)
    assert not CHAIN & set(types(after))
    assert CHAIN <= set(types(before))      # the input graph is untouched
    # Nothing reads the Sub's, the Square's or the gradient Muls' old nodes any more.
    gone = {n for n in before.nodes if n.type in CHAIN}
    assert not any(p[0] in gone for n in after.nodes for p in n.inputs)


def test_the_forward_alone_fuses_without_a_gradient():
    with af.Graph().as_default():
        x, _, loss, _ = mse_graph()
    after = fuse_squared_error(node_graph([loss], feeds=[x]))
    assert "_FusedMeanSquaredError" in types(after)
    assert not {"Sub", "Square", "Mean"} & set(types(after))


def test_no_fusion_where_an_intermediate_is_used_elsewhere():
    def build(extra, fetch_grad=True):
        graph = af.Graph()
        with graph.as_default():
            x, h, loss, grad = mse_graph()
            ops = {op.type: op for op in graph.get_operations()
                   if op.type in ("Sub", "Square", "Mean", "BroadcastToLike", "Mul")
                   and (op.type != "Mul" or "Square_grad" in op.name)}
            muls = sorted((op for op in graph.get_operations()
                           if op.type == "Mul" and "Square_grad" in op.name),
                          key=lambda op: op.name)
            fetches = [loss] + ([grad] if fetch_grad else []) + extra(ops, muls, x)
        return fuse_squared_error(node_graph(fetches, feeds=[x]))

    # The squares read by another op, fetched, or a control input: nothing fuses.
    for extra in [lambda ops, muls, x: [af.reduce_sum(ops["Square"].outputs[0])],
                  lambda ops, muls, x: [ops["Square"].outputs[0]],
                  lambda ops, muls, x: [_after(ops["Square"], x)]]:
        assert not FUSED & set(types(build(extra)))
    # The gradient's intermediates read elsewhere or fetched: the forward fuses, not the
    # gradient (which then reads the fused node's difference).
    for extra in [lambda ops, muls, x: [ops["BroadcastToLike"].outputs[0]],
                  lambda ops, muls, x: [af.reduce_sum(muls[0].outputs[0])],
                  lambda ops, muls, x: [_after(muls[0], x)]]:
        graph = build(extra)
        assert "_FusedMeanSquaredError" in types(graph)
        assert "_FusedMeanSquaredErrorGrad" not in types(graph)
        assert "BroadcastToLike" in types(graph)
    # The difference read elsewhere or fetched is fine: it is the fused node's output 1.
    graph = build(lambda ops, muls, x: [ops["Sub"].outputs[0]])
    (fused,) = [n for n in graph.nodes if n.type == "_FusedMeanSquaredError"]
    assert graph.fetches[-1] == (fused, 1) and "_FusedMeanSquaredErrorGrad" in types(graph)


def _after(op, x):
    with af.control_dependencies([op]):
        return af.identity(x)


def test_no_fusion_for_a_partial_mean_an_integer_dtype_or_another_factor():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 6], name="x")
        y = af.placeholder(af.float32, [None, 6], name="y")
        partial = af.reduce_mean(af.square(x - y), axis=1)
        kept = af.reduce_mean(af.square(x - y), keepdims=True)
        summed = af.reduce_sum(af.square(x - y))
        i = af.placeholder(af.int32, [3, 4], name="i")
        ints = af.reduce_mean(af.square(i - i))
        unranked = af.placeholder(af.float32, None, name="u")
        loose = af.reduce_mean(af.square(unranked - 1.0))
        every = af.reduce_mean(af.square(x - y), axis=[1, -2])     # every axis, spelled out
    for fetch, feeds in ((partial, [x, y]), (kept, [x, y]), (summed, [x, y]), (ints, [i]),
                         (loose, [unranked])):
        before = node_graph([fetch], feeds=feeds)
        after = fuse_squared_error(before)
        assert types(after) == types(before) and not FUSED & set(types(after))
    assert "_FusedMeanSquaredError" in types(fuse_squared_error(node_graph([every], [x, y])))


def test_no_fusion_across_devices_and_no_copy_without_a_mean():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [4, 5], name="x")
        loss = af.reduce_mean(af.square(x - 1.0))
        plain = af.nn.relu(x)
    ops = prune([loss], [], [x])
    cpu1 = CPU0.replace("CPU:0", "CPU:1")
    placement = {op: cpu1 if op.type == "Square" else CPU0 for op in ops}
    graph = fuse_squared_error(NodeGraph.from_ops(ops, [x], [loss], [], placement))
    assert not FUSED & set(types(graph))
    plain_graph = node_graph([plain], feeds=[x])
    assert fuse_squared_error(plain_graph) is plain_graph


async def run_steps(optimize_graph, value, target, dtype, steps=3):
    """The loss, the gradient of ``a`` and the trained weights over ``steps`` SGD steps."""
    with af.Graph().as_default():
        a = af.placeholder(dtype, value.shape)
        b = af.placeholder(dtype, target.shape)
        w = af.Variable(np.full(value.shape[1:], 0.75, dtype), name="w")
        loss = af.reduce_mean(af.square(a * w - b))
        grad_a, grad_w = af.gradients(loss, [a, w])
        train = af.train.GradientDescentOptimizer(0.125).minimize(loss)
        config = af.ConfigProto(optimize_graph=optimize_graph)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            results = [await session.run([loss, grad_a, grad_w, train], {a: value, b: target})
                       for _ in range(steps)]
            metadata = af.RunMetadata()
            await session.run([loss, grad_w], {a: value, b: target}, options=af.RunOptions(
                trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
    return [r[:3] for r in results], {s.op_type for s in metadata.step_stats}


@pytest.mark.parametrize("dtype, shape", [
    (np.float32, (256, 784)), (np.float32, (3, 5, 7)), (np.float64, (33, 17)),
    (np.float16, (9, 4)), (np.float32, (1, 1))])
async def test_fused_steps_give_the_same_bits_as_unfused(dtype, shape):
    rng = np.random.default_rng(3)
    value = rng.standard_normal(shape).astype(dtype)
    target = rng.standard_normal(shape).astype(dtype)
    fused, fused_types = await run_steps(True, value, target, dtype)
    plain, plain_types = await run_steps(False, value, target, dtype)
    assert FUSED <= fused_types and not {"Square", "BroadcastToLike"} & fused_types
    assert not FUSED & plain_types and {"Square", "BroadcastToLike"} <= plain_types
    assert_same_bits(fused, plain)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), rows=st.integers(1, 9), cols=st.integers(1, 13))
async def test_odd_sizes_and_special_values_keep_the_bits(data, rows, cols):
    # Odd sizes, NaN, inf, -0, overflowing squares and subnormals: the same bits either way
    # (the broadcast target included: b of one row).
    value = data.draw(special_arrays((rows, cols)))
    target = data.draw(special_arrays((1, cols)))
    with np.errstate(all="ignore"):
        fused, fused_types = await run_steps(True, value, target, np.float32, steps=1)
        plain, _ = await run_steps(False, value, target, np.float32, steps=1)
    assert FUSED <= fused_types
    assert_same_bits(fused, plain)


async def test_the_fused_gradient_against_central_differences():
    rng = np.random.default_rng(5)
    await check_gradients(lambda a, b: af.reduce_mean(af.square(af.tanh(a) - b)),
                          [rng.standard_normal((7, 5)), rng.standard_normal((7, 5))])


async def test_mismatched_shapes_name_the_op():
    with af.Graph().as_default():
        a = af.placeholder(af.float32, [None, 3])
        b = af.placeholder(af.float32, [None, 3])
        loss = af.reduce_mean(af.square(a - b), name="the_loss")
        async with af.Session() as session:
            with pytest.raises(af.errors.InvalidArgumentError, match="Incompatible shapes") as info:
                await session.run(loss, {a: np.ones((2, 3), np.float32),
                                         b: np.ones((4, 3), np.float32)})
    assert "the_loss" in str(info.value)


@pytest.mark.parametrize("grad", [1.0, 0.37, -3.0, 1e-30, 0.0])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_gradient_in_one_pass_has_the_two_pass_bits(dtype, grad):
    """Given the forward's loss, the gradient multiplies by ``2 * scale`` in one pass: the
    bits of ``(diff * 2) * scale`` wherever the loss is finite (magnitudes up to near the
    square root of float's max, subnormals, zeros' signs), and the two-pass form where the
    loss is not (a ``diff * 2`` that overflows)."""
    from asyncflow.kernels import math as kmath

    class Ctx:
        xp, name, attrs, prepared = np, "mse", {}, False
    rng = np.random.default_rng(8)
    info = np.finfo(dtype)
    magnitudes = np.exp(rng.uniform(np.log(float(info.tiny) / 4),
                                    np.log(np.sqrt(float(info.max)) / 64), 257))
    diff = (magnitudes * rng.choice([-1, 1], 257)).astype(dtype)
    diff[:3] = [0.0, -0.0, info.tiny / 2]
    grad = np.asarray(grad, dtype)
    for value in (diff, np.concatenate([diff, [info.max / 1.5]]).astype(dtype)):
        with np.errstate(all="ignore"):
            loss, _ = kmath._fused_mean_squared_error(Ctx(), value, np.zeros_like(value))
            one_pass = kmath._fused_mean_squared_error_grad(Ctx(), grad, value, loss)[0]
            two_pass = kmath._fused_mean_squared_error_grad(Ctx(), grad, value)[0]
        assert one_pass.dtype == two_pass.dtype == dtype
        assert one_pass.tobytes() == two_pass.tobytes()
        assert np.isfinite(loss) == (value.size == 257)


async def run_split(optimize_graph, threads):
    """The loss and its gradient of fed arrays: no other elementwise op runs."""
    from asyncflow.exec import intra_op
    rng = np.random.default_rng(9)
    value, target = (rng.standard_normal((37, 13)).astype(np.float32) for _ in range(2))
    value.reshape(-1)[::7] = -0.0
    with af.Graph().as_default():
        a = af.placeholder(af.float32, [None, 13])
        b = af.placeholder(af.float32, [None, 13])
        loss = af.reduce_mean(af.square(a - b))
        (grad,) = af.gradients(loss, [a])
        config = af.ConfigProto(optimize_graph=optimize_graph,
                                intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            splits = intra_op.shared_pool(threads).splits
            metadata = af.RunMetadata()
            result = await session.run([loss, grad], {a: value, b: target},
                                       options=af.RunOptions(trace_level=af.RunOptions.FULL_TRACE),
                                       run_metadata=metadata)
            splits = intra_op.shared_pool(threads).splits - splits
    return result, splits, {s.op_type for s in metadata.step_stats}


async def test_the_fused_gradient_splits_when_large_as_the_muls_it_replaces(monkeypatch,
                                                                            cpu_only):
    """Large, the unfused gradient's Muls split over the intra-op threads; the fused gradient's
    one pass does too (it once ran whole on one thread), with the same bits."""
    from asyncflow.kernels import intra_op as kernel_intra_op
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 64)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 256)
    fused, fused_splits, fused_types = await run_split(True, 2)
    plain, plain_splits, plain_types = await run_split(False, 2)
    assert FUSED <= fused_types and not FUSED & plain_types
    assert plain_splits > 0 and fused_splits > 0
    assert_same_bits([fused], [plain])
