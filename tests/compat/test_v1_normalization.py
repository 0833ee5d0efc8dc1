"""``tf.nn.lrn``/``local_response_normalization`` and ``tf.nn.fused_batch_norm`` (issue 36):
values and gradients against TF1 where TensorFlow is installed, numpy always, gradients
against finite differences, and bad input named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from gradcheck import check_gradients
from tf1_reference import compare_groups, compat_run, tf1_run


SNIPPET = """
x = tf.constant(inputs["x"])
scale, offset = tf.constant(inputs["scale"]), tf.constant(inputs["offset"])
lrns = [tf.nn.lrn(x), tf.nn.local_response_normalization(x, depth_radius=2, bias=2.0,
                                                         alpha=0.3, beta=0.75)]
lrn_grads = tf.gradients(tf.reduce_sum(lrns[1] * inputs["w"]) + tf.reduce_sum(lrns[0]), x)
train = tf.nn.fused_batch_norm(x, scale, offset, epsilon=0.01)
infer = tf.nn.fused_batch_norm(x, scale, offset, mean=inputs["mean"],
                               variance=inputs["var"], is_training=False)
bn_grads = tf.gradients(tf.reduce_sum(train[0] * inputs["w"]) + tf.reduce_sum(infer[0] ** 2),
                        [x, scale, offset])
with tf.Session() as sess:
    outputs["lrns"], outputs["lrn_grads"], outputs["train"], outputs["infer"], \\
        outputs["bn_grads"] = sess.run([lrns, lrn_grads, list(train), list(infer), bn_grads])
"""


def _inputs():
    rng = np.random.RandomState(8)
    return {"x": rng.normal(size=[2, 3, 4, 7]).astype(np.float32),
            "w": rng.normal(size=[2, 3, 4, 7]).astype(np.float32),
            "scale": rng.uniform(0.5, 1.5, [7]).astype(np.float32),
            "offset": rng.normal(size=[7]).astype(np.float32),
            "mean": rng.normal(size=[7]).astype(np.float32),
            "var": rng.uniform(0.5, 2.0, [7]).astype(np.float32)}


def _ours(inputs):
    return compat_run(SNIPPET, inputs)


def test_normalization_matches_tf1(tmp_path):
    inputs = _inputs()
    ours = _ours(inputs)
    theirs = tf1_run(SNIPPET, tmp_path, **inputs)
    assert sorted(ours) == sorted(theirs)
    compare_groups([ours[name] for name in sorted(ours)], theirs, sorted(ours), rtol=1e-4, atol=1e-5)


def _lrn(x, radius, bias, alpha, beta):
    padded = np.pad(x * x, [(0, 0)] * 3 + [(radius, radius)])
    sums = sum(padded[..., k:k + x.shape[-1]] for k in range(2 * radius + 1))
    return x / (bias + alpha * sums) ** beta


def test_normalization_against_numpy():
    inputs = _inputs()
    out = _ours(inputs)
    x = inputs["x"].astype(np.float64)
    np.testing.assert_allclose(out["lrns"][0], _lrn(x, 5, 1.0, 1.0, 0.5), rtol=1e-5)
    np.testing.assert_allclose(out["lrns"][1], _lrn(x, 2, 2.0, 0.3, 0.75), rtol=1e-5)
    mean, var = x.mean((0, 1, 2)), x.var((0, 1, 2))
    y = (x - mean) / np.sqrt(var + 0.01) * inputs["scale"] + inputs["offset"]
    np.testing.assert_allclose(out["train"][0], y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["train"][1], mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["train"][2], var * 24 / 23, rtol=1e-4)  # Bessel-corrected
    y = (x - inputs["mean"]) / np.sqrt(inputs["var"] + 0.001) * inputs["scale"] + inputs["offset"]
    np.testing.assert_allclose(out["infer"][0], y, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out["infer"][1], inputs["mean"])


@pytest.mark.trio
async def test_normalization_gradients_against_finite_differences():
    rng = np.random.RandomState(6)
    point = rng.normal(size=[2, 2, 3, 6])
    await check_gradients(lambda v: af.nn.lrn(v, depth_radius=2, bias=1.5, alpha=0.4,
                                              beta=0.75), [point])
    await check_gradients(lambda v: af.nn.lrn(v, depth_radius=0), [point])
    await check_gradients(lambda v, s, o: af.nn.fused_batch_norm(v, s, o)[0],
                          [point, rng.uniform(0.5, 1.5, [6]), rng.normal(size=[6])])
    moving = rng.normal(size=[6]), rng.uniform(0.5, 1.5, [6])
    await check_gradients(lambda v, s, o: af.nn.fused_batch_norm(
        v, s, o, moving[0], moving[1], is_training=False)[0],
        [point, rng.uniform(0.5, 1.5, [6]), rng.normal(size=[6])])
    await check_gradients(lambda v: af.nn.fused_batch_norm(
        v, np.ones(2), np.zeros(2), data_format="NCHW")[0], [rng.normal(size=[3, 2, 2, 2])])


def test_fused_batch_norm_half_keeps_float32_statistics():
    x = np.random.RandomState(1).rand(2, 3, 3, 4).astype(np.float16)
    y, mean, var = tf.nn.fused_batch_norm(x, np.ones(4, np.float32), np.zeros(4, np.float32))
    assert (y.dtype, mean.dtype, var.dtype) == (tf.float16, tf.float32, tf.float32)
    with tf.Session() as sess:
        y, mean = sess.run([y, mean])
    wide = x.astype(np.float64)
    expected = (wide - wide.mean((0, 1, 2))) / np.sqrt(wide.var((0, 1, 2)) + 0.001)
    np.testing.assert_allclose(y, expected, atol=1e-2)
    np.testing.assert_allclose(mean, wide.mean((0, 1, 2)), rtol=1e-3)


def test_normalization_errors_name_the_op():
    with pytest.raises(ValueError, match="LRN.*4-D"):
        tf.nn.lrn(tf.zeros([3, 4]))
    with pytest.raises(TypeError, match="LRN.*int32"):
        tf.nn.lrn(tf.zeros([1, 1, 1, 3], tf.int32))
    with pytest.raises(ValueError, match="fused_batch_norm: x must be 4-D"):
        tf.nn.fused_batch_norm(tf.zeros([3, 4]), [1.0] * 4, [0.0] * 4)
    with pytest.raises(ValueError, match="fused_batch_norm: mean and variance are required"):
        tf.nn.fused_batch_norm(tf.zeros([1, 2, 2, 4]), [1.0] * 4, [0.0] * 4, is_training=False)
    with pytest.raises(ValueError, match="fused_batch_norm: data_format"):
        tf.nn.fused_batch_norm(tf.zeros([1, 2, 2, 4]), [1.0] * 4, [0.0] * 4, data_format="NWHC")
