"""Two independent GEMMs of a static schedule run at once on the intra-op pool, one hand-off
for the pair (issue 37, ``exec/pairs.py``): the same values as one after the other; never a
kernel that depends on the other, nor one moved past a stateful op; a paired kernel's error
names its own op."""
import dataclasses
import os
import threading

import numpy as np
import pytest

import asyncflow as af
from asyncflow.compile import fuse_matmul_apply
from asyncflow.exec import intra_op, lanes, pairs
from asyncflow.kernels import registry

# [64, 256] x [256, 256]: 4M multiply-adds, the smallest GEMM that pairs.
M, K, N = 64, 256, 256


@pytest.fixture
def paired(monkeypatch):
    """The op names of each pair that ran at once, and the threads MatMuls ran on."""
    # ``meet``, when a test sets it: "first" waits (10 s at most) for "second" to start, so the
    # two run at once whatever the load (the pool's caller takes a chunk no worker has taken).
    seen = {"pairs": [], "threads": {}, "meet": None, "met": None, "results": [], "groups": []}
    run_pair, run_group = pairs.run_pair, pairs.run_group
    monkeypatch.setattr(lanes, "ENABLED", False)  # (two lanes would take the pair apart)

    def spy(first, a, second, b):
        result = run_pair(first, a, second, b)
        if result is not None:
            seen["pairs"].append((first.op.name, second.op.name))
            seen["results"].append(list(result))
        return result
    monkeypatch.setattr(pairs, "run_pair", spy)

    def group_spy(first, args, rest):
        result = run_group(first, args, rest)
        if result is not None:
            seen["groups"].append([first.op.name] + [node.op.name for node, _ in rest])
            seen["results"].append(list(result))
        return result
    monkeypatch.setattr(pairs, "run_group", group_spy)
    kernel = registry._KERNELS[("MatMul", registry.ANY)]

    def where(ctx, *args, _fn=kernel.fn):
        seen["threads"][ctx.name] = threading.get_ident()
        if seen["meet"] is not None:
            if ctx.name == "second":
                seen["meet"].set()
            elif ctx.name == "first":
                seen["met"] = seen["meet"].wait(10)
        return _fn(ctx, *args)
    monkeypatch.setitem(registry._KERNELS, ("MatMul", registry.ANY),
                        dataclasses.replace(kernel, fn=where))
    return seen


def operands(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32)
            for shape in ((M, K), (K, N), (M, K), (K, N))]


async def run(fetches_of, feed_values, threads):
    with af.Graph().as_default():
        feeds = [af.placeholder(af.float32, [None, K]), af.placeholder(af.float32, [K, N]),
                 af.placeholder(af.float32, [None, K]), af.placeholder(af.float32, [None, N])]
        fetches = fetches_of(*feeds)
        config = af.ConfigProto(intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            return await session.run(fetches, dict(zip(feeds, feed_values)))


async def test_independent_gemms_run_at_once_with_the_bits_of_one_thread(paired, cpu_only):
    values = operands(0)

    def two(a, b, c, d):
        return [af.matmul(a, b, name="first"), af.matmul(c, d, name="second")]
    paired["meet"] = threading.Event()
    together = await run(two, values, threads=2)
    paired["meet"] = None
    assert paired["pairs"] == [("first", "second")]
    assert paired["met"], "the first GEMM finished before the second started"
    assert paired["threads"]["first"] != paired["threads"]["second"]
    alone = await run(two, values, threads=1)  # no pool of 2: one after the other
    assert paired["pairs"] == [("first", "second")]
    for got, want, (x, y) in zip(together, alone, (values[:2], values[2:])):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, x @ y, rtol=1e-4, atol=1e-3)


async def test_a_pair_hands_its_second_back_when_no_thread_takes_it(paired, cpu_only):
    """With the pool's one worker taken (no free core), the caller computes one kernel of
    the pair and hands the other back undone: it runs on its own line, after a time-slice
    check, so a pair holds the event loop for one GEMM at most."""
    values = operands(4)

    def two(a, b, c, d):
        return [af.matmul(a, b, name="first"), af.matmul(c, d, name="second")]
    pool = intra_op.shared_pool(2)
    busy, release = threading.Event(), threading.Event()

    def hold():
        busy.set()
        release.wait(30)
    held = pool._workers().submit(hold)  # the split worker (not the lane thread)
    assert busy.wait(30)
    try:
        handed_back = await run(two, values, threads=2)
    finally:
        release.set()
        held.result(30)
    assert paired["pairs"] == [("first", "second")]
    (result,) = paired["results"]
    assert result[0] is not None and result[1] is None
    alone = await run(two, values, threads=1)
    for got, want in zip(handed_back, alone):
        np.testing.assert_array_equal(got, want)


async def test_a_gemm_that_reads_the_other_never_pairs(paired, cpu_only):
    values = operands(1)

    def chain(a, b, c, d):
        first = af.matmul(a, b, name="first")
        return af.matmul(first, d, name="second")
    out = await run(chain, values, threads=2)
    assert paired["pairs"] == []
    np.testing.assert_allclose(out, values[0] @ values[1] @ values[3], rtol=1e-3, atol=1e-2)


async def test_small_gemms_run_alone(paired, cpu_only):
    rng = np.random.default_rng(2)
    small = [rng.standard_normal((4, K)).astype(np.float32), *operands(2)[1:2]] * 2

    def two(a, b, c, d):
        return [af.matmul(a, b, name="first"), af.matmul(c, d, name="second")]
    await run(two, small, threads=2)  # 256k multiply-adds each: a hand-off would cost more
    assert paired["pairs"] == []


class FakeOpDef:
    def __init__(self, stateful, cost):
        self.stateful, self.cost = stateful, cost


class FakeOp:
    def __init__(self, name, stateful, cost):
        self.name, self.type, self.op_def = name, "MatMul", FakeOpDef(stateful, cost)


class FakeNode:
    """The fields of a ``NodePlan`` that ``pair_schedule`` reads."""

    def __init__(self, index, name, gemm=False, stateful=False, consumers=()):
        cost = (lambda shapes, op: 0) if gemm else None
        self.index, self.consumers = index, tuple(consumers)
        self.op = FakeOp(name, stateful, cost)
        self.offload, self.is_async, self.offload_cost = gemm, False, 1 << 26


def names(order):
    return [node.op.name for node in order]


@pytest.mark.parametrize("between, moves", [
    ("pure", True),        # an elementwise op that does not feed the partner
    ("stateful", False),   # an assign: the partner would read what it read before it
    ("feeds", False),      # it produces the partner's input
])
def test_a_partner_moves_up_only_past_pure_ops_that_do_not_feed_it(between, moves,
                                                                  monkeypatch):
    monkeypatch.setattr(pairs, "estimate_static_cost", lambda op: None)  # a batch dim unknown
    nodes = [FakeNode(0, "first", gemm=True),
             FakeNode(1, between, stateful=between == "stateful",
                      consumers=(2,) if between == "feeds" else ()),
             FakeNode(2, "second", gemm=True)]
    order, firsts = pairs.pair_schedule(nodes)
    if moves:
        assert names(order) == ["first", "second", "pure"] and firsts == {0: 1}
    else:
        assert names(order) == ["first", between, "second"] and firsts == {}


def test_a_gemm_feeding_the_next_never_pairs_with_it(monkeypatch):
    monkeypatch.setattr(pairs, "estimate_static_cost", lambda op: None)
    nodes = [FakeNode(0, "first", gemm=True, consumers=(1,)), FakeNode(1, "second", gemm=True)]
    assert pairs.pair_schedule(nodes) == (nodes, {})


async def test_a_paired_kernel_failure_names_its_own_op(paired, cpu_only):
    values = operands(4)
    values[3] = values[3][:100]  # [100, 256]: not [256, 256]

    def two(a, b, c, d):
        return [af.matmul(a, b, name="first"), af.matmul(c, d, name="second")]
    with pytest.raises(af.errors.InvalidArgumentError, match="second"):
        await run(two, values, threads=2)
    assert paired["pairs"] == [("first", "second")]  # it failed inside the pair


# -- dense optimizer applies of different variables, paired --------------------------------
async def train_two_layers(threads, steps=3, fetch_reads=False):
    """Weights of [384, 256] and [256, 256] (98,304 and 65,536 elements: 65,536 is the
    smallest apply that pairs) and a bias between them, RMSProp; the variables' values after
    ``steps`` steps."""
    rng = np.random.default_rng(5)
    x_value = rng.standard_normal((32, 384)).astype(np.float32)
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 384])
        w1 = af.Variable(rng.standard_normal((384, N)).astype(np.float32) * 0.05, name="w1")
        b1 = af.Variable(np.zeros(N, np.float32), name="b1")
        w2 = af.Variable(rng.standard_normal((N, N)).astype(np.float32) * 0.05, name="w2")
        hidden = af.nn.relu(af.matmul(x, w1) + b1)
        loss = af.reduce_mean(af.square(af.matmul(hidden, w2)))
        train = af.train.RMSPropOptimizer(0.01).minimize(loss)
        fetches = [loss, train] + ([w1.read_value(), w2.read_value()] if fetch_reads else [])
        config = af.ConfigProto(intra_op_parallelism_threads=threads)
        # w1's apply stays an apply (compile/fuse_matmul_apply.py would take it into its
        # weight gradient's node, the first layer's): these tests pair two applies.
        fused, fuse_matmul_apply.ENABLED = fuse_matmul_apply.ENABLED, False
        try:
            async with af.Session(config=config) as session:
                await session.run(af.global_variables_initializer())
                losses = [(await session.run(fetches, {x: x_value}))[0] for _ in range(steps)]
                return losses, await session.run([w1, b1, w2])
        finally:
            fuse_matmul_apply.ENABLED = fused


def _variables(group):
    return [name.split("/")[1].replace("update_", "") for name in group]


async def test_two_applies_run_as_a_pair_with_the_bits_of_one_thread(paired, cpu_only):
    # w1's apply waits (10 s at most) for w2's to start on the other thread: at once,
    # whatever the load.
    kernel = registry._KERNELS[("ApplyRMSProp", registry.ANY)]
    started, met, threads = threading.Event(), [], {}

    def meet(ctx, *args, _fn=kernel.fn):
        threads[ctx.name] = threading.get_ident()
        if "w2" in ctx.name:
            started.set()
        elif "w1" in ctx.name:
            met.append(started.wait(10))
            started.clear()
        return _fn(ctx, *args)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(registry._KERNELS, ("ApplyRMSProp", registry.ANY),
                      dataclasses.replace(kernel, fn=meet))
        losses, values = await train_two_layers(threads=2)
    # One group a step: the larger weight's apply, the other's and the bias's beside it.
    assert [_variables(group) for group in paired["groups"]] in (
        [["w1", "w2", "b1"]] * 3, [["w1", "b1", "w2"]] * 3), paired["groups"]
    assert met == [True] * 3, "the first apply finished before the other started"
    assert all(result[1:] != [None, None] for result in paired["results"])
    with pytest.MonkeyPatch.context() as patch:  # one thread, the schedule as it was
        patch.setattr(pairs, "pair_schedule", lambda schedule: (list(schedule), {}))
        alone_losses, alone = await train_two_layers(threads=1)
    assert losses == alone_losses
    for got, want in zip(values, alone):
        np.testing.assert_array_equal(got, want)


async def test_applies_pair_with_reads_of_their_variables_fetched(paired, cpu_only):
    """A read of a variable fetched beside the train op: the apply does not move past it."""
    losses, values = await train_two_layers(threads=2, fetch_reads=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pairs, "pair_schedule", lambda schedule: (list(schedule), {}))
        alone_losses, alone = await train_two_layers(threads=1, fetch_reads=True)
    assert losses == alone_losses
    for got, want in zip(values, alone):
        np.testing.assert_array_equal(got, want)


def test_small_applies_do_not_pair(monkeypatch):
    monkeypatch.setattr(pairs, "APPLY_PAIR_MIN", 1 << 40)

    class Shape:
        def num_elements(self):
            return 1 << 20

    class ApplyOp:
        def __init__(self, name):
            self.name, self.type = name, "ApplyRMSProp"
            self.op_def = FakeOpDef(True, None)

        def out_spec(self, index):
            return (None, Shape(), True)
    nodes = [FakeNode(0, "a"), FakeNode(1, "b")]
    for node in nodes:
        node.op, node.offload = ApplyOp(node.op.name), False
    assert pairs._apply_size(nodes[0]) is None
    assert pairs.pair_schedule(nodes) == (nodes, {})


async def test_a_group_hands_its_rest_back_when_no_thread_takes_it(paired, cpu_only):
    """The pool's worker taken, no Ctrl-C: the caller runs the first apply, the rest run on
    their own lines after it (after a slice check: the loop is not held for both sides),
    with the same bits."""
    pool = intra_op.shared_pool(2)
    busy, release = threading.Event(), threading.Event()

    def hold():
        busy.set()
        release.wait(30)
    held = pool._workers().submit(hold)
    assert busy.wait(30)
    try:
        losses, values = await train_two_layers(threads=2, steps=2)
    finally:
        release.set()
        held.result(30)
    assert len(paired["groups"]) == 2
    assert all(result[0] is not None and result[1:] == [None, None]
               for result in paired["results"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pairs, "pair_schedule", lambda schedule: (list(schedule), {}))
        alone_losses, alone = await train_two_layers(threads=1, steps=2)
    assert losses == alone_losses
    for got, want in zip(values, alone):
        np.testing.assert_array_equal(got, want)


async def _two_optimizers(threads):
    """Two optimizers updating the same [256, 256] weight (and RMSProp a second weight of
    the same size): the values after two steps."""
    rng = np.random.default_rng(6)
    x_value = rng.standard_normal((16, N)).astype(np.float32)
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, N])
        w = af.Variable(rng.standard_normal((N, N)).astype(np.float32) * 0.05, name="w")
        v = af.Variable(rng.standard_normal((N, N)).astype(np.float32) * 0.05, name="v")
        loss = af.reduce_mean(af.square(af.matmul(af.matmul(x, w), v)))
        first = af.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=[w])
        second = af.train.RMSPropOptimizer(0.01).minimize(loss, var_list=[w, v])
        config = af.ConfigProto(intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            for _ in range(2):
                await session.run([first, second], {x: x_value})
            return await session.run([w, v])


async def test_two_updates_of_one_variable_never_pair(paired, cpu_only):
    """Two optimizers on one weight: its two updates keep their order on one thread; only
    an update of another variable may run beside either."""
    values = await _two_optimizers(threads=2)
    assert paired["groups"], "the update of v pairs with one of w's"
    for group in paired["groups"]:
        updated = [name.split("/")[1] for name in group]  # update_w, update_v
        assert len(set(updated)) == len(updated), group
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pairs, "pair_schedule", lambda schedule: (list(schedule), {}))
        alone = await _two_optimizers(threads=1)
    for got, want in zip(values, alone):
        np.testing.assert_array_equal(got, want)


async def test_a_failing_apply_of_a_group_names_its_own_op(paired, cpu_only):
    """w2's update fails beside w1's: the error names w2's update (as one after the other),
    and the bias's update after it in the group does not run."""
    kernel = registry._KERNELS[("ApplyRMSProp", registry.ANY)]
    ran = []

    def failing(ctx, *args, _fn=kernel.fn):
        ran.append(ctx.name.split("/")[1])
        if "w2" in ctx.name:
            raise ValueError("w2's update fails")
        return _fn(ctx, *args)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(registry._KERNELS, ("ApplyRMSProp", registry.ANY),
                      dataclasses.replace(kernel, fn=failing))
        with pytest.raises(af.errors.OpError, match="update_w2"):
            await train_two_layers(threads=2, steps=1)
    assert len(paired["groups"]) == 1
    group = [name.split("/")[1] for name in paired["groups"][0]]
    if group.index("update_w2") < group.index("update_b1"):
        assert "update_b1" not in ran, ran


class _Elements:
    def __init__(self, count):
        self.count = count

    def num_elements(self):
        return self.count


class _StateOp:
    """A variable (``ref``: its output is a reference) or a dense apply of 64k elements."""

    def __init__(self, name, kind, stateful=True):
        self.name, self.type = name, kind
        self.op_def = FakeOpDef(stateful, None)

    def out_spec(self, index):
        return (None, _Elements(1 << 16), self.type == "VariableV2")


def _state_node(index, name, kind, inputs=(), outputs=(-1,), consumers=(), stateful=True):
    node = FakeNode(index, name, consumers=consumers)
    node.op = _StateOp(name, kind, stateful)
    node.inputs, node.outputs = tuple(inputs), tuple(outputs)
    return node


@pytest.mark.parametrize("edge", ["none", "control", "reads_b", "stateful"])
def test_an_apply_moves_up_only_past_nodes_that_neither_feed_nor_touch_it(edge):
    """``a``'s update, then a node, then ``b``'s update: ``b``'s moves up beside ``a``'s past
    a pure node, not past one it waits for (a control edge counts), one that reads ``b``,
    or another stateful op."""
    between = _state_node(
        4, edge, "Identity" if edge != "stateful" else "Print",
        inputs=(1,) if edge == "reads_b" else (), outputs=(2,),
        consumers=(5,) if edge == "control" else (), stateful=edge == "stateful")
    nodes = [_state_node(0, "a", "VariableV2", outputs=(0,), consumers=(3,)),
             _state_node(1, "b", "VariableV2", outputs=(1,), consumers=(4, 5)),
             _state_node(3, "update_a", "ApplyGradientDescent", inputs=(0,)),
             between,
             _state_node(5, "update_b", "ApplyGradientDescent", inputs=(1,))]
    order, firsts = pairs.pair_schedule(nodes)
    if edge == "none":
        assert names(order)[2:] == ["update_a", "update_b", "none"] and firsts == {3: 1}
    else:
        assert names(order)[2:] == ["update_a", edge, "update_b"] and firsts == {}


async def test_gpu_applies_are_not_paired_on_cpu_threads(paired):
    """With a GPU visible (``make test-gpu``) the weights and their updates are the GPU's: no
    group runs them on the CPU's intra-op threads, and the values are those of one after the
    other."""
    if os.environ.get("ASYNCFLOW_FAKE_GPU") != "1":
        pytest.skip("a GPU is visible only under make test-gpu")
    kernel = registry._KERNELS[("ApplyRMSProp", registry.ANY)]
    kinds = set()

    def where(ctx, *args, _fn=kernel.fn):
        kinds.add(ctx.device.kind)
        return _fn(ctx, *args)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(registry._KERNELS, ("ApplyRMSProp", registry.ANY),
                      dataclasses.replace(kernel, fn=where))
        losses, values = await train_two_layers(threads=2, steps=2)
    assert kinds == {"GPU"} and paired["groups"] == []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pairs, "pair_schedule", lambda schedule: (list(schedule), {}))
        alone_losses, alone = await train_two_layers(threads=2, steps=2)
    assert losses == alone_losses
    for got, want in zip(values, alone):
        np.testing.assert_array_equal(got, want)


async def test_a_traced_step_shows_each_apply_with_its_own_times(paired, cpu_only,
                                                                 monkeypatch):
    """A traced step (``RunOptions`` FULL_TRACE) runs its schedule unpaired: every update
    has its own entry and times in the step's stats, as one after the other."""
    monkeypatch.setattr(fuse_matmul_apply, "ENABLED", False)  # (w1's apply stays an apply)
    rng = np.random.default_rng(7)
    with af.Graph().as_default():
        x = af.constant(rng.standard_normal((8, 384)).astype(np.float32))
        w1 = af.Variable(rng.standard_normal((384, N)).astype(np.float32) * 0.05, name="w1")
        w2 = af.Variable(rng.standard_normal((N, N)).astype(np.float32) * 0.05, name="w2")
        loss = af.reduce_mean(af.square(af.matmul(af.matmul(x, w1), w2)))
        train = af.train.RMSPropOptimizer(0.01).minimize(loss)
        async with af.Session(config=af.ConfigProto(intra_op_parallelism_threads=2)) as sess:
            await sess.run(af.global_variables_initializer())
            metadata = af.RunMetadata()
            options = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE)
            await sess.run(train, options=options, run_metadata=metadata)
            await sess.run(train)  # untraced: paired
    updates = [s for s in metadata.step_stats if s.op_type == "ApplyRMSProp"]
    assert sorted(s.node_name.split("/")[1] for s in updates) == ["update_w1", "update_w2"]
    assert all(s.end_us >= s.start_us for s in updates)
    assert len(paired["groups"]) == 1  # the untraced step's
