"""The offload test of an offloadable kernel, remembered per node for the shapes of its last
run (``plan.runtime_cost``, ``plan.offload_due``; issue 37): a step whose shapes did not
change reads its cost back, and any other shapes, on any device, get their own decision."""
import dataclasses
import linecache
import threading

import numpy as np
import pytest

import asyncflow as af
from asyncflow.exec import plan as plan_mod
from asyncflow.kernels import intra_op, registry

SMALL, LARGE = 256, 512  # 256^3 multiply-adds stay inline, 512^3 go to a worker thread
SUM_LARGE = plan_mod.OFFLOAD_COST  # a Sum's cost is its input's size


@pytest.fixture
def threads_of(monkeypatch):
    """Per op name, whether each run of its MatMul, Sum or Einsum kernel was on the event
    loop's thread (True) or a worker's (False), in order."""
    seen = {}
    for op_type in ("MatMul", "Sum", "Einsum"):
        kernel = registry._KERNELS[(op_type, registry.ANY)]

        def spy(ctx, *args, _fn=kernel.fn):
            seen.setdefault(ctx.name, []).append(
                threading.current_thread() is threading.main_thread())
            return _fn(ctx, *args)
        monkeypatch.setitem(registry._KERNELS, (op_type, registry.ANY),
                            dataclasses.replace(kernel, fn=spy))
    return seen


def _matrix(size, seed):
    return np.random.default_rng(seed).random((size, size), np.float32)


def _static_plan(sess):
    (compiled,) = sess._cache.values()
    (plan,) = compiled.plans
    assert plan.static
    return plan


async def test_a_shape_change_between_runs_gets_its_own_decision(threads_of, cpu_only):
    """Each signature holds one offloadable kernel (two large ones would move the next
    step whole onto a worker thread: ``exec/thread_step.py``)."""
    assert SMALL ** 3 < plan_mod.OFFLOAD_COST * intra_op.MACS_PER_WORK <= LARGE ** 3
    assert SMALL * SMALL * 32 < SUM_LARGE <= LARGE * LARGE * 32
    sizes = [SMALL, LARGE, LARGE, SMALL, SMALL, LARGE]
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, None])
        v = af.placeholder(af.float32, [None])
        product, total = af.matmul(x, x, name="product"), af.reduce_sum(v, name="total")
        async with af.Session() as sess:
            for size in sizes:
                np.testing.assert_allclose(await sess.run(product, {x: _matrix(size, size)}),
                                           _matrix(size, size) @ _matrix(size, size), rtol=1e-5)
                assert await sess.run(total, {v: np.ones(size * size * 32, np.float32)}) \
                    == size * size * 32
            plans = [compiled.plans[0] for compiled in sess._cache.values()]
    # One signature each, one static form: its test decides again for each run's shapes.
    inline = [size == SMALL for size in sizes]
    assert threads_of == {"product": inline, "total": inline}
    assert all(plan.static for plan in plans)
    (node,) = [n for plan in plans for n in plan.nodes if n.op.type == "MatMul"]
    assert node.cost_memo == (((LARGE, LARGE), (LARGE, LARGE)), LARGE ** 3)


async def test_each_device_s_plan_decides_for_itself(threads_of, cpu_only):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, None])
        with af.device("/cpu:0"):
            first = af.matmul(x, x, name="first")
        with af.device("/cpu:1"):
            second = af.matmul(x, x, name="second")
        async with af.Session(config=af.SessionConfig(device_count={"CPU": 2})) as sess:
            for size in (LARGE, SMALL, LARGE):
                a, b = await sess.run([first, second], {x: _matrix(size, 3)})
                np.testing.assert_array_equal(a, b)
    assert threads_of == {"first": [False, True, False], "second": [False, True, False]}


async def test_a_constant_input_counts_in_the_sizes_summed_in_the_line(threads_of, cpu_only):
    """Without a cost function the cost is the inputs' sizes: a constant's, counted when the
    code is generated, is added to the fed one's summed in the line, and the threshold itself
    offloads, as ``runtime_cost`` decides (the fed input alone never reaches it)."""
    width = plan_mod.OFFLOAD_COST // 4
    rows = [3, 2, 3, 2]  # 3 * width + width: the threshold exactly; 2 rows: under it
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, None])
        weights = np.ones(width, np.float32)
        mixed = af.einsum("ij,j->i", x, af.constant(weights), name="mixed")
        config = af.SessionConfig(optimize_graph=False)
        async with af.Session(config=config) as sess:
            for count in rows:
                np.testing.assert_array_equal(
                    await sess.run(mixed, {x: np.ones((count, width), np.float32)}),
                    np.full(count, width, np.float32))
            plan = _static_plan(sess)
    expected = [count == 2 for count in rows]
    assert threads_of == {"mixed": expected}
    (node,) = [n for n in plan.nodes if n.op.type == "Einsum"]
    assert node.cost_fn is None and node.offload_cost == plan_mod.OFFLOAD_COST
    for count, inline in zip(rows, expected):
        args = [np.empty((count, width), np.float32), weights]
        assert (plan_mod.runtime_cost(node, args) < node.offload_cost) is inline


def _matmul_node(sess):
    (node,) = [n for n in _static_plan(sess).nodes if n.op.type == "MatMul"]
    return node


async def test_the_memo_keeps_a_cost_so_another_threshold_decides_for_itself(cpu_only):
    """A node of another device (another kernel: another ``offload_scale``) compares the same
    shapes' cost with its own threshold, even holding a copy of this node's memo."""
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, None])
        product = af.matmul(x, x)
        async with af.Session() as sess:
            await sess.run(product, {x: _matrix(SMALL, 0)})
            node = _matmul_node(sess)
    shapes = ((SMALL, SMALL), (SMALL, SMALL))
    assert node.cost_memo == (shapes, SMALL ** 3)
    assert not plan_mod.offload_due(node, shapes)
    other = dataclasses.replace(node, offload_cost=SMALL ** 3)  # (memo copied)
    assert plan_mod.offload_due(other, shapes)
    assert not plan_mod.offload_due(node, shapes)


async def test_runtime_cost_is_the_cost_function_s_for_any_shapes(cpu_only, monkeypatch):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, None])
        product = af.matmul(x, x, transpose_b=True)
        async with af.Session() as sess:
            await sess.run(product, {x: np.ones((2, 3), np.float32)})
            node = _matmul_node(sess)
    calls = []

    def counted(shapes, op, _fn=node.cost_fn):
        calls.append([tuple(shape) for shape in shapes])
        return _fn(shapes, op)
    node.cost_fn, node.cost_memo = counted, plan_mod._NO_SHAPES
    cases = [((4, 5), (6, 5)), ((4, 5), (6, 5)), ((7, 5), (6, 5)), ((4, 5), (6, 5))]
    for a, b in cases:
        args = [np.empty(a, np.float32), np.empty(b, np.float32)]
        assert plan_mod.runtime_cost(node, args) == a[0] * a[1] * b[0]
    # Computed for each new shape, read back for a repeat.
    assert calls == [list(cases[0]), list(cases[2]), list(cases[3])]
    monkeypatch.setattr(plan_mod, "MEMO_COSTS", False)
    assert plan_mod.runtime_cost(node, args) == 4 * 5 * 6 and len(calls) == 4


async def test_the_static_form_tests_a_lone_offloadable_kernel_without_a_list(cpu_only,
                                                                                monkeypatch):
    """The generated line makes the list of arguments only to offload; a Sum of a constant
    (not folded here) is decided when the code is generated; the old form (``MEMO_COSTS``
    False) gives the same values."""
    sources = {}
    for memo in (True, False):
        monkeypatch.setattr(plan_mod, "MEMO_COSTS", memo)
        with af.Graph().as_default():
            x = af.placeholder(af.float32, [None, None], name="x")
            product = af.matmul(x, x, name="product")
            fetches = [product, af.reduce_sum(product, name="total"),
                       af.reduce_sum(af.constant(np.ones(3, np.float32)), name="fixed")]
            config = af.SessionConfig(optimize_graph=False)
            async with af.Session(config=config) as sess:
                got = await sess.run(fetches, {x: _matrix(4, 1)})
                plan = _static_plan(sess)
                sources[memo] = "".join(linecache.getlines(plan.static_fn.__code__.co_filename))
        np.testing.assert_array_equal(got[0], _matrix(4, 1) @ _matrix(4, 1))
        assert got[1] == got[0].sum(dtype=np.float32) and got[2] == 3
    assert "_big(N" in sources[True] and "_a = [" not in sources[True]
    assert "getattr(v" in sources[True] and "F_Sum(c_fixed, K" in sources[True]
    assert "getattr(K" not in sources[True]
    assert "_cost(N" in sources[False] and "_a = [" in sources[False]
