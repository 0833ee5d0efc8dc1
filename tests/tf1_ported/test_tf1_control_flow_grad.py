"""TensorFlow 1.x's ``control_flow_ops_py_test.py``: the gradients of loops nested in conds and
of conds nested in loops, ported to asyncflow (the rest of that file is
``test_tf1_control_flow_ops.py``).

Each test keeps TF's inputs and expected values; its docstring names the TF method. Every test
runs with simple loops compiled and all dynamic. The last one runs one program under TF1 too
(when TensorFlow is importable) and compares the values.
"""
import numpy as np
import pytest

import asyncflow as af
import loop_modes
from tests.tf1_reference import tf1_run


@pytest.fixture(autouse=True, params=["compiled", "dynamic"])
def loop_mode(request):
    loop_modes.use(request.param)
    yield request.param
    loop_modes.use("compiled")


async def run(fetches, feed_dict=None):
    async with af.Session(config=loop_modes.config()) as sess:
        return await sess.run(fetches, feed_dict)


def _counted_inner_loop(s):
    z = af.constant(0)
    return af.while_loop(lambda i, x: af.less(i, 4),
                         lambda i, x: [af.add(i, 1), af.multiply(x, 2.0)], [z, s])


async def test_nested_while_cond_while_grad():
    """control_flow_ops_py_test.py ControlFlowTest.testNestedWhileCondWhileGrad"""
    with af.Graph().as_default():
        v = af.constant(1.0)

        def body(x):
            return af.cond(af.constant(True),
                           lambda: af.square(_counted_inner_loop(x)[1]),
                           lambda: af.multiply(x, 2.0))
        r = af.while_loop(lambda x: af.less(x, 128.0), body, [v])
        assert await run([r, af.gradients(r, v)[0]]) == [256.0, 512.0]


async def test_while_grad_in_cond():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileGradInCond"""
    with af.Graph().as_default():
        n = af.convert_to_tensor(1.0, name="n")
        x = af.placeholder(af.float32, shape=None)

        def fn1():
            r = af.while_loop(lambda n: af.less(n, 10.0), lambda n: af.add(n, x), [n],
                              [af.TensorShape(None)])
            return af.gradients(r, x)[0]
        r = af.cond(af.less(1, 2), fn1, lambda: x)
        assert await run(r, {x: 1.0}) == 9.0


async def test_cond_while_3():
    """control_flow_ops_py_test.py ControlFlowTest.testCondWhile_3 (a loop's gradient through
    the cond that holds it, both ways)"""
    with af.Graph().as_default():
        p = af.placeholder(af.bool)
        n = af.constant(0.0)
        r = af.cond(p, lambda: af.while_loop(lambda x: af.less(x, 10.0),
                                             lambda x: af.add(x, 1.0), [n]),
                    lambda: af.multiply(n, 2.0))
        r1 = af.gradients(r, [n])
        async with af.Session(config=loop_modes.config()) as sess:
            assert await sess.run(r, {p: True}) == 10.0
            assert await sess.run(r1, {p: True}) == [1.0]
            assert await sess.run(r, {p: False}) == 0.0
            assert await sess.run(r1, {p: False}) == [2.0]


async def test_cond_grad_in_nested_whiles():
    """control_flow_ops_py_test.py ControlFlowTest.testCondGradInNestedWhiles"""
    with af.Graph().as_default():
        def outer_body(i, x):
            _, x = af.while_loop(lambda j, x: j < 3, inner_body, [0, 0.0])
            return i + 1, x

        def inner_body(j, x):
            y = af.cond(af.less(x, 1), lambda: 2 * x, lambda: x)
            return j + 1, af.gradients(y, x)[0]
        i, x = af.while_loop(lambda i, x: i < 3, outer_body, [0, 0.0])
        i_val, x_val = await run([i, x])
        assert i_val == 3
        assert x_val == pytest.approx(1.0)


async def test_while_cond_grad_unknown_shape():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileCondGrad_UnknownShape"""
    with af.Graph().as_default():
        v = af.placeholder(af.float32)
        n = af.convert_to_tensor(100.0, name="n")
        one = af.convert_to_tensor(1.0, name="one")
        r = af.while_loop(lambda x: af.less(x, n),
                          lambda x: af.cond(af.constant(True), lambda: af.square(x),
                                            lambda: af.subtract(x, one)), [v])
        assert await run(af.gradients(r, v)[0], {v: 2.0}) == 1024.0


# A loop in a cond in a loop whose branch is taken in some iterations only, with a ragged
# inner trip count and inner reads of an outer invariant and of an outer-body value: the same
# source runs under TF1 (``tf``) and asyncflow (``af``).
_RAGGED = """
def ragged(tf, x0, w):
    def outer_body(i, x):
        z = tf.cos(x) * 0.5
        def taken():
            _, y = tf.while_loop(lambda j, y: j < i,
                                 lambda j, y: [j + 1, tf.sin(y) * w + y * z], [0, x])
            return y * x
        y = tf.cond(tf.equal(i % 2, 1), taken, lambda: x * w)
        return i + 1, y
    _, r = tf.while_loop(lambda i, x: i < 5, outer_body, [0, x0])
    return [r] + tf.gradients(r, [x0, w])
"""


async def test_loop_in_cond_in_loop_gradient_matches_tf1(tmp_path):
    namespace = {}
    exec(_RAGGED, namespace)
    with af.Graph().as_default():
        ours = await run(namespace["ragged"](af, af.constant(0.7), af.constant(0.9)))
    theirs = tf1_run(_RAGGED + """
with tf.Session() as sess:
    outputs["values"] = sess.run(ragged(tf, tf.constant(0.7), tf.constant(0.9)))
""", tmp_path)
    np.testing.assert_allclose(ours, theirs["values"], rtol=1e-5)
