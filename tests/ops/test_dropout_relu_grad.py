"""A Relu's gradient through the dropout after it as one node (issue 37): the dropout
fusion (compile/fuse_dropout.py) makes ``ReluGrad(_FusedDropoutGrad(g, mask, keep),
features)`` one ``_FusedDropoutReluGrad``, whose kernel (kernels/dropout.py) is one compiled
pass on CPU for float32/float64: the same bits as the two kernels (NaN, inf, -0, a zero
feature included), split or whole, compiled or not; the MLP's step the same bits fused and
unfused; the gradient against central differences."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.compile.fuse_dropout import fuse_dropout
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.compile.prune import prune
from asyncflow.kernels import dropout as dropout_kernels
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.kernels import jit
from asyncflow.kernels.registry import get_kernel

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


class Ctx:
    xp, name, attrs, prepared, device = np, "relu_grad", {}, False, None


def kernel(name, *args):
    return get_kernel(name, "CPU").fn(Ctx(), *args)[0]


def special_inputs(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    grad = (rng.standard_normal(shape) * 3).astype(dtype)
    features = np.maximum(rng.standard_normal(shape), 0).astype(dtype)
    mask = np.floor(rng.random(shape) + 0.7).astype(dtype)
    flat_g, flat_f = grad.reshape(-1), features.reshape(-1)
    specials = [np.nan, np.inf, -np.inf, -0.0, 0.0, np.finfo(dtype).max]
    for i, value in enumerate(specials):
        if i < flat_g.size:
            flat_g[i] = value
        if i + 3 < flat_f.size:
            flat_f[(i + 3) % flat_f.size] = value   # NaN/-0/0 features: not > 0
    return grad, mask, np.asarray(0.7, dtype), features


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(128, 256), (7, 13), (1,), (3, 5, 2)])
@pytest.mark.parametrize("compiled", [True, False])
def test_the_kernel_is_the_two_kernels_bit_for_bit(monkeypatch, dtype, shape, compiled):
    monkeypatch.setattr(jit, "ENABLED", compiled)
    grad, mask, keep, features = special_inputs(dtype, shape, 3)
    kept = [a.copy() for a in (grad, mask, features)]
    want = kernel("ReluGrad", kernel("_FusedDropoutGrad", grad, mask, keep), features)
    got = kernel("_FusedDropoutReluGrad", grad, mask, keep, features)
    assert got.dtype == want.dtype == dtype and got.shape == want.shape == shape
    assert got.tobytes() == want.tobytes()
    assert all(a.tobytes() == b.tobytes() for a, b in zip((grad, mask, features), kept))


def test_the_loop_is_the_numpy_form_on_random_values():
    rng = np.random.default_rng(9)
    for size in (1, 2, 15, 16, 17, 1000, 4099):
        for dtype in (np.float32, np.float64):
            grad, mask, keep, features = special_inputs(dtype, (size,), size)
            grad[size // 2:] = (rng.standard_normal(size - size // 2) * 1e30).astype(dtype)
            loop, numpy_form = np.empty(size, dtype), np.empty(size, dtype)
            dropout_kernels._relu_grad_loop_on(grad, mask, keep, features, out=loop)
            dropout_kernels._relu_grad_numpy_on(grad, mask, keep, features, out=numpy_form)
            assert loop.tobytes() == numpy_form.tobytes()


def test_broadcast_or_mixed_inputs_take_the_two_kernels_forms():
    grad, mask, keep, features = special_inputs(np.float32, (4, 6), 5)
    row = grad[:1].copy()
    want = kernel("ReluGrad", kernel("_FusedDropoutGrad", row, mask, keep), features)
    assert kernel("_FusedDropoutReluGrad", row, mask, keep, features).tobytes() == \
        want.tobytes()
    strided = np.asfortranarray(features)
    want = kernel("ReluGrad", kernel("_FusedDropoutGrad", grad, mask, keep), strided)
    assert kernel("_FusedDropoutReluGrad", grad, mask, keep, strided).tobytes() == \
        want.tobytes()


def mlp_layer(fetch=(), extra=lambda graph: []):
    graph = af.Graph()
    with graph.as_default():
        x = af.placeholder(af.float32, [None, 6], name="x")
        w = af.Variable(np.ones((6, 5), np.float32), name="w")
        h = af.nn.relu(af.matmul(x, w), name="relu")
        h = af.nn.dropout(h, rate=0.25, seed=3, name="drop")
        loss = af.reduce_sum(h * h)
        (grad,) = af.gradients(loss, [w])
        fetches = [loss, grad] + [graph.get_tensor_by_name(n) for n in fetch] + extra(graph)
    ops = prune(fetches, [], [x])
    return fuse_dropout(NodeGraph.from_ops(ops, [x], fetches, [], {op: CPU0 for op in ops}))


def test_the_pass_fuses_the_relu_gradient_through_the_dropout():
    graph = mlp_layer()
    types = [n.type for n in graph.nodes]
    assert "ReluGrad" not in types and "_FusedDropoutGrad" not in types
    (fused,) = [n for n in graph.nodes if n.type == "_FusedDropoutReluGrad"]
    assert fused.name == "gradients/relu_grad/ReluGrad"
    (drop,) = [n for n in graph.nodes if n.type == "_FusedDropout"]
    assert fused.inputs[1] == (drop, 1) and fused.inputs[2] == drop.inputs[2]
    assert fused.inputs[3][0].name == "relu"
    # The dropout's gradient fetched (nothing of it fuses) or read by another op (it fuses
    # alone): the ReluGrad stays as built.
    graph = mlp_layer(fetch=["gradients/drop/truediv_grad/truediv_2:0"])
    types = [n.type for n in graph.nodes]
    assert "ReluGrad" in types and "_FusedDropoutReluGrad" not in types
    graph = mlp_layer(extra=lambda g: [af.reduce_sum(g.get_tensor_by_name(
        "gradients/drop/truediv_grad/truediv_2:0"))])
    types = [n.type for n in graph.nodes]
    assert "ReluGrad" in types and "_FusedDropoutGrad" in types
    assert "_FusedDropoutReluGrad" not in types


async def mlp_steps(optimize_graph, threads=2, steps=3, dtype=np.float32):
    """Two hidden layers (Relu, dropout), RMSProp: the losses, variables and one gradient."""
    rng = np.random.default_rng(1)
    images = rng.random((33, 20)).astype(dtype)
    images[0, :3] = [np.inf, -0.0, 0.0]
    labels = np.eye(4, dtype=dtype)[rng.integers(0, 4, size=33)]
    with af.Graph().as_default():
        af.set_random_seed(5)
        x = af.placeholder(dtype, [None, 20])
        y = af.placeholder(dtype, [None, 4])
        h = x
        for n_in, n_out in ((20, 16), (16, 8)):
            w = af.Variable((rng.standard_normal((n_in, n_out)) * 0.3).astype(dtype))
            b = af.Variable(np.zeros(n_out, dtype))
            h = af.nn.dropout(af.nn.relu(af.matmul(h, w) + b), rate=0.25)
        w = af.Variable((rng.standard_normal((8, 4)) * 0.3).astype(dtype))
        loss = af.reduce_mean(af.nn.softmax_cross_entropy_with_logits(
            labels=y, logits=af.matmul(h, w)))
        (grad,) = af.gradients(loss, [w])
        train = af.train.RMSPropOptimizer(0.01).minimize(loss)
        config = af.ConfigProto(optimize_graph=optimize_graph,
                                intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            out = [(await session.run([loss, grad, train], {x: images, y: labels}))[:2]
                   for _ in range(steps)]
            metadata = af.RunMetadata()
            await session.run(train, {x: images, y: labels}, options=af.RunOptions(
                trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
            out.append(await session.run(af.trainable_variables()))
    return out, {s.op_type for s in metadata.step_stats}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
async def test_a_training_step_has_the_unfused_bits(monkeypatch, dtype, cpu_only):
    fused, fused_types = await mlp_steps(True, dtype=dtype)
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 64)   # split, on two threads
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 256)
    split, split_types = await mlp_steps(True, dtype=dtype)
    monkeypatch.setattr(jit, "ENABLED", False)
    plain, plain_types = await mlp_steps(False, dtype=dtype)
    assert "_FusedDropoutReluGrad" in fused_types and "_FusedDropoutReluGrad" in split_types
    assert "_FusedDropoutReluGrad" not in plain_types and "ReluGrad" in plain_types
    for a, b, c in zip(_flat(fused), _flat(split), _flat(plain)):
        assert a.dtype == c.dtype and a.tobytes() == b.tobytes() == c.tobytes()


def _flat(steps):
    return [np.asarray(v) for step in steps for v in step]


async def test_the_fused_gradient_against_central_differences():
    # d/dx sum(dropout(relu(x))^2): 2 relu(x) mask / keep^2 where x > 0, else 0; each
    # session's first run draws the same mask.
    rng = np.random.default_rng(8)
    value = rng.uniform(-2.0, 2.0, (12, 9))
    value[np.abs(value) < 0.1] = 0.5   # no kink within the step

    async def first_run(v, with_grad):
        with af.Graph().as_default():
            x = af.placeholder(af.float64, v.shape)
            out = af.nn.dropout(af.nn.relu(x), rate=0.4, seed=7)
            loss = af.reduce_sum(out * out)
            fetches = [loss, af.gradients(loss, [x])[0]] if with_grad else loss
            async with af.Session() as session:
                return await session.run(fetches, {x: v})
    _, grad = await first_run(value, True)
    eps = 1e-6
    for index in [(0, 0), tuple(np.argwhere(value < 0)[0]), tuple(np.argwhere(grad != 0)[-1]),
                  tuple(np.argwhere((grad == 0) & (value > 0))[0])]:
        moved = [value.copy(), value.copy()]
        moved[0][index] += eps
        moved[1][index] -= eps
        numeric = (await first_run(moved[0], False) - await first_run(moved[1], False)) / (2 * eps)
        np.testing.assert_allclose(grad[index], numeric, rtol=1e-6, atol=1e-8)
