"""TensorFlow 1.x's ``python/ops/gradients_test.py``, ported to asyncflow.

Each test keeps TF's inputs, expected values and error classes; its docstring names the TF
method. (TF's ``_OpsBetween`` tests exercise a private helper, and its aggregation-method
and IndexedSlices tests options asyncflow does not have: gradients are dense and summed
with AddN.)
"""
import numpy as np
import pytest

import asyncflow as af


def test_gradients():
    """gradients_test.py GradientsTest.testGradients"""
    with af.Graph().as_default():
        inp = af.constant(1.0, shape=[32, 100], name="in")
        w = af.constant(1.0, shape=[100, 10], name="w")
        b = af.constant(1.0, shape=[10], name="b")
        xw = af.matmul(inp, w, name="xw")
        h = af.nn.bias_add(xw, b, name="h")
        w_grad = af.gradients(h, w)[0]
    assert w_grad.op.type == "MatMul"
    assert w_grad.op.get_attr("transpose_a")
    assert not w_grad.op.get_attr("transpose_b")


def test_unused_output():
    """gradients_test.py GradientsTest.testUnusedOutput"""
    with af.Graph().as_default():
        w = af.constant(1.0, shape=[2, 2])
        x = af.constant(1.0, shape=[2, 2])
        wx = af.matmul(w, x)
        split_wx = af.split(wx, 2, axis=0)
        c = af.reduce_sum(split_wx[1])
        gw = af.gradients(c, [w])[0]
    assert gw.op.type == "MatMul"


def test_boundary_stop():
    """gradients_test.py GradientsTest.testBoundaryStop"""
    with af.Graph().as_default():
        c = af.constant(1.0)
        x = af.identity(c)
        y = x + 1.0
        z = y + 1
        grads = af.gradients(z, [x])
        assert all(g is not None for g in grads)


async def test_boundary_continue():
    """gradients_test.py GradientsTest.testBoundaryContinue"""
    with af.Graph().as_default():
        x = af.constant(1.0)
        y = x * 2.0
        z = y * 3.0
        grads = af.gradients(z, [x, y])
        assert all(g is not None for g in grads)
        async with af.Session() as sess:
            assert await sess.run(grads[0]) == 6.0


async def test_aggregation():
    """gradients_test.py GradientsTest.testAggregationMethodAddN (the default method)"""
    with af.Graph().as_default():
        x = af.constant(1.0)
        y = x * 2.0
        z = y + y + y + y + y + y + y + y + y + y
        grads = af.gradients(z, [x, y])
        async with af.Session() as sess:
            assert await sess.run(grads) == [20.0, 10.0]


def test_stop_gradient():
    """gradients_test.py StopGradientTest.testStopGradient"""
    with af.Graph().as_default():
        inp = af.constant(1.0, shape=[100, 32], name="in")
        out = af.stop_gradient(inp)
        assert af.gradients(out, inp)[0] is None


async def test_hessian_vector_product():
    """gradients_test.py HessianVectorProductTest.testHessianVectorProduct (TF's private
    ``_hessian_vector_product`` is two af.gradients calls)"""
    m = 4
    rng = np.random.RandomState([1, 2, 3])
    mat_value = rng.randn(m, m).astype("float32")
    v_value = rng.randn(m, 1).astype("float32")
    x_value = rng.randn(m, 1).astype("float32")
    hess_v_value = np.dot(mat_value + mat_value.T, v_value)
    with af.Graph().as_default():
        mat, v, x = af.constant(mat_value), af.constant(v_value), af.constant(x_value)
        mat_x = af.matmul(mat, x, name="Ax")
        x_mat_x = af.matmul(af.transpose(x), mat_x, name="xAx")
        grad = af.gradients(x_mat_x, [x])[0]
        hess_v = af.gradients(af.multiply(grad, af.stop_gradient(v)), [x])[0]
        async with af.Session() as sess:
            np.testing.assert_allclose(await sess.run(hess_v), hess_v_value, rtol=1e-5)


async def test_gradients_in_while_body_without_crossing_a_loop():
    """control_flow_ops_py_test.py ControlFlowTest.testGradInWhileWrtInitialLoopVal's
    simpler form: af.gradients of ops inside one iteration of the body."""
    with af.Graph().as_default():
        def body(i, x):
            y = x * x * 3.0
            return i + 1, af.gradients(y, x)[0]
        r = af.while_loop(lambda i, x: i < 3, body, [af.constant(0), af.constant(1.0)])
        async with af.Session() as sess:
            assert await sess.run(r) == [3, 216.0]


async def test_dependent_ys():
    """gradients_test.py GradientsTest.testDependentYs"""
    with af.Graph().as_default():
        x = af.constant(3.0)
        y = af.square(x)
        y1 = af.square(y)
        y2 = af.square(y1)
        z = af.identity(y)
        z2 = af.identity(y2)
        async with af.Session() as sess:
            assert await sess.run(af.gradients([y, y2], x)[0]) == 17502.0
            assert await sess.run(af.gradients(y + y2, x)[0]) == 17502.0
            assert await sess.run(af.gradients([z, z2], x)[0]) == 17502.0


async def test_partial_derivatives():
    """gradients_test.py GradientsTest.testPartialDerivatives"""
    with af.Graph().as_default():
        x = af.constant(1.)
        y = 2 * x
        z = x + y
        async with af.Session() as sess:
            assert await sess.run(af.gradients(z, [x, y])) == [3.0, 1.0]
            assert await sess.run(af.gradients(z, [x, y], stop_gradients=[x, y])) == [1.0, 1.0]


def test_non_differentiable_switch_in_while_loop():
    """gradients_test.py GradientsTest.testNonDifferentiableSwitchInWhileLoop: a loop
    invariant read only through an integer cast has no gradient (None, not zeros)."""
    with af.Graph().as_default():
        v = af.placeholder(af.float32, [])

        def step(i, a, ta):
            a += af.cast(v, af.int32)
            return (i + 1, a, ta.write(i, a))
        n = 4
        i, _, ta = af.while_loop(lambda i, *_: i < n, step,
                                 [0, 0, af.TensorArray(af.int32, size=n)])
        target = ta.read(i - 1)
        grad, = af.gradients(target, v)
        assert grad is None


async def test_unconnected_gradients_zero():
    """gradients_test.py GradientsTest.testUnconnectedGradientsZerosUnconnectedGradients and
    testUnconnectedGradientsZeroConnectedGradients (TF 1.13's ``unconnected_gradients``)"""
    with af.Graph().as_default():
        x = af.constant(1.0, shape=[2, 2])
        y = af.constant(3.0, shape=[3, 1])
        assert af.gradients([y], [x]) == [None]
        grads = af.gradients([y], [x], unconnected_gradients="zero")
        connected = af.gradients(x * 3.0, [x],
                                 unconnected_gradients=af.UnconnectedGradients.ZERO)
        async with af.Session() as sess:
            np.testing.assert_array_equal((await sess.run(grads))[0], np.zeros([2, 2]))
            np.testing.assert_array_equal((await sess.run(connected))[0], np.full([2, 2], 3.0))
        with pytest.raises(ValueError, match="unconnected_gradients must be"):
            af.gradients([y], [x], unconnected_gradients="nothing")
