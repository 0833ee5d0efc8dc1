"""TF1's ``tf.losses`` (issue 36): values against TF1 itself where TensorFlow is installed,
against numpy always, gradients against finite differences, and the LOSSES collection."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from gradcheck import check_gradients as _check_gradients
from tf1_reference import compare_groups, compat_run, tf1_run


SNIPPET = """
L = tf.losses
R = tf.losses.Reduction
y, p, w = inputs["y"], inputs["p"], inputs["w"]
onehot, logits, classes = inputs["onehot"], inputs["logits"], inputs["classes"]
binary = inputs["binary"]
results = [
    L.absolute_difference(y, p), L.absolute_difference(y, p, weights=w),
    L.mean_squared_error(y, p, weights=w, reduction=R.MEAN),
    L.mean_squared_error(y, p, weights=2.0, reduction=R.SUM),
    L.huber_loss(y, p, weights=w, delta=0.5),
    L.huber_loss(y, p, reduction=R.NONE, loss_collection=None),
    L.log_loss(binary, inputs["prob"], weights=w[:, :1]),
    L.hinge_loss(binary, p, reduction=R.SUM_OVER_BATCH_SIZE),
    L.sigmoid_cross_entropy(binary, p, weights=w, label_smoothing=0.2),
    L.softmax_cross_entropy(onehot, logits), L.softmax_cross_entropy(onehot, logits,
                                                                     label_smoothing=0.1),
    L.softmax_cross_entropy(onehot, logits, weights=inputs["row_w"]),
    L.sparse_softmax_cross_entropy(classes, logits, weights=inputs["row_w"]),
    L.sparse_softmax_cross_entropy(classes[:, None], logits, weights=inputs["row_w"][:, None]),
    L.mean_squared_error(y, p, weights=np.zeros_like(w)),
]
logits_t = tf.constant(logits)
grads = tf.gradients(L.softmax_cross_entropy(onehot, logits_t, label_smoothing=0.1)
                     + L.sparse_softmax_cross_entropy(classes, logits_t), logits_t)
count = len(tf.losses.get_losses())
total = tf.losses.get_total_loss()
with tf.Session() as sess:
    outputs["results"], outputs["grads"], outputs["total"] = sess.run([results, grads, total])
outputs["count"] = np.array(count)
"""


def _inputs():
    rng = np.random.RandomState(3)
    w = rng.rand(4, 3).astype(np.float32)
    w[1, 2] = 0.0
    w[3, 0] = 0.0
    classes = np.array([0, 2, 1, 2], np.int32)
    return {"y": rng.normal(size=[4, 3]).astype(np.float32),
            "p": rng.normal(size=[4, 3]).astype(np.float32), "w": w,
            "binary": (rng.rand(4, 3) > 0.5).astype(np.float32),
            "prob": rng.uniform(0.05, 0.95, [4, 3]).astype(np.float32),
            "onehot": np.eye(3, dtype=np.float32)[classes], "classes": classes,
            "logits": rng.normal(size=[4, 3]).astype(np.float32),
            "row_w": np.array([1.0, 0.0, 2.0, 0.5], np.float32)}


def _ours(inputs):
    return compat_run(SNIPPET, inputs)


def test_losses_match_tf1(tmp_path):
    inputs = _inputs()
    ours = _ours(inputs)
    theirs = tf1_run(SNIPPET, tmp_path, **inputs)
    assert sorted(ours) == sorted(theirs)
    compare_groups([ours["results"]], theirs, ["results"], rtol=1e-5, atol=1e-6)
    for name in ("grads", "total", "count"):
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, atol=1e-6, err_msg=name)


def _xent(onehot, logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return -(onehot * (shifted - np.log(np.exp(shifted).sum(-1, keepdims=True)))).sum(-1)


def test_losses_against_numpy():
    inputs = _inputs()
    out = _ours(inputs)["results"]
    y, p, w = (inputs[k].astype(np.float64) for k in ("y", "p", "w"))
    nonzero = (w != 0).sum()
    np.testing.assert_allclose(out[0], np.abs(p - y).mean(), rtol=1e-5)
    np.testing.assert_allclose(out[1], (np.abs(p - y) * w).sum() / nonzero, rtol=1e-5)
    np.testing.assert_allclose(out[2], ((p - y) ** 2 * w).sum() / w.sum(), rtol=1e-5)
    np.testing.assert_allclose(out[3], ((p - y) ** 2 * 2).sum(), rtol=1e-5)
    err = np.abs(p - y)
    quad = np.minimum(err, 0.5)
    np.testing.assert_allclose(out[4], ((0.5 * quad ** 2 + 0.5 * (err - quad)) * w).sum()
                               / nonzero, rtol=1e-5)
    quad = np.minimum(err, 1.0)
    np.testing.assert_allclose(out[5], 0.5 * quad ** 2 + (err - quad), rtol=1e-5)
    b, prob = inputs["binary"], inputs["prob"].astype(np.float64)
    log = -b * np.log(prob + 1e-7) - (1 - b) * np.log(1 - prob + 1e-7)
    np.testing.assert_allclose(out[6], (log * w[:, :1]).sum() / (3 * (w[:, :1] != 0).sum()),
                               rtol=1e-5)
    np.testing.assert_allclose(out[7], np.maximum(0, 1 - (2 * b - 1) * p).mean(), rtol=1e-5)
    smooth = b * 0.8 + 0.1
    sig = np.maximum(p, 0) - p * smooth + np.log1p(np.exp(-np.abs(p)))
    np.testing.assert_allclose(out[8], (sig * w).sum() / nonzero, rtol=1e-5)
    onehot, logits, row_w = inputs["onehot"], inputs["logits"].astype(np.float64), inputs["row_w"]
    np.testing.assert_allclose(out[9], _xent(onehot, logits).mean(), rtol=1e-5)
    np.testing.assert_allclose(out[10], _xent(onehot * 0.9 + 0.1 / 3, logits).mean(), rtol=1e-5)
    expected = (_xent(onehot, logits) * row_w).sum() / (row_w != 0).sum()
    for i in (11, 12, 13):
        np.testing.assert_allclose(out[i], expected, rtol=1e-5, err_msg=str(i))
    assert out[14] == 0.0  # all weights zero: 0, not NaN (div_no_nan)
    assert all(r.dtype == np.float32 for r in out)


def test_loss_collection_and_total_loss():
    x = af.constant([1.0, 2.0])
    assert tf.losses.get_losses() == []
    first = tf.losses.mean_squared_error([0.0, 0.0], x)
    tf.losses.absolute_difference([0.0, 0.0], x, loss_collection=None)
    extra = af.constant(3.0)
    tf.losses.add_loss(extra)
    assert tf.losses.get_losses() == [first, extra]
    with af.variable_scope("reg", regularizer=lambda v: 0.5 * af.reduce_sum(v)):
        af.get_variable("v", initializer=af.constant([1.0, 3.0]))
    assert len(tf.losses.get_regularization_losses()) == 1
    assert tf.GraphKeys.REGULARIZATION_LOSSES == "regularization_losses"
    total = tf.losses.get_total_loss()
    without = tf.losses.get_total_loss(add_regularization_losses=False)
    reg = tf.losses.get_regularization_loss()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run([total, without, reg]) == pytest.approx([2.5 + 3 + 2, 5.5, 2.0])
    af.reset_default_graph()
    with pytest.raises(ValueError, match="get_total_loss: no losses"):
        tf.losses.get_total_loss()
    with tf.Session() as sess:
        assert sess.run(tf.losses.get_regularization_loss()) == 0.0


@pytest.mark.trio
async def test_loss_gradients_against_finite_differences():
    # TF1 reduces losses in float32 whatever the inputs' dtype, so the float64 differences
    # take a larger step and looser tolerances than float64 ops get.
    async def check_gradients(build, inputs):
        await _check_gradients(build, inputs, delta=1e-3, rtol=2e-3, atol=2e-4)

    rng = np.random.RandomState(5)
    labels = rng.normal(size=[3, 4])
    weights = rng.rand(3, 4)
    onehot = np.eye(4)[[1, 3, 0]]
    await check_gradients(lambda p: af.losses.huber_loss(labels, p, weights=weights, delta=0.7),
                          [rng.normal(size=[3, 4])])
    await check_gradients(lambda p: af.losses.mean_squared_error(labels, p, weights=weights),
                          [rng.normal(size=[3, 4])])
    await check_gradients(lambda p: af.losses.log_loss(onehot, p),
                          [rng.uniform(0.2, 0.8, [3, 4])])
    await check_gradients(lambda z: af.losses.sigmoid_cross_entropy(
        onehot, z, label_smoothing=0.1, reduction=af.losses.Reduction.MEAN),
        [rng.normal(size=[3, 4])])
    await check_gradients(lambda z: af.losses.softmax_cross_entropy(
        onehot, z, weights=weights[:, 0], label_smoothing=0.2),
                          [rng.normal(size=[3, 4])])
    await check_gradients(lambda z: af.losses.sparse_softmax_cross_entropy([1, 3, 0], z),
                          [rng.normal(size=[3, 4])])


def test_loss_errors_name_the_op():
    with pytest.raises(ValueError, match="mean_squared_error: predictions shape"):
        tf.losses.mean_squared_error(tf.zeros([3]), tf.zeros([4]))
    with pytest.raises(ValueError, match="softmax_cross_entropy: logits shape"):
        tf.losses.softmax_cross_entropy(tf.zeros([2, 3]), tf.zeros([2, 4]))
    with pytest.raises(TypeError, match="sparse_softmax_cross_entropy: labels must be integers"):
        tf.losses.sparse_softmax_cross_entropy(tf.zeros([2]), tf.zeros([2, 4]))
    with pytest.raises(TypeError, match="huber_loss: labels must be numeric"):
        tf.losses.huber_loss(tf.constant(["a"]), tf.zeros([1]))
    with pytest.raises(ValueError, match="log_loss: labels must not be None"):
        tf.losses.log_loss(None, tf.zeros([1]))
    with pytest.raises(ValueError, match="Invalid Reduction Key"):
        tf.losses.absolute_difference(tf.zeros([1]), tf.zeros([1]), reduction="avg")
