"""Issue 36's TF1 linear algebra names: ``tf.matrix_inverse``/``tf.linalg.inv``,
``tf.matrix_determinant``/``tf.linalg.det``, ``tf.cholesky``, ``tf.qr`` and ``tf.svd``:
values against numpy (always) and TF1 (when TensorFlow is installed), the inverse's,
determinant's and Cholesky factor's gradients against finite differences, and bad input
named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import check_gradients
from tf1_reference import compare_groups, tf1_run

RNG = np.random.default_rng(12)
A = RNG.standard_normal((2, 3, 3)) + 3 * np.eye(3)  # well conditioned
SPD = A @ np.swapaxes(A, -1, -2) + np.eye(3)
WIDE = RNG.standard_normal((2, 3, 5))


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


async def test_values_against_numpy():
    with af.Graph().as_default():
        p = af.placeholder(af.float64, [None, 3, 3])
        lower_only = np.tril(SPD) + np.triu(np.full((3, 3), 99.0), 1)  # upper part ignored
        q, r = tf.qr(WIDE)
        fq, fr = tf.qr(np.swapaxes(WIDE, -1, -2), full_matrices=True)
        s, u, v = tf.svd(WIDE)
        fs, fu, fv = tf.svd(WIDE, full_matrices=True)
        outs = [tf.matrix_inverse(p), tf.linalg.inv(A, adjoint=True), tf.matrix_determinant(p),
                tf.linalg.det(A.astype(np.float32)), tf.cholesky(SPD), tf.cholesky(lower_only),
                q, r, fq, fr, s, u, v, fs, fu, fv, tf.svd(A, compute_uv=False)]
        values = await _run(outs, {p: A})
    inv, inv_adj, det, det32, chol, chol_lower, q, r, fq, fr, s, u, v, fs, fu, fv, s_only = values
    np.testing.assert_allclose(inv, np.linalg.inv(A), rtol=1e-12)
    np.testing.assert_allclose(inv_adj, np.linalg.inv(np.swapaxes(A, -1, -2)), rtol=1e-12)
    np.testing.assert_allclose(det, np.linalg.det(A), rtol=1e-12)
    assert det32.dtype == np.float32 and det.shape == (2,) and outs[2].shape.as_list() == [None]
    np.testing.assert_allclose(det32, np.linalg.det(A), rtol=1e-5)
    np.testing.assert_allclose(chol, np.linalg.cholesky(SPD), rtol=1e-12)
    np.testing.assert_array_equal(chol_lower, chol)
    np.testing.assert_allclose(q @ r, WIDE, atol=1e-12)
    assert q.shape == (2, 3, 3) and r.shape == (2, 3, 5) and np.allclose(np.tril(r, -1), 0)
    np.testing.assert_allclose(fq @ fr, np.swapaxes(WIDE, -1, -2), atol=1e-12)
    assert fq.shape == (2, 5, 5) and fr.shape == (2, 5, 3)
    np.testing.assert_allclose(s, np.linalg.svd(WIDE, compute_uv=False), rtol=1e-12)
    np.testing.assert_allclose(u @ (s[..., None] * np.swapaxes(v, -1, -2)), WIDE, atol=1e-12)
    assert u.shape == (2, 3, 3) and v.shape == (2, 5, 3)
    assert fu.shape == (2, 3, 3) and fv.shape == (2, 5, 5)
    np.testing.assert_allclose(s_only, np.linalg.svd(A, compute_uv=False), rtol=1e-12)
    assert [o.shape.as_list() for o in outs[6:8]] == [[2, 3, 3], [2, 3, 5]]
    assert [o.shape.as_list() for o in outs[10:13]] == [[2, 3], [2, 3, 3], [2, 5, 3]]


@pytest.mark.parametrize("build", [
    tf.matrix_inverse, lambda t: tf.matrix_inverse(t, adjoint=True), tf.matrix_determinant,
    lambda t: tf.matrix_determinant(tf.matrix_inverse(t)),
    # Cholesky's gradient is symmetric (TF1's): check it on symmetric inputs, as TF1 does.
    lambda t: tf.cholesky(tf.matmul(t, t, transpose_b=True) + tf.eye(3, dtype=tf.float64)),
], ids=["inverse", "inverse_adjoint", "determinant", "det_of_inverse", "cholesky"])
async def test_gradients(build):
    await check_gradients(build, [A], rtol=1e-5)


def test_bad_input_is_named():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="MatrixInverse .*square"):
            tf.matrix_inverse(WIDE)
        with pytest.raises(ValueError, match="MatrixDeterminant .*at least 2-D"):
            tf.matrix_determinant([1.0, 2.0])
        with pytest.raises(TypeError, match="Cholesky.*int32"):
            tf.cholesky([[1, 0], [0, 1]])
        with pytest.raises(TypeError, match="Svd .*float32 or float64"):
            tf.svd(np.eye(2, dtype=np.float16))
        with pytest.raises(ValueError, match="Qr .*at least 2-D"):
            tf.qr([1.0])


async def test_singular_and_indefinite_inputs_fail_naming_the_op():
    with af.Graph().as_default():
        p = af.placeholder(af.float64)
        inverse = tf.matrix_inverse(p, name="invert")
        with pytest.raises(af.errors.InvalidArgumentError, match="invert.*not invertible"):
            await _run(inverse, {p: np.ones((2, 2))})
        factor = tf.cholesky(p, name="factor")
        with pytest.raises(af.errors.InvalidArgumentError, match="factor.*Cholesky"):
            await _run(factor, {p: -np.eye(2)})
        with pytest.raises(af.errors.InvalidArgumentError, match="invert.*square"):
            await _run(inverse, {p: WIDE})


TF_SNIPPET = """
a = tf.constant(inputs["a"])
outs = [tf.matrix_inverse(a), tf.linalg.inv(a, adjoint=True), tf.matrix_determinant(a),
        tf.linalg.det(tf.cast(a, tf.float32)), tf.cholesky(inputs["spd"]),
        tf.svd(inputs["wide"], compute_uv=False)]
q, r = tf.qr(inputs["wide"])
spd = tf.matmul(a, a, transpose_b=True) + tf.eye(3, dtype=tf.float64)
grads = tf.gradients(tf.reduce_sum(tf.sin(outs[0])) + tf.reduce_sum(tf.sin(outs[1]))
                     + tf.reduce_sum(tf.sin(outs[2])) + tf.reduce_sum(tf.sin(tf.cholesky(spd))), a)
with tf.Session() as sess:
    outputs["outs"], outputs["grads"], outputs["qr"] = sess.run([outs, grads, [q, r]])
"""


async def test_against_tf1(tmp_path):
    inputs = {"a": A, "spd": SPD, "wide": WIDE}
    theirs = tf1_run(TF_SNIPPET, tmp_path, **inputs)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": inputs}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run([g["outs"], g["grads"], [g["q"], g["r"]]])
    compare_groups(values[:2], theirs, ("outs", "grads"), rtol=1e-10, float32=(1e-5, 0))
    # A QR factorization is unique up to the signs of r's diagonal (q's columns follow).
    (q, r), (tq, tr) = values[2], theirs["qr"]
    signs = np.sign(np.diagonal(r, 0, -2, -1)) * np.sign(np.diagonal(tr, 0, -2, -1))
    np.testing.assert_allclose(q * signs[..., None, :], tq, atol=1e-10)
    np.testing.assert_allclose(r * signs[..., :, None], tr, atol=1e-10)
