"""Small TF1-surface gaps (rsmall); every expected value below is TF1's (1.15 compat.v1 graph
mode, run once, copied here: these tests need no TF).

- The softmax cross entropies' ops ignored TF1's naming: TF1 opens a scope ``name`` (default
  ``softmax_cross_entropy_with_logits``, the sparse one's ``SparseSoftmaxCrossEntropyWithLogits``)
  and names its kernel op the scope itself (``xent``; the sparse one ``sxent/sxent``); the
  float16 path's cast back is ``xent/Cast_2`` (sparse: ``sxent/Cast_1``). Here the cast back was
  a root ``Cast_4``. TF1's non-half loss is a ``xent/Reshape_2`` after its 2-D kernel ``xent``;
  ours takes any rank, so ``xent`` is the loss.
- ``tf.batch_gather`` (TF1's deprecated ``gather`` with ``batch_dims = axis = rank(indices) - 1``)
  was missing.
- ``assert_rank`` / ``assert_rank_at_least`` / ``assert_rank_in`` took only Python int ranks
  (``int(tensor)``: TypeError); TF1 takes scalar int32 tensors: a constant one decided now, any
  other checked when the step runs, with TF1's data (``[msg] [Tensor x must have rank] [3]
  [Received shape: ] [1 2]``).
- ``verify_tensor_all_finite(t, msg, x=, message=)``: TF1 refuses both of an alias pair, a
  missing message (its CheckNumerics attr must be a string) and a None tensor; here they ran.
  ``assert_proper_iterable``: TF1 passes a Variable (its ``__iter__``), refuses a SparseTensor
  and says "to be iterable" of a non-iterable. ``assert_near(..., data=d, message=m)`` shows
  ``d`` alone in TF1; here ``[m] + d``.
"""
import numpy as np
import pytest

import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)
from gradcheck import check_gradients

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


def test_batch_gather_values_gradients_and_names_as_tf1():
    p = tf.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.5 - 3)
    a = tf.batch_gather(p, tf.constant([[2, 0], [1, 1]]))
    w = tf.constant(np.arange(16, dtype=np.float32).reshape(2, 2, 4) * 0.25)
    ga = tf.gradients(tf.reduce_sum(a * w), p)[0]
    b = tf.batch_gather(tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), [[2], [0]], name="bg")
    c = tf.batch_gather([10.0, 20.0, 30.0], [2, 0, 2])
    p3 = tf.constant(np.arange(12, dtype=np.float32).reshape(2, 2, 3))
    d = tf.batch_gather(p3, [[[2, 1], [0, 0]], [[1, 1], [2, 0]]])
    gd = tf.gradients(tf.reduce_sum(d * np.arange(8, dtype=np.float32).reshape(2, 2, 2)), p3)[0]
    # TF1's scopes (its result is BatchGather/Reshape_3 ...) and static shapes
    assert [t.name.split("/")[0] for t in (a, b, c, d)] == [
        "BatchGather", "bg", "BatchGather_1", "BatchGather_2"]
    assert [t.shape.as_list() for t in (a, b, c, d)] == [[2, 2, 4], [2, 1], [3], [2, 2, 2]]
    x = tf.placeholder(tf.float32, [None, 3])
    assert tf.batch_gather(x, [[0], [2]]).shape.as_list() == [2, 1]
    got = session_run([a, ga, b, c, d, gd])
    want = [  # TF1's
        [[[1.0, 1.5, 2.0, 2.5], [-3.0, -2.5, -2.0, -1.5]],
         [[5.0, 5.5, 6.0, 6.5], [5.0, 5.5, 6.0, 6.5]]],
        [[[1.0, 1.25, 1.5, 1.75], [0.0, 0.0, 0.0, 0.0], [0.0, 0.25, 0.5, 0.75]],
         [[0.0, 0.0, 0.0, 0.0], [5.0, 5.5, 6.0, 6.5], [0.0, 0.0, 0.0, 0.0]]],
        [[3.0], [4.0]],
        [30.0, 10.0, 30.0],
        [[[2.0, 1.0], [3.0, 3.0]], [[7.0, 7.0], [11.0, 9.0]]],
        [[[0.0, 1.0, 0.0], [5.0, 0.0, 0.0]], [[0.0, 9.0, 0.0], [7.0, 0.0, 6.0]]]]
    for value, expected in zip(got, want):
        np.testing.assert_array_equal(np.asarray(value), np.array(expected, np.float32))


async def test_batch_gather_gradient_against_finite_differences():
    ids = np.array([[[2, 1, 2], [0, 0, 1]], [[1, 1, 0], [2, 0, 2]]])
    params = np.random.RandomState(3).randn(2, 2, 3, 2)
    await check_gradients(lambda t: tf.batch_gather(t, ids), [params])


def test_batch_gather_refuses_as_tf1():
    p = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    with pytest.raises(ValueError, match="batch_gather does not allow indices with unknown"):
        tf.batch_gather(p, tf.placeholder(tf.int32))
    with pytest.raises(ValueError, match="axis 2 is out of range"):  # TF1: batch_dims 2 >= rank 2
        tf.batch_gather(p, [[[0]]])
    with pytest.raises(ValueError, match="dims of params"):  # TF1: Dimensions must be equal
        tf.batch_gather(p, [[0], [1], [0]])
    # TF1's CPU kernel reads [3] of row 0 as row 1's [0] (4.0); ours names the op and index
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"BatchGather.*indices\[0,0\] = 3"):
        session_run(tf.batch_gather(p, [[3], [0]]))


def test_assert_rank_takes_a_rank_tensor_as_tf1():
    x = tf.constant([[1.0, 2.0]])
    r1, r2, wanted = tf.constant(1), tf.constant(2), tf.placeholder(tf.int32, [])
    # constant rank tensors decide now, as TF1 (a NoOp, or TF1's ValueError)
    assert tf.assert_rank(x, r2).type == "NoOp"
    assert tf.assert_rank_in(x, [r1, r2]).type == "NoOp"
    assert tf.assert_rank_at_least(x, r1).type == "NoOp"
    with pytest.raises(ValueError, match="Tensor Const:0 must have rank 1"):
        tf.assert_rank(x, r1)
    with pytest.raises(ValueError, match=r"must have rank in \(1, 3\)"):
        tf.assert_rank_in(x, [r1, tf.constant(3)])
    with pytest.raises(ValueError, match="must have rank at least 3"):
        tf.assert_rank_at_least(x, tf.constant(3))
    # TF1's refusals: a non-scalar rank, a rank tensor not int32
    with pytest.raises(ValueError, match="Rank must be a scalar"):
        tf.assert_rank(x, tf.constant([2]))
    with pytest.raises(ValueError, match="Rank must be a scalar"):
        tf.assert_rank_in(x, (tf.constant([1]),))
    with pytest.raises(TypeError, match="must be of type int32; got float32"):
        tf.assert_rank(x, tf.constant(2.0))
    # a fed rank: an Assert (TF1's ar/Assert/Assert), checked when the step runs
    checks = {"rank": tf.assert_rank(x, wanted, name="ar"),
              "in": tf.assert_rank_in(x, [wanted, r1]),
              "at_least": tf.assert_rank_at_least(x, wanted)}
    assert {k: v.type for k, v in checks.items()} == dict.fromkeys(checks, "Assert")
    assert checks["rank"].name.startswith("ar/")
    for key, ok, bad in [("rank", 2, 3), ("in", 2, 3), ("at_least", 1, 3)]:
        session_run(checks[key], {wanted: ok})
        with pytest.raises(tf.errors.InvalidArgumentError) as failed:
            session_run(checks[key], {wanted: bad})
        # TF1's data: [] [Tensor Const:0 must have rank] [3] [Received shape: ] [1 2]
        words = {"rank": "rank] [3]", "in": "rank in] [3] [1]", "at_least": "rank at least] [3]"}
        assert f"[Tensor Const:0 must have {words[key]} [Received shape: ] [1 2]" in \
            str(failed.value)
    y = tf.placeholder(tf.float32)
    check = tf.assert_rank(y, r2)
    session_run(check, {y: [[1.0]]})
    with pytest.raises(tf.errors.InvalidArgumentError, match="must have rank"):
        session_run(check, {y: [1.0]})


def test_verify_tensor_all_finite_refuses_as_tf1():
    x = tf.constant([1.0, 2.0])
    for kwargs, error, words in [
            (dict(t=x, msg="m", x=x), ValueError, "Cannot specify both 't' and 'x'"),
            (dict(t=x, msg="a", message="b"), ValueError, "Cannot specify both 'msg' and 'message'"),
            (dict(t=x), TypeError, "Expected string for argument 'message' not None"),
            (dict(x=x), TypeError, "Expected string for argument 'message' not None"),
            (dict(msg="m"), ValueError, "None values not supported")]:
        with pytest.raises(error, match=words):
            tf.verify_tensor_all_finite(**kwargs)
    assert tf.verify_tensor_all_finite(x=x, message="b").name.startswith("VerifyFinite")
    with pytest.raises(tf.errors.InvalidArgumentError, match="not finite"):
        session_run(tf.debugging.assert_all_finite(x=tf.constant([np.inf]), message="not finite"))


def test_assert_proper_iterable_as_tf1():
    tf.assert_proper_iterable(tf.Variable([1.0, 2.0]))  # TF1: no error
    tf.assert_proper_iterable([tf.constant(1.0)])
    for value in (tf.constant([1.0]), tf.SparseTensor([[0]], [1.0], [2]), np.zeros(2), "ab"):
        with pytest.raises(TypeError, match='to be a "proper" iterable'):
            tf.assert_proper_iterable(value)
    with pytest.raises(TypeError, match='Expected argument "values" to be iterable.  Found'):
        tf.assert_proper_iterable(3)


def test_assert_near_shows_data_alone_as_tf1():
    x, y = tf.constant([1.0, 2.0]), tf.constant([1.0, 5.0])
    with pytest.raises(tf.errors.InvalidArgumentError) as failed:
        session_run(tf.assert_near(x, y, data=["d1", x], message="mmm"))
    assert "assertion failed: [d1] [1 2]" in str(failed.value)  # TF1's whole data
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[mmm\] \[x and y not equal"):
        session_run(tf.assert_near(x, y, message="mmm"))
