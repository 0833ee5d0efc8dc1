"""The dropout fusion (compile/fuse_dropout.py, issue 37): ``dropout``'s RandomUniform, Add,
Floor, RealDiv and Mul become one ``_FusedDropout`` where no intermediate has another use;
as data (the rewritten NodeGraph: the gradient reads the fused node's mask) and end to end
(the same bits as the unfused ops for a seed, forward and training steps; the gradient the
mask over keep); the gradient's Mul, SumToShape and RealDiv become one
``_FusedDropoutGrad`` where nothing else reads them (the same bits)."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf1
from asyncflow.compile.fuse_dropout import fuse_dropout
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.compile.prune import prune

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
CHAIN = {"RandomUniform", "Floor", "RealDiv", "Add", "Mul"}


def node_graph(fetches, feeds=(), targets=()):
    ops = prune(fetches, targets, feeds)
    placement = {op: CPU0 for op in ops}
    return NodeGraph.from_ops(ops, list(feeds), list(fetches), list(targets), placement)


def types(graph):
    return [n.type for n in graph.nodes]


def test_dropout_and_its_gradient_read_one_fused_node():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 6], name="x")
        out = af.nn.dropout(x * 2.0, rate=0.25, seed=3, name="drop")
        (grad,) = af.gradients(af.reduce_sum(out * out), [x])
    before = node_graph([out, grad], feeds=[x])
    after = fuse_dropout(before)
    (fused,) = [n for n in after.nodes if n.type == "_FusedDropout"]
    assert after.changed and fused.name == out.op.name
    assert after.fetches[0] == (fused, 0)
    assert not {"RandomUniform", "Floor"} & set(types(after))
    assert {"RandomUniform", "Floor"} <= set(types(before))  # the input graph is untouched
    # The fused gradient reads the mask (output 1); Shape nodes read output 0.
    readers = [(n, i) for n in after.nodes for i, p in enumerate(n.inputs) if p[0] is fused]
    (grad_node,) = [n for n in after.nodes if n.type == "_FusedDropoutGrad"]
    assert grad_node.inputs[1] == (fused, 1)
    assert grad_node.name == "gradients/drop/truediv_grad/truediv_2"
    assert grad_node.inputs[2] == fused.inputs[2]  # keep
    assert all(n.inputs[i] == (fused, 0) for n, i in readers if n.type == "Shape")
    assert "RealDiv" not in types(after) and "gradients/drop_grad/SumToShape" not in [
        n.name for n in after.nodes]
    assert fused.attrs["seed"] is not None


def test_the_gradient_stays_unfused_where_an_intermediate_is_used_elsewhere():
    def build(extra_of):
        graph = af.Graph()
        with graph.as_default():
            x = af.placeholder(af.float32, [None, 6], name="x")
            out = af.nn.dropout(x * 2.0, rate=0.25, seed=3, name="drop")
            (grad,) = af.gradients(af.reduce_sum(out * out), [x])
            fetches = [out, grad] + extra_of(graph)
        return types(fuse_dropout(node_graph(fetches, feeds=[x])))

    assert "_FusedDropoutGrad" in build(lambda g: [])
    for name in ("gradients/drop_grad/mul", "gradients/drop_grad/SumToShape"):
        fused = build(lambda g: [g.get_tensor_by_name(name + ":0")])       # fetched
        assert "_FusedDropout" in fused and "_FusedDropoutGrad" not in fused
        fused = build(lambda g: [af.nn.relu(g.get_tensor_by_name(name + ":0"))])  # read
        assert "_FusedDropoutGrad" not in fused


@pytest.mark.parametrize("grad_shape", [(5, 7), (1, 7), (3, 5, 7), ()])
def test_the_fused_gradient_kernel_is_mul_sum_to_shape_then_divide(grad_shape):
    """The kernel against the three unfused kernels, bit for bit, a gradient broadcast
    against the mask (summed back to its shape) included; its inputs are left alone."""
    from asyncflow.kernels.registry import get_kernel

    class Ctx:
        xp, name, attrs, prepared = np, "grad", {}, False
    rng = np.random.default_rng(4)
    grad = rng.standard_normal(grad_shape).astype(np.float32)
    mask = np.floor(rng.random((5, 7), dtype=np.float32) + np.float32(0.6))
    keep = np.asarray(0.6, np.float32)
    kept = grad.copy(), mask.copy()

    def kernel(name, *args):
        return get_kernel(name, "CPU").fn(Ctx(), *args)[0]
    product = kernel("Mul", grad, mask)
    unfused = kernel("RealDiv", kernel("SumToShape", product, np.asarray(mask.shape)), keep)
    fused = kernel("_FusedDropoutGrad", grad, mask, keep)
    assert fused.shape == unfused.shape == mask.shape and fused.dtype == np.float32
    assert fused.tobytes() == unfused.tobytes()
    assert grad.tobytes() == kept[0].tobytes() and mask.tobytes() == kept[1].tobytes()


def test_no_fusion_where_an_intermediate_is_used_elsewhere():
    def build(extra):
        graph = af.Graph()
        with graph.as_default():
            x = af.placeholder(af.float32, [4, 5], name="x")
            out = af.nn.dropout(x, rate=0.5, seed=1, name="drop")
            ops = {n.type: graph.get_operation_by_name(n.name) for n in graph.get_operations()
                   if n.name.startswith("drop/")}
            fetches = [out] + extra(ops, x)
        return fuse_dropout(node_graph(fetches, feeds=[x]))

    # Each intermediate read by another op, fetched, or a control input: nothing fuses.
    cases = [
        lambda ops, x: [af.reduce_sum(ops["RandomUniform"].outputs[0])],
        lambda ops, x: [ops["Add"].outputs[0]],
        lambda ops, x: [af.reduce_sum(ops["RealDiv"].outputs[0])],
        lambda ops, x: [_after(ops["Add"], x)],
    ]
    for extra in cases:
        assert "_FusedDropout" not in types(build(extra))
    # The mask read elsewhere or fetched is fine: it is the fused node's second output.
    graph = build(lambda ops, x: [ops["Floor"].outputs[0]])
    (fused,) = [n for n in graph.nodes if n.type == "_FusedDropout"]
    assert graph.fetches[1] == (fused, 1)


def _after(op, x):
    with af.control_dependencies([op]):
        return af.identity(x)


def test_no_fusion_for_another_noise_shape_or_a_tensor_rate():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [4, 5], name="x")
        broadcast = af.nn.dropout(x, rate=0.5, noise_shape=[4, 1], seed=1)
        rate = af.placeholder(af.float32, [2], name="rate")   # not a scalar
        vector = af.nn.dropout(x, rate=rate[:1], seed=2)
        scalar_rate = af.placeholder(af.float32, [], name="scalar_rate")
        fed = af.nn.dropout(x, rate=scalar_rate, seed=3)
    graph = fuse_dropout(node_graph([broadcast, vector], feeds=[x, rate]))
    assert "_FusedDropout" not in types(graph)
    graph = fuse_dropout(node_graph([fed], feeds=[x, scalar_rate]))
    assert types(graph).count("_FusedDropout") == 1


async def run_dropout(optimize_graph, dtype, shape, rate, steps=3):
    rng = np.random.default_rng(5)
    value = (rng.standard_normal(shape) * 3).astype(dtype)
    value.reshape(-1)[:3] = [0.0, -0.0, np.inf]
    with af.Graph().as_default():
        af.set_random_seed(11)
        x = af.placeholder(dtype, [None] + list(shape[1:]))
        scale = af.Variable(np.ones(shape[1:], dtype))
        out = af.nn.dropout(x * scale, rate=rate)
        twice = tf1.nn.dropout(out, keep_prob=0.5)                       # chained
        (grad,) = af.gradients(af.reduce_sum(twice), [scale])
        config = af.ConfigProto(optimize_graph=optimize_graph)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            results = [await session.run([out, twice, grad], {x: value}) for _ in range(steps)]
            metadata = af.RunMetadata()
            await session.run([twice, grad], {x: value}, options=af.RunOptions(
                trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
    return results, {s.op_type for s in metadata.step_stats}


@pytest.mark.parametrize("dtype, shape, rate", [
    (np.float32, (128, 256), 0.25), (np.float32, (3, 5, 7), 0.9), (np.float64, (33, 17), 0.5),
    (np.float16, (9, 4), 0.1)])
async def test_fused_dropout_gives_the_same_bits_as_unfused(dtype, shape, rate):
    fused, fused_types = await run_dropout(True, dtype, shape, rate)
    plain, plain_types = await run_dropout(False, dtype, shape, rate)
    assert {"_FusedDropout", "_FusedDropoutGrad"} <= fused_types
    assert "RandomUniform" not in fused_types
    assert "_FusedDropout" not in plain_types and "RandomUniform" in plain_types
    assert "_FusedDropoutGrad" not in plain_types
    for fused_step, plain_step in zip(fused, plain):
        for a, b in zip(fused_step, plain_step):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
            assert a.tobytes() == b.tobytes()
    # The draws move on each step, and some units are dropped, some kept.
    assert not np.array_equal(fused[0][0], fused[1][0])
    kept = fused[0][0][np.isfinite(fused[0][0])] != 0
    assert kept.any() and not kept.all()


async def first_run(value, fetches_of):
    """The first run of a fresh session (the same seeded draws every time)."""
    with af.Graph().as_default():
        x = af.placeholder(af.float64, value.shape)
        out = af.nn.dropout(x, rate=0.4, seed=7)
        loss = af.reduce_sum(out * out)
        async with af.Session() as session:
            return await session.run(fetches_of(x, out, loss), {x: value})


async def test_the_fused_gradient_is_the_mask_over_keep():
    # d(sum(dropout(x)^2))/dx is 2 x mask / keep^2: the mask read from the forward output of
    # the same run (x has no zeros), and central differences over fresh sessions, whose first
    # run draws the same mask.
    rng = np.random.default_rng(2)
    value = rng.uniform(0.5, 2.0, (16, 8))
    grad, forward = await first_run(value, lambda x, out, loss: [af.gradients(loss, [x])[0], out])
    mask = (forward != 0).astype(np.float64)
    assert 0 < mask.sum() < mask.size
    np.testing.assert_allclose(grad, 2 * value * mask / 0.6 ** 2, rtol=1e-12)
    eps = 1e-5
    for index in [(0, 0), tuple(np.argwhere(mask == 0)[0]), tuple(np.argwhere(mask == 1)[-1])]:
        shifted = []
        for sign in (1, -1):
            moved = value.copy()
            moved[index] += sign * eps
            shifted.append(await first_run(moved, lambda x, out, loss: loss))
        numeric = (shifted[0] - shifted[1]) / (2 * eps)
        np.testing.assert_allclose(grad[index], numeric, rtol=1e-6, atol=1e-8)


def test_a_graph_without_dropout_is_left_as_it_is():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [4, 5], name="x")
        out = af.floor(af.random_uniform([4, 5]) + 0.5) * x     # no RealDiv: not dropout
        plain = af.nn.relu(x)
    for fetches in ([out], [plain]):
        before = node_graph(fetches, feeds=[x])
        after = fuse_dropout(before)
        assert types(after) == types(before) and not after.changed


def test_no_fusion_across_devices():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [4, 5], name="x")
        out = af.nn.dropout(x, rate=0.5, seed=1, name="drop")
    ops = prune([out], [], [x])
    cpu1 = CPU0.replace("CPU:0", "CPU:1")
    placement = {op: cpu1 if op.type == "RandomUniform" else CPU0 for op in ops}
    graph = fuse_dropout(NodeGraph.from_ops(ops, [x], [out], [], placement))
    assert "_FusedDropout" not in types(graph) and "RandomUniform" in types(graph)
    assert "_FusedDropout" in types(fuse_dropout(node_graph([out], feeds=[x])))


async def run_gradient_split(optimize_graph, threads):
    """Dropout and its gradient of a fed one (no other elementwise op runs)."""
    from asyncflow.exec import intra_op
    rng = np.random.default_rng(6)
    value = rng.standard_normal((37, 13)).astype(np.float32)
    upstream = rng.standard_normal((37, 13)).astype(np.float32)
    upstream.reshape(-1)[::11] = np.nan
    with af.Graph().as_default():
        af.set_random_seed(2)
        x = af.placeholder(af.float32, [None, 13])
        g = af.placeholder(af.float32, [None, 13])
        out = af.nn.dropout(x, rate=0.3)
        (grad,) = af.gradients(out, [x], grad_ys=[g])
        grad = af.identity(grad)  # (a fetched RealDiv stays as built)
        config = af.ConfigProto(optimize_graph=optimize_graph,
                                intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            splits = intra_op.shared_pool(threads).splits
            metadata = af.RunMetadata()
            result = await session.run([out, grad], {x: value, g: upstream}, options=af.RunOptions(
                trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
            splits = intra_op.shared_pool(threads).splits - splits
    return result, splits, {s.op_type for s in metadata.step_stats}


async def test_the_fused_gradient_splits_when_large_as_the_ops_it_replaces(monkeypatch,
                                                                           cpu_only):
    """Large, the unfused Mul and RealDiv split over the intra-op threads; the fused gradient
    does too (it once ran whole on one thread), with the same bits."""
    from asyncflow.kernels import intra_op as kernel_intra_op
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 64)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 256)
    fused, fused_splits, fused_types = await run_gradient_split(True, 2)
    plain, plain_splits, plain_types = await run_gradient_split(False, 2)
    assert "_FusedDropoutGrad" in fused_types and "_FusedDropoutGrad" not in plain_types
    assert plain_splits > 0 and fused_splits > 0
    for a, b in zip(fused, plain):
        assert a.dtype == b.dtype and a.shape == b.shape == (37, 13)
        assert a.tobytes() == b.tobytes()
