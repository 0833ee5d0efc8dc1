"""TensorFlow 1.x's ``python/kernel_tests/control_flow_ops_py_test.py``, ported to asyncflow.

Each test keeps TF's inputs, expected values and error classes; its docstring names the TF
method. ``control_flow_ops.While`` is ``af.while_loop``; ``tf.sub``/``tf.mul`` are
``af.subtract``/``af.multiply``; the primitives (``switch``, ``merge``, ``enter``...) are
``asyncflow.ops.control_flow``'s. A loop variable whose shape changes across iterations
needs ``shape_invariants``, as in every TF 1.x release. Every test runs with simple loops
compiled and all dynamic.
"""
import math

import numpy as np
import pytest

import asyncflow as af
from asyncflow.ops import control_flow as cf
import loop_modes


@pytest.fixture(autouse=True, params=["compiled", "dynamic"])
def loop_mode(request):
    loop_modes.use(request.param)
    yield request.param
    loop_modes.use("compiled")


async def run(fetches, feed_dict=None, init=False):
    async with af.Session(config=loop_modes.config()) as sess:
        if init:
            await sess.run(af.global_variables_initializer())
        return await sess.run(fetches, feed_dict)


def isum(s):
    i = af.constant(0, name="i")
    c = lambda i, s: af.less(i, 10)  # noqa: E731
    b = lambda i, s: [af.add(i, 1), af.add(i, s)]  # noqa: E731
    _, r_s = af.while_loop(c, b, [i, s])
    return r_s


# -- primitives -------------------------------------------------------------------------------
async def test_switch_dead_branch():
    """control_flow_ops_py_test.py ControlFlowTest.testSwitchDeadBranch"""
    with af.Graph().as_default():
        data = af.constant([1, 2, 3, 4, 5, 6], name="data")
        ports = af.convert_to_tensor(True, name="ports")
        switch_op = cf.switch(data, ports)
        dead_branch = af.identity(switch_op[0])
        with pytest.raises(af.errors.InvalidArgumentError, match="The tensor returned for"):
            await run(dead_branch)


@pytest.mark.parametrize("method, ports, expected", [
    ("testSwitchMerge_1", True, np.arange(1, 7)),
    ("testSwitchMergeIdentity_1", True, np.arange(1, 7)),
])
async def test_switch_merge(method, ports, expected):
    """control_flow_ops_py_test.py ControlFlowTest.testSwitchMerge_1 and
    testSwitchMergeIdentity_1"""
    with af.Graph().as_default():
        data = af.constant([1, 2, 3, 4, 5, 6], name="data")
        switch_op = cf.switch(data, af.convert_to_tensor(ports, name="ports"))
        merge_op = cf.merge(switch_op)[0]
        if method.startswith("testSwitchMergeIdentity"):
            merge_op = af.identity(merge_op)
        np.testing.assert_array_equal(await run(merge_op), expected)


@pytest.mark.parametrize("convert", [af.constant, af.convert_to_tensor])
async def test_switch_merge_less(convert):
    """control_flow_ops_py_test.py ControlFlowTest.testSwitchMergeLess_0 / _1"""
    with af.Graph().as_default():
        data = af.constant([1, 2, 3, 4, 5, 6], name="data")
        less_op = af.less(convert(0), convert(1))
        merge_op = cf.merge(cf.switch(data, less_op))[0]
        np.testing.assert_array_equal(await run(merge_op), np.arange(1, 7))


@pytest.mark.parametrize("ports, expected", [
    (False, [x + 1 for x in [1, 2, 3, 4, 5, 6]]), (True, np.arange(1, 7))])
async def test_switch_merge_add_identity(ports, expected):
    """control_flow_ops_py_test.py ControlFlowTest.testSwitchMergeAddIdentity_0 / _1"""
    with af.Graph().as_default():
        data = af.constant([1, 2, 3, 4, 5, 6], name="data")
        switch_op = cf.switch(data, af.convert_to_tensor(ports, name="ports"))
        add_op = af.add(switch_op[0], af.constant(1))
        id_op = af.identity(switch_op[1])
        merge_op = cf.merge([add_op, id_op])[0]
        np.testing.assert_array_equal(await run(merge_op), expected)


@pytest.mark.parametrize("ports, expected", [
    (False, [x + 1 for x in [1, 2, 3, 4, 5, 6]]), (True, [x * 5 for x in [1, 2, 3, 4, 5, 6]])])
async def test_switch_merge_add_mul(ports, expected):
    """control_flow_ops_py_test.py ControlFlowTest.testSwitchMergeAddMul_0 / _1"""
    with af.Graph().as_default():
        data = af.constant([1, 2, 3, 4, 5, 6], name="data")
        switch_op = cf.switch(data, af.convert_to_tensor(ports, name="ports"))
        add_op = af.add(switch_op[0], af.constant(1))
        mul_op = af.multiply(switch_op[1], af.constant(5))
        merge_op = cf.merge([add_op, mul_op])[0]
        np.testing.assert_array_equal(await run(merge_op), expected)


async def test_loop_1():
    """control_flow_ops_py_test.py ControlFlowTest.testLoop_1 (a loop from primitives)"""
    with af.Graph().as_default():
        zero, one, n = af.constant(0), af.constant(1), af.constant(10)
        enter_i = cf.enter_frame(zero, "foo", False)
        enter_one = cf.enter_frame(one, "foo", True)
        enter_n = cf.enter_frame(n, "foo", True)
        merge_i = cf.merge([enter_i, enter_i])[0]
        less_op = af.less(merge_i, enter_n)
        cond_op = cf.loop_cond(less_op)
        switch_i = cf.switch(merge_i, cond_op)
        add_i = af.add(switch_i[1], enter_one)
        next_i = cf.next_iteration(add_i)
        merge_i.op.update_input(1, next_i)
        exit_i = cf.exit_frame(switch_i[0])
        assert await run(exit_i) == 10


# -- cond -------------------------------------------------------------------------------------
def test_cond_bool():
    """control_flow_ops_py_test.py ControlFlowTest.testCondBool"""
    with af.Graph().as_default():
        values = af.constant(10)
        with pytest.raises(TypeError, match="must not be a Python bool"):
            af.cond(False, lambda: af.add(values, 1), lambda: af.subtract(values, 1))


async def test_cond_1():
    """control_flow_ops_py_test.py ControlFlowTest.testCond_1"""
    with af.Graph().as_default():
        x = af.constant(10)
        r = af.cond(af.less(1, 2), lambda: af.add(x, 1), lambda: af.subtract(x, 1))
        assert await run(r) == 11


async def test_cond_2():
    """control_flow_ops_py_test.py ControlFlowTest.testCond_2"""
    with af.Graph().as_default():
        x = af.constant(10)
        r = af.cond(af.less(1, 0), lambda: af.add(x, 1), lambda: af.subtract(x, 1))
        assert await run(r) == 9


async def test_cond_3():
    """control_flow_ops_py_test.py ControlFlowTest.testCond_3"""
    with af.Graph().as_default():
        x = af.constant(10)
        pred = af.less(1, 2)
        fn1 = lambda: af.add(x, 1)  # noqa: E731
        fn2 = lambda: af.subtract(x, 1)  # noqa: E731
        fn3 = lambda: af.add(af.cond(pred, fn1, fn2), 1)  # noqa: E731
        assert await run(af.cond(pred, fn3, fn2)) == 12


async def test_cond_4():
    """control_flow_ops_py_test.py ControlFlowTest.testCond_4: ops returned by a branch
    come back as tensors that evaluate to True (the taken branch's pivot)."""
    with af.Graph().as_default():
        v1, v2, v3 = af.Variable(7), af.Variable(7), af.Variable(7)
        age, max_age = af.constant(3), af.constant(2)
        pred = af.greater(age, max_age)
        fn1 = lambda: [af.assign(v1, 1).op, af.assign(v2, 2).op]  # noqa: E731
        fn2 = lambda: [af.assign(v3, 3).op, af.constant(10).op]  # noqa: E731
        r = af.cond(pred, fn1, fn2)
        assert len(r) == 2
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(r[1]) == True  # noqa: E712
            assert await sess.run([v1, v2, v3]) == [7, 2, 7]


async def test_cond_5():
    """control_flow_ops_py_test.py ControlFlowTest.testCond_5"""
    with af.Graph().as_default():
        alive = af.constant(True, name="alive")
        count = af.constant(0, name="count")

        def body(i):
            return af.cond(alive, lambda: [af.less(i, 3), af.add(count, 1)],
                           lambda: [alive, count])
        for i in range(10):
            alive, count = body(i)
        assert await run(count) == 4


async def test_cond_6():
    """control_flow_ops_py_test.py ControlFlowTest.testCond_6"""
    with af.Graph().as_default():
        v1 = af.Variable([7])
        age = af.constant(3)
        r = af.cond(af.greater(age, 4), lambda: age, lambda: v1)
        np.testing.assert_array_equal(await run(r, init=True), [7])


async def test_cond_7():
    """control_flow_ops_py_test.py ControlFlowTest.testCond_7"""
    with af.Graph().as_default():
        x, y = af.constant(10), af.constant(200)
        r = af.cond(af.less(1, 2), lambda: [af.add(x, 1), af.add(x, 2)], lambda: [y, y])
        assert await run(r) == [11, 12]


async def test_cond_grad_1():
    """control_flow_ops_py_test.py ControlFlowTest.testCondGrad_1"""
    with af.Graph().as_default():
        x = af.constant(10.0, name="x")
        r = af.cond(af.less(1, 2), lambda: af.identity(x), lambda: af.identity(x))
        assert await run(af.gradients(r, [x])[0]) == 1.0


async def test_cond_grad_2():
    """control_flow_ops_py_test.py ControlFlowTest.testCondGrad_2"""
    with af.Graph().as_default():
        c = af.placeholder(af.int32, shape=[])
        x = af.constant(10.0)
        r = af.cond(af.less(c, 2), lambda: af.multiply(x, 42.0), lambda: af.multiply(x, 3.0))
        grad = af.gradients(r, [x])[0]
        async with af.Session(config=loop_modes.config()) as sess:
            assert await sess.run(grad, {c: 1}) == 42.0
            assert await sess.run(grad, {c: 3}) == 3.0


async def test_cond_grad_gather():
    """control_flow_ops_py_test.py ControlFlowTest.testCondGrad_Gather (asyncflow's
    gradients are dense: TF's sparse values summed per index)"""
    with af.Graph().as_default():
        v1 = af.Variable([1.0, 42.0])
        c = af.placeholder(af.int32, shape=[])
        r = af.cond(af.less(c, 2), lambda: af.identity(v1), lambda: af.gather(v1, [1, 1]))
        grad = af.gradients(r, [v1])[0]
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            np.testing.assert_array_equal(await sess.run(grad, {c: 1}), [1.0, 1.0])
            np.testing.assert_array_equal(await sess.run(grad, {c: 3}), [0.0, 2.0])


async def test_one_value_cond():
    """control_flow_ops_py_test.py ControlFlowTest.testOneValueCond"""
    with af.Graph().as_default():
        c = af.placeholder(af.int32, shape=[])
        one = af.convert_to_tensor(1, name="one")
        two = af.convert_to_tensor(2, name="two")
        i = af.cond(af.greater_equal(c, 1), lambda: one, lambda: two)
        assert isinstance(i, af.Tensor)
        async with af.Session(config=loop_modes.config()) as sess:
            assert await sess.run(i, {c: 2}) == 1
            assert await sess.run(i, {c: 0}) == 2


async def test_example_cond():
    """control_flow_ops_py_test.py ControlFlowTest.testExampleCond"""
    with af.Graph().as_default():
        x = af.convert_to_tensor([-2.0, 2.0], name="x")
        d = af.placeholder(af.int32, shape=[])
        i = af.cond(af.equal(d, 2), lambda: af.sqrt(af.reduce_sum(af.square(x))),
                    lambda: af.reduce_sum(af.abs(x)))
        async with af.Session(config=loop_modes.config()) as sess:
            assert await sess.run(i, {d: 1}) == 4.0
            assert await sess.run(i, {d: 2}) == pytest.approx(2.0 * math.sqrt(2))


async def test_one_op_cond():
    """control_flow_ops_py_test.py ControlFlowTest.testOneOpCond"""
    with af.Graph().as_default():
        v = af.Variable(0)
        c = af.convert_to_tensor(0)
        one, two = af.convert_to_tensor(1), af.convert_to_tensor(2)
        i = af.cond(af.greater_equal(c, 1), lambda: af.assign(v, one), lambda: af.assign(v, two))
        assert isinstance(i, af.Tensor)
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(v) == 0
            assert await sess.run(i, {c.name: 2}) == 1
            assert await sess.run(v) == 1
            assert await sess.run(i, {c.name: 0}) == 2
            assert await sess.run(v) == 2


async def test_cond_single_element_list_is_unpacked():
    """control_flow_ops_py_test.py ControlFlowTest.testCondListOutput's singleton case:
    TF1's ``cond`` (``strict=False``) returns the tensor of a one-element list."""
    with af.Graph().as_default():
        r = af.cond(af.constant(True), lambda: [af.constant(1)], lambda: [af.constant(2)])
        assert isinstance(r, af.Tensor)
        assert await run(r) == 1


async def test_cond_variable_created_in_branch_initializes_alone():
    """A variable created inside a cond branch is created outside it (TF1's init_scope in
    ``RefVariable._init_from_args``): its initializer runs without the predicate."""
    with af.Graph().as_default():
        made = []

        def true_fn():
            made.append(af.Variable(3.0))
            return made[0] + 1.0
        c = af.cond(af.constant(True), true_fn, lambda: af.constant(0.0))
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(made[0].initializer)
            assert await sess.run(c) == 4.0


def test_variable_is_not_iterable():
    """variables.py RefVariable.__iter__: "'Variable' object is not iterable." (TypeError)"""
    with af.Graph().as_default():
        v = af.Variable(1.0)
        with pytest.raises(TypeError, match="not iterable"):
            list(v)
        with pytest.raises(TypeError, match="not iterable"):
            iter(af.Variable([1.0, 2.0]))


# -- while_loop ---------------------------------------------------------------------------------
async def test_while_1():
    """control_flow_ops_py_test.py ControlFlowTest.testWhile_1"""
    with af.Graph().as_default():
        n = af.constant(0)
        r = af.while_loop(lambda x: af.less(x, 10000), lambda x: af.add(x, 1), [n],
                          parallel_iterations=20)
        assert await run(r) == 10000


async def test_while_2():
    """control_flow_ops_py_test.py ControlFlowTest.testWhile_2"""
    with af.Graph().as_default():
        assert await run(isum(af.constant(0))) == 45


async def test_while_3():
    """control_flow_ops_py_test.py ControlFlowTest.testWhile_3"""
    with af.Graph().as_default():
        def compute(i, m, c, o):
            m, c = [af.add(m, 1), af.add(c, 1)]
            o = af.add(af.add(o, m), c)
            return [af.add(i, 1), m, c, o]
        zero = [af.convert_to_tensor(0) for _ in range(4)]
        d = af.convert_to_tensor(100)
        r = af.while_loop(lambda i, m, c, o: af.less(i, d), compute, zero)
        assert await run(r[3]) == 10100


async def test_while_4():
    """control_flow_ops_py_test.py ControlFlowTest.testWhile_4"""
    with af.Graph().as_default():
        x = af.convert_to_tensor([1, 2, 3, 4, 5, 6])
        s = af.size(x)

        def compute(i, m, c, o):
            m, c = [af.gather(x, i), af.gather(x, i)]
            o = af.add(af.add(o, m), c)
            return [af.add(i, 1), m, c, o]
        zero = [af.convert_to_tensor(0) for _ in range(4)]
        r = af.while_loop(lambda i, m, c, o: af.less(i, s), compute, zero)
        assert await run(r[3]) == 42


async def test_while_5():
    """control_flow_ops_py_test.py ControlFlowTest.testWhile_5 (with TF 1.x's
    shape_invariants for the growing ``o``)"""
    with af.Graph().as_default():
        x = af.convert_to_tensor([1, 2, 3, 4, 5, 6])
        s = af.size(x)

        def compute(i, c, o):
            c = af.slice(x, af.expand_dims(i, 0), [1])
            o = af.concat([o, c], 0)
            return [af.add(i, 1), c, o]
        i, c, o = af.convert_to_tensor(0), af.convert_to_tensor([0]), af.convert_to_tensor([0])
        r = af.while_loop(lambda i, c, o: af.less(i, s), compute, [i, c, o],
                          shape_invariants=[af.TensorShape([]), af.TensorShape([1]),
                                            af.TensorShape([None])])
        np.testing.assert_array_equal(await run(r[2]), [0, 1, 2, 3, 4, 5, 6])


def test_while_shape_change_without_invariant_is_a_build_error():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileShapeInference (TF 1.x): a loop
    variable whose shape changes needs shape_invariants; ValueError at build time."""
    with af.Graph().as_default():
        with pytest.raises(ValueError):
            af.while_loop(lambda i, o: i < 3, lambda i, o: (i + 1, af.concat([o, o], 0)),
                          [af.constant(0), af.constant([0])])


@pytest.mark.parametrize("on_cpu", [False, True])
async def test_while_gpu(on_cpu):
    """control_flow_ops_py_test.py ControlFlowTest.testWhile_Gpu_1 / testWhile_Gpu_2"""
    with af.Graph().as_default():
        def b(x):
            if on_cpu:
                with af.device("/cpu:0"):
                    return af.add(x, 1.0)
            return af.add(x, 1.0)
        r = af.while_loop(lambda x: af.less(x, 10.0), b, [af.constant(1.0)])
        assert await run(r) == 10.0


async def test_nested_while_1():
    """control_flow_ops_py_test.py ControlFlowTest.testNestedWhile_1"""
    with af.Graph().as_default():
        n = af.constant(0)

        def cpu_sum(s):
            def b(i, s):
                i1 = af.add(i, 1)
                with af.device("/cpu:0"):
                    s1 = af.add(i, s)
                return i1, s1
            _, r_s = af.while_loop(lambda i, s: af.less(i, 10), b, [n, s])
            return r_s
        r = af.while_loop(lambda x: af.less(x, 200), lambda x: af.add(x, cpu_sum(n)), [n])
        assert await run(r) == 225


async def test_while_with_control_1():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileWithControl_1"""
    with af.Graph().as_default():
        def body(n_, r_):
            n_ = af.add(n_, 1)
            with r_.graph.control_dependencies([r_]):
                r_ = af.constant(12)
            return [n_, r_]
        res = af.while_loop(lambda n_, r_: af.less(n_, 10), body,
                            [af.constant(0), af.constant(0)], parallel_iterations=1)
        assert await run(res[1]) == 12


async def test_while_with_control_2():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileWithControl_2"""
    with af.Graph().as_default():
        def body(r_):
            with r_.graph.control_dependencies([r_]):
                r_ = af.constant(12)
            return [r_]
        res = af.while_loop(lambda r_: af.less(r_, 10), body, [af.constant(0)],
                            parallel_iterations=1)
        assert await run(res) == 12


async def test_cond_while_1():
    """control_flow_ops_py_test.py ControlFlowTest.testCondWhile_1"""
    with af.Graph().as_default():
        n = af.convert_to_tensor(0, name="n")
        r = af.cond(af.less(0, 1),
                    lambda: af.while_loop(lambda x: af.less(x, 10), lambda x: af.add(x, 1), [n]),
                    lambda: n)
        assert await run(r) == 10


async def test_cond_while_2():
    """control_flow_ops_py_test.py ControlFlowTest.testCondWhile_2"""
    with af.Graph().as_default():
        n = af.convert_to_tensor(0)
        r = af.cond(af.less(1, 0), lambda: af.add(n, 1),
                    lambda: af.while_loop(lambda x: af.less(x, 10), lambda x: af.add(x, 1), [n]))
        assert await run(r) == 10


async def test_while_cond_1():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileCond_1"""
    with af.Graph().as_default():
        i = af.convert_to_tensor(0, name="i")
        n = af.convert_to_tensor(10, name="n")
        one = af.convert_to_tensor(1, name="one")
        b = lambda x: af.cond(af.constant(True), lambda: af.add(x, one),  # noqa: E731
                              lambda: af.subtract(x, one))
        assert await run(af.while_loop(lambda x: af.less(x, n), b, [i])) == 10


async def test_while_cond_2():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileCond_2"""
    with af.Graph().as_default():
        n = af.convert_to_tensor(0, name="n")
        b = lambda x: af.cond(af.constant(True), lambda: af.add(x, 1), lambda: n)  # noqa: E731
        assert await run(af.while_loop(lambda x: af.less(x, 10), b, [n])) == 10


async def test_while_cond_3():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileCond_3"""
    with af.Graph().as_default():
        n = af.convert_to_tensor(0)
        b = lambda x: af.cond(af.less(0, 1), lambda: af.add(x, 1),  # noqa: E731
                              lambda: af.subtract(x, 1))
        assert await run(af.while_loop(lambda x: af.less(x, 10), b, [n])) == 10


# -- variables updated in loops (TF1 ref semantics) --------------------------------------------
async def test_while_update_variable_1():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileUpdateVariable_1"""
    with af.Graph().as_default():
        select = af.Variable([3.0, 4.0, 5.0])
        n = af.constant(0)

        def loop_body(j):
            ns = af.scatter_update(select, j, 10.0)
            nj = af.add(j, 1)
            op = af.group(ns)
            with af.control_dependencies([op]):
                return af.identity(nj)
        r = af.while_loop(lambda j: af.less(j, 3), loop_body, [n], parallel_iterations=1)
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(r) == 3
            np.testing.assert_array_equal(await sess.run(select), [10.0, 10.0, 10.0])


async def test_while_update_variable_2():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileUpdateVariable_2"""
    with af.Graph().as_default():
        select1 = af.Variable([3.0, 4.0, 5.0])
        select2 = af.Variable([3.0, 4.0, 5.0])

        def loop_body(j):
            ns1 = af.scatter_update(select1, j, 10.0)
            ns2 = af.scatter_update(select2, j, 10.0)
            with af.control_dependencies([af.group(ns1, ns2)]):
                return af.identity(af.add(j, 1))
        r = af.while_loop(lambda j: af.less(j, 3), loop_body, [af.constant(0)],
                          parallel_iterations=1)
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(r) == 3
            np.testing.assert_array_equal(await sess.run(select1), [10.0, 10.0, 10.0])
            np.testing.assert_array_equal(await sess.run(select2), [10.0, 10.0, 10.0])


async def test_while_update_variable_3():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileUpdateVariable_3"""
    with af.Graph().as_default():
        select = af.Variable([3.0, 4.0, 5.0])

        def loop_body(j, _):
            ns = af.scatter_update(select, j, 10.0)
            return [af.add(j, 1), ns]
        r = af.while_loop(lambda j, _: af.less(j, 3), loop_body,
                          [af.constant(0), af.identity(select)], parallel_iterations=1)
        np.testing.assert_array_equal(await run(r[1], init=True), [10.0, 10.0, 10.0])


async def test_while_update_variable_4():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileUpdateVariable_4"""
    with af.Graph().as_default():
        var_a = af.Variable(0, name="a")
        var_b = af.Variable(0, name="b")
        c = af.constant(0, name="c")
        asn1 = af.assign_add(var_a, 1, name="a_add")

        def loop_body(i):
            asn2 = af.assign_add(var_b, asn1, name="b_add")
            with af.control_dependencies([asn2]):
                return af.add(i, 1, name="i_add")
        lpa = af.while_loop(lambda i: af.less(i, 10), loop_body, [c], parallel_iterations=1)
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(var_b) == 0
            await sess.run(lpa)
            assert await sess.run(var_b) == 10


async def test_while_update_variable_5():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileUpdateVariable_5"""
    with af.Graph().as_default():
        var_a = af.Variable(0, name="a")
        var_b = af.Variable(0, name="b")

        def loop_body(i):
            asn1 = af.assign_add(var_a, af.constant(1), name="a_add")
            asn2 = af.assign_add(var_b, af.constant(1), name="b_add")
            with af.control_dependencies([asn1, asn2]):
                return af.identity(var_b)
        lpa = af.while_loop(lambda i: af.less(var_b, 10), loop_body, [var_b],
                            parallel_iterations=1, name="loop")
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(var_b) == 0
            await sess.run(lpa)
            assert await sess.run([var_a, var_b]) == [10, 10]


async def test_while_update_variable_6():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileUpdateVariable_6: the read of
    ``var_a`` inside the body sees the ``assign_add`` made there (55, not 0)."""
    with af.Graph().as_default():
        var_a = af.Variable(0, name="a")
        var_b = af.Variable(0, name="b")
        c = af.constant(0)

        def loop_body(i):
            asn1 = af.assign_add(var_a, 1, name="a_add")
            with af.control_dependencies([asn1]):
                asn2 = af.assign_add(var_b, var_a, name="b_add")
            with af.control_dependencies([asn2]):
                return af.add(i, 1, name="i_add")
        lpa = af.while_loop(lambda i: af.less(i, 10), loop_body, [c], parallel_iterations=1,
                            name="loop")
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(var_b) == 0
            await sess.run(lpa)
            assert await sess.run([var_b, var_a]) == [55, 10]


async def test_while_update_variable_across_devices():
    """testWhileUpdateVariable_6 and testWhileGrad_Variable with the variables on another
    device than the loop (TF's _testWhile_Gpu pattern on two CPU devices): the reads enter
    the loop where the variable lives and see each iteration's assign_add; the gradient
    matches the one-device run."""
    async def build_and_run(two_devices):
        with af.Graph().as_default():
            with af.device("/device:CPU:1" if two_devices else "/device:CPU:0"):
                w = af.Variable(np.full((3, 3), 0.1, np.float32))
                a = af.Variable(0)
            with af.device("/device:CPU:0"):
                x0 = af.constant(np.ones((1, 3), np.float32))

                def body(i, x):
                    with af.control_dependencies([af.assign_add(a, 1)]):
                        return i + a, af.tanh(af.matmul(x, w))
                r = af.while_loop(lambda i, x: i < 20, body, [af.constant(0), x0])
                grad = af.gradients(af.reduce_sum(r[1]), [w])[0]
            config = af.SessionConfig(device_count={"CPU": 2})
            async with af.Session(config=loop_modes.config(config)) as sess:
                await sess.run(af.global_variables_initializer())
                return await sess.run([r[0], grad])
    one = await build_and_run(False)
    two = await build_and_run(True)
    assert one[0] == two[0] == 21  # a = 1, 2, ...: i = 1, 3, 6, 10, 15, 21
    np.testing.assert_allclose(two[1], one[1], rtol=1e-6)


async def test_loop_reading_a_variable_sees_assignments_it_depends_on():
    """A loop that only reads a variable reads it once at entry, after the loop's control
    dependencies (TF1's aliased read would see the assign too), and its body stays on the
    straight-line path; a loop that assigns it keeps a fresh read per iteration."""
    with af.Graph().as_default() as graph:
        v = af.Variable(1.0)
        with af.control_dependencies([af.assign(v, 5.0)]):
            r = af.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x + v),
                              [af.constant(0), af.constant(0.0)])[1]
        reads = [op for op in graph.get_operations()
                 if op.type == "Identity" and op.control_flow_context is not None
                 and op.inputs[0].op.type == "RefEnter"]
        assert reads == []  # settled: the body reads a loop invariant
        assert await run(r, init=True) == 15.0


async def test_read_in_cond_sees_assignment_made_there():
    """Issue 14's cond form of testWhileUpdateVariable_6: a read inside a branch, ordered
    after an assign in it, sees the new value (TF1: 5, confirmed with tf.compat.v1)."""
    with af.Graph().as_default():
        v = af.Variable(0)
        p = af.placeholder(af.bool, [])

        def true_fn():
            with af.control_dependencies([af.assign(v, 5)]):
                return af.identity(v) + 0
        r = af.cond(p, true_fn, lambda: af.constant(-1))
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run(r, {p: True}) == 5
            assert await sess.run(r, {p: False}) == -1


# -- gradients of loops --------------------------------------------------------------------------
async def test_while_grad_square():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_Square"""
    with af.Graph().as_default():
        v = af.constant(2.0, name="v")
        r = af.while_loop(lambda v: af.less(v, 100.0), af.square, [v], parallel_iterations=1)
        assert await run(af.gradients(r, v)[0]) == 1024.0


@pytest.mark.parametrize("p_iters", [1, 10])
async def test_while_grad_mul(p_iters):
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_Mul"""
    with af.Graph().as_default():
        a = af.constant(3.0, name="a")
        v = af.constant(2.0, name="v")
        r = af.while_loop(lambda v: af.less(v, 100.0), lambda v: af.multiply(v, a), [v],
                          parallel_iterations=p_iters)
        grad_a, grad_v = af.gradients(r, [a, v])
        assert await run([grad_a, grad_v]) == [216.0, 81.0]


async def test_while_grad_variable():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_Variable"""
    with af.Graph().as_default():
        a = af.Variable(3.0)
        v = af.constant(2.0, name="v")
        r = af.while_loop(lambda v: af.less(v, 100.0), lambda v: af.multiply(v, a), [v],
                          parallel_iterations=1)
        assert await run(af.gradients(r, a)[0], init=True) == 216.0


async def test_while_grad_variable_read_is_not_stacked():
    """testWhileGrad_Variable with a matrix (tf.compat.v1 gives 0.03867681 and 0.00220523):
    the body's reads of the variable are read again by the gradient loop, like TF1's Enter
    of the snapshot, so no stack keeps a copy of the weights per iteration."""
    with af.Graph().as_default() as graph:
        w = af.Variable(np.full((3, 3), 0.1, np.float32))
        x0 = af.constant(np.ones((1, 3), np.float32))
        r = af.while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, af.tanh(af.matmul(x, w))),
                          [af.constant(0), x0])[1]
        grad_w, grad_x = af.gradients(af.reduce_sum(r), [w, x0])
        pushed = [op.inputs[1] for op in graph.get_operations() if op.type == "StackPushV2"]
        assert all(t.shape.as_list() != [3, 3] for t in pushed), pushed
        got_w, got_x = await run([grad_w, grad_x], init=True)
    np.testing.assert_allclose(got_w, np.full((3, 3), 0.03867681), rtol=1e-5)
    np.testing.assert_allclose(got_x, np.full((1, 3), 0.00220523), rtol=1e-4)


async def test_while_grad_ys_xs():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_ys_xs"""
    with af.Graph().as_default():
        x = af.constant(3.0, name="x")
        y = af.constant(2.0, name="y")

        def b(x, y):
            y1 = af.add(x, y)
            return af.multiply(x, y1), y1
        rx, ry = af.while_loop(lambda x, y: af.less(x, 100.0), b, [x, y], parallel_iterations=1)
        grads = [af.gradients([rx, ry], x)[0], af.gradients([rx, ry], y)[0],
                 af.gradients([rx], x)[0], af.gradients([rx], y)[0]]
        assert await run(grads) == [304.0, 124.0, 295.0, 120.0]


async def test_while_grad_dependency():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_Dependency"""
    with af.Graph().as_default():
        i = af.constant(0, name="i")
        x = af.constant(2.0, name="x")
        ri, rx = af.while_loop(lambda i, x: af.less(i, 10),
                               lambda i, x: (af.add(i, 1), af.multiply(x, 2.0)), [i, x],
                               parallel_iterations=1)
        assert await run([af.gradients([ri, rx], x)[0], af.gradients([rx], x)[0]]) == \
            [1024.0, 1024.0]


async def test_while_grad_no_gradient():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_NoGradient"""
    with af.Graph().as_default():
        v = af.constant(2.0, name="v")
        r = af.while_loop(lambda v: af.less(v, 100.0), af.square, [v], back_prop=False)
        r = af.add(r, v)
        assert await run(af.gradients(r, v)[0]) == 1.0


async def test_while_grad_serial_two_loops():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_SerialTwoLoops"""
    with af.Graph().as_default():
        i = af.constant(0, name="i")
        x = af.constant(2.0, name="x")
        c = lambda i, x: af.less(i, 5)  # noqa: E731
        b = lambda i, x: (af.add(i, 1), af.multiply(x, 2.0))  # noqa: E731
        _, rx = af.while_loop(c, b, [i, x], parallel_iterations=1)
        _, rx = af.while_loop(c, b, [i, rx], parallel_iterations=1)
        assert await run(af.gradients([rx], x)[0]) == 1024.0


async def test_while_grad_parallel_two_loops():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_ParallelTwoLoops"""
    with af.Graph().as_default():
        i = af.constant(0, name="i")
        x = af.constant(2.0, name="x")
        c = lambda i, x: af.less(i, 5)  # noqa: E731
        b = lambda i, x: (af.add(i, 1), af.multiply(x, 2.0))  # noqa: E731
        _, r1 = af.while_loop(c, b, [i, x], parallel_iterations=1)
        _, r2 = af.while_loop(c, b, [i, x], parallel_iterations=1)
        assert await run(af.gradients([af.add(r1, r2)], x)[0]) == 64.0


async def test_nested_while_grad_simple():
    """control_flow_ops_py_test.py ControlFlowTest.testNestedWhileGrad_Simple"""
    with af.Graph().as_default():
        v = af.constant(1.0)

        def inner_loop(s):
            return af.while_loop(lambda x: af.less(x, 4.0), lambda x: af.multiply(x, 2.0), [s])
        r = af.while_loop(lambda x: af.less(x, 2.0),
                          lambda x: af.multiply(inner_loop(x), 2.0), [v])
        assert await run(af.gradients(r, v)[0]) == 8.0


def _counted_inner_loop(s):
    z = af.constant(0)
    return af.while_loop(lambda i, x: af.less(i, 4),
                         lambda i, x: [af.add(i, 1), af.multiply(x, 2.0)], [z, s])


async def test_nested_while_grad_serial_inner():
    """control_flow_ops_py_test.py ControlFlowTest.testNestedWhileGrad_SerialInner"""
    with af.Graph().as_default():
        v = af.constant(1.0)
        r = af.while_loop(lambda x: af.less(x, 128.0),
                          lambda x: _counted_inner_loop(_counted_inner_loop(x)[1])[1], [v])
        assert await run(af.gradients(r, v)[0]) == 256.0


async def test_nested_while_grad_parallel_inner():
    """control_flow_ops_py_test.py ControlFlowTest.testNestedWhileGrad_ParallelInner"""
    with af.Graph().as_default():
        v = af.constant(1.0)
        r = af.while_loop(lambda x: af.less(x, 128.0),
                          lambda x: af.multiply(_counted_inner_loop(x)[1],
                                                _counted_inner_loop(x)[1]), [v])
        assert await run(af.gradients(r, v)[0]) == 512.0


async def test_while_cond_grad_simple():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileCondGrad_Simple: a cond in the
    body; its branch values are saved only in the iterations that take it."""
    with af.Graph().as_default():
        v = af.convert_to_tensor(2.0, name="i")
        n = af.convert_to_tensor(100.0, name="n")
        one = af.convert_to_tensor(1.0, name="one")
        b = lambda x: af.cond(af.constant(True), lambda: af.square(x),  # noqa: E731
                              lambda: af.subtract(x, one))
        r = af.while_loop(lambda x: af.less(x, n), b, [v])
        assert await run(af.gradients(r, v)[0]) == 1024.0


@pytest.mark.parametrize("parallel_iterations", [1, 10])
async def test_while_cond_grad_both_branches(parallel_iterations):
    """testWhileCondGrad_Simple with a predicate that changes across iterations, so both
    branches run (checked against finite differences)."""
    with af.Graph().as_default():
        x0 = af.constant(2.0, af.float64)
        b = lambda x: af.cond(x < 10.0, lambda: af.square(x), lambda: x * 1.5)  # noqa: E731
        r = af.while_loop(lambda x: x < 100.0, b, [x0], parallel_iterations=parallel_iterations)
        value, grad = await run([r, af.gradients(r, x0)[0]])

    def forward(x):
        while x < 100.0:
            x = x * x if x < 10.0 else x * 1.5
        return x
    assert value == pytest.approx(forward(2.0))
    eps = 1e-6
    assert grad == pytest.approx((forward(2.0 + eps) - forward(2.0 - eps)) / (2 * eps), rel=1e-5)


@pytest.mark.parametrize("invariant", [af.TensorShape([None, 2]), af.TensorShape(None)])
async def test_while_grad_keeps_shape_invariants(invariant):
    """Issue 14 item 4: a loop variable growing under a shape invariant; the gradient loop
    keeps the invariant although shape inference through the backward concat knows less
    (tf.compat.v1 gives [[27, 27]] and 81)."""
    with af.Graph().as_default():
        x = af.constant([[1.0, 2.0]])
        w = af.constant(2.0)
        r = af.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, af.concat([x, x * w], 0)),
                          [af.constant(0), x], shape_invariants=[af.TensorShape([]), invariant])
        grad_x, grad_w = af.gradients(af.reduce_sum(r[1]), [x, w])
        got_x, got_w = await run([grad_x, grad_w])
    np.testing.assert_array_equal(got_x, [[27.0, 27.0]])
    assert got_w == 81.0


async def test_while_grad_in_while():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGradInWhile: af.gradients of an
    inner loop called inside the outer loop's body (27.0 with tf.compat.v1)."""
    with af.Graph().as_default():
        n = af.convert_to_tensor(1.0, name="n")
        x = af.placeholder(af.float32, shape=None)
        c = lambda n: af.less(n, 10.0)  # noqa: E731
        b = lambda n: af.multiply(n, x)  # noqa: E731

        def b1(n):
            r = af.while_loop(c, b, [n], [af.TensorShape(None)])
            return af.gradients(r, x)
        r = af.while_loop(lambda n: n < 6.0, b1, [n], [af.TensorShape(None)])
        assert await run(r, {x: 3.0}) == 27.0


# -- build-time checks ---------------------------------------------------------------------------
def _get_while_tensor():
    """control_flow_ops_py_test.py ControlFlowTest._getWhileTensor"""
    tensor = []

    def body(i):
        if not tensor:
            tensor.append(af.constant(1))
        return i + tensor[0]
    af.while_loop(lambda i: i < 10, body, [0])
    return tensor[0]


def test_invalid_context():
    """control_flow_ops_py_test.py ControlFlowTest.testInvalidContext"""
    with af.Graph().as_default():
        while_tensor = _get_while_tensor()
        with pytest.raises(ValueError, match=r"Cannot use 'while/Const.*' as input to 'Add' "
                                             r"because 'while/Const.*' is in a while loop"):
            af.add(1, while_tensor, name="Add")


def test_invalid_context_in_cond():
    """control_flow_ops_py_test.py ControlFlowTest.testInvalidContextInCond"""
    with af.Graph().as_default():
        while_tensor = _get_while_tensor()
        with pytest.raises(ValueError, match=r"as input to 'cond/Add' because .* is in a while"):
            af.cond(af.less(1, 2), lambda: af.add(1, while_tensor, name="Add"),
                    lambda: af.constant(0))


def test_invalid_context_in_while():
    """control_flow_ops_py_test.py ControlFlowTest.testInvalidContextInWhile"""
    with af.Graph().as_default():
        while_tensor = _get_while_tensor()
        with pytest.raises(ValueError, match="because they are in different while loops"):
            af.while_loop(lambda i: i < 10, lambda i: af.add(1, while_tensor), [0])


async def test_control_dependency_on_fed_placeholder():
    """session_test.py SessionTest.testFeedAndFetch-style control edge: a control
    dependency on a fed placeholder is satisfied by the feed (TF1 moves the edge to the
    feed); the placeholder's kernel never runs."""
    with af.Graph().as_default():
        b = af.placeholder(af.bool)
        with af.control_dependencies([b]):
            y = af.constant(1) + 1
        assert await run(y, {b: True}) == 2


# -- dependencies, group, tuple -------------------------------------------------------------------
async def test_with_tensor_dependencies():
    """control_flow_ops_py_test.py ControlFlowTest.testWithTensorDependencies"""
    with af.Graph().as_default():
        v = af.Variable(0.0)
        c1, c2 = af.constant(10), af.constant(20)
        with af.control_dependencies([v.initializer]):
            c1_with_init_v = af.identity(c1, name="c1_with_init_v")
        with af.control_dependencies([c1_with_init_v]):
            c2_with_c1_dep = af.identity(c2, name="c2_with_c1_dep")
        async with af.Session(config=loop_modes.config()) as sess:
            with pytest.raises(af.errors.FailedPreconditionError):
                await sess.run(v)
            assert await sess.run(c2_with_c1_dep) == 20
            assert await sess.run(v) == 0.0


async def test_group():
    """control_flow_ops_py_test.py ControlFlowTest.testGroup"""
    with af.Graph().as_default():
        v1, v2 = af.Variable([0.0]), af.Variable([1.0])
        init = af.group(v1.initializer, v2.initializer)
        async with af.Session(config=loop_modes.config()) as sess:
            with pytest.raises(af.errors.FailedPreconditionError):
                await sess.run(v1)
            await sess.run(init)
            v1_val, v2_val = await sess.run([v1, v2])
    np.testing.assert_allclose(v1_val, [0.0])
    np.testing.assert_allclose(v2_val, [1.0])


def test_merge_shapes():
    """control_flow_ops_py_test.py ControlFlowTest.testMergeShapes"""
    with af.Graph().as_default():
        m, index = cf.merge([af.placeholder(af.float32) for _ in range(3)])
        assert m.shape.ndims is None and index.shape.as_list() == []
        m, index = cf.merge([af.placeholder(af.float32, shape=[1, 2]),
                             af.placeholder(af.float32, shape=[2, 1])])
        # TF 1.x: same rank, dims that differ unknown (tf.compat.v1 gives (?, ?)).
        assert m.shape.as_list() == [None, None] and index.shape.as_list() == []
        m, index = cf.merge([af.placeholder(af.float32, shape=[1, 2]),
                             af.placeholder(af.float32, shape=[1, 2])])
        assert m.shape.as_list() == [1, 2] and index.shape.as_list() == []
        p2 = af.placeholder(af.float32)
        p2.set_shape([None, 2])
        m, index = cf.merge([af.placeholder(af.float32, shape=[1, 2]), p2])
        assert m.shape.as_list() == [None, 2] and index.shape.as_list() == []
        m, _ = cf.merge([af.placeholder(af.float32, shape=[1, 2]),
                         af.placeholder(af.float32, shape=[1])])
        assert m.shape.ndims is None


@pytest.mark.parametrize("v1_first", [True, False])
async def test_tuple_tensors(v1_first):
    """control_flow_ops_py_test.py TupleTest.testTensors"""
    with af.Graph().as_default():
        v1 = af.Variable([1.0])
        with af.control_dependencies([v1.initializer]):
            add1 = af.add(af.identity(v1.read_value()), 2.0)
        v2 = af.Variable([10.0])
        with af.control_dependencies([v2.initializer]):
            add2 = af.add(af.identity(v2.read_value()), 20.0)
        t1, _, t2 = af.tuple([add1, None, add2])
        async with af.Session(config=loop_modes.config()) as sess:
            with pytest.raises(af.errors.FailedPreconditionError):
                await sess.run(v1)
            with pytest.raises(af.errors.FailedPreconditionError):
                await sess.run(v2)
            if v1_first:
                np.testing.assert_allclose(await sess.run(t1), [3.0])
                np.testing.assert_allclose(await sess.run(v2), [10.0])
            else:
                np.testing.assert_allclose(await sess.run(t2), [30.0])
                np.testing.assert_allclose(await sess.run(v1), [1.0])


async def test_accept_tensors_as_control_inputs():
    """control_flow_ops_py_test.py TupleTest.testAcceptTensorsAsControlInputs"""
    with af.Graph().as_default():
        var = af.Variable(0)
        assign = af.assign(var, 1)
        (t,) = af.tuple([af.constant(0)], control_inputs=[assign])
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(af.global_variables_initializer())
            await sess.run(t)
            assert await sess.run(var) == 1


# -- python/ops/control_flow_ops_test.py ----------------------------------------------------------
async def test_gradient_through_single_branch_outside_of_context():
    """control_flow_ops_test.py SwitchTest.testGradientThroughSingleBranchOutsideOfContext"""
    with af.Graph().as_default():
        x = af.constant(2.0)
        s = af.constant(True)
        x_false, x_true = cf.switch(x, s)
        grad_x_true = af.gradients(x_true, x)[0]
        grad_x_false = af.gradients(x_false, x)[0]
        assert await run([grad_x_true, grad_x_false]) == [1.0, 0.0]


@pytest.mark.parametrize("method, y, expected", [
    ("testCondTrue", 5, 34), ("testCondFalse", 1, 24)])
async def test_cond_true_false(method, y, expected):
    """control_flow_ops_test.py CondTest.testCondTrue / testCondFalse"""
    with af.Graph().as_default():
        x, y = af.constant(2), af.constant(y)
        z = af.cond(af.less(x, y), lambda: af.multiply(x, 17), lambda: af.add(y, 23))
        assert await run(z) == expected


@pytest.mark.parametrize("y, expected", [(5, 34), (1, 24)])
async def test_cond_legacy(y, expected):
    """control_flow_ops_test.py CondTest.testCondTrueLegacy / testCondFalseLegacy"""
    with af.Graph().as_default():
        x, y = af.constant(2), af.constant(y)
        z = af.cond(af.less(x, y), fn1=lambda: af.multiply(x, 17), fn2=lambda: af.add(y, 23))
        assert await run(z) == expected


async def test_cond_modify_bool_pred():
    """control_flow_ops_test.py CondTest.testCondModifyBoolPred"""
    with af.Graph().as_default():
        bool_var = af.get_variable("bool_var", dtype=af.bool, initializer=True)
        cond_on_bool_var = af.cond(pred=bool_var,
                                   true_fn=lambda: af.assign(bool_var, False),
                                   false_fn=lambda: True)
        async with af.Session(config=loop_modes.config()) as sess:
            await sess.run(bool_var.initializer)
            assert await sess.run(cond_on_bool_var) == False  # noqa: E712
            assert await sess.run(cond_on_bool_var) == True  # noqa: E712


def test_cond_missing_and_duplicate_args():
    """control_flow_ops_test.py CondTest.testCondMissingArg1 / testCondMissingArg2 /
    testCondDuplicateArg1 / testCondDuplicateArg2"""
    with af.Graph().as_default():
        x = af.constant(1)
        p = af.constant(True)
        with pytest.raises(TypeError):
            af.cond(p, false_fn=lambda: x)
        with pytest.raises(TypeError):
            af.cond(p, lambda: x)
        with pytest.raises(TypeError):
            af.cond(p, lambda: x, lambda: x, fn1=lambda: x)
        with pytest.raises(TypeError):
            af.cond(p, lambda: x, lambda: x, fn2=lambda: x)


async def _return_values(fn_true, fn_false, expected_true, expected_false, strict=False):
    """control_flow_ops_test.py DataTypesTest._testReturnValues (cond and case)"""
    condition = af.placeholder(af.bool)
    output_cond = af.cond(condition, fn_true, fn_false, strict=strict)
    output_case = af.case([(condition, fn_true)], fn_false)
    async with af.Session(config=loop_modes.config()) as sess:
        await sess.run(af.global_variables_initializer())
        for value, expected in ((True, expected_true), (False, expected_false)):
            result_cond, result_case = await sess.run([output_cond, output_case],
                                                      {condition: value})
            np.testing.assert_equal(result_cond, expected)
            np.testing.assert_equal(result_case, expected)


@pytest.mark.parametrize("method, fn_true, fn_false, expected", [
    ("test_int", lambda: 1, lambda: 2, (1, 2)),
    ("test_float", lambda: 1.0, lambda: 2.0, (1.0, 2.0)),
    ("test_string", lambda: "abc", lambda: "xyz", (b"abc", b"xyz")),
    ("test_variable", lambda: af.Variable(3.0), lambda: af.Variable(4.0), (3.0, 4.0)),
    ("test_noop", af.no_op, af.no_op, (True, False)),
])
async def test_data_types(method, fn_true, fn_false, expected):
    """control_flow_ops_test.py DataTypesTest.test_int / test_float / test_string /
    test_variable / test_noop (a branch returning an op gives its pivot: True, False)"""
    with af.Graph().as_default():
        await _return_values(fn_true, fn_false, *expected)


@pytest.mark.parametrize("dtype", [af.float16, af.int8, af.int32, af.uint8])
async def test_data_types_tensors(dtype):
    """control_flow_ops_test.py DataTypesTest.test_tensors"""
    with af.Graph().as_default():
        fn_true = lambda: (af.zeros([2, 2], dtype=dtype), af.ones([3, 3], dtype=dtype))  # noqa: E731
        fn_false = lambda: (af.ones([2, 2], dtype=dtype), af.zeros([3, 3], dtype=dtype))  # noqa: E731
        await _return_values(fn_true, fn_false, (np.zeros([2, 2]), np.ones([3, 3])),
                             (np.ones([2, 2]), np.zeros([3, 3])))


def test_data_types_none():
    """control_flow_ops_test.py DataTypesTest.test_none"""
    with af.Graph().as_default():
        with pytest.raises(ValueError):
            af.cond(af.constant(True), lambda: None, lambda: af.constant(1))
        with pytest.raises(ValueError):
            af.cond(af.constant(True), lambda: af.constant(1), lambda: None)


async def test_data_types_strict_singleton():
    """control_flow_ops_test.py DataTypesTest.test_singleton_list: strict keeps the list,
    the default unpacks it."""
    with af.Graph().as_default():
        condition = af.placeholder(af.bool)
        loose = af.cond(condition, lambda: [af.constant(1)], lambda: [af.constant(2)])
        strict = af.cond(condition, lambda: [af.constant(1)], lambda: [af.constant(2)],
                         strict=True)
        assert isinstance(loose, af.Tensor) and isinstance(strict, list)
        async with af.Session(config=loop_modes.config()) as sess:
            assert await sess.run([loose, strict], {condition: False}) == [2, [2]]
