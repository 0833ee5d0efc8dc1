"""More of TensorFlow 1.x's ``control_flow_ops_py_test.py``, ported to asyncflow: loops and
conds with control dependencies, queues, variables, nested structures, and loop gradients of
shapes and multiple uses (the rest of that file is ``test_tf1_control_flow_ops.py`` and
``test_tf1_control_flow_grad.py``).

Each test keeps TF's inputs and expected values; its docstring names the TF method (TF's
``control_flow_ops.with_dependencies`` is ``af.control_dependencies`` around an identity,
``linalg_ops.norm`` the square root of a sum of squares).
Every test runs with simple loops compiled and all dynamic.
"""
import collections

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


async def ev(fetches, feed_dict=None, init=False):
    async with af.Session(config=loop_modes.config()) as sess:
        if init:
            await sess.run(af.global_variables_initializer())
        return await sess.run(fetches, feed_dict)


def isum(s, maximum_iterations=None):
    i = af.constant(0, name="i")
    _, r_s = af.while_loop(lambda i, s: af.less(i, 10), lambda i, s: [af.add(i, 1), af.add(i, s)],
                           [i, s], maximum_iterations=maximum_iterations)
    return r_s


async def test_while_with_maximum_iterations():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileWithMaximumIterations"""
    with af.Graph().as_default():
        r = isum(af.constant([1, 2, 3, 4, 5]), maximum_iterations=3)
        assert list(await ev(r)) == [4, 5, 6, 7, 8]


async def test_while_with_maximum_iterations_and_single_argument():
    """control_flow_ops_py_test.py
    ControlFlowTest.testWhileWithMaximumIterationsAndSingleArgument"""
    with af.Graph().as_default():
        r = af.while_loop(lambda i: i < 3, lambda i: i + 1, [0], maximum_iterations=1)
        assert await ev(r) == 1


async def test_while_shape():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileShape"""
    with af.Graph().as_default():
        i = af.constant(0)
        m = af.ones([2, 2])
        r = af.while_loop(lambda i, j: af.less(i, 2),
                          lambda i, j: [af.add(i, 1), af.tile(j, [2, 2])], [i, m],
                          [i.get_shape(), af.TensorShape(None)])
        r = r[1] * af.ones([8, 8])
        assert (await ev(r) == np.ones((8, 8))).all()


async def test_while_with_non_tensor_input_scalar():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileWithNonTensorInput_Scalar"""
    with af.Graph().as_default():
        r = af.while_loop(lambda x: x < 10000, lambda x: x + 1, [0], parallel_iterations=20)
        assert await ev(r) == 10000


async def test_while_with_non_tensor_input_vector():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileWithNonTensorInput_Vector"""
    with af.Graph().as_default():
        n = np.array([0])
        r = af.while_loop(lambda x: x[0] < 10000, lambda x: af.stack([x[0] + 1]), [n],
                          parallel_iterations=20)
        assert list(await ev(r)) == [10000]


async def test_while_external_control_dependencies():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileExternalControlDependencies"""
    with af.Graph().as_default():
        v = af.Variable(0.0)
        increment = v.assign_add(1.0)
        def body_fn(i):
            with af.control_dependencies([increment]):
                return i + i
        result = af.while_loop(cond=lambda i: i < 1, body=body_fn, loop_vars=[1])
        async with af.Session(config=loop_modes.config()) as s:
            await s.run(v.initializer)
            await s.run(result)
            assert await s.run(v) == 1.0


async def test_while_external_control_dependencies_no_input():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileExternalControlDependenciesNoInput"""
    with af.Graph().as_default():
        v = af.Variable(0.0)
        increment = v.assign_add(1.0)
        def body_fn(unused_i):
            with af.control_dependencies([increment]):
                return af.constant(5, name="five")
        result = af.while_loop(cond=lambda i: i < 5, body=body_fn, loop_vars=[0])
        async with af.Session(config=loop_modes.config()) as s:
            await s.run(v.initializer)
            await s.run(result)
            assert await s.run(v) == 1.0


async def test_cond_int():
    """control_flow_ops_py_test.py ControlFlowTest.testCondInt"""
    with af.Graph().as_default():
        p = af.placeholder(af.bool, shape=[])
        v = af.constant(10)
        y = af.cond(p, lambda: af.add(v, 1), lambda: af.subtract(v, 1))
        assert af.gradients(y, [v]) == [None]


async def test_cond_grad_3():
    """control_flow_ops_py_test.py ControlFlowTest.testCondGrad_3"""
    with af.Graph().as_default():
        c = af.placeholder(af.int32, shape=[])
        ox = af.constant(10.0)
        pred = af.less(c, 2)
        def fn1(x):
            m = x * x
            return af.gradients(m, [ox])[0]
        fn2 = lambda: af.multiply(ox, 3.0)
        y = af.multiply(7.0, ox)
        r = af.cond(pred, lambda: fn1(y), fn2)
        assert await ev(r, {c: 1}) == 980.0
        assert await ev(r, {c: 3}) == 30.0


async def test_nested_cond_simple():
    """control_flow_ops_py_test.py ControlFlowTest.testNestedCond_Simple"""
    with af.Graph().as_default():
        x = af.constant(0., name="X")
        y = af.cond(af.constant(True), lambda: x, lambda: af.cond(x < 1., lambda: x, lambda: x))
        assert await ev(af.gradients(y, x)[0]) == 1.0
        z = af.cond(af.constant(False), lambda: x, lambda: af.cond(x < 1., lambda: x, lambda: x))
        assert await ev(af.gradients(z, x)[0]) == 1.0


async def test_cond_with_control():
    """control_flow_ops_py_test.py ControlFlowTest.testCondWithControl"""
    with af.Graph().as_default():
        control_holder = af.placeholder(af.float32, shape=())
        a = af.constant(3)
        def true_branch():
            with af.control_dependencies([control_holder]):
                _ = a + 1
            return a + 2
        r = af.cond(af.constant(True), true_branch, lambda: af.constant(1))
        assert await ev(r) == 5


async def test_nested_while_2():
    """control_flow_ops_py_test.py ControlFlowTest.testNestedWhile_2"""
    with af.Graph().as_default():
        s0 = af.constant(2.0)
        def inner_loop(s):
            return af.while_loop(lambda s: af.less(s, 20.0), lambda s: af.add(s, s), [s],
                                 parallel_iterations=1)
        def outer_b(x):
            x = af.Print(x, [x])
            x = inner_loop(x)
            with af.device("/cpu:0"):
                x = af.square(x)
            return x
        r = af.while_loop(lambda x: af.less(x, 3000.0), outer_b, [s0], parallel_iterations=1)
        assert await ev(r) == 1048576.0


async def test_while_with_control_3():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileWithControl_3"""
    with af.Graph().as_default():
        b = af.placeholder(af.bool)
        c = af.constant(1)
        x0 = af.constant(0)
        with af.control_dependencies([b]):
            r = af.while_loop(lambda x: x < 10, lambda x: x + c, [x0])
        assert await ev(r, {b: True}) == 10


async def test_while_with_control_4():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileWithControl_4"""
    with af.Graph().as_default():
        b = af.placeholder(af.bool)
        c = af.constant(1)
        x0 = af.constant(0)
        with af.control_dependencies([b]):
            r = af.while_loop(lambda x: x < 10, lambda x: x + af.identity(c), [x0])
        assert await ev(r, {b: True}) == 10


async def test_while_with_control_5():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileWithControl_5"""
    with af.Graph().as_default():
        b = af.placeholder(af.bool)
        c = af.constant(1)
        x0 = af.constant(0)
        def body(x):
            with af.control_dependencies([b]):
                return x + c
        r = af.while_loop(lambda x: x < 10, body, [x0])
        assert await ev(r, {b: True}) == 10


async def test_while_cond_with_control():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileCondWithControl"""
    with af.Graph().as_default():
        const_true = lambda: af.constant(True)
        const_false = lambda: af.constant(False)
        cond = lambda i: af.cond(i > 0, const_true, const_false)
        body = lambda i: af.cond(i > 0, lambda: i - 1, lambda: i)
        with af.control_dependencies([af.no_op()]):
            loop = af.while_loop(cond, body, (af.constant(5),))
        assert await ev(loop) == 0


async def test_while_cond_with_control_1():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileCondWithControl_1"""
    with af.Graph().as_default():
        v = af.get_variable("v", [], initializer=af.constant_initializer(2))
        i0 = af.constant(0)
        with af.control_dependencies([i0]):
            def loop_condition(i): return i < 4
            def loop_body(i):
                some_cond = af.cond(af.constant(True), lambda: af.assign(v, af.square(v)),
                                    lambda: v)
                with af.control_dependencies([some_cond]):
                    return i + 1
        r = af.while_loop(loop_condition, loop_body, (i0,))
        async with af.Session(config=loop_modes.config()) as s:
            await s.run(af.global_variables_initializer())
            assert await s.run(r) == 4
            assert abs(await s.run(v) - 65536.0) < 1e-3


async def test_while_cond_exit_control():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileCondExitControl"""
    with af.Graph().as_default():
        v = af.Variable(1)
        def false_branch():
            def body(i):
                x = af.assign(v, i)
                return x + 1
            loop = af.while_loop(lambda i: i < 100, body, [0])
            with af.control_dependencies([loop]):
                return af.constant(6.0)
        r = af.cond(af.constant(False), lambda: af.constant(1.0), false_branch)
        async with af.Session(config=loop_modes.config()) as s:
            await s.run(af.global_variables_initializer())
            assert await s.run(r) == 6.0
            assert await s.run(v) == 99


async def test_while_queue_1():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileQueue_1"""
    with af.Graph().as_default():
        q = af.FIFOQueue(-1, af.int32)
        i = af.constant(0)
        def b(i):
            ni = af.add(i, 1)
            with af.control_dependencies([q.enqueue((i,))]):
                ni = af.identity(ni)
            return ni
        r = af.while_loop(lambda i: af.less(i, 10), b, [i], parallel_iterations=1)
        async with af.Session(config=loop_modes.config()) as s:
            assert await s.run(r) == 10
            for k in range(10):
                assert await s.run(q.dequeue()) == k


async def test_while_grad_shape():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_Shape"""
    with af.Graph().as_default():
        x = af.placeholder(af.float32, shape=[None])
        v = af.constant([2.0], name="v")
        n = af.constant(0, name="n")
        r = af.while_loop(lambda i, v: af.less(i, 5), lambda i, v: [i + 1, af.multiply(x, v)],
                          [n, v], [n.get_shape(), af.TensorShape(None)], parallel_iterations=1)
        r = af.gradients(r[1], x)[0]
        assert r.get_shape().as_list() == [None], r.get_shape()
        assert np.allclose(await ev(r, {x: [3.0, 4.0]}), [810.0, 2560.0])


async def test_while_grad_base_shape():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_BaseShape"""
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None])
        v0 = af.constant([2.0, 2.0], name="v")
        r = af.while_loop(lambda v: af.constant(False), lambda v: af.multiply(v, x), [v0])
        y = af.square(x)
        r = af.gradients([r, y], x)[0]
        assert np.allclose(await ev(r, {x: [1.0, 2.0]}), [2.0, 4.0])


async def test_while_grad_multiple_uses():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_MultipleUses"""
    with af.Graph().as_default():
        v = af.constant(2.0, name="v")
        r = af.while_loop(lambda v: af.less(v, 100.0), af.square, [v], parallel_iterations=1)
        r = af.multiply(r, r)
        assert await ev(af.gradients(r, v)[0]) == 524288.0


async def test_while_grad_loop_add():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_LoopAdd"""
    with af.Graph().as_default():
        v = af.constant(2.0, name="v")
        r = af.while_loop(lambda v: af.less(v, 100.0), af.square, [v], parallel_iterations=1)
        r = af.add(r, r)
        assert await ev(af.gradients(r, v)[0]) == 2048.0


async def test_while_nested_input():
    """control_flow_ops_py_test.py ControlFlowTest.testWhile_NestedInput"""
    with af.Graph().as_default():
        named = collections.namedtuple("named", ("a", "b"))
        loop_vars = [named(a=af.constant(0.0), b=af.constant(1.0)),
                     (af.constant(2.0), af.constant(3.0)), af.constant(4.0)]
        c = lambda lv0, _1, _2: lv0.a < 100.0
        def b(lv0, lv1, lv2):
            lv0 = named(a=lv0.a + 1, b=lv0.b)
            lv1 = (lv1[0] + 1, lv1[1])
            lv2 += 2
            return [lv0, lv1, lv2]
        r = af.while_loop(c, b, loop_vars)
        assert isinstance(r, list) and isinstance(r[0], named) and isinstance(r[1], tuple)
        assert await ev(cf.flatten(r)) == [100.0, 1.0, 102.0, 3.0, 4.0 + 100 * 2.0]


async def test_while_nested_bad_arity_fails():
    """control_flow_ops_py_test.py ControlFlowTest.testWhile_NestedBadArityFails"""
    with af.Graph().as_default():
        named = collections.namedtuple("named", ("a", "b"))
        loop_vars = [named(a=af.constant(0.0), b=af.constant(1.0)),
                     (af.constant(2.0), af.constant(3.0)), af.constant(4.0)]
        c = lambda lv0, _1, _2: lv0.a < 100.0
        def b(lv0, lv1, _): return [lv0, lv1]
        with pytest.raises(ValueError, match="the same number of elements"):
            af.while_loop(c, b, loop_vars)


async def test_while_grad_no_dependency():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_NoDependency"""
    with af.Graph().as_default():
        variable = af.Variable(af.ones([2, 3]))
        duration = af.zeros([], dtype=af.int32)
        def cond(duration, tensor, _): return duration < 10
        def body(duration, tensor, _): return (duration + 1, tensor, tensor)
        tensors = af.while_loop(cond=cond, body=body, loop_vars=[duration, variable, variable])
        cost = af.reduce_sum(tensors[2])
        grad = af.gradients(cost, [variable])
        assert np.allclose(await ev(grad[0], init=True), np.ones([2, 3]))


async def test_while_grad_const():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_Const"""
    with af.Graph().as_default():
        c0 = af.constant(0.0, name="c0")
        c1 = af.constant(1.0, name="c1")
        duration = af.constant(0, name="t")
        tensors = af.while_loop(cond=lambda d, _: d < 1, body=lambda d, _: (d + 1, c1),
                                loop_vars=[duration, c0])
        grad = af.gradients(af.reduce_sum(tensors[1]), [c0])
        assert await ev(grad[0]) == 0.0


async def test_while_grad_one_output_with_control_dependency_on_second():
    """control_flow_ops_py_test.py
    ControlFlowTest.testWhileGrad_OneOutputWithControlDependencyOnSecond"""
    with af.Graph().as_default():
        i = af.constant(0, name="i")
        x = af.constant(1.0, name="x")
        y = af.constant(1.0, name="y")
        c = lambda i, *_: af.less(i, 1, name="cond_less")
        def b(i, xi, yi):
            return (af.add(i, 1, name="inc"), af.identity(xi, name="xi"),
                    af.add(xi, yi, name="xi_plus_yi"))
        _, x_f, y_f = af.while_loop(c, b, [i, x, y])
        with af.control_dependencies([x_f]):
            y_f_d = af.identity(y_f, name="y_f_d")
        assert await ev(y_f_d) == 2.0
        g = af.gradients([y_f_d], [x])[0]
        assert g is not None
        assert await ev(g) == 1.0


async def test_nested_while_grad_parallel_iterations():
    """control_flow_ops_py_test.py ControlFlowTest.testNestedWhileGrad_ParallelIterations"""
    with af.Graph().as_default():
        def inner_loop(t):
            return af.map_fn(fn=lambda n: n + af.square(var), elems=t, parallel_iterations=10)
        def outer_loop(inp):
            return af.map_fn(fn=inner_loop, elems=inp, parallel_iterations=10)
        var = af.Variable(af.constant(3.0))
        inp = af.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        res = outer_loop(inp)
        optimizer = af.train.AdamOptimizer(learning_rate=0.001)
        train_op = optimizer.minimize(af.reduce_mean(af.square(res)))
        async with af.Session(config=loop_modes.config()) as s:
            await s.run(af.global_variables_initializer())
            await s.run(train_op)
            assert abs(await s.run(var) - 2.999) < 1e-5


async def test_while_grad_concat():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_Concat"""
    with af.Graph().as_default():
        x = af.get_variable("x", initializer=[[1., 2.]])
        i0 = af.constant(0)
        h0 = af.zeros([0, 2])
        _, h = af.while_loop(lambda i, _: i < 2, lambda i, h: (i + 1, af.concat([h, x], 0)),
                             [i0, h0], [i0.get_shape(), af.TensorShape([None, 2])])
        s_ = af.reduce_sum(h)
        op = af.train.GradientDescentOptimizer(0.01).minimize(s_)
        async with af.Session(config=loop_modes.config()) as s:
            await s.run(af.global_variables_initializer())
            await s.run(op)
            assert np.allclose(await s.run(x), [[0.98000002, 1.98000002]])


async def test_while_grad_indexed_slices():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_IndexedSlices"""
    with af.Graph().as_default():
        values = af.constant([2.0, 4.0], name="values")
        indices = af.constant([0, 3], name="indices")
        shape = af.constant([10], name="dense_shape")
        i = af.constant(0)
        x = af.IndexedSlices(values, indices, dense_shape=shape)
        _, r = af.while_loop(
            lambda i, _: i < 10,
            lambda i, x: [i + 1, af.IndexedSlices(x.values * 2.0, x.indices, x.dense_shape)],
            [i, x])
        r = af.gradients(r.values, values)[0]
        assert np.allclose(await ev(r), [1024.0, 1024.0])


async def test_while_grad_sparse_tensor():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_SparseTensor"""
    with af.Graph().as_default():
        values = af.constant([2.0, 4.0], name="values")
        indices = af.constant([[0], [3]], dtype=af.int64)
        shape = af.constant([10], dtype=af.int64)
        i = af.constant(0)
        x = af.SparseTensor(indices, values, dense_shape=shape)
        _, r = af.while_loop(
            lambda i, _: i < 10,
            lambda i, x: [i + 1, af.SparseTensor(x.indices, x.values * 2.0, x.dense_shape)],
            [i, x])
        r = af.gradients(r.values, values)[0]
        assert np.allclose(await ev(r), [1024.0, 1024.0])


async def test_call_grad_in_loop():
    """control_flow_ops_py_test.py ControlFlowTest.testCallGradInLoop"""
    with af.Graph().as_default():
        i0 = af.constant(0)
        params = af.constant(5.0)
        params_1 = af.square(params)
        def b(i, x):
            data = af.constant([1.0, 2.0, 3.0])
            data = af.multiply(data, params_1)
            return i + 1, x + af.gradients(data, params)[0]
        out = af.while_loop(lambda i, _: i < 10, b, [i0, af.constant(0.0)])
        assert abs((await ev(out))[1] - 600.0) < 1e-3


async def test_while_and_tensor_array():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileAndTensorArray"""
    with af.Graph().as_default():
        param = af.constant(2.0)
        n0 = af.constant(0)
        y0 = af.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], name="elems")
        r = af.while_loop(lambda i, _: i < 10,
                          lambda i, y: [i + 1, af.map_fn(lambda x: af.multiply(x, param), y)],
                          [n0, y0], parallel_iterations=1)
        r = af.gradients(r, param)[0]
        assert abs(await ev(r) - 107520.0) < 1e-2


async def test_while_grad_stop_grad():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_StopGrad"""
    with af.Graph().as_default():
        x = af.constant(3.0, name="x")
        y = af.constant(2.0, name="y")
        def b(x, y):
            y1 = af.square(y)
            return af.add(af.square(x), y1), y1
        rx, ry = af.while_loop(lambda x, y: af.less(x, 100.0), b, [x, y])
        assert await ev(af.gradients(rx, y)[0]) == 136.0
        assert await ev(af.gradients(ry, y)[0]) == 32.0
        assert af.gradients(af.stop_gradient(rx), y)[0] is None
        assert af.gradients(af.stop_gradient(ry), y)[0] is None
        assert af.gradients(af.stop_gradient(af.square(rx)), y)[0] is None
        assert af.gradients(af.stop_gradient(af.add(rx, ry)), x)[0] is None
        assert af.gradients(af.stop_gradient(af.add(rx, ry)), y)[0] is None
        assert await ev(af.gradients(af.add(rx, ry), y)[0]) == 168.0
        assert await ev(af.gradients(af.add(rx, af.stop_gradient(ry)), y)[0]) == 136.0
        assert await ev(af.gradients(af.add(af.stop_gradient(rx), ry), y)[0]) == 32.0


async def test_while_grad_stop_grad_inside():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_StopGradInside"""
    with af.Graph().as_default():
        x = af.constant(3.0, name="x")
        y = af.constant(2.0, name="y")
        def b(x, y):
            y1 = af.stop_gradient(af.square(y))
            return af.add(af.square(x), y1), y1
        rx, _ = af.while_loop(lambda x, y: af.less(x, 100.0), b, [x, y])
        assert await ev(af.gradients(rx, y)[0]) == 0.0
        assert await ev(af.gradients(rx, x)[0]) == 156.0


async def test_while_grad_stop_grad_inside_no_shape():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGrad_StopGradInsideNoShape"""
    with af.Graph().as_default():
        x = af.placeholder(af.float32)
        y = af.placeholder(af.float32)
        def b(x, y):
            y1 = af.stop_gradient(af.square(y, name="stopped"))
            return af.add(af.square(x), y1), y1
        rx, _ = af.while_loop(lambda x, y: af.less(af.reduce_sum(x), 100.0), b, [x, y])
        fd = {x: [3.0, 4.0], y: [2.0, 3.0]}
        assert np.allclose(await ev(af.gradients(rx, y)[0], fd), [0.0, 0.0])
        assert np.allclose(await ev(af.gradients(rx, x)[0], fd), [156.0, 400.0])
        assert not any("gradients/while/stopped_grad" in op.name for op in x.graph.get_operations())


async def test_while_grad_grad_fail():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGradGradFail"""
    with af.Graph().as_default():
        theta = af.Variable(initial_value=1.)
        result = af.scan(lambda prev, x: prev + x * theta, np.array([1., 2., 3.], dtype=np.float32))
        grad_theta = af.gradients(result, theta)
        with pytest.raises(TypeError, match="Second-order gradient"):
            af.gradients(grad_theta, theta)
        af.gradients(af.stop_gradient(grad_theta), theta)


async def test_stop_grad_on_while_grad():
    """control_flow_ops_py_test.py ControlFlowTest.testStopGradOnWhileGrad"""
    with af.Graph().as_default():
        x = af.constant(2.0, name="x")
        y = af.constant(2.0, name="y")
        rx = af.while_loop(lambda x: af.less(x, 100.0), lambda x: af.multiply(x, y), [x])
        rg = af.stop_gradient(af.gradients(rx, y)[0])
        r = af.add(af.add(af.square(y), rx), rg)
        assert await ev(af.gradients(r, y)[0]) == 388.0


async def test_stop_grad_multi_flows():
    """control_flow_ops_py_test.py ControlFlowTest.testStopGradMultiFlows"""
    with af.Graph().as_default():
        def body(i, y, r):
            x = af.get_variable("x", shape=(), dtype=af.float32, initializer=af.ones_initializer())
            y *= x
            return [i + 1, y, r + af.reduce_sum(y)]
        _, _, r = af.while_loop(lambda i, y, r: i < 1, body,
                                [af.constant(0), af.ones(5), af.constant(0.0)], back_prop=True)
        vars_ = af.global_variables()
        grads = af.sqrt(af.reduce_sum(af.square(af.gradients(r, vars_)[0])))  # linalg_ops.norm
        z = af.add(r, af.stop_gradient(af.reduce_sum(grads)))
        result = af.gradients(z, vars_)[0]
        assert await ev(result, init=True) == 5.0


async def test_case():
    """control_flow_ops_py_test.py ControlFlowTest.testCase"""
    with af.Graph().as_default():
        x = af.constant(1)
        y = af.constant(2)
        z = af.constant(3)
        f1 = lambda: af.constant(17)
        f2 = lambda: af.constant(23)
        f3 = lambda: af.constant(-1)
        r1 = af.case({x < y: f1, x > z: f2}, default=f3, exclusive=True)
        assert await ev(r1) == 17
        assert await ev(af.case([(y > z, f1), (y > x, f2)], default=f3)) == 23
        assert await ev(af.case([(x < y, f1), (x < y, f2)], default=f3)) == 17
        r4 = af.case([(x < y, f1), (x < y, f2)], default=f3, exclusive=True)
        with pytest.raises(af.errors.OpError, match="Input error:"):
            await ev(r4)
        assert await ev(af.case({x > y: f1}, default=f3)) == -1
        ran_once = [False, False, False]
        def brt(ix):
            def _break():
                ran_once[ix] = True
                return af.constant(ix)
            return _break
        r6 = af.case([(x < y, brt(0)), (x > y, brt(1))], default=lambda: af.constant(2))
        assert await ev(r6) == 0


def _while_tensor():
    tensor = []
    def body(i):
        if not tensor:
            tensor.append(af.constant(1))
        return i + tensor[0]
    af.while_loop(lambda i: i < 10, body, [0])
    return tensor[0]

def _cond_tensor():
    cond_tensor = []
    def true_fn():
        if not cond_tensor:
            cond_tensor.append(af.constant(1))
        return cond_tensor[0]
    af.cond(af.less(1, 2), true_fn, lambda: af.constant(0))
    return cond_tensor[0]


async def test_case_side_effects():
    """control_flow_ops_py_test.py ControlFlowTest.testCaseSideEffects"""
    with af.Graph().as_default():
        v0 = af.Variable(-1)
        v1 = af.Variable(-1)
        v2 = af.Variable(-1)
        def dep(v, k):
            def f():
                with af.control_dependencies([af.assign(v, k)]):
                    return af.identity(af.constant(k))
            return f
        a, b, c = dep(v0, 0), dep(v1, 1), dep(v2, 2)
        x = af.constant(1)
        y = af.constant(2)
        r0 = af.case(((x < y, a), (x > y, b)), default=c, exclusive=True)
        r1 = af.case(((x > y, a), (x < y, b)), default=c, exclusive=True)
        r2 = af.case(((x > y, a), (x > y, b)), default=c, exclusive=True)
        async with af.Session(config=loop_modes.config()) as s:
            init = af.global_variables_initializer()
            await s.run(init)
            assert await s.run([v0, v1, v2]) == [-1] * 3
            assert await s.run(r2) == 2
            assert await s.run([v0, v1, v2]) == [-1, -1, 2]
            await s.run(init)
            assert await s.run(r1) == 1
            assert await s.run([v0, v1, v2]) == [-1, 1, -1]
            await s.run(init)
            assert await s.run(r0) == 0
            assert await s.run([v0, v1, v2]) == [0, -1, -1]


async def test_one_op_cond():
    """control_flow_ops_py_test.py ControlFlowTest.testOneOpCond"""
    with af.Graph().as_default():
        v = af.Variable(0)
        c = af.convert_to_tensor(0)
        one = af.convert_to_tensor(1)
        two = af.convert_to_tensor(2)
        p = af.greater_equal(c, 1)
        i = af.cond(p, lambda: af.assign(v, one), lambda: af.assign(v, two))
        assert isinstance(i, af.Tensor)
        async with af.Session(config=loop_modes.config()) as s:
            await s.run(af.global_variables_initializer())
            assert await s.run(v) == 0
            assert await s.run(i, {c.name: 2}) == 1
            assert await s.run(v) == 1
            assert await s.run(i, {c.name: 0}) == 2
            assert await s.run(v) == 2


async def test_group_empty():
    """control_flow_ops_py_test.py ControlFlowTest.testGroupEmpty"""
    with af.Graph().as_default():
        op = af.group()
        assert op.type == "NoOp"
        assert op.control_inputs == []


async def test_run_loop_tensor():
    """control_flow_ops_py_test.py ControlFlowTest.testRunLoopTensor"""
    with af.Graph().as_default():
        tensor_list = []
        def body(_):
            tensor_list.append(af.constant(5))
            return af.constant(10)
        result = af.while_loop(lambda t: t < af.constant(5), body, [af.constant(4)])
        async with af.Session(config=loop_modes.config()) as s:
            assert await s.run(result) == 10
            with pytest.raises(ValueError, match="has been marked as not fetchable"):
                await s.run(tensor_list[0])


async def test_while_py_func_basic():
    """control_flow_ops_py_test.py ControlFlowTest.testWhilePyFuncBasic"""
    with af.Graph().as_default():
        def func(x):
            return np.square(x)
        r = af.while_loop(lambda i, v: i < 4,
                          lambda i, v: [i + 1, af.py_func(func, [v], [af.float32])[0]],
                          [af.constant(0), af.constant(2.0, af.float32)],
                          [af.TensorShape(None), af.TensorShape(None)])
        assert await ev(r[1]) == 65536.0


async def test_valid_cond_context():
    """control_flow_ops_py_test.py ControlFlowContextCheckTest.testValidCondContext"""
    with af.Graph().as_default():
        af.add(1, _cond_tensor())


async def test_valid_cond_context_branches():
    """control_flow_ops_py_test.py ControlFlowContextCheckTest.testValidCondContextBranches"""
    with af.Graph().as_default():
        cond_tensor = []
        def branch_fn():
            if not cond_tensor:
                cond_tensor.append(af.constant(1))
            return cond_tensor[0]
        af.cond(af.less(1, 2), branch_fn, branch_fn)


async def test_valid_while_context():
    """control_flow_ops_py_test.py ControlFlowContextCheckTest.testValidWhileContext"""
    with af.Graph().as_default():
        def body(_):
            c = af.constant(1)
            return af.while_loop(lambda i: i < 3, lambda i: i + c, [0])
        af.while_loop(lambda i: i < 5, body, [0])


async def test_valid_nested_contexts():
    """control_flow_ops_py_test.py ControlFlowContextCheckTest.testValidNestedContexts"""
    with af.Graph().as_default():
        def body(_):
            cond_tensor = _cond_tensor()
            return af.cond(af.less(1, 2),
                           lambda: af.while_loop(lambda i: i < 3, lambda i: i + cond_tensor, [0]),
                           lambda: af.constant(0))
        r = af.while_loop(lambda i: i < 5, body, [0])
        assert r.dtype == af.int32


async def test_invalid_nested_contexts():
    """control_flow_ops_py_test.py ControlFlowContextCheckTest.testInvalidNestedContexts"""
    with af.Graph().as_default():
        def true_fn():
            while_tensor = _while_tensor()
            return af.while_loop(lambda i: i < 3, lambda i: i + while_tensor, [0])
        with pytest.raises(ValueError, match="because they are in different while loops"):
            af.cond(af.less(1, 2), true_fn, lambda: af.constant(0))
