"""An optimizer's small RMSProp applies as one node (issue 37): the pass
(compile/group_applies.py) makes the ``ApplyRMSProp`` nodes that share their hyperparameter
inputs, dtype, device and controlling nodes one ``_FusedApplyRMSPropGroup``, whose kernel
(kernels/apply_group.py) runs each member's compiled loop in one call. The steps have the
separate applies' bits (float32, float64, odd sizes, one-element variables, the numpy forms);
a shape error changes no variable."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.compile import fuse_matmul_apply, group_applies as grouping
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.compile.prune import prune
from asyncflow.kernels import jit
from asyncflow.ops.training import apply_update

from traced_steps import traced_steps  # same folder

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"


def build(rng, dtype, sizes=(20, 7, 5, 3)):
    """Dense layers of ``sizes`` (biases of odd sizes; a one-element output layer when the
    last size is 1) under RMSProp: ``(x, y, loss, train)``."""
    x = af.placeholder(dtype, [None, sizes[0]], name="x")
    y = af.placeholder(dtype, [None, sizes[-1]], name="y")
    h = x
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        w = af.Variable((rng.standard_normal((n_in, n_out)) * 0.3).astype(dtype), name=f"w{i}")
        b = af.Variable(np.full(n_out, 0.1, dtype), name=f"b{i}")
        h = af.matmul(h, w) + b
        if i < len(sizes) - 2:
            h = af.nn.relu(h)
    loss = af.reduce_mean(af.square(h - y))
    train = af.train.RMSPropOptimizer(0.01, momentum=0.5).minimize(loss)
    return x, y, loss, train


def node_graph(graph, fetches, targets, feeds, device_of=lambda op: CPU0):
    ops = prune(fetches, targets, feeds)
    built = NodeGraph.from_ops(ops, feeds, fetches, targets, {op: device_of(op) for op in ops})
    return grouping.group_applies(fuse_matmul_apply.fuse_matmul_apply(built))


def groups(graph):
    return [n for n in graph.nodes if n.type == grouping.GROUP_TYPE]


def test_the_optimizers_remaining_applies_group():
    graph = af.Graph()
    with graph.as_default():
        x, y, loss, train = build(np.random.default_rng(0), np.float32)
    result = node_graph(graph, [loss], [train], [x, y])
    (group,) = groups(result)
    members = group.attrs["members"]
    # w0's apply fused with its weight gradient; the five others in one node.
    assert sorted(members) == sorted(f"RMSProp/update_{v}/ApplyRMSProp"
                                     for v in ("b0", "w1", "b1", "w2", "b2"))
    assert not [n for n in result.nodes if n.type == "ApplyRMSProp"]
    assert len(group.out_specs) == 5 and len(group.inputs) == 4 + 4 * 5
    for k, name in enumerate(members):  # (var, ms, mom, grad) a member, in its order
        var = name.split("/")[1][len("update_"):]
        assert [p[0].name for p in group.inputs[4 + 4 * k:7 + 4 * k]] == [
            var, var + "/RMSProp", var + "/RMSProp_1"]
    (noop,) = [n for n in result.nodes if n.type == "NoOp" and n.name == "RMSProp"]
    assert group in noop.control_inputs


def test_a_fetched_apply_output_a_gpu_placement_and_other_hyperparameters_stay_apart():
    graph = af.Graph()
    with graph.as_default():
        x, y, loss, train = build(np.random.default_rng(0), np.float32)
    fetched = graph.get_tensor_by_name("RMSProp/update_b2/ApplyRMSProp:0")
    result = node_graph(graph, [loss, fetched], [train], [x, y])
    (group,) = groups(result)
    assert "RMSProp/update_b2/ApplyRMSProp" not in group.attrs["members"]
    assert len(group.attrs["members"]) == 4
    assert any(n.name == "RMSProp/update_b2/ApplyRMSProp" for n in result.nodes)

    def on_gpu(op):
        return GPU0 if op.name.startswith(("w1", "RMSProp/update_w1")) else CPU0
    result = node_graph(graph, [loss], [train], [x, y], on_gpu)
    (group,) = groups(result)
    assert "RMSProp/update_w1/ApplyRMSProp" not in group.attrs["members"]
    assert len(group.attrs["members"]) == 4

    graph = af.Graph()
    with graph.as_default():
        refs = [af.Variable(np.zeros(3, np.float32), name=f"v{i}") for i in range(4)]
        slots = [[af.Variable(np.zeros(3, np.float32)) for _ in range(2)] for _ in refs]
        grad = af.constant(np.ones(3, np.float32))
        rho, momentum, epsilon = [af.constant(np.float32(v)) for v in (0.9, 0.5, 1e-10)]
        rates = [af.constant(np.float32(0.1)), af.constant(np.float32(0.1))]  # two tensors
        applies = [apply_update("ApplyRMSProp", [r._ref(), s[0]._ref(), s[1]._ref()],
                                [lr, rho, momentum, epsilon, grad])
                   for r, s, lr in zip(refs, slots, rates * 2)]
        train = af.group(*applies)
    result = node_graph(graph, [], [train], [])
    assert sorted(len(g.attrs["members"]) for g in groups(result)) == [2, 2]


async def steps(dtype, sizes, steps=3):
    """Losses and variables after each of ``steps`` steps (and after a traced one), and the
    op types run."""
    rng = np.random.default_rng(1)
    images = rng.random((32, sizes[0])).astype(dtype)
    labels = rng.random((32, sizes[-1])).astype(dtype)
    return await traced_steps(lambda: build(rng, dtype, sizes), images, labels, steps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sizes", [(20, 7, 5, 3), (9, 13, 1), (3, 1, 1)])
async def test_the_steps_have_the_separate_applies_bits(monkeypatch, dtype, sizes, cpu_only):
    grouped, grouped_types = await steps(dtype, sizes)
    monkeypatch.setattr(grouping, "ENABLED", False)
    plain, plain_types = await steps(dtype, sizes)
    assert grouping.GROUP_TYPE in grouped_types and grouping.GROUP_TYPE not in plain_types
    assert len(grouped) == len(plain)
    for a, b in zip(grouped, plain):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    monkeypatch.setattr(jit, "ENABLED", False)  # the numpy forms, grouped or not
    numpy_plain, _ = await steps(dtype, sizes)
    monkeypatch.setattr(grouping, "ENABLED", True)
    numpy_grouped, types = await steps(dtype, sizes)
    assert grouping.GROUP_TYPE in types
    for a, b in zip(numpy_grouped, numpy_plain):
        assert a.tobytes() == b.tobytes()


async def test_a_slot_of_another_shape_changes_no_variable(cpu_only):
    rng = np.random.default_rng(2)
    with af.Graph().as_default():
        x, y, loss, train = build(rng, np.float32)
        slot = [v for v in af.global_variables() if v.op.name == "b2/RMSProp"][0]
        async with af.Session() as session:
            await session.run(af.global_variables_initializer())
            await session.run(af.assign(slot, np.ones(4, np.float32), validate_shape=False))
            before = await session.run(af.global_variables())
            feed = {x: rng.random((8, 20)).astype(np.float32),
                    y: rng.random((8, 3)).astype(np.float32)}
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"slot b2/RMSProp has shape \[4\]"):
                await session.run(train, feed)
            after = await session.run(af.global_variables())
            names = [v.op.name for v in af.global_variables()]
    # The group's members (all but the first layer's weights, fused with its own gradient,
    # a node of its own) are as they were.
    kept = [(n, a, b) for n, a, b in zip(names, before, after) if not n.startswith("w0")]
    assert len(kept) == len(names) - 3
    for _, a, b in kept:
        assert a.shape == b.shape and a.tobytes() == b.tobytes()


async def test_a_member_whose_gradient_is_dead_leaves_the_others_live(cpu_only):
    """An apply whose gradient comes from a Switch's untaken output (built outside any cond
    context) is dead and skipped: the live applies beside it still run. The pass groups
    nothing in a graph with a Switch (exec/compiled_run.py also runs the graph passes only
    on graphs without control flow; the pass must not rely on it)."""
    from asyncflow.ops import control_flow

    graph = af.Graph()
    with graph.as_default():
        refs = [af.Variable(np.zeros(3, np.float32), name=f"v{i}") for i in range(3)]
        slots = [[af.Variable(np.zeros(3, np.float32)) for _ in range(2)] for _ in refs]
        grad = af.constant(np.ones(3, np.float32))
        pred = af.placeholder(af.bool, [], name="pred")
        dead, _ = control_flow.switch(grad, pred)  # output_false: dead when pred is true
        lr, rho, momentum, epsilon = [af.constant(np.float32(v))
                                      for v in (0.1, 0.9, 0.5, 1e-10)]
        applies = [apply_update("ApplyRMSProp", [r._ref(), s[0]._ref(), s[1]._ref()],
                                [lr, rho, momentum, epsilon, g])
                   for r, s, g in zip(refs, slots, [grad, grad, dead])]
        train = af.group(*applies)
        assert groups(node_graph(graph, [], [train], [pred])) == []
        async with af.Session() as session:
            await session.run(af.global_variables_initializer())
            await session.run(train, {pred: True})
            values = await session.run([r.value() for r in refs])
    assert not np.array_equal(values[0], np.zeros(3)), values
    assert not np.array_equal(values[1], np.zeros(3)), values
    assert np.array_equal(values[2], np.zeros(3)), values


def test_the_pass_large_apply_size_is_pairs_threshold():
    """compile/ passes do not import exec/: the pass's copy of exec/pairs.py's threshold."""
    from asyncflow.exec import pairs

    assert grouping.LARGE == pairs.APPLY_PAIR_MIN


def test_an_apply_past_the_largest_member_size_stays_apart(monkeypatch):
    # An apply of LARGE_MAX elements or more runs as soon as its gradient is ready (beside the
    # backward GEMMs) rather than waiting in a group for the last member's gradient.
    graph = af.Graph()
    with graph.as_default():
        x, y, loss, train = build(np.random.default_rng(0), np.float32, sizes=(20, 30, 5, 3))
    monkeypatch.setattr(grouping, "LARGE", 100)
    monkeypatch.setattr(grouping, "LARGE_MAX", 150)  # w1 (30 x 5) reaches it, w2 (5 x 3) not
    (group,) = groups(node_graph(graph, [loss], [train], [x, y]))
    assert sorted(group.attrs["members"]) == sorted(f"RMSProp/update_{v}/ApplyRMSProp"
                                                    for v in ("b0", "b1", "w2", "b2"))
    monkeypatch.setattr(grouping, "LARGE_MAX", 151)  # one large member under the bound: in
    (group,) = groups(node_graph(graph, [loss], [train], [x, y]))
    assert "RMSProp/update_w1/ApplyRMSProp" in group.attrs["members"]
