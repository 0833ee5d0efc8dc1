"""af.py_func: plain and async callables as ops, result conversion, errors naming the op."""
import functools

import numpy as np
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import asyncflow as af


async def run(fetches, feed_dict=None):
    async with af.Session() as sess:
        return await sess.run(fetches, feed_dict)


@settings(max_examples=20, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
                  elements=st.floats(-5, 5, width=32)))
async def test_py_func_applies_callable_to_numpy_inputs(x):
    with af.Graph().as_default():
        p = af.placeholder(af.float32)
        out = af.py_func(lambda a: np.sin(a) * 2, [p], af.float32)
        assert out.dtype is af.float32 and out.shape.ndims is None
        value = await run(out, {p: x})
        assert value.dtype == np.float32
        np.testing.assert_allclose(value, np.sin(x) * 2, rtol=1e-6)


async def test_py_func_list_of_outputs_and_single_output_list():
    with af.Graph().as_default():
        a, b = af.constant([1, 2]), af.constant(3.0)
        outs = af.py_func(lambda x, y: (x + 1, y * 2), [a, b], [af.int32, af.float32])
        assert isinstance(outs, list) and [o.dtype for o in outs] == [af.int32, af.float32]
        one = af.py_func(lambda x: [x], [a], [af.int32])
        assert isinstance(one, list) and len(one) == 1
        got = await run([outs, one])
        np.testing.assert_array_equal(got[0][0], [2, 3])
        assert got[0][1] == 6.0
        np.testing.assert_array_equal(got[1][0], [1, 2])


async def test_py_func_without_outputs_returns_op_and_runs_for_effect():
    seen = []
    with af.Graph().as_default():
        op = af.py_func(lambda x: seen.append(int(x)), [af.constant(7)], [])
        assert isinstance(op, af.Operation)
        assert await run(op) is None
    assert seen == [7]


async def test_py_func_converts_python_results_and_same_kind_arrays():
    with af.Graph().as_default():
        floats = af.py_func(lambda: [1.5, 2.5], [], af.float32)
        ints = af.py_func(lambda: np.arange(3, dtype=np.int64), [], af.int32)
        strings = af.py_func(lambda: ["a", b"b"], [], af.string)
        got = await run([floats, ints, strings])
    assert got[0].dtype == np.float32 and got[0].tolist() == [1.5, 2.5]
    assert got[1].dtype == np.int32 and got[1].tolist() == [0, 1, 2]
    assert list(got[2]) == [b"a", b"b"]


async def test_py_func_dtype_or_count_mismatch_is_invalid_argument_naming_op():
    with af.Graph().as_default():
        wrong_kind = af.py_func(lambda: np.array([0.5]), [], af.int32, name="to_int")
        with pytest.raises(af.errors.InvalidArgumentError, match="float64.*Tout\\[0\\]") as info:
            await run(wrong_kind)
        assert info.value.op.name == "to_int"
        wrong_count = af.py_func(lambda: (1, 2, 3), [], [af.int32, af.int32], name="two")
        with pytest.raises(af.errors.InvalidArgumentError, match="returned 3 values") as info:
            await run(wrong_count)
        assert info.value.op.name == "two"


async def test_py_func_exceptions_fail_the_run_naming_op():
    def explode(x):
        raise ValueError("no thanks")

    def finished():
        raise StopIteration

    with af.Graph().as_default():
        out = af.py_func(explode, [af.constant(1)], af.int32, name="explode")
        with pytest.raises(af.errors.InvalidArgumentError, match="no thanks") as info:
            await run(out)
        assert info.value.op.name == "explode"
        with pytest.raises(af.errors.OutOfRangeError):
            await run(af.py_func(finished, [], af.int32))


async def test_py_func_inputs_are_read_only():
    def mutate(x):
        x[0] = 99
        return x

    with af.Graph().as_default():
        with pytest.raises(af.errors.InvalidArgumentError, match="read-only"):
            await run(af.py_func(mutate, [af.constant([1, 2])], af.int32))


async def test_sync_callable_returning_awaitable_is_rejected():
    async def later():
        return 1

    with af.Graph().as_default():
        out = af.py_func(lambda: later(), [], af.int32)
        with pytest.raises(af.errors.InvalidArgumentError, match="async def"):
            await run(out)


async def test_async_py_func_awaits_on_event_loop_without_blocking_others(autojump_clock):
    order = []

    async def slow_double(x):
        order.append("start")
        await trio.sleep(5)
        order.append("end")
        return x * 2

    with af.Graph().as_default():
        x = af.placeholder(af.float64, [2])
        out = af.py_func(slow_double, [x], af.float64, name="fetch_row")
        assert out.op.type == "AsyncPyFunc"
        other = x + 1.0
        start = trio.current_time()
        async with af.Session() as sess:
            doubled, plus = await sess.run([out, other], {x: [1.0, 2.0]})
        assert trio.current_time() - start == pytest.approx(5)
    np.testing.assert_array_equal(doubled, [2.0, 4.0])
    np.testing.assert_array_equal(plus, [2.0, 3.0])
    assert order == ["start", "end"]


async def test_async_py_func_partial_stateless_and_errors(autojump_clock):
    async def scale(factor, x):
        await trio.sleep(1)
        if factor < 0:
            raise TypeError("negative factor")
        return x * factor

    with af.Graph().as_default():
        out = af.py_func(functools.partial(scale, 3), [af.constant([1, 2])], af.int32,
                         stateful=False)
        assert out.op.type == "AsyncPyFuncStateless"
        np.testing.assert_array_equal(await run(out), [3, 6])
        bad = af.py_func(functools.partial(scale, -1), [af.constant([1])], af.int32, name="neg")
        with pytest.raises(af.errors.InvalidArgumentError, match="negative factor") as info:
            await run(bad)
        assert info.value.op.name == "neg"


async def test_async_py_func_is_cancelled_with_the_run(autojump_clock):
    finished = []

    async def forever():
        await trio.sleep(1000)
        finished.append(True)
        return 0

    with af.Graph().as_default():
        out = af.py_func(forever, [], af.int32)
        async with af.Session() as sess:
            with trio.move_on_after(3) as scope:
                await sess.run(out)
            assert scope.cancelled_caught
            assert await sess.run(af.constant(5)) == 5
    assert not finished


def test_py_func_build_errors_and_no_gradient():
    with af.Graph().as_default():
        with pytest.raises(TypeError, match="callable"):
            af.py_func(3, [], af.int32)
        with pytest.raises(TypeError, match="list"):
            af.py_func(lambda x: x, af.constant(1), af.int32)
        x = af.constant(1.0)
        y = af.py_func(lambda v: v, [x], af.float32)
        assert af.gradients(y, [x]) == [None]
