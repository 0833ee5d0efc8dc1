"""Gradients of while loops nested in while loops, against closed forms and finite differences.

The inner loop's gradient loop runs once per outer gradient iteration; its forward values
live on stacks created per outer iteration, whose handles (and the inner trip count) the
outer loop saves in turn. Every test runs with simple loops compiled and all dynamic.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncflow as af
from gradcheck import check_gradients, nested_loops_across_devices
import loop_modes

SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True, params=["compiled", "dynamic"])
def loop_mode(request):
    loop_modes.use(request.param)
    yield request.param
    loop_modes.use("compiled")


async def run(fetches, feed_dict=None):
    async with af.Session(config=loop_modes.config()) as sess:
        return await sess.run(fetches, feed_dict)


def power_loops(x, outer_n, inner_n, parallel_iterations=10):
    """``x ** (outer_n * inner_n)`` as an inner multiply loop inside an outer loop."""
    def outer_body(i, acc):
        _, inner = af.while_loop(lambda j, a: j < inner_n, lambda j, a: (j + 1, a * x),
                                 [af.constant(0), acc], parallel_iterations=parallel_iterations,
                                 name="inner")
        return i + 1, inner
    return af.while_loop(lambda i, acc: i < outer_n, outer_body,
                         [af.constant(0), af.constant(1.0, af.float64)],
                         parallel_iterations=parallel_iterations, name="outer")[1]


@pytest.mark.parametrize("parallel_iterations", [1, 10])
async def test_nested_power_loop_gradient(parallel_iterations):
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [], name="x")
        y = power_loops(x, 3, 2, parallel_iterations)
        g, = af.gradients(y, x)
        value, grad = await run([y, g], {x: 1.3})
        assert value == pytest.approx(1.3 ** 6)
        assert grad == pytest.approx(6 * 1.3 ** 5)


@pytest.mark.parametrize("outer_n,inner_n", [(0, 2), (3, 0), (1, 1), (4, 3)])
async def test_nested_power_loop_gradient_with_fed_trip_counts(outer_n, inner_n):
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [], name="x")
        n = af.placeholder(af.int32, [], name="n")
        m = af.placeholder(af.int32, [], name="m")
        y = power_loops(x, n, m)
        g, = af.gradients(y, x)
        value, grad = await run([y, g], {x: 0.9, n: outer_n, m: inner_n})
        power = outer_n * inner_n
        assert value == pytest.approx(0.9 ** power)
        assert grad == pytest.approx(power * 0.9 ** (power - 1) if power else 0.0)


def ragged_loops(x, w, h0, outer_n, parallel_iterations):
    """Inner trip count i + 1 per outer iteration i; captures from both levels.

    The inner body reads ``x`` (from outside both loops) and ``scale`` (computed in the outer
    body); the outer body also uses the inner loop's result and its own loop variable.
    """
    def outer_body(i, h):
        scale = af.tanh(h) * 0.5 + w

        def inner_body(j, a):
            return j + 1, af.sin(a * scale) + x * 0.3
        _, inner = af.while_loop(lambda j, a: j < i + 1, inner_body, [af.constant(0), h],
                                 parallel_iterations=parallel_iterations, name="inner")
        return i + 1, inner * h + 0.1
    return af.while_loop(lambda i, h: i < outer_n, outer_body, [af.constant(0), h0],
                         parallel_iterations=parallel_iterations, name="outer")[1]


@SETTINGS
@given(st.data())
async def test_nested_loop_gradients_match_finite_differences(data):
    shape = data.draw(st.sampled_from([(), (3,), (2, 2)]))
    outer_n = data.draw(st.integers(0, 3))
    parallel_iterations = data.draw(st.sampled_from([1, 3, 10]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    inputs = [rng.uniform(-1.0, 1.0, size=shape) for _ in range(3)]
    await check_gradients(
        lambda x, w, h0: ragged_loops(x, w, h0, outer_n, parallel_iterations), inputs)


async def test_three_nested_loops():
    def build(x, h0):
        def middle_body(k, b):
            _, inner = af.while_loop(lambda j, a: j < k + 1, lambda j, a: (j + 1, af.sin(a) * x),
                                     [af.constant(0), b], name="inner")
            return k + 1, inner + b * 0.5

        def outer_body(i, c):
            _, middle = af.while_loop(lambda k, b: k < 2, middle_body, [af.constant(0), c],
                                      name="middle")
            return i + 1, middle
        return af.while_loop(lambda i, c: i < 2, outer_body, [af.constant(0), h0],
                             name="outer")[1]
    await check_gradients(build, [np.array([0.7, -0.4]), np.array([0.5, 0.9])])


async def test_two_inner_loops_and_a_matmul_state():
    def build(h0, w):
        def outer_body(i, h):
            h = af.while_loop(lambda j, a: j < 2, lambda j, a: (j + 1, af.tanh(af.matmul(a, w))),
                              [af.constant(0), h], name="first")[1]
            h = af.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a * 0.9 + af.sin(a)),
                              [af.constant(0), h], name="second")[1]
            return i + 1, h
        return af.while_loop(lambda i, h: i < 3, outer_body, [af.constant(0), h0])[1]
    rng = np.random.default_rng(1)
    await check_gradients(build, [rng.normal(size=(2, 3)), rng.normal(size=(3, 3)) * 0.5])


async def test_inner_loop_body_on_another_device():
    build = nested_loops_across_devices
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [])
        y = build(x)
        g, = af.gradients(y, x)
        config = af.SessionConfig(device_count={"CPU": 2})
        async with af.Session(config=loop_modes.config(config)) as sess:
            grad = await sess.run(g, {x: 0.7})
            plus, minus = [await sess.run(y, {x: 0.7 + d}) for d in (1e-6, -1e-6)]
        assert grad == pytest.approx((plus - minus) / 2e-6, rel=1e-5)


async def test_a_cond_result_in_the_body_is_saved_for_the_gradient():
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [])

        def body(i, acc):
            u = af.cond(i < 1, lambda: af.constant(2.0, af.float64),
                        lambda: af.constant(3.0, af.float64))
            return i + 1, acc * u * x
        y = af.while_loop(lambda i, acc: i < 3, body, [af.constant(0), x])[1]
        g, = af.gradients(y, x)
        value, grad = await run([y, g], {x: 0.3})
        assert value == pytest.approx(18 * 0.3 ** 4)
        assert grad == pytest.approx(72 * 0.3 ** 3)


async def test_a_value_inside_a_cond_in_the_body_is_saved_when_its_branch_runs():
    with af.Graph().as_default():
        x = af.constant(0.3)
        y = af.while_loop(lambda i, acc: i < 3, lambda i, acc: (i + 1, af.cond(
            i < 1, lambda: af.exp(acc + 0.0), lambda: acc + x)), [af.constant(0), x],
            name="outer")[1]
        grad = af.gradients(y, [x])[0]
        # y = exp(x) + 2x: exp's input is pushed in the one iteration that takes it.
        value, grad_value = await run([y, grad])
        assert value == pytest.approx(np.exp(0.3) + 0.6)
        assert grad_value == pytest.approx(np.exp(0.3) + 2)


async def test_gradient_inside_the_outer_body_is_an_inner_gradient_loop():
    with af.Graph().as_default():
        x = af.constant(2.0)

        def body(i, v):
            inner = af.while_loop(lambda j, u: j < 2, lambda j, u: (j + 1, u * x),
                                  (af.constant(0), v), name="inner")[1]
            return i + 1, inner + af.gradients(inner, [v])[0]
        y = af.while_loop(lambda i, v: i < 2, body, (af.constant(0), x), name="outer")[1]
        # Each outer iteration: v -> v * x**2 + x**2, so 2 -> 12 -> 52.
        assert await run(y) == pytest.approx(52.0)


async def test_loop_in_a_cond_in_a_loop():
    """The cond takes the inner loop in the first outer iteration only: y = x ** 3."""
    with af.Graph().as_default():
        x = af.constant(2.0)

        def body(i, v):
            return i + 1, af.cond(i < 1, lambda: af.while_loop(
                lambda j, u: j < 2, lambda j, u: (j + 1, u * x), (af.constant(0), v),
                name="inner")[1], lambda: v)
        y = af.while_loop(lambda i, v: i < 2, body, (af.constant(0), x), name="outer")[1]
        assert await run([y, af.gradients(y, [x])[0]]) == [8.0, 12.0]


@given(st.lists(st.booleans(), min_size=1, max_size=4))
@SETTINGS
async def test_loop_in_a_cond_in_a_loop_matches_finite_differences(taken):
    """Which outer iterations take the branch (and so run the inner loop, whose trip count
    is the outer iteration's index) is drawn; the gradient matches central differences."""
    def build(x):
        pattern = af.constant(taken)

        def body(i, v):
            inner = lambda: af.while_loop(  # noqa: E731
                lambda j, u: j <= i, lambda j, u: (j + 1, af.sin(u) * x), (af.constant(0), v),
                name="inner")[1]
            return i + 1, af.cond(af.gather(pattern, i), inner, lambda: v * x)
        return af.while_loop(lambda i, v: i < len(taken), body, (af.constant(0), x),
                             name="outer")[1]
    await check_gradients(build, [np.array([0.7, -0.4])])
