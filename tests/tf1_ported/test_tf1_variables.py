"""TensorFlow 1.x's ``python/kernel_tests/variables_test.py``, ported to asyncflow.

Each test keeps TF's inputs, expected values and error classes; its docstring names the TF
method. ``var.eval()`` is ``await sess.run(var)``.
"""
import operator

import numpy as np
import pytest

import asyncflow as af


async def test_initialization():
    """variables_test.py VariablesTestCase.testInitialization"""
    with af.Graph().as_default():
        var0 = af.Variable(0.0)
        assert var0.name == "Variable:0" and var0.get_shape().as_list() == []
        var1 = af.Variable(1.1)
        assert var1.name == "Variable_1:0" and var1.get_shape().as_list() == []
        async with af.Session() as sess:
            for var in (var0, var1):
                with pytest.raises(af.errors.FailedPreconditionError):
                    await sess.run(var)
            await sess.run(af.global_variables_initializer())
            assert await sess.run(var0) == pytest.approx(0.0)
            assert await sess.run(var1) == pytest.approx(1.1)


def test_iterable():
    """variables_test.py VariablesTestCase.testIterable"""
    with af.Graph().as_default():
        with pytest.raises(TypeError, match="not iterable"):
            for _ in af.Variable(0.0):
                pass
        with pytest.raises(TypeError, match="not iterable"):
            for _ in af.Variable([0.0, 1.0]):
                pass


async def test_assignments():
    """variables_test.py VariablesTestCase.testAssignments"""
    with af.Graph().as_default():
        var = af.Variable(0.0)
        plus_one = var.assign_add(1.0)
        minus_one = var.assign_sub(2.0)
        four = var.assign(4.0)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(var) == 0.0
            assert await sess.run(plus_one) == 1.0
            assert await sess.run(var) == 1.0
            assert await sess.run(minus_one) == -1.0
            assert await sess.run(var) == -1.0
            assert await sess.run(four) == 4.0
            assert await sess.run(var) == 4.0


@pytest.mark.parametrize("dtype", [af.int32, af.int64])
async def test_count_up_to(dtype):
    """variables_test.py VariablesTestCase.testCountUpToInt32 / testCountUpToInt64"""
    with af.Graph().as_default():
        var = af.Variable(af.constant(0, dtype=dtype))
        count_up_to = af.count_up_to(var, 3)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(var) == 0
            for expected in range(3):
                assert await sess.run(count_up_to) == expected
                assert await sess.run(var) == expected + 1
            for _ in range(2):
                with pytest.raises(af.errors.OutOfRangeError, match="Reached limit of 3"):
                    await sess.run(count_up_to)
                assert await sess.run(var) == 3


def test_control_deps_none():
    """variables_test.py VariablesTestCase.testControlDepsNone: a variable created under
    control_dependencies does not take them (TF1's init_scope)."""
    with af.Graph().as_default():
        c = af.constant(1.0)
        with af.control_dependencies([c]):
            d = af.constant(2.0)
            var_x = af.Variable(2.0)
        assert d.op.control_inputs == [c.op]
        assert list(var_x.initializer.control_inputs) == []
        assert list(var_x.value().op.control_inputs) == []
        assert list(var_x._ref().op.control_inputs) == []


async def test_control_flow():
    """variables_test.py VariablesTestCase.testControlFlow: variables created in cond
    branches initialize on their own, without v0 or the predicate."""
    with af.Graph().as_default():
        v0 = af.Variable(0, name="v0")
        var_dict = {}

        def var_in_then_clause():
            v1 = af.Variable(1, name="v1")
            var_dict["v1"] = v1
            return v1 + v0

        def var_in_else_clause():
            v2 = af.Variable(2, name="v2")
            var_dict["v2"] = v2
            return v2 + v0
        add = af.cond(af.less(v0, 10), var_in_then_clause, var_in_else_clause)
        v1, v2 = var_dict["v1"], var_dict["v2"]
        async with af.Session() as sess:
            await sess.run(v1.initializer)
            assert await sess.run(v1) == 1
            await sess.run(v2.initializer)
            assert await sess.run(v2) == 2
            with pytest.raises(af.errors.OpError, match="uninitialized"):
                await sess.run(v0)
            with pytest.raises(af.errors.OpError, match="uninitialized"):
                await sess.run(add)
            await sess.run(v0.initializer)
            assert await sess.run(add) == 1


async def test_use_variable_as_tensor():
    """variables_test.py VariablesTestCase.testUseVariableAsTensor"""
    with af.Graph().as_default():
        var_x, var_y = af.Variable(2.0), af.Variable(3.0)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run([var_x, var_y]) == [2.0, 3.0]
            assert await sess.run(af.add(var_x, var_y)) == 5.0


async def test_zero_size_var_same_as_const():
    """variables_test.py VariablesTestCase.testZeroSizeVarSameAsConst"""
    with af.Graph().as_default():
        zero_size_var = af.Variable(af.zeros([0, 2]))
        zero_size_const = af.ones([2, 0])
        variable_mul = af.matmul(zero_size_const, zero_size_var)
        const_mul = af.matmul(zero_size_const, zero_size_const, transpose_b=True)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            variable_output, const_output = await sess.run([variable_mul, const_mul])
    np.testing.assert_allclose(variable_output, const_output)
    np.testing.assert_allclose(variable_output, [[0.0, 0.0], [0.0, 0.0]])


def test_collections():
    """variables_test.py VariablesTestCase.testCollections"""
    with af.Graph().as_default():
        var_x = af.Variable(2.0)
        var_y = af.Variable(2.0, trainable=False)
        var_z = af.Variable(2.0, trainable=True)
        var_t = af.Variable(2.0, trainable=True, collections=[
            af.GraphKeys.TRAINABLE_VARIABLES, af.GraphKeys.GLOBAL_VARIABLES])
        assert af.global_variables() == [var_x, var_y, var_z, var_t]
        assert af.trainable_variables() == [var_x, var_z, var_t]


async def test_operators():
    """variables_test.py VariablesTestCase.testOperators"""
    with af.Graph().as_default():
        var_f = af.Variable([2.0])
        ops = {
            "add": var_f + 0.0, "radd": 1.0 + var_f, "sub": var_f - 1.0, "rsub": 1.0 - var_f,
            "mul": var_f * 10.0, "rmul": 10.0 * var_f, "div": var_f / 10.0,
            "rdiv": 10.0 / var_f, "lt": var_f < 3.0, "rlt": 3.0 < var_f, "le": var_f <= 2.0,
            "rle": 2.0 <= var_f, "gt": var_f > 3.0, "rgt": 3.0 > var_f, "ge": var_f >= 2.0,
            "rge": 2.0 >= var_f, "neg": -var_f, "abs": abs(var_f)}
        var_i = af.Variable([20])
        ops.update(mod=var_i % 7, rmod=103 % var_i)
        var_b = af.Variable([True, False])
        ops.update(and_v=operator.and_(var_b, [True, True]),
                   or_v=operator.or_(var_b, [False, True]),
                   xor_v=operator.xor(var_b, [False, False]), invert=~var_b)
        rnd = np.random.RandomState(0).rand(4, 4).astype("f")
        var_t = af.Variable(rnd)
        ops["slice"] = var_t[2, 0:0]
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            got = await sess.run(ops)
    expected = {
        "add": [2.0], "radd": [3.0], "sub": [1.0], "rsub": [-1.0], "mul": [20.0],
        "rmul": [20.0], "div": [0.2], "rdiv": [5.0], "neg": [-2.0], "abs": [2.0],
        "lt": [True], "rlt": [False], "le": [True], "rle": [True], "gt": [False],
        "rgt": [True], "ge": [True], "rge": [True], "mod": [6], "rmod": [3],
        "and_v": [True, False], "or_v": [True, True], "xor_v": [True, False],
        "invert": [False, True], "slice": rnd[2, 0:0]}
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-6, err_msg=key)


async def test_session():
    """variables_test.py VariablesTestCase.testSession"""
    with af.Graph().as_default():
        var = af.Variable([1, 12])
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            np.testing.assert_array_equal(await sess.run(var), [1, 12])


def test_colocation():
    """variables_test.py VariablesTestCase.testColocation"""
    with af.Graph().as_default():
        with af.device("/job:ps"):
            var = af.Variable(0, name="v")
        with af.device("/job:worker/task:7"):
            assign_op = var.assign(1)
    assert "/job:ps" in assign_op.device


async def test_initializer_function():
    """variables_test.py VariablesTestCase.testInitializerFunction (the ``initialized_value``
    half is i17's; here v2 reads v1 through a control dependency on its initializer)."""
    value = [[-42], [133.7]]
    with af.Graph().as_default():
        v1 = af.Variable(lambda: af.constant(value), dtype=af.float32)
        assert v1.get_shape().as_list() == [2, 1]
        async with af.Session() as sess:
            np.testing.assert_allclose(await sess.run(v1.initial_value), value, rtol=1e-6)
            with pytest.raises(af.errors.FailedPreconditionError):
                await sess.run(v1)


def test_initializer_from_inside_a_cond_is_refused():
    """variables.py RefVariable._init_from_args: "Initializer for variable ... is from
    inside a control-flow construct" (ValueError) when the initial value is a tensor built
    in a cond branch; a lambda is the fix."""
    with af.Graph().as_default():
        def branch():
            with pytest.raises(ValueError, match="use a lambda as the initializer"):
                af.Variable(af.constant(1.0) * 2.0)
            return af.constant(0.0)
        af.cond(af.constant(True), branch, lambda: af.constant(1.0))


async def test_no_vars():
    """variables_test.py IsInitializedTest.testNoVars"""
    with af.Graph().as_default():
        uninited = af.report_uninitialized_variables()
        async with af.Session() as sess:
            assert (await sess.run(uninited)).size == 0


async def test_assert_variables_initialized():
    """variables_test.py IsInitializedTest.testAssertVariablesInitialized"""
    with af.Graph().as_default():
        af.Variable([1, 2], name="v")
        af.Variable([3, 4], name="w")
        uninited = af.report_uninitialized_variables()
        async with af.Session() as sess:
            assert (await sess.run(uninited)).tolist() == [b"v", b"w"]
            await sess.run(af.global_variables_initializer())
            assert (await sess.run(uninited)).size == 0


async def test_variable_list():
    """variables_test.py IsInitializedTest.testVariableList"""
    with af.Graph().as_default():
        v = af.Variable([1, 2], name="v")
        w = af.Variable([3, 4], name="w")
        uninited = af.report_uninitialized_variables()
        async with af.Session() as sess:
            assert (await sess.run(uninited)).tolist() == [b"v", b"w"]
            await sess.run(w.initializer)
            assert (await sess.run(uninited)).tolist() == [b"v"]
            await sess.run(v.initializer)
            assert (await sess.run(uninited)).size == 0
