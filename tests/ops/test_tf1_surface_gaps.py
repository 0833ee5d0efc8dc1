"""Small TF1-surface gaps (rsmall); every expected value below is TF1's (1.15 compat.v1 graph
mode, run once, copied here: these tests need no TF).

- The softmax cross entropies' ops ignored TF1's naming: TF1 opens a scope ``name`` (default
  ``softmax_cross_entropy_with_logits``, the sparse one's ``SparseSoftmaxCrossEntropyWithLogits``)
  and names its kernel op the scope itself (``xent``; the sparse one ``sxent/sxent``); the
  float16 path's cast back is ``xent/Cast_2`` (sparse: ``sxent/Cast_1``). Here the cast back was
  a root ``Cast_4``. TF1's non-half loss is a ``xent/Reshape_2`` after its 2-D kernel ``xent``;
  ours takes any rank, so ``xent`` is the loss.
"""
import numpy as np
import pytest

import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)

LOGITS = [[1.0, 2.0, 3.0], [1.0, 0.0, -1.0]]
LABELS = [[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]]


def _xent_names():
    lg, lb = tf.constant(LOGITS), tf.constant(LABELS)
    nn = tf.nn
    made = [nn.softmax_cross_entropy_with_logits_v2(labels=lb, logits=lg, name="xent"),
            nn.softmax_cross_entropy_with_logits(labels=lb, logits=lg, name="xent1"),
            nn.sparse_softmax_cross_entropy_with_logits(labels=[2, 0], logits=lg, name="sxent"),
            nn.softmax_cross_entropy_with_logits_v2(labels=lb, logits=lg),
            nn.sparse_softmax_cross_entropy_with_logits(labels=[2, 0], logits=lg)]
    with tf.name_scope("outer"):
        made.append(nn.softmax_cross_entropy_with_logits_v2(labels=lb, logits=lg, name="xent"))
    lg16, lb16 = tf.cast(lg, tf.float16), tf.cast(lb, tf.float16)
    made += [nn.softmax_cross_entropy_with_logits_v2(labels=lb16, logits=lg16, name="hx"),
             nn.sparse_softmax_cross_entropy_with_logits(labels=[2, 0], logits=lg16, name="hs"),
             nn.softmax_cross_entropy_with_logits_v2(labels=lb16, logits=lg16),
             nn.sparse_softmax_cross_entropy_with_logits(labels=[2, 0], logits=lg16),
             nn.softmax_cross_entropy_with_logits_v2(labels=tf.cast(lb, tf.bfloat16),
                                                      logits=tf.cast(lg, tf.bfloat16), name="bx")]
    return made


def test_xent_names_follow_tf1():
    made = _xent_names()
    # TF1: the op each loss comes from (xent/Reshape_2's input xent:0, ...), and the casts.
    assert [t.op.name if t.op.type != "Cast" else t.name for t in made] == [
        "xent", "xent1", "sxent/sxent", "softmax_cross_entropy_with_logits",
        "SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits",
        "outer/xent", "hx/Cast_2:0", "hs/Cast_1:0", "softmax_cross_entropy_with_logits_1/Cast_2:0",
        "SparseSoftmaxCrossEntropyWithLogits_1/Cast_1:0", "bx/Cast_2:0"]
    assert [t.op.inputs[0].name for t in made[6:]] == [
        "hx:0", "hs/hs:0", "softmax_cross_entropy_with_logits_1:0",
        "SparseSoftmaxCrossEntropyWithLogits_1/SparseSoftmaxCrossEntropyWithLogits:0", "bx:0"]


def test_xent_values_unchanged_by_the_names():
    made = _xent_names()
    got = session_run(made)
    # TF1's losses (float32, and the float16 one's bits)
    full = [1.1076059, 0.40760595]
    sparse = [0.40760595, 0.40760595]
    for value, want in zip(got, [full, full, sparse, full, sparse, full]):
        np.testing.assert_allclose(value, want, rtol=1e-6)
    np.testing.assert_array_equal(got[6], np.array([1.107421875, 0.40771484375], np.float16))
