"""Issue 36's TF1 special functions ``tf.erf``/``tf.math.erf``, ``tf.lgamma`` and
``tf.digamma``: values against the C library (``math.erf``, ``math.lgamma``) and a float64
reference, against TF1 when TensorFlow is installed, gradients against finite differences,
and bad input named."""
import math

import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import check_gradients
from tf1_reference import compare_groups, tf1_run

POINTS = np.concatenate([np.linspace(-7, 7, 281), [-1e-8, 0.0, 1e-8, 1e-3, 0.999, 1.001]])
POSITIVE = np.concatenate([np.logspace(-6, 2.5, 120), [0.5, 1.0, 1.5, 2.0, 2.5, 11.9, 12.1]])


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


def _lgamma(v):
    try:
        return math.lgamma(v)
    except ValueError:  # a pole: TF1 gives inf
        return math.inf


def _ulps(a, b):
    """How many float32 steps apart ``a`` and ``b`` (float32 arrays of one sign) are."""
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


def _digamma_reference(x):
    """psi by the recurrence to x >= 40 and the asymptotic series (float64, independent)."""
    x = float(x)
    if x <= 0:
        return _digamma_reference(1 - x) - math.pi / math.tan(math.pi * x)
    shift = 0.0
    while x < 40:
        shift -= 1 / x
        x += 1
    return shift + math.log(x) - 0.5 / x - 1 / (12 * x * x) + 1 / (120 * x ** 4) \
        - 1 / (252 * x ** 6)


async def test_values_against_the_c_library():
    x32 = POINTS.astype(np.float32)
    with af.Graph().as_default():
        outs = [tf.erf(POINTS), tf.math.erf(x32), tf.lgamma(POINTS), tf.lgamma(x32),
                tf.digamma(POSITIVE), tf.math.digamma(-POSITIVE[:40] - 0.25), tf.math.lgamma(-2.0)]
        erf64, erf32, lg64, lg32, psi, psi_neg, pole = await _run(outs)
    np.testing.assert_array_equal(erf64, [math.erf(v) for v in POINTS])
    exact32 = np.array([math.erf(float(v)) for v in x32], np.float32)
    assert erf32.dtype == np.float32 and (_ulps(np.abs(erf32), np.abs(exact32)) <= 1).all()
    np.testing.assert_array_equal(lg64, [_lgamma(v) for v in POINTS])
    np.testing.assert_array_equal(lg32, np.array([_lgamma(float(v)) for v in x32],
                                                 np.float32))
    np.testing.assert_allclose(psi, [_digamma_reference(v) for v in POSITIVE], rtol=1e-13,
                               atol=1e-15)
    np.testing.assert_allclose(psi_neg, [_digamma_reference(v) for v in -POSITIVE[:40] - 0.25],
                               rtol=1e-12)
    assert pole == np.inf


@pytest.mark.parametrize("build,point", [
    (tf.erf, np.linspace(-2.5, 2.5, 12)), (tf.lgamma, np.linspace(0.3, 9, 12)),
    (tf.lgamma, -np.linspace(0.2, 3.7, 7) - 0.13),  # between the poles
], ids=["erf", "lgamma", "lgamma_negative"])
async def test_gradients(build, point):
    await check_gradients(build, [point])


def test_bad_dtypes_are_named():
    with af.Graph().as_default():
        for build, op in [(tf.erf, "Erf"), (tf.lgamma, "Lgamma"), (tf.digamma, "Digamma")]:
            with pytest.raises(TypeError, match=f"{op}: value passed to x has dtype int32"):
                build(af.constant([1, 2]))


TF_SNIPPET = """
x = tf.constant(inputs["x"])
p = tf.constant(inputs["p"])
outs = [tf.erf(x), tf.math.erf(tf.cast(x, tf.float32)), tf.lgamma(p), tf.digamma(p),
        tf.lgamma(tf.cast(p, tf.float32)), tf.digamma(tf.cast(p, tf.float32)),
        tf.math.lgamma(-p - 0.25), tf.math.digamma(-p - 0.25)]
grads = tf.gradients(tf.reduce_sum(tf.sin(outs[0])) + tf.reduce_sum(tf.sin(outs[2])), [x, p])
with tf.Session() as sess:
    outputs["outs"], outputs["grads"] = sess.run([outs, grads])
"""


async def test_against_tf1(tmp_path):
    inputs = {"x": POINTS, "p": POSITIVE[10:100]}
    theirs = tf1_run(TF_SNIPPET, tmp_path, **inputs)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": inputs}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run([g["outs"], g["grads"]])
    # TF1 computes float32 digamma in float32 (digamma(1) is 4 ulps off there); ours is
    # float64 rounded once, so float32 results agree to TF's error, not to an ulp.
    compare_groups(values, theirs, ("outs", "grads"), rtol=1e-12, atol=1e-15,
                   float32=(2e-6, 1e-12))
