"""The softmax cross entropies as TF1's (2.21's ``tf.compat.v1``, v2 behaviour off) where
their inputs' shapes differ or are unknown:

- labels that broadcast to the logits, by TF1's rule (both as ``[rows, classes]`` matrices,
  the class axis last: the labels' rows and classes each the logits' or 1), e.g. logits
  ``[3, 4]`` with labels ``[1, 4]``, ``[4]`` or ``[3, 1]``: TF1 computes the loss (``[3]``);
  asyncflow refused ("logits and labels must have the same shape"). Labels whose matrix does
  not broadcast (``[3, 4]`` for logits ``[2, 3, 4]``: ``[3, 4]`` against ``[6, 4]``) both
  refuse, while building when the shapes are known, else when the op runs.
- logits of unknown rank, ``dim=-1``: TF1 builds and resolves the axis when it runs;
  asyncflow refused ("a negative axis needs a known rank"), and refused the sparse form's
  gradient ("needs logits of known rank").
- TF1's gradient reshapes the labels' gradient to their shape, so with labels that
  broadcast ``tf.gradients`` fails (ValueError while building when the shapes are known, an
  InvalidArgumentError when it runs otherwise): so it does here.

Not copied: logits that would broadcast to the labels (logits ``[3, 1]``, labels ``[3, 4]``;
TF1 computes the loss but fails to differentiate it) are refused here. TF1 on random shapes:
tests/ops/test_tf1_nn_fuzz.py."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)

RNG = np.random.default_rng(7)
LOGITS = RNG.standard_normal((3, 4))


def _expected(logits, labels, axis=-1):
    logits = np.moveaxis(logits, axis, -1)
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    flat = np.moveaxis(labels, axis if labels.ndim == logits.ndim else -1, -1)
    flat = np.broadcast_to(flat.reshape(-1, flat.shape[-1]), (log_p.size // log_p.shape[-1],
                                                              log_p.shape[-1]))
    return -(flat.reshape(log_p.shape) * log_p).sum(-1)


@pytest.mark.parametrize("form", ["v1", "v2"])
@pytest.mark.parametrize("label_shape", [(1, 4), (4,), (3, 1), (3, 4)])
@pytest.mark.parametrize("fed", [False, True])
def test_labels_that_broadcast_to_the_logits(form, label_shape, fed):
    op = tf.nn.softmax_cross_entropy_with_logits if form == "v1" else \
        tf.nn.softmax_cross_entropy_with_logits_v2
    labels = RNG.random(label_shape)
    if fed:
        x, y = tf.placeholder(tf.float64), tf.placeholder(tf.float64)
        loss = op(labels=y, logits=x)
        assert loss.shape.ndims is None
        got = session_run(loss, {x: LOGITS, y: labels})
    else:
        loss = op(labels=tf.constant(labels), logits=tf.constant(LOGITS))
        assert loss.shape.as_list() == [3]
        got = session_run(loss)
    np.testing.assert_allclose(got, _expected(LOGITS, labels), rtol=1e-12)


def test_labels_that_broadcast_along_dim_0():
    # dim=0 moves the class axis last in both: labels [1, 3] for logits [4, 3] are [3, 1].
    logits, labels = RNG.standard_normal((4, 3)), RNG.random((1, 3))
    loss = tf.nn.softmax_cross_entropy_with_logits_v2(labels=tf.constant(labels),
                                                      logits=tf.constant(logits), dim=0)
    np.testing.assert_allclose(session_run(loss), _expected(logits, labels, axis=0),
                               rtol=1e-12)


def test_the_logits_gradient_with_fed_labels_that_broadcast():
    # TF1's gradient of sum(w * loss) is w * (softmax(logits) - labels), per row (its kernel's
    # backprop, exact for labels that sum to 1), with the labels' row broadcast.
    x, y = tf.placeholder(tf.float64), tf.placeholder(tf.float64)
    w = np.array([1.0, -2.0, 0.5])
    loss = tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=x)
    grad = tf.gradients(loss, x, grad_ys=tf.constant(w))[0]
    # Its own generator: the module's RNG is drawn by whichever tests ran before on this
    # worker, and an entry of ``probs - labels`` near 0 (a cancellation: 2e-05 from values
    # near 0.5) has a relative error far above the others', so an absolute floor too.
    labels = np.random.default_rng(11).random((1, 4))
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
    want = w[:, None] * (probs - labels)
    np.testing.assert_allclose(session_run(grad, {x: LOGITS, y: labels}), want, rtol=1e-12,
                               atol=1e-15)


def test_labels_that_do_not_broadcast_are_refused():
    logits = tf.constant(RNG.standard_normal((2, 3, 4)))
    for shape in [(3, 4), (1, 3, 4), (2, 1, 4), (2, 3, 5)]:
        with pytest.raises(ValueError, match="do not broadcast to logits"):
            tf.nn.softmax_cross_entropy_with_logits(labels=tf.constant(np.ones(shape)),
                                                    logits=logits)
    with pytest.raises(ValueError, match="labels must have >= 1 dimension"):
        tf.nn.softmax_cross_entropy_with_logits(labels=tf.constant(1.0),
                                                logits=tf.constant(np.ones((2, 3), np.float32)))
    x, y = tf.placeholder(tf.float64), tf.placeholder(tf.float64)
    loss = tf.nn.softmax_cross_entropy_with_logits_v2(labels=y, logits=x)
    with pytest.raises(af.errors.InvalidArgumentError,
                       match=r"SoftmaxCrossEntropyWithLogits .*must be broadcastable: "
                             r"logits_size=\[6,4\] labels_size=\[3,4\]"):
        session_run(loss, {x: np.ones((2, 3, 4)), y: np.ones((3, 4))})
    with pytest.raises(ValueError, match="do not broadcast"):  # the logits' classes: refused
        tf.nn.softmax_cross_entropy_with_logits(labels=tf.constant(np.ones((3, 4))),
                                                logits=tf.constant(np.ones((3, 1))))


def test_differentiating_labels_that_broadcast_fails_as_in_tf1():
    logits, labels = tf.constant(LOGITS), tf.constant(RNG.random((1, 4)))
    loss = tf.nn.softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits)
    with pytest.raises(ValueError, match="Reshape"):
        tf.gradients(loss, [logits])
    x, y = tf.placeholder(tf.float64), tf.placeholder(tf.float64)
    fed = tf.nn.softmax_cross_entropy_with_logits_v2(labels=y, logits=x)
    grad_labels = tf.gradients(fed, [y])[0]
    with pytest.raises(af.errors.InvalidArgumentError, match="Reshape"):
        session_run(grad_labels, {x: LOGITS, y: RNG.random((1, 4))})
    same = RNG.random((3, 4))  # equal shapes: the labels' gradient, -log softmax
    log_p = LOGITS - np.log(np.exp(LOGITS).sum(-1, keepdims=True))
    np.testing.assert_allclose(session_run(grad_labels, {x: LOGITS, y: same}), -log_p,
                               rtol=1e-12)


def test_sparse_gradient_with_logits_of_unknown_rank():
    x, known = tf.placeholder(tf.float64), tf.placeholder(tf.float64, [2, 3, 4])
    labels = np.array([[0, 3, 1], [2, 2, 0]], np.int32)
    grads = [tf.gradients(tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=t) ** 2), t)[0] for t in (x, known)]
    value = RNG.standard_normal((2, 3, 4))
    got, want = session_run(grads, {x: value, known: value})
    assert grads[0].shape.ndims is None
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_lower_rank_labels_with_the_class_axis_given_non_negative_broadcast_as_with_minus_one():
    # TF1 fails to build this (it moves axis 1 of the rank-1 labels by the logits' rank 2):
    # here, as docs/porting.md says, the labels broadcast as they do with axis=-1.
    labels = np.array([0.25, 0.25, 0.5, 0.0])
    given, last = [tf.nn.softmax_cross_entropy_with_logits_v2(
        labels=tf.constant(labels), logits=tf.constant(LOGITS), axis=axis) for axis in (1, -1)]
    got = session_run([given, last])
    np.testing.assert_allclose(got[0], got[1])
    np.testing.assert_allclose(got[0], _expected(LOGITS, labels), rtol=1e-6)


@pytest.mark.parametrize("labels", [np.ones((3, 4)), np.float64(1.0), np.ones(4)])
def test_a_refused_labels_shape_names_the_op_once(labels):
    # Building prefixes "SoftmaxCrossEntropyWithLogits '<name>': "; the messages began with
    # "SoftmaxCrossEntropyWithLogits <name>: " again.
    logits = tf.constant(RNG.standard_normal((2, 3, 4)))
    with pytest.raises(ValueError) as raised:
        tf.nn.softmax_cross_entropy_with_logits_v2(labels=tf.constant(labels), logits=logits,
                                                   axis=1 if labels.ndim == 1 else -1,
                                                   name="xent")
    message = str(raised.value)
    assert message.startswith("SoftmaxCrossEntropyWithLogits 'xent': labels ") and \
        message.count("xent") == 1, message
