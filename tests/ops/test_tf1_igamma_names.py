"""TF1's ``tf.igamma`` and ``tf.igammac`` (also ``tf.math.*``), which porting.md listed as not
provided: values against scipy's reference points and TF1 (when TensorFlow is installed),
TF1's domain (NaN where a <= 0 or x < 0), broadcasting, the gradient with respect to x
against finite differences and TF1's, and the gradient with respect to a refused by name."""
import math

import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import check_gradients
from tf1_reference import compare_groups, tf1_run

A = np.array([0.0, -1.0, 0.5, 1.0, 2.5, 10.0, 100.0, np.inf, np.nan, 3.0, 1e-3, 30.0])
X = np.array([1.0, 1.0, 0.0, -1.0, 2.5, 3.0, 120.0, 1.0, 1.0, np.inf, 1e-4, 29.0])


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


async def test_values_domain_and_names():
    with af.Graph().as_default():
        outs = [tf.igamma(A, X), tf.igammac(A, X), tf.math.igamma(np.float32(2.0), [0.5, 4.0]),
                tf.math.igammac(np.array([[1.0], [3.0]]), np.array([2.0, 0.25]))]
        assert [o.name for o in outs] == ["Igamma:0", "Igammac:0", "Igamma_1:0", "Igammac_1:0"]
        assert [o.shape.as_list() for o in outs] == [[12], [12], [2], [2, 2]]
        values = await _run(outs)
    # P(1, x) = 1 - exp(-x); P(a, 0) = 0; NaN where a <= 0 or x < 0 (TF1's, not scipy's P(0, x))
    assert np.isnan(values[0][[0, 1, 3, 8]]).all() and np.isnan(values[1][[0, 1, 3, 8]]).all()
    assert values[0][2] == 0 and values[1][2] == 1 and values[0][9] == 1 and values[0][7] == 0
    np.testing.assert_allclose(values[0] + values[1], np.where(np.isnan(values[0]), np.nan, 1.0),
                               rtol=1e-15)
    assert values[2].dtype == np.float32
    np.testing.assert_allclose(values[2], [1 - 1.5 * math.exp(-0.5), 1 - 5 * math.exp(-4.0)],
                               rtol=1e-6)
    q = lambda a, x: math.exp(-x) if a == 1 else math.exp(-x) * (1 + x + x * x / 2)  # noqa: E731
    np.testing.assert_allclose(values[3], [[q(1, 2.0), q(1, 0.25)], [q(3, 2.0), q(3, 0.25)]],
                               rtol=1e-14)


@pytest.mark.parametrize("fn", [tf.igamma, tf.igammac], ids=["igamma", "igammac"])
async def test_gradient_with_respect_to_x(fn):
    a = np.array([[0.7], [2.5], [6.0]])
    await check_gradients(lambda x: fn(af.constant(a), x), [np.array([0.4, 1.3, 3.0, 7.5])])
    await check_gradients(lambda x: fn(af.stop_gradient(af.constant(a[:, 0])), x),
                          [np.array([0.4, 1.3, 3.0])])


def test_refusals_are_named():
    with af.Graph().as_default():
        a = af.placeholder(af.float64, [2])
        with pytest.raises(LookupError, match="Igamma 'Igamma' input 0: the gradient with "
                                              r"respect to a \(TF1's IgammaGradA\) is not "
                                              "provided"):
            af.gradients(tf.igamma(a, [1.0, 2.0]), [a])
        x = af.placeholder(af.float64, [2])  # (a on no path to x: a's gradient is not asked)
        assert af.gradients(tf.igammac(a * 2.0, x), [x])[0] is not None
        with pytest.raises(TypeError, match="Igamma: value passed to a has dtype int32"):
            tf.igamma([1, 2], [1, 2])
        with pytest.raises(TypeError, match="Igammac.*type float64 that does not match type "
                                            "float32"):
            tf.igammac(af.ones([2]), af.ones([2], af.float64))
        with pytest.raises(ValueError, match="Igamma"):
            tf.igamma(af.ones([2]), af.ones([3]))


def test_a_from_a_while_loop_is_on_the_path():
    # a is a loop's output computed from x: its gradient is asked for, so the refusal (not a
    # silent None because the walk met the loop's Exit rather than its unit)
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [3])
        _, a = af.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * 1.5),
                             [af.constant(0), x])
        with pytest.raises(LookupError, match="Igamma 'Igamma' input 0: the gradient with "
                                              "respect to a"):
            af.gradients(af.reduce_sum(tf.igamma(a, af.constant([1.0, 2.0, 3.0], af.float64))),
                         [x])


@pytest.mark.parametrize("fn, sign", [(tf.igamma, 1), (tf.igammac, -1)],
                         ids=["igamma", "igammac"])
async def test_constant_a_read_in_a_while_loop(fn, sign):
    # a constant a read in a loop body is one of the loop's invariants, off the path to x
    # (or a loop variable that x does not reach): its gradient is not asked for (TF1's values: acc + P(a, acc) once, d/dx 1 + P'(a, x))
    a, x0 = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 2.0])
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [3])
        const = af.constant(a)
        _, out = af.while_loop(lambda i, acc: i < 1,
                               lambda i, acc: (i + 1, acc + fn(const, acc)),
                               [af.constant(0), x])
        grad = af.gradients(af.reduce_sum(out), [x])[0]
        assert grad is not None
        # a as a loop variable that x does not reach: not differentiated either
        _, out2, _ = af.while_loop(lambda i, acc, av: i < 1,
                                   lambda i, acc, av: (i + 1, acc + fn(av, acc), av * 1.0),
                                   [af.constant(0), x, const])
        grad2 = af.gradients(af.reduce_sum(out2), [x])[0]
        value, value2 = await _run([grad, grad2], {x: x0})
        np.testing.assert_array_equal(value2, value)
    partial = np.exp(-x0) * x0 ** (a - 1) / np.array([math.gamma(v) for v in a])
    np.testing.assert_allclose(value, 1 + sign * partial, rtol=1e-12)


TF_SNIPPET = """
a = tf.constant(inputs["a"])
x = tf.constant(inputs["x"])
outs = [tf.igamma(a, x), tf.igammac(a, x), tf.math.igamma(a[:, :1], x[0]),
        tf.math.igammac(a[0, 2:], x[:, 2:]), tf.igamma(tf.cast(a, tf.float32), tf.cast(x, tf.float32))]
grads = [tf.gradients(tf.reduce_sum(tf.sin(o)), x)[0] for o in outs[:4]]
with tf.Session() as sess:
    outputs["outs"], outputs["grads"] = sess.run([outs, grads])
outputs["names"] = np.array([t.name for t in outs])
"""


async def test_against_tf1(tmp_path):
    rng = np.random.default_rng(9)
    inputs = {"a": rng.uniform(0.05, 12.0, (4, 5)), "x": rng.uniform(0.0, 15.0, (4, 5))}
    theirs = tf1_run(TF_SNIPPET, tmp_path, **inputs)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": inputs}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run([g["outs"], g["grads"]])
        names = [t.name for t in g["outs"]]
    assert names == theirs["names"].tolist()
    # TF1 computes float32 in float32 (a few ulps off: 3e-6 at worst on these); ours is
    # scipy's float64 rounded once. Both float64 forms are Cephes' series: 1e-13.
    compare_groups(values, theirs, ("outs", "grads"), rtol=1e-13, atol=1e-15,
                   float32=(1e-5, 1e-7))
