"""Issue 36's TF1 matrix and array names: ``tf.eye``, ``tf.diag``/``diag_part``,
``tf.matrix_diag``/``matrix_diag_part``/``matrix_set_diag``/``matrix_band_part``, ``tf.trace``,
``tf.reverse``/``reverse_v2`` (and their ``tf.linalg`` spellings): values against numpy
(always) and TF1 (when TensorFlow is installed), gradients against finite differences, and
bad input named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import check_gradients
from tf1_reference import compare_groups, tf1_run

X = np.random.default_rng(4).standard_normal((2, 3, 4))


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


def _band_np(x, lower, upper):
    m, n = x.shape[-2:]
    offset = np.arange(m)[:, None] - np.arange(n)[None, :]
    keep = ((lower < 0) | (offset <= lower)) & ((upper < 0) | (-offset <= upper))
    return np.where(keep, x, 0)


def _set_diag_np(x, d):
    out = x.copy()
    k = min(x.shape[-2:])
    out[..., np.arange(k), np.arange(k)] = d
    return out


async def test_values_against_numpy():
    d = X[0, 0]
    square = X[:, :3, :3]
    with af.Graph().as_default():
        p = af.placeholder(af.float64, [None, None, 4])
        outs = [tf.eye(3), tf.eye(2, 4, batch_shape=[2], dtype=tf.int32), tf.linalg.eye(4, 2),
                tf.diag(d), tf.diag(X[0]), tf.diag_part(np.diag(d)),
                tf.diag_part(np.einsum("ij,kl->ijkl", X[0], np.ones((3, 4))) * np.eye(12)
                             .reshape(3, 4, 3, 4)),
                tf.matrix_diag(X), tf.matrix_diag_part(X), tf.linalg.diag_part(p),
                tf.matrix_set_diag(X, X[:, 0, :3]), tf.trace(X), tf.linalg.trace(square),
                tf.reverse(X, [0, -1]), tf.reverse_v2(X, [1]), tf.reverse(X, [])]
        outs += [tf.matrix_band_part(p, lo, up) for lo, up in [(0, 0), (1, 0), (-1, 0),
                                                               (0, -1), (2, 1), (-1, -1)]]
        values = await _run(outs, {p: X})
    expected = [np.eye(3), np.tile(np.eye(2, 4, dtype=np.int32), (2, 1, 1)), np.eye(4, 2),
                np.diag(d), np.einsum("ij,kl->ijkl", X[0], np.ones((3, 4))) * np.eye(12)
                .reshape(3, 4, 3, 4), d, X[0],
                X[..., None] * np.eye(4), np.diagonal(X, 0, -2, -1), np.diagonal(X, 0, -2, -1),
                _set_diag_np(X, X[:, 0, :3]), np.trace(X, 0, -2, -1),
                np.trace(square, 0, -2, -1), X[::-1, :, ::-1], X[:, ::-1], X]
    expected += [_band_np(X, lo, up) for lo, up in [(0, 0), (1, 0), (-1, 0), (0, -1), (2, 1),
                                                    (-1, -1)]]
    assert values[0].dtype == np.float32 and values[1].dtype == np.int32
    for i, (value, want) in enumerate(zip(values, expected)):
        np.testing.assert_allclose(value, want, rtol=1e-7, atol=0, err_msg=f"output {i}")
    assert [o.shape.as_list() for o in outs[7:9]] == [[2, 3, 4, 4], [2, 3]]
    assert outs[9].shape.as_list() == [None, None] and outs[4].shape.as_list() == [3, 4, 3, 4]


@pytest.mark.parametrize("build", [
    tf.matrix_diag, tf.matrix_diag_part, lambda t: tf.matrix_set_diag(t, t[:, 0, :3] * 2),
    lambda t: tf.matrix_band_part(t, 1, 0), lambda t: tf.matrix_band_part(t, -1, 1),
    tf.trace, lambda t: tf.reverse(t, [0, 2]), lambda t: tf.diag(t[0]),
    lambda t: tf.diag_part(tf.reshape(t[:, :2, :], [2, 2, 2, 2])),
], ids=["matrix_diag", "matrix_diag_part", "matrix_set_diag", "band_lower", "band_upper",
        "trace", "reverse", "diag", "diag_part"])
async def test_gradients(build):
    await check_gradients(build, [X])


def test_bad_input_is_named():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="MatrixDiag .*diagonal must be at least 1-D"):
            tf.matrix_diag(1.0)
        with pytest.raises(ValueError, match="MatrixDiagPart .*at least 2-D"):
            tf.matrix_diag_part([1.0, 2.0])
        with pytest.raises(ValueError, match="MatrixBandPart .*at least 2-D"):
            tf.matrix_band_part([1.0], 0, 0)
        with pytest.raises(ValueError, match="MatrixSetDiag .*diagonal must have shape"):
            tf.matrix_set_diag(X, X[:, :, :2])
        with pytest.raises(TypeError, match="MatrixSetDiag .*same dtype"):
            tf.matrix_set_diag(X, X[:, 0, :3].astype(np.float32))
        with pytest.raises(TypeError, match="matrix_band_part: num_lower"):
            tf.matrix_band_part(X, 0.5, 0)
        with pytest.raises(ValueError, match="trace: x must be at least 2-D"):
            tf.trace([1.0])
        with pytest.raises(ValueError, match="diag_part: .*even"):
            tf.diag_part(X)
        with pytest.raises(ValueError, match="diag_part: .*two halves"):
            tf.diag_part(X[0])
        with pytest.raises(ValueError, match="diag: diagonal must be at least 1-D"):
            tf.diag(1.0)
        with pytest.raises(ValueError, match="ReverseV2: axis 3 is out of range"):
            tf.reverse(X, [3])
        with pytest.raises(ValueError, match="ReverseV2: .*twice"):
            tf.reverse(X, [1, -2])
        with pytest.raises(TypeError, match="reverse: axis must be a list of integers"):
            tf.reverse(X, [0.5])
        with pytest.raises(ValueError, match="eye: sizes must be non-negative"):
            tf.eye(-1)


async def test_run_time_shape_errors_name_the_op():
    with af.Graph().as_default():
        p, q = af.placeholder(af.float64), af.placeholder(af.float64)
        out = tf.matrix_set_diag(p, q, name="setter")
        with pytest.raises(af.errors.InvalidArgumentError, match="setter"):
            await _run(out, {p: X, q: X[:, 0, :]})
        part = tf.matrix_diag_part(p, name="parter")
        with pytest.raises(af.errors.InvalidArgumentError, match="parter"):
            await _run(part, {p: X[0, 0]})


TF_SNIPPET = """
x = tf.constant(inputs["x"])
outs = [tf.eye(3), tf.eye(2, 4, batch_shape=[2], dtype=tf.int32), tf.linalg.eye(4, 2),
        tf.diag(x[0, 0]), tf.diag(x[0]), tf.diag_part(tf.diag(x[0])),
        tf.matrix_diag(x), tf.matrix_diag_part(x), tf.matrix_set_diag(x, x[:, 0, :3]),
        tf.trace(x), tf.linalg.trace(x[:, :3, :3]), tf.reverse(x, [0, -1]),
        tf.reverse_v2(x, [1]), tf.linalg.band_part(x, 1, 0), tf.linalg.diag(x[0]),
        tf.linalg.diag_part(x), tf.linalg.set_diag(x, x[:, 1, :3])]
outs += [tf.matrix_band_part(x, lo, up) for lo, up in [(0, 0), (1, 0), (-1, 0), (0, -1),
                                                       (2, 1), (-1, -1)]]
w = tf.constant(inputs["w"])
grads = [tf.gradients(tf.reduce_sum(tf.sin(o)), x)[0] for o in outs[3:]]
with tf.Session() as sess:
    outputs["outs"], outputs["grads"] = sess.run([outs, grads])
"""


async def test_against_tf1(tmp_path):
    w = np.random.default_rng(8).standard_normal(5)
    theirs = tf1_run(TF_SNIPPET, tmp_path, x=X, w=w)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": {"x": X, "w": w}}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run([g["outs"], g["grads"]])
    compare_groups(values, theirs, ("outs", "grads"))
