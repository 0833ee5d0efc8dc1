"""Control flow in TF's control-flow-suite style: Switch/Merge, cond, case, while_loop."""
import collections
import tracemalloc

import numpy as np
import pytest

import asyncflow as af
from asyncflow import errors
from asyncflow.ops import control_flow as cf
import loop_modes


@pytest.fixture(autouse=True, params=["compiled", "dynamic"])
def loop_mode(request):
    """Run every test twice: simple loops on the straight-line runner, and all dynamically."""
    loop_modes.use(request.param)
    yield request.param
    loop_modes.use("compiled")


async def run(fetches, feed_dict=None, graph=None):
    async with af.Session(graph=graph or af.get_default_graph(), config=loop_modes.config()) as sess:
        return await sess.run(fetches, feed_dict)


# -- primitives ---------------------------------------------------------------------------
async def test_switch_merge_forward_the_taken_side():
    with af.Graph().as_default():
        data = af.constant([1.0, 2.0])
        pred = af.placeholder(af.bool, [])
        false_out, true_out = cf.switch(data, pred)
        merged, index = cf.merge([false_out * 10.0, true_out + 1.0])
        assert merged.shape.as_list() == [2] and index.dtype is af.int32
        value, which = await run([merged, index], {pred: True})
        np.testing.assert_allclose(value, [2.0, 3.0])
        assert which == 1
        value, which = await run([merged, index], {pred: False})
        np.testing.assert_allclose(value, [10.0, 20.0])
        assert which == 0


async def test_fetching_a_dead_switch_output_is_an_error():
    with af.Graph().as_default():
        false_out, true_out = cf.switch(af.constant(1.0), af.constant(True))
        assert await run(true_out) == 1.0
        with pytest.raises(errors.InvalidArgumentError, match="was not valid"):
            await run(false_out)
        # Deadness propagates through ordinary ops.
        with pytest.raises(errors.InvalidArgumentError, match="was not valid"):
            await run(af.square(false_out) + 1.0)


async def test_deadness_through_control_edges():
    with af.Graph().as_default():
        false_out, _ = cf.switch(af.constant(1.0), af.constant(True))
        dead = af.identity(false_out)
        with af.control_dependencies([dead]):
            gated = af.constant(5.0) + 1.0
        with pytest.raises(errors.InvalidArgumentError, match="was not valid"):
            await run(gated)
        # A control edge from the Switch itself is live: the node ran, one port is dead.
        with af.control_dependencies([false_out]):
            live = af.constant(5.0) + 1.0
        assert await run(live) == 6.0


async def test_merge_of_all_dead_inputs_is_dead_and_merge_waits_for_controls():
    with af.Graph().as_default():
        pred = af.constant(True)
        false_a, true_a = cf.switch(af.constant(1.0), pred)
        false_b, _ = cf.switch(af.constant(2.0), pred)
        dead_merge, _ = cf.merge([false_a, false_b])
        with pytest.raises(errors.InvalidArgumentError, match="was not valid"):
            await run(dead_merge)
        with af.control_dependencies([af.no_op()]):
            live_merge, index = cf.merge([false_b, true_a])
        assert await run([live_merge, index]) == [1.0, 1]


def test_primitive_build_errors_name_the_op():
    with af.Graph().as_default():
        with pytest.raises(TypeError, match="Switch.*bool"):
            cf.switch(af.constant(1.0), af.constant(1.0))
        with pytest.raises(TypeError, match="Merge.*dtype"):
            cf.merge([af.constant(1.0), af.constant(1)])


# -- cond and case ------------------------------------------------------------------------
async def test_cond_runs_only_the_taken_branch():
    with af.Graph().as_default():
        pred = af.placeholder(af.bool, [])
        x = af.constant(3.0)
        out = af.cond(pred, lambda: x * 2.0, lambda: x - 1.0)
        assert await run(out, {pred: True}) == 6.0
        assert await run(out, {pred: False}) == 2.0


def test_cond_requires_a_tensor_predicate_and_matching_branches():
    with af.Graph().as_default():
        with pytest.raises(TypeError, match="Python bool"):
            af.cond(True, lambda: 1.0, lambda: 2.0)
        pred = af.constant(True)
        with pytest.raises(ValueError, match="same type"):  # TF1's class
            af.cond(pred, lambda: af.constant(1.0), lambda: af.constant(1))
        with pytest.raises(ValueError, match="same structure"):
            af.cond(pred, lambda: (af.constant(1.0), af.constant(2.0)),
                    lambda: af.constant(1.0))


async def test_cond_side_effects_only_in_taken_branch_and_nested_structures():
    with af.Graph().as_default():
        v = af.Variable(0.0)
        pred = af.placeholder(af.bool, [])
        out = af.cond(pred, lambda: {"a": af.assign_add(v, 1.0), "b": af.constant(1)},
                      lambda: {"a": af.assign_add(v, 10.0), "b": af.constant(2)})
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(out, {pred: True}) == {"a": 1.0, "b": 1}
            assert await sess.run(out, {pred: False}) == {"a": 11.0, "b": 2}
            assert await sess.run(v.value()) == 11.0


async def test_nested_cond_and_case():
    with af.Graph().as_default():
        x = af.placeholder(af.int32, [])
        nested = af.cond(x > 0, lambda: af.cond(x > 10, lambda: x * 100, lambda: x * 10),
                         lambda: -x)
        chosen = af.case([(x < 0, lambda: af.constant(-1)), (x < 5, lambda: af.constant(5))],
                         default=lambda: af.constant(99))
        last_is_default = af.case([(x < 0, lambda: af.constant(-1)),
                                   (x < 5, lambda: af.constant(5))])
        for value, expected in ((3, (30, 5, 5)), (-2, (2, -1, -1))):
            assert tuple(await run([nested, chosen, last_is_default], {x: value})) == expected
        assert tuple(await run([nested, chosen], {x: 20})) == (2000, 99)
        # no predicate true and no default: TF1 fails the run (the last fn is no fallback)
        with pytest.raises(errors.InvalidArgumentError, match="none of the predicates"):
            await run(last_is_default, {x: 20})


async def test_case_exclusive_rejects_two_true_predicates():
    with af.Graph().as_default():
        x = af.placeholder(af.int32, [])
        out = af.case([(x > 0, lambda: af.constant(1)), (x > 1, lambda: af.constant(2))],
                      default=lambda: af.constant(0), exclusive=True)
        assert await run(out, {x: 1}) == 1
        with pytest.raises(errors.InvalidArgumentError, match="exclusive"):
            await run(out, {x: 5})


# -- while_loop -----------------------------------------------------------------------------
@pytest.mark.parametrize("parallel_iterations", [1, 2, 10])
async def test_while_loop_wider_than_its_window(parallel_iterations):
    with af.Graph().as_default():
        i, acc = af.while_loop(lambda i, acc: i < 25, lambda i, acc: (i + 1, acc + i),
                               (af.constant(0), af.constant(0)),
                               parallel_iterations=parallel_iterations)
        assert await run([i, acc]) == [25, 300]


async def test_one_element_list_returns_the_tensor_and_structures_round_trip():
    Pair = collections.namedtuple("Pair", "a b")
    with af.Graph().as_default():
        single = af.while_loop(lambda x: x < 5, lambda x: x + 1, [af.constant(0)])
        assert isinstance(single, af.Tensor)
        pair = af.while_loop(lambda p: p.a < 3, lambda p: Pair(p.a + 1, p.b * 2.0),
                             Pair(af.constant(0), af.constant(1.0)))
        assert isinstance(pair, Pair)
        mapping = af.while_loop(lambda d: d["n"] < 4, lambda d: {"n": d["n"] + 1, "s": [d["s"][0] + 2]},
                                {"n": af.constant(0), "s": [af.constant(0)]})
        assert await run(single) == 5
        assert tuple(await run(pair)) == (3, 8.0)
        assert await run(mapping) == {"n": 4, "s": [8]}


def test_while_loop_errors_name_the_loop():
    with af.Graph().as_default():
        x = af.constant(0)
        with pytest.raises(ValueError, match="'my_loop'.*structure"):
            af.while_loop(lambda a, b: a < 3, lambda a, b: a + 1, (x, x), name="my_loop")
        with pytest.raises(TypeError, match="'dtype_loop'.*float32"):
            af.while_loop(lambda a: a < 3, lambda a: af.cast(a, af.float32), [x],
                          name="dtype_loop")
        with pytest.raises(ValueError, match="'shape_loop'.*shape_invariants"):
            af.while_loop(lambda a: af.size(a) < 3, lambda a: af.concat([a, a], 0),
                          [af.constant([1])], name="shape_loop")
        with pytest.raises(TypeError, match="'pred_loop'.*scalar bool"):
            af.while_loop(lambda a: a, lambda a: a + 1, [x], name="pred_loop")


async def test_shape_invariant_lets_a_dimension_grow():
    with af.Graph().as_default():
        start = af.constant([1])
        grown = af.while_loop(lambda a: af.size(a) < 8, lambda a: af.concat([a, a], 0), [start],
                              shape_invariants=[af.TensorShape([None])])
        assert grown.shape.as_list() == [None]
        np.testing.assert_array_equal(await run(grown), np.ones(8, np.int32))


async def test_loop_invariants_and_inputless_body_ops_run_every_iteration():
    with af.Graph().as_default():
        step = af.placeholder(af.float32, [])
        total = af.while_loop(lambda i, s: i < 4,
                              lambda i, s: (i + 1, s + step + af.constant(100.0)),
                              (af.constant(0), af.constant(0.0)))[1]
        assert await run(total, {step: 0.5}) == pytest.approx(4 * 100.5)


async def test_nested_loops():
    with af.Graph().as_default():
        def outer_body(i, acc):
            inner = af.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + j),
                                  (af.constant(0), acc))[1]
            return i + 1, inner
        _, total = af.while_loop(lambda i, acc: i < 6, outer_body,
                                 (af.constant(0), af.constant(0)))
        assert await run(total) == sum(j for i in range(6) for j in range(i))


async def test_cond_inside_while_returning_an_outer_tensor():
    with af.Graph().as_default():
        outer = af.constant(7)
        def body(i, acc):
            picked = af.cond(af.equal(af.mod(i, 2), 0), lambda: outer, lambda: i)
            return i + 1, acc + picked
        _, acc = af.while_loop(lambda i, acc: i < 6, body, (af.constant(0), af.constant(0)))
        assert await run(acc) == 7 * 3 + (1 + 3 + 5)


async def test_while_inside_an_untaken_cond_branch_is_dead_not_run():
    with af.Graph().as_default():
        pred = af.placeholder(af.bool, [])
        n = af.constant(5)
        out = af.cond(pred,
                      lambda: af.while_loop(lambda i: i < n, lambda i: i + 1, [af.constant(0)]),
                      lambda: af.constant(-1))
        assert await run(out, {pred: True}) == 5
        assert await run(out, {pred: False}) == -1


async def test_maximum_iterations_bounds_the_loop():
    with af.Graph().as_default():
        out = af.while_loop(lambda x: x < 1000, lambda x: x + 1, [af.constant(0)],
                            maximum_iterations=7)
        assert await run(out) == 7


async def test_variable_updates_inside_a_loop_run_once_per_iteration_in_order():
    with af.Graph().as_default():
        v = af.Variable(0)
        def body(i, seen):
            update = af.assign_add(v, 1)
            return i + 1, seen * 10 + update
        _, seen = af.while_loop(lambda i, s: i < 4, body, (af.constant(0), af.constant(0)),
                                parallel_iterations=1)
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(seen) == 1234
            assert await sess.run(v.value()) == 4


async def test_data_dependent_loop_collatz():
    with af.Graph().as_default():
        n = af.placeholder(af.int32, [])
        def body(x, steps):
            nxt = af.cond(af.equal(af.mod(x, 2), 0), lambda: af.floordiv(x, 2),
                          lambda: 3 * x + 1)
            return nxt, steps + 1
        _, steps = af.while_loop(lambda x, s: x > 1, body, (n, af.constant(0)))
        assert await run(steps, {n: 27}) == 111
        assert await run(steps, {n: 1}) == 0


async def test_ten_thousand_iterations_keep_memory_flat():
    with af.Graph().as_default():
        x = af.while_loop(lambda i: i < 10000, lambda i: i + 1, [af.constant(0)])
        async with af.Session(config=loop_modes.config()) as sess:
            assert await sess.run(x) == 10000
            tracemalloc.start()
            try:
                await sess.run(x)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        # A few KB per live iteration at most: a leak of one iteration's state would be MBs.
        assert peak < 1_000_000


async def test_frame_statistics_show_the_window_bound(loop_mode):
    from asyncflow.exec import dispatch
    from asyncflow.exec.step import Step
    with af.Graph().as_default() as graph:
        x = af.while_loop(lambda i: i < 50, lambda i: i + 1, [af.constant(0)],
                          parallel_iterations=3)
    async with af.Session(graph=graph, config=loop_modes.config()) as sess:
        compiled = sess.prepare(x).compiled
        step = Step(1)
        assert await dispatch.run_plan(compiled.plans[0], [], step) == [50]
    stats = step.extras["frame_statistics"]
    assert stats.iterations_created == 51  # iterations 0..50 of the loop (the last one exits)
    assert stats.frames_created == 1
    assert stats.max_live_iterations <= 1 + 3  # the root's, plus the window
    if loop_mode == "compiled":
        assert stats.max_live_iterations == 2  # one iteration at a time, in place


# -- gradients ----------------------------------------------------------------------------
async def test_gradient_through_cond_follows_the_taken_branch():
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [])
        pred = af.placeholder(af.bool, [])
        y = af.cond(pred, lambda: x * x, lambda: x * 3.0)
        dx, = af.gradients(y, [x])
        assert await run([y, dx], {x: 1.5, pred: True}) == [2.25, 3.0]
        assert await run([y, dx], {x: 1.5, pred: False}) == [4.5, 3.0]


async def test_gradient_through_case_and_cond_finite_differences():
    from gradcheck import check_gradients

    def build(x):
        return af.cond(af.reduce_sum(x) > 0.0, lambda: af.sin(x) * x, lambda: af.exp(x))
    await check_gradients(build, [np.array([0.3, -0.1, 0.7])])
    await check_gradients(build, [np.array([-0.3, -0.1, 0.2])])


@pytest.mark.parametrize("parallel_iterations", [1, 10])
@pytest.mark.parametrize("power", [0, 1, 4])
async def test_gradient_of_a_loop_raising_x_to_a_power(power, parallel_iterations):
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [])
        n = af.placeholder(af.int32, [])
        _, y = af.while_loop(lambda i, p: i < n, lambda i, p: (i + 1, p * x),
                             (af.constant(0), af.constant(1.0, af.float64)),
                             parallel_iterations=parallel_iterations)
        dx, = af.gradients(y, [x])
        value, grad = await run([y, dx], {x: 1.5, n: power})
        assert value == pytest.approx(1.5 ** power)
        assert grad == pytest.approx(power * 1.5 ** (power - 1) if power else 0.0)


async def test_gradient_with_respect_to_a_loop_variable_and_through_time():
    from gradcheck import check_gradients

    def build(h0, w):
        def body(i, h):
            return i + 1, af.tanh(af.matmul(h, w) + 0.1)
        return af.while_loop(lambda i, h: i < 3, body, (af.constant(0), h0))[1]
    rng = np.random.default_rng(0)
    await check_gradients(build, [rng.normal(size=(2, 3)), rng.normal(size=(3, 3)) * 0.5])


def test_back_prop_false_makes_the_loop_a_constant():
    with af.Graph().as_default():
        x = af.constant(2.0)
        y = af.while_loop(lambda v: v < 100.0, lambda v: v * x, [x], back_prop=False)
        assert af.gradients(y, [x]) == [None]


async def test_gradient_of_a_nested_loop():
    # More nested cases (finite differences, ragged trip counts, three levels, errors) are
    # in test_nested_loop_gradients.py.
    with af.Graph().as_default():
        x = af.constant(2.0)

        def body(i, v):
            return i + 1, af.while_loop(lambda j, u: j < 2, lambda j, u: (j + 1, u * x),
                                        (af.constant(0), v), name="inner")[1]
        y = af.while_loop(lambda i, v: i < 2, body, (af.constant(0), x))[1]
        dx, = af.gradients(y, [x])
        assert await run([y, dx]) == [32.0, 80.0]  # x ** 5, 5 * x ** 4


async def test_loop_body_on_another_device_runs_every_iteration():
    with af.Graph().as_default():
        with af.device("/cpu:0"):
            x = af.constant(2.0)

        def body(i, v):
            with af.device("/cpu:1"):
                w = v * x
            return i + 1, w
        with af.device("/cpu:0"):
            _, y = af.while_loop(lambda i, v: i < 3, body, (af.constant(0), af.constant(1.0)))
        config = af.SessionConfig(device_count={"CPU": 2})
        async with af.Session(config=loop_modes.config(config)) as sess:
            assert await sess.run(y) == 8.0
            assert await sess.run(y) == 8.0  # per-step rendezvous keys carry frame:iteration


async def test_loop_condition_and_nested_loop_on_another_device():
    with af.Graph().as_default():
        limit = af.placeholder(af.int32, [])

        def cond(i, acc):
            with af.device("/cpu:1"):
                return i < limit

        def body(i, acc):
            with af.device("/cpu:1"):
                inner = af.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + j),
                                      (af.constant(0), acc))[1]
            return i + 1, inner
        with af.device("/cpu:0"):
            _, total = af.while_loop(cond, body, (af.constant(0), af.constant(0)))
        config = af.SessionConfig(device_count={"CPU": 2})
        async with af.Session(config=loop_modes.config(config)) as sess:
            assert await sess.run(total, {limit: 6}) == sum(j for i in range(6) for j in range(i))
            assert await sess.run(total, {limit: 0}) == 0


async def test_cond_branches_returning_ops_run_only_the_taken_one():
    with af.Graph().as_default():
        v = af.Variable(0)
        pred = af.placeholder(af.bool, [])
        update = af.cond(pred, lambda: af.assign_add(v, 1).op, lambda: af.assign_add(v, 5).op)
        assert isinstance(update, af.Tensor) and update.dtype is af.bool  # TF1: the pivot
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(update, {pred: True}) == True  # noqa: E712
            assert await sess.run(update, {pred: False}) == False  # noqa: E712
            assert await sess.run(v.value()) == 6


async def test_fetching_a_value_inside_a_loop_body_is_refused():
    """TF1 marks it not fetchable: refused before anything runs, naming the loop."""
    with af.Graph().as_default():
        captured = []

        def body(i):
            captured.append(i * 2)
            return i + 1
        af.while_loop(lambda i: i < 3, body, [af.constant(0)])
        with pytest.raises(ValueError, match="'while/mul' has been marked as not fetchable: "
                                             "it is computed inside while_loop 'while'"):
            await run(captured[0])


async def test_cond_branch_on_another_device_carries_deadness_through_send_recv():
    with af.Graph().as_default():
        pred = af.placeholder(af.bool, [])
        with af.device("/cpu:0"):
            x = af.constant(3.0)

        def on_cpu1(fn):
            def branch():
                with af.device("/cpu:1"):
                    return fn()
            return branch
        with af.device("/cpu:0"):
            y = af.cond(pred, on_cpu1(lambda: x * 2.0), lambda: x - 1.0)
        config = af.SessionConfig(device_count={"CPU": 2})
        async with af.Session(config=loop_modes.config(config)) as sess:
            assert await sess.run(y, {pred: True}) == 6.0
            assert await sess.run(y, {pred: False}) == 2.0
