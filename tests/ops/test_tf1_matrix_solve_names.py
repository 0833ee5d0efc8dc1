"""TF1's ``tf.matrix_solve``, ``tf.matrix_triangular_solve`` and ``tf.cholesky_solve`` (also
``tf.linalg.solve``/``triangular_solve``/``cholesky_solve``; porting.md listed them as not
provided): values, names, static shapes and gradients against TF1 running the same program,
gradients against finite differences, refusals named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import check_gradients
from tf1_reference import compare_groups, compat_run, tf1_run

SNIPPET = """
a = tf.constant(inputs["a"])
b = tf.constant(inputs["b"])
low = tf.constant(inputs["low"])
outs = [tf.matrix_solve(a, b), tf.matrix_solve(a, b, adjoint=True, name="adj"),
        tf.linalg.solve(a[0], b[0]),
        tf.matrix_triangular_solve(low, b), tf.matrix_triangular_solve(low, b, adjoint=True),
        tf.matrix_triangular_solve(tf.transpose(low, [0, 2, 1]), b, lower=False),
        tf.linalg.triangular_solve(low * 2.0, b, lower=True),
        tf.cholesky_solve(low, b), tf.linalg.cholesky_solve(low[1], b[1]),
        tf.matrix_solve(tf.cast(a, tf.float32), tf.cast(b, tf.float32))]
outputs["names"] = np.array([t.name for t in outs])
outputs["shapes"] = np.array([str(t.shape.as_list()) for t in outs])
grads = []
for t in outs[:9]:
    grads += tf.gradients(tf.reduce_sum(tf.sin(t)), [a, b, low])
grads = [g for g in grads if g is not None]
refused = []
for build in (lambda: tf.matrix_solve(a, b[..., :2, :]),
              lambda: tf.matrix_solve(a[:, :, :2], b),
              lambda: tf.matrix_solve(tf.cast(a, tf.int32), tf.cast(b, tf.int32)),
              lambda: tf.matrix_solve(a, tf.cast(b, tf.float32))):
    try:
        build()
        refused.append("none")
    except Exception as e:
        refused.append(type(e).__name__)
outputs["refused"] = np.array(refused)
with tf.Session() as sess:
    outputs["outs"] = sess.run(outs)
    outputs["grads"] = sess.run(grads)
    try:
        sess.run(tf.matrix_solve(tf.zeros([2, 2], tf.float64), b[0, :2]))
        outputs["singular"] = np.array(["none"])
    except tf.errors.InvalidArgumentError as e:
        outputs["singular"] = np.array(["InvalidArgumentError", "not invertible" in str(e)])
"""

RNG = np.random.default_rng(2)
_A = RNG.standard_normal((2, 3, 3)) + 3 * np.eye(3)
_L = np.tril(RNG.standard_normal((2, 3, 3))) + 2 * np.eye(3) + np.triu(np.ones((3, 3)), 1)
INPUTS = {"a": _A, "b": RNG.standard_normal((2, 3, 4)), "low": _L}


def _here():
    with af.Graph().as_default():
        return compat_run(SNIPPET, INPUTS)


def test_against_tf1(tmp_path):
    theirs = tf1_run(SNIPPET, tmp_path, **INPUTS)
    ours = _here()
    for key in ("names", "shapes", "refused", "singular"):
        assert list(ours[key]) == list(theirs[key]), key
    compare_groups([ours["outs"], ours["grads"]], theirs, ["outs", "grads"], rtol=1e-9,
                   atol=1e-12, float32=(1e-5, 1e-6))


def test_values_here():
    out = _here()
    a, b, low = INPUTS["a"], INPUTS["b"], np.tril(INPUTS["low"])
    np.testing.assert_allclose(np.einsum("bij,bjk->bik", a, out["outs"][0]), b, atol=1e-12)
    np.testing.assert_allclose(np.einsum("bji,bjk->bik", a, out["outs"][1]), b, atol=1e-12)
    np.testing.assert_allclose(np.einsum("bij,bjk->bik", low, out["outs"][3]), b, atol=1e-12)
    np.testing.assert_allclose(out["outs"][5], out["outs"][4] * 0 + np.linalg.solve(
        np.swapaxes(low, 1, 2), b), atol=1e-12)
    np.testing.assert_allclose(out["outs"][7], np.linalg.solve(
        low @ np.swapaxes(low, 1, 2), b), atol=1e-10)
    assert list(out["refused"]) == ["ValueError", "ValueError", "TypeError", "TypeError"]


@pytest.mark.parametrize("build", [
    lambda a, b: tf.matrix_solve(a, b), lambda a, b: tf.matrix_solve(a, b, adjoint=True),
    lambda a, b: tf.matrix_triangular_solve(a, b),
    lambda a, b: tf.matrix_triangular_solve(a, b, lower=False, adjoint=True),
    lambda a, b: tf.cholesky_solve(a, b),
], ids=["solve", "solve_adjoint", "triangular", "triangular_upper_adjoint", "cholesky_solve"])
async def test_gradients(build):
    await check_gradients(build, [INPUTS["low"], INPUTS["b"]])
