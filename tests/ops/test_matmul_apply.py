"""A dense weight gradient and its RMSProp apply as one node (issue 37): the fusion pass
(compile/fuse_matmul_apply.py) makes ``ApplyRMSProp(..., MatMul(x, dy, transpose_a))`` one
``_FusedMatMulApplyRMSProp`` where no other ``MatMul`` shares an operand (the first layer's,
not a hidden layer's, whose weight gradient pairs with its input gradient); its kernel
(kernels/matmul_apply.py) applies each row chunk of the split product on its thread. The
training steps have the unfused bits: split and whole, compiled and numpy forms, float32 and
float64; a shape error leaves the variable and its slots as they were."""
import threading

import numpy as np
import pytest

import asyncflow as af
from asyncflow.compile import fuse_matmul_apply as fusion
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.compile.prune import prune
from asyncflow.exec import plan
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.kernels import jit, training

from traced_steps import traced_steps  # same folder

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def build(rng, dtype, fused_forward=True):
    """Two layers (a Relu hidden layer) under RMSProp: ``(x, y, loss, train)``."""
    x = af.placeholder(dtype, [None, 20], name="x")
    y = af.placeholder(dtype, [None, 4], name="y")
    w1 = af.Variable((rng.standard_normal((20, 16)) * 0.3).astype(dtype), name="w1")
    b1 = af.Variable(np.zeros(16, dtype), name="b1")
    pre = af.matmul(x, w1) + b1 if fused_forward else af.matmul(x, w1)
    h = af.nn.relu(pre)
    w2 = af.Variable((rng.standard_normal((16, 4)) * 0.3).astype(dtype), name="w2")
    loss = af.reduce_mean(af.nn.softmax_cross_entropy_with_logits(
        labels=y, logits=af.matmul(h, w2)))
    train = af.train.RMSPropOptimizer(0.01, momentum=0.5).minimize(loss)
    return x, y, loss, train


def fused_graph(fused_forward=True, fetch_grad=False):
    graph = af.Graph()
    with graph.as_default():
        x, y, loss, train = build(np.random.default_rng(0), np.float32, fused_forward)
        fetches = [loss]
        if fetch_grad:
            fetches.append(graph.get_tensor_by_name("gradients/MatMul_grad/MatMul_1:0"))
    ops = prune(fetches, [train], [x, y])
    node_graph = NodeGraph.from_ops(ops, [x, y], fetches, [train], {op: CPU0 for op in ops})
    return fusion.fuse_matmul_apply(node_graph)


@pytest.mark.parametrize("fused_forward", [True, False])
def test_the_pass_fuses_the_first_layers_weight_gradient_only(fused_forward):
    graph = fused_graph(fused_forward)
    (fused,) = [n for n in graph.nodes if n.type == fusion.FUSED_TYPE]
    assert fused.name == "RMSProp/update_w1/ApplyRMSProp"
    assert fused.attrs == {"transpose_a": True, "transpose_b": False}
    assert [p[0].name for p in fused.inputs[:3]] == ["w1", "w1/RMSProp", "w1/RMSProp_1"]
    assert fused.inputs[7][0].name == "x"
    names = {n.name for n in graph.nodes}
    assert "gradients/MatMul_grad/MatMul_1" not in names
    # The second layer's weight gradient shares dy with its input gradient: kept, paired.
    assert {"gradients/MatMul_1_grad/MatMul", "gradients/MatMul_1_grad/MatMul_1",
            "RMSProp/update_w2/ApplyRMSProp"} <= names
    group = [n for n in graph.nodes if n.type == "NoOp" and n.name == "RMSProp"]
    assert group and fused in group[0].control_inputs


def test_a_fetched_gradient_is_not_fused():
    graph = fused_graph(fetch_grad=True)
    assert not [n for n in graph.nodes if n.type == fusion.FUSED_TYPE]


async def steps(dtype, steps=3):
    """Losses and variables after each of ``steps`` RMSProp steps on a batch of 96 (and after
    a traced one), two intra-op threads, and the op types run."""
    rng = np.random.default_rng(1)
    images = rng.random((96, 20)).astype(dtype)
    images[0, :3] = [np.inf, -0.0, 0.0]
    images[1, :] = 0.0
    labels = np.eye(4, dtype=dtype)[rng.integers(0, 4, size=96)]
    return await traced_steps(lambda: build(rng, dtype), images, labels, steps,
                              af.ConfigProto(intra_op_parallelism_threads=2))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
async def test_the_steps_have_the_unfused_bits(monkeypatch, dtype, cpu_only):
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 64)  # the products split
    fused, fused_types = await steps(dtype)
    monkeypatch.setattr(fusion, "ENABLED", False)
    plain, plain_types = await steps(dtype)
    assert fusion.FUSED_TYPE in fused_types and fusion.FUSED_TYPE not in plain_types
    assert len(fused) == len(plain)
    for a, b in zip(fused, plain):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    monkeypatch.setattr(jit, "ENABLED", False)  # the two kernels' numpy forms, fused or not
    numpy_fused, _ = await steps(dtype)
    monkeypatch.setattr(fusion, "ENABLED", True)
    numpy_plain, _ = await steps(dtype)
    for a, b in zip(numpy_fused, numpy_plain):
        assert a.tobytes() == b.tobytes()


async def test_whole_products_have_the_unfused_bits(monkeypatch, cpu_only):
    fused, fused_types = await steps(np.float32, steps=2)  # (below the split threshold)
    monkeypatch.setattr(fusion, "ENABLED", False)
    plain, _ = await steps(np.float32, steps=2)
    assert fusion.FUSED_TYPE in fused_types
    for a, b in zip(fused, plain):
        assert a.tobytes() == b.tobytes()


async def test_a_slot_of_another_shape_changes_nothing(monkeypatch, cpu_only):
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 64)
    rng = np.random.default_rng(2)
    with af.Graph().as_default():
        x, y, loss, train = build(rng, np.float32)
        first = [v for v in af.global_variables() if v.op.name.startswith("w1")]
        slot = [v for v in first if v.op.name == "w1/RMSProp"][0]
        async with af.Session() as session:
            await session.run(af.global_variables_initializer())
            await session.run(af.assign(slot, np.ones((3, 3), np.float32),
                                        validate_shape=False))
            before = await session.run(first)
            feed = {x: rng.random((64, 20)).astype(np.float32),
                    y: np.eye(4, dtype=np.float32)[rng.integers(0, 4, size=64)]}
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"slot w1/RMSProp has shape \[3, 3\]"):
                await session.run(train, feed)
            after = await session.run(first)
    assert len(before) == 3
    for a, b in zip(before, after):
        assert a.shape == b.shape and a.tobytes() == b.tobytes()


async def test_a_product_past_the_offload_threshold_runs_off_the_event_loop(monkeypatch,
                                                                            cpu_only):
    """As ``MatMul``'s kernel: a fused node whose cost reaches the offload threshold runs on a
    worker thread, not on the event loop's (here every offloadable kernel reaches it), with
    a variable whose shape the graph does not know (its resource's shape is None: the cost
    reads the product's)."""
    monkeypatch.setattr(plan, "OFFLOAD_COST", 1)
    loop, threads = training.rms_prop_loop, []

    def spy(x, *args):
        if x.size == 20 * 16:  # w1's (the fused node's)
            threads.append(threading.get_ident())
        return loop(x, *args)
    monkeypatch.setattr(training, "rms_prop_loop", spy)
    rng = np.random.default_rng(3)
    with af.Graph().as_default():
        x = af.placeholder(np.float32, [None, 20], name="x")
        dy = af.placeholder(np.float32, [None, 16], name="dy")
        w1 = af.Variable(rng.standard_normal((20, 16)).astype(np.float32),
                         validate_shape=False, name="w1")
        train = af.train.RMSPropOptimizer(0.01).apply_gradients(
            [(af.matmul(x, dy, transpose_a=True), w1)])
        async with af.Session() as session:
            await session.run(af.global_variables_initializer())
            feed = {x: rng.random((8, 20)).astype(np.float32),
                    dy: rng.random((8, 16)).astype(np.float32)}
            metadata = af.RunMetadata()
            await session.run(train, feed, run_metadata=metadata, options=af.RunOptions(
                trace_level=af.RunOptions.FULL_TRACE))
            await session.run(train, feed)
    assert fusion.FUSED_TYPE in {s.op_type for s in metadata.step_stats}
    assert len(threads) == 2 and threading.get_ident() not in threads


async def applied(transpose_a, transpose_b, dtype, steps=3):
    """The variable and its slots after ``steps`` RMSProp steps whose gradient is one
    ``MatMul`` of fed operands (97 rows: uneven row chunks), and the step's op types."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((24, 97) if transpose_a else (97, 24)).astype(dtype)
    b = rng.standard_normal((16, 24) if transpose_b else (24, 16)).astype(dtype)
    a[3, :2] = [np.nan, np.inf]
    with af.Graph().as_default():
        pa, pb = af.placeholder(dtype, a.shape), af.placeholder(dtype, b.shape)
        w = af.Variable(rng.standard_normal((97, 16)).astype(dtype), name="w")
        optimizer = af.train.RMSPropOptimizer(0.01, momentum=0.5)
        train = optimizer.apply_gradients([(af.matmul(
            pa, pb, transpose_a=transpose_a, transpose_b=transpose_b), w)])
        async with af.Session(config=af.ConfigProto(intra_op_parallelism_threads=2)) as session:
            await session.run(af.global_variables_initializer())
            metadata = af.RunMetadata()
            for step in range(steps):
                await session.run(train, {pa: a, pb: b}, run_metadata=metadata,
                                  options=af.RunOptions(trace_level=af.RunOptions.FULL_TRACE
                                                        if step == 0 else 0))
            values = await session.run(af.global_variables())
    return values, {s.op_type for s in metadata.step_stats}


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (False, True),
                                                     (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
async def test_each_transpose_form_has_the_unfused_bits(monkeypatch, transpose_a, transpose_b,
                                                        dtype):
    """Split by rows (or on a GPU, where the two kernels run inside the node): the variable
    and both slots, NaN and inf included, as the two kernels leave them."""
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 64)
    fused, types = await applied(transpose_a, transpose_b, dtype)
    monkeypatch.setattr(fusion, "ENABLED", False)
    plain, plain_types = await applied(transpose_a, transpose_b, dtype)
    assert fusion.FUSED_TYPE in types and fusion.FUSED_TYPE not in plain_types
    assert len(fused) == len(plain) == 3
    for got, want in zip(fused, plain):
        assert got.dtype == want.dtype == dtype and got.tobytes() == want.tobytes()
    assert np.isnan(fused[0]).any() and not np.isnan(fused[0]).all()
