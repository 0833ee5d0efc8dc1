"""TF1's ``tf.metrics`` (issue 36): several batches streamed through each metric, against TF1
where TensorFlow is installed and against numpy always; local variables reset them."""
import numpy as np
import pytest

import asyncflow.compat.v1 as tf
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from tf1_reference import compat_run, tf1_run


SNIPPET = """
labels = tf.placeholder(tf.int64, [None])
preds = tf.placeholder(tf.int64, [None])
values = tf.placeholder(tf.float32, [None, 2])
weights = tf.placeholder(tf.float32, [None])
metrics = [
    tf.metrics.accuracy(labels, preds), tf.metrics.accuracy(labels, preds, weights=weights),
    tf.metrics.mean(values), tf.metrics.mean(values[:, 0], weights=weights),
    tf.metrics.mean_squared_error(values[:, 0], values[:, 1]),
    tf.metrics.mean_squared_error(values[:, 0], values[:, 1], weights=weights),
    tf.metrics.precision(labels, preds), tf.metrics.precision(labels, preds, weights=weights),
    tf.metrics.recall(labels, preds), tf.metrics.recall(labels, preds, weights=weights),
]
outputs["local"] = np.array(len(tf.local_variables()))
outputs["trainable"] = np.array(len(tf.trainable_variables()))
updates = [update for _, update in metrics]
finals = [value for value, _ in metrics]
with tf.Session() as sess:
    sess.run(tf.local_variables_initializer())
    steps = []
    for i in range(3):
        feed = {labels: inputs["labels"][i], preds: inputs["preds"][i],
                values: inputs["values"][i], weights: inputs["weights"][i]}
        steps.append(sess.run(updates, feed))
    outputs["steps"] = np.array(steps)
    outputs["finals"] = np.array(sess.run(finals))
    sess.run(tf.local_variables_initializer())
    outputs["reset"] = np.array(sess.run(finals))
"""


def _inputs():
    rng = np.random.RandomState(11)
    weights = rng.rand(3, 6).astype(np.float32)
    weights[1, :2] = 0.0
    return {"labels": rng.randint(0, 2, [3, 6]).astype(np.int64),
            "preds": rng.randint(0, 2, [3, 6]).astype(np.int64),
            "values": rng.normal(size=[3, 6, 2]).astype(np.float32), "weights": weights}


def _ours(inputs):
    return compat_run(SNIPPET, inputs)


def test_metrics_match_tf1(tmp_path):
    inputs = _inputs()
    ours = _ours(inputs)
    theirs = tf1_run(SNIPPET, tmp_path, **inputs)
    assert sorted(ours) == sorted(theirs)
    for name in ("local", "trainable", "steps", "finals", "reset"):
        assert ours[name].dtype == theirs[name].dtype, name
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_metrics_against_numpy():
    inputs = _inputs()
    out = _ours(inputs)
    assert out["local"] == 2 * 6 + 2 * 4 and out["trainable"] == 0
    for step in range(3):
        seen = slice(0, step + 1)
        y, p = inputs["labels"][seen].ravel(), inputs["preds"][seen].ravel()
        v, w = inputs["values"][seen].reshape(-1, 2), inputs["weights"][seen].ravel()
        w64 = w.astype(np.float64)
        tp, fp, fn = (y == 1) & (p == 1), (y == 0) & (p == 1), (y == 1) & (p == 0)
        expected = [
            (y == p).mean(), ((y == p) * w64).sum() / w64.sum(), v.mean(),
            (v[:, 0] * w64).sum() / w64.sum(), ((v[:, 0] - v[:, 1]) ** 2).mean(),
            ((v[:, 0] - v[:, 1]) ** 2 * w64).sum() / w64.sum(),
            tp.sum() / (tp.sum() + fp.sum()), (tp * w64).sum() / ((tp + fp) * w64).sum(),
            tp.sum() / (tp.sum() + fn.sum()), (tp * w64).sum() / ((tp + fn) * w64).sum(),
        ]
        np.testing.assert_allclose(out["steps"][step], expected, rtol=1e-5, err_msg=str(step))
    np.testing.assert_allclose(out["finals"], out["steps"][-1], rtol=1e-6)
    assert (out["reset"] == 0).all()  # no batch seen: 0, not NaN


def test_metric_collections_and_errors():
    value, update = tf.metrics.mean([1.0, 2.0], metrics_collections=["m"],
                                    updates_collections=["u"], name="avg")
    assert tf.get_collection("m") == [value] and tf.get_collection("u") == [update]
    names = sorted(v.op.name for v in tf.get_collection(tf.GraphKeys.METRIC_VARIABLES))
    assert names == ["avg/count", "avg/total"]
    with pytest.raises(ValueError, match="accuracy: predictions shape"):
        tf.metrics.accuracy(tf.zeros([3]), tf.zeros([4]))
    with pytest.raises(TypeError, match="mean: values must be numeric"):
        tf.metrics.mean(tf.constant(["a"]))
    with pytest.raises(TypeError, match="precision: labels must be bool or numeric"):
        tf.metrics.precision(tf.constant(["a"]), tf.constant([True]))
    with pytest.raises(ValueError, match="recall: labels and predictions must not be None"):
        tf.metrics.recall(None, tf.constant([True]))


AUC_SNIPPET = """
labels = tf.placeholder(tf.int64, [None])
scores = tf.placeholder(tf.float32, [None])
weights = tf.placeholder(tf.float32, [None])
metrics = [tf.metrics.auc(labels, scores), tf.metrics.auc(labels, scores, weights=weights),
           tf.metrics.auc(labels, scores, num_thresholds=7, summation_method="minoring"),
           tf.metrics.auc(labels, scores, curve="PR", num_thresholds=50),
           tf.metrics.auc(labels, scores, curve="PR", summation_method="majoring"),
           tf.metrics.auc(labels, scores, thresholds=[0.25, 0.5, 0.75])]
with tf.Session() as sess:
    sess.run(tf.local_variables_initializer())
    steps = []
    for i in range(3):
        feed = {labels: inputs["labels"][i], scores: inputs["scores"][i],
                weights: inputs["weights"][i]}
        steps.append(sess.run([u for _, u in metrics], feed))
    outputs["steps"] = np.array(steps)
    outputs["finals"] = np.array(sess.run([v for v, _ in metrics]))
"""


def _auc_inputs():
    rng = np.random.RandomState(21)
    labels = rng.randint(0, 2, [3, 40]).astype(np.int64)
    scores = np.clip(labels * 0.3 + rng.rand(3, 40) * 0.7, 0, 1).astype(np.float32)
    return {"labels": labels, "scores": scores,
            "weights": rng.rand(3, 40).astype(np.float32)}


def _auc_ours(inputs):
    outputs = {}
    exec(compile(AUC_SNIPPET, "snippet", "exec"),  # noqa: S102
         {"tf": tf, "np": np, "inputs": inputs, "outputs": outputs})
    return outputs


def test_auc_matches_tf1(tmp_path):
    inputs = _auc_inputs()
    ours = _auc_ours(inputs)
    theirs = tf1_run(AUC_SNIPPET, tmp_path, **inputs)
    for name in ("steps", "finals"):
        assert ours[name].dtype == theirs[name].dtype
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_auc_against_numpy():
    """With many thresholds the ROC area is the rank statistic P(score+ > score-)."""
    inputs = _auc_inputs()
    out = _auc_ours(inputs)
    for step in range(3):
        y = inputs["labels"][:step + 1].ravel().astype(bool)
        s = inputs["scores"][:step + 1].ravel().astype(np.float64)
        pos, neg = s[y], s[~y]
        exact = ((pos[:, None] > neg[None]) + 0.5 * (pos[:, None] == neg[None])).mean()
        assert abs(out["steps"][step][0] - exact) < 0.02, step
    np.testing.assert_allclose(out["finals"], out["steps"][-1], rtol=1e-6)
    assert out["finals"][2] <= out["finals"][0] + 1e-6  # minoring never exceeds trapezoids


def test_auc_errors():
    with pytest.raises(ValueError, match="auc: curve must be"):
        tf.metrics.auc([1, 0], [0.5, 0.5], curve="DET")
    with pytest.raises(ValueError, match="auc: careful_interpolation of a PR curve"):
        tf.metrics.auc([1, 0], [0.5, 0.5], curve="PR", summation_method="careful_interpolation")
    with pytest.raises(TypeError, match="auc: predictions must be numeric"):
        tf.metrics.auc([True], tf.constant(["a"]))
    value, update = tf.metrics.auc([1, 0], [0.5, 1.5])
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        with pytest.raises(tf.errors.InvalidArgumentError, match="predictions must be in"):
            sess.run(update)
