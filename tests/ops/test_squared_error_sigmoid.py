"""The loss and its gradient's sigmoid tail as one node (compile/fuse_squared_error.py's
``SIGMOID_GRAD``, kernels/squared_error_sigmoid.py, issue 37): where it fuses and where it
does not, and end to end the same bits as the four unfused kernels (the compiled pass,
numba off, NaN, inf, -0, a broadcast target), with one to three intra-op threads; the gradient against central differences."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from special_values import assert_same_bits, special_arrays

import asyncflow as af
from asyncflow.compile import fuse_squared_error as fusion
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.compile.prune import prune
from asyncflow.kernels import jit
from asyncflow.kernels import squared_error_sigmoid as kernel

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
FUSED = "_FusedMeanSquaredErrorSigmoidGrad"
UNFUSED = {"_FusedMeanSquaredError", "_FusedMeanSquaredErrorGrad", "SigmoidGrad"}


def node_graph(fetches, feeds=()):
    ops = prune(fetches, [], feeds)
    return NodeGraph.from_ops(ops, list(feeds), list(fetches), [], {op: CPU0 for op in ops})


def types(graph):
    return [n.type for n in graph.nodes]


def sigmoid_loss(shape=(None, 6), target_shape=None, dtype=af.float32):
    x = af.placeholder(dtype, shape, name="x")
    t = af.placeholder(dtype, target_shape or shape, name="t")
    w = af.Variable(np.full(shape[1:], 0.5, dtype.np), name="w")
    h = af.sigmoid(x * w)
    loss = af.reduce_mean(af.square(h - t), name="loss")
    return x, t, w, h, loss


def fuse(fetches, feeds, monkeypatch, on=True):
    monkeypatch.setattr(fusion, "SIGMOID_GRAD", on)
    return fusion.fuse_squared_error(node_graph(fetches, feeds))


def test_the_loss_and_the_sigmoid_gradient_fuse_into_one_node(monkeypatch):
    with af.Graph().as_default():
        x, t, w, _, loss = sigmoid_loss()
        (grad,) = af.gradients(loss, [w])
    after = fuse([loss, grad], [x, t], monkeypatch)
    (node,) = [n for n in after.nodes if n.type == FUSED]
    assert node.name == loss.op.name and after.fetches[0] == (node, 0)
    assert not UNFUSED & set(types(after)) and "SumToShape" not in types(after)
    assert any(p == (node, 1) for n in after.nodes for p in n.inputs)   # dy is read
    assert node.attrs == {"sum_to_y": True}
    off = fuse([loss, grad], [x, t], monkeypatch, on=False)
    assert FUSED not in types(off) and UNFUSED - {"SigmoidGrad"} <= set(types(off))


def test_no_fusion_where_an_intermediate_is_read_elsewhere(monkeypatch):
    def fused(extra):
        with af.Graph().as_default() as graph:
            x, t, w, h, loss = sigmoid_loss()
            (grad,) = af.gradients(loss, [w])
            ops = {op.type: op for op in graph.get_operations()}
            fetches = [loss, grad] + extra(ops, h, t)
            return FUSED in types(fuse(fetches, [x, t], monkeypatch))
    assert fused(lambda ops, h, t: [])
    assert not fused(lambda ops, h, t: [ops["Sub"].outputs[0]])            # the difference
    assert not fused(lambda ops, h, t: [ops["SigmoidGrad"].outputs[0]])    # the tail fetched
    assert not fused(lambda ops, h, t: [af.reduce_sum(ops["SumToShape"].outputs[0])])


def test_no_fusion_without_a_sigmoid_or_with_a_seed_that_reads_the_loss(monkeypatch):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 6], name="x")
        t = af.placeholder(af.float32, [None, 6], name="t")
        w = af.Variable(np.full(6, 0.5, np.float32), name="w")
        loss = af.reduce_mean(af.square(af.tanh(x * w) - t))
        (grad,) = af.gradients(loss, [w])
        h = af.sigmoid(x * w)
        other = af.reduce_mean(af.square(h - t))
        (seeded,) = af.gradients(other, [w], grad_ys=other * 2.0)
    assert FUSED not in types(fuse([loss, grad], [x, t], monkeypatch))
    assert FUSED not in types(fuse([other, seeded], [x, t], monkeypatch))


async def run_steps(on, value, target, dtype, threads, steps=2):
    """The loss, the gradients of the input and the weight and the trained weight."""
    with af.Graph().as_default():
        x = af.placeholder(dtype, value.shape)
        t = af.placeholder(dtype, target.shape)
        w = af.Variable(np.full(value.shape[1:], 0.75, dtype), name="w")
        loss = af.reduce_mean(af.square(af.sigmoid(x * w) - t))
        grad_x, grad_w = af.gradients(loss, [x, w])
        train = af.train.GradientDescentOptimizer(0.125).minimize(loss)
        fusion.SIGMOID_GRAD = on
        try:
            config = af.ConfigProto(intra_op_parallelism_threads=threads)
            async with af.Session(config=config) as session:
                await session.run(af.global_variables_initializer())
                results = [await session.run([loss, grad_x, grad_w, train], {x: value, t: target})
                           for _ in range(steps)]
                metadata = af.RunMetadata()
                await session.run([loss, grad_x, grad_w, train], {x: value, t: target},
                                  options=af.RunOptions(
                    trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
        finally:
            fusion.SIGMOID_GRAD = True
    return [r[:3] for r in results], {s.op_type for s in metadata.step_stats}


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype, shape", [
    (np.float32, (256, 784)), (np.float32, (3, 5, 7)), (np.float64, (33, 17)),
    (np.float64, (130, 9)), (np.float32, (1, 1)), (np.float16, (9, 4)), (np.float32, (257, 263))])
async def test_fused_steps_give_the_same_bits_as_unfused(monkeypatch, cpu_only, threads, dtype,
                                                         shape):
    # On the CPU (the compiled pass; a GPU runs the four kernels, which the other tests here
    # check under make test-gpu).
    passes, fast = [], kernel._fast
    monkeypatch.setattr(kernel, "_fast", lambda *args: passes.append(fast(*args)) or passes[-1])
    rng = np.random.default_rng(3)
    value = rng.standard_normal(shape).astype(dtype)
    target = rng.random(shape).astype(dtype)
    value.reshape(-1)[::11] = -0.0
    fused, fused_types = await run_steps(True, value, target, dtype, threads)
    plain, plain_types = await run_steps(False, value, target, dtype, threads)
    assert FUSED in fused_types and not UNFUSED & fused_types
    assert FUSED not in plain_types and "SigmoidGrad" in plain_types
    assert_same_bits(fused, plain)
    if dtype != np.float16 and np.prod(shape) > 1 and jit.available():
        assert passes and all(p is not None for p in passes)   # the compiled pass ran


async def test_numpy_form_when_loops_are_off(monkeypatch):
    monkeypatch.setattr(jit, "ENABLED", False)
    rng = np.random.default_rng(4)
    value, target = rng.standard_normal((40, 30)), rng.random((40, 30))
    fused, fused_types = await run_steps(True, value, target, np.float64, 2)
    plain, _ = await run_steps(False, value, target, np.float64, 2)
    assert FUSED in fused_types
    assert_same_bits(fused, plain)


@settings(max_examples=20, deadline=None)
@given(data=st.data(), rows=st.integers(1, 9), cols=st.integers(1, 13), broadcast=st.booleans())
async def test_odd_sizes_and_special_values_keep_the_bits(data, rows, cols, broadcast):
    # NaN, inf, -0, overflowing squares, subnormals (a loss that is not finite takes the four
    # kernels) and a broadcast target (b of one row: the SumToShape sums): the same bits.
    value = data.draw(special_arrays((rows, cols)))
    target = data.draw(special_arrays((1 if broadcast else rows, cols)))
    with np.errstate(all="ignore"):
        fused, fused_types = await run_steps(True, value, target, np.float32, 2, steps=1)
        plain, _ = await run_steps(False, value, target, np.float32, 2, steps=1)
    assert FUSED in fused_types
    assert_same_bits(fused, plain)


async def test_the_fused_gradient_against_central_differences():
    # The loss's gradient of the sigmoid's input through the fused node (the step's trace
    # names it), in float64, against central differences of the loss computed in numpy.
    rng = np.random.default_rng(5)
    value, target = rng.standard_normal((7, 5)), rng.random((7, 5))
    weight = np.linspace(0.5, 1.5, 5)

    def loss_of(v):
        return np.mean((1 / (1 + np.exp(-(v * weight))) - target) ** 2)
    with af.Graph().as_default():
        x = af.placeholder(af.float64, value.shape)
        loss = af.reduce_mean(af.square(af.sigmoid(x * af.constant(weight)) - target))
        (grad,) = af.gradients(loss, [x])
        async with af.Session() as session:
            metadata = af.RunMetadata()
            _, got = await session.run([loss, grad], {x: value}, options=af.RunOptions(
                trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
    assert FUSED in {s.op_type for s in metadata.step_stats}
    delta, want = 1e-6, np.empty_like(value)
    for index in np.ndindex(value.shape):
        up, down = value.copy(), value.copy()
        up[index] += delta
        down[index] -= delta
        want[index] = (loss_of(up) - loss_of(down)) / (2 * delta)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
