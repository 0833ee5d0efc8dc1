"""Pooling and the softmax cross entropies in float16 and bfloat16, against TF1's bits.

- ``max_pool`` of bfloat16 failed in its kernel ("Invalid integer data type 'V'": ml_dtypes'
  bfloat16 has no float ``kind``, so the padding's lowest value came from ``iinfo``); float16
  ran. TF1's CPU kernels take both.
- ``softmax_cross_entropy_with_logits`` (v1 and v2) of float16 and bfloat16, and the sparse one
  of float16, are computed by TF1 in float32: its Python wrapper casts the logits (and labels)
  up and the loss back, so the gradient is float32's too. Here they ran in half precision:
  up to 3.0 off for 1000 bfloat16 classes, float16 losses a last bit off ("float16 xent last
  bit"). The sparse one of bfloat16 runs in bfloat16 in TF1 (its kernel's own arithmetic,
  whose bits numpy does not reproduce: within a bfloat16 ulp or two).
"""
import numpy as np
import pytest

import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)
from tf1_reference import compat_run, tf1_run

HALVES = ("float16", "bfloat16")

XENT = """
rng = np.random.RandomState(1)
for dt in (tf.float16, tf.bfloat16):
    cases = []
    for shape in [(64, 10), (16, 1000), (3, 4, 5)]:
        l = (rng.randn(*shape) * 3).astype(np.float32)
        lb = rng.dirichlet(np.ones(shape[-1]), int(np.prod(shape[:-1]))).reshape(shape)
        logits = tf.cast(tf.constant(l), dt)
        labels = tf.cast(tf.constant(lb.astype(np.float32)), dt)
        for xent in (tf.nn.softmax_cross_entropy_with_logits_v2,
                     tf.nn.softmax_cross_entropy_with_logits):
            loss = xent(labels=labels, logits=logits)
            cases += [loss, tf.gradients(tf.reduce_sum(loss * loss), logits)[0]]
    ids = rng.randint(0, 10, 64)
    logits = tf.cast(tf.constant((rng.randn(64, 10) * 3).astype(np.float32)), dt)
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=logits)
    cases += [loss, tf.gradients(tf.reduce_sum(loss * loss), logits)[0]]
    with tf.Session() as sess:
        outputs[dt.name] = sess.run([tf.cast(c, tf.float32) for c in cases])
"""

POOL = """
rng = np.random.RandomState(2)
x = rng.randint(-4, 5, (2, 6, 7, 3)).astype(np.float32) / 2  # ties
x[0, 1, 1, 0] = np.nan
x[1, 2:4, 2:4, 1] = -np.inf
x[0, 4, 5, 2] = np.inf
w = rng.randn(2, 6, 7, 3).astype(np.float32)
for dt in (tf.float16, tf.bfloat16):
    t = tf.cast(tf.constant(x), dt)
    fetched = []
    for ksize, strides, padding in [((2, 2), (2, 2), "SAME"), ((3, 3), (1, 2), "VALID"),
                                    ((3, 2), (2, 1), "SAME")]:
        k, s = [1, ksize[0], ksize[1], 1], [1, strides[0], strides[1], 1]
        for pool in (tf.nn.max_pool, tf.nn.avg_pool):
            y = pool(t, k, s, padding)
            weights = tf.cast(tf.constant(w[:, :y.shape[1], :y.shape[2]]), dt)
            fetched += [y, tf.gradients(tf.reduce_sum(y * weights), t)[0]]
        fetched.append(tf.nn.max_pool(t * 1, k, s, padding))  # no gradient pairs this one
    with tf.Session() as sess:
        outputs[dt.name] = sess.run([tf.cast(f, tf.float32) for f in fetched])
"""


def test_half_precision_cross_entropies_are_float32_ones_rounded():
    # TF1's rule, checked here without TF: the half loss is the float32 loss rounded once
    rng = np.random.RandomState(0)
    logits = (rng.randn(16, 300) * 4).astype(np.float32)
    labels = rng.dirichlet(np.ones(300), 16).astype(np.float32)
    for dtype in (tf.float16, tf.bfloat16):
        half_logits, half_labels = tf.cast(logits, dtype), tf.cast(labels, dtype)
        half = tf.nn.softmax_cross_entropy_with_logits_v2(labels=half_labels,
                                                          logits=half_logits)
        wide = tf.nn.softmax_cross_entropy_with_logits_v2(
            labels=tf.cast(half_labels, tf.float32), logits=tf.cast(half_logits, tf.float32))
        assert half.dtype is dtype
        got, want = session_run([tf.cast(half, tf.float32), tf.cast(tf.cast(wide, dtype),
                                                                    tf.float32)])
        np.testing.assert_array_equal(got, want)
    ids = rng.randint(0, 300, 16)
    half = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids,
                                                          logits=tf.cast(logits, tf.float16))
    wide = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=ids, logits=tf.cast(tf.cast(logits, tf.float16), tf.float32))
    assert half.dtype is tf.float16
    got, want = session_run([half, tf.cast(wide, tf.float16)])
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_half_precision_cross_entropies_as_tf1(tmp_path):
    ours = compat_run(XENT, {})
    theirs = tf1_run(XENT, tmp_path)
    for name in HALVES:
        pairs = list(zip(ours[name], theirs[name]))
        sparse = pairs[-2:]
        for i, (got, want) in enumerate(pairs[:-2]):
            if i in (5, 7):  # [16, 1000]'s gradients: float32 sums in another order can
                # round a rare element the other way (one in 16000 seen)
                assert (got != want).sum() <= 2, f"{name} output {i}"
                np.testing.assert_allclose(got, want, rtol=2 ** -7, err_msg=f"{name} output {i}")
                continue
            np.testing.assert_array_equal(got, want, err_msg=f"{name} output {i}")
        for got, want in sparse:
            if name == "float16":
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=2 ** -6, atol=2 ** -7)


@pytest.mark.parametrize("name", HALVES)
def test_half_precision_max_pool_runs_as_float32_does(name):
    # The max of half values is one of them, and each window's gradient goes to one cell: the
    # float32 pool of the same values gives the same bits (NaN and -inf windows included)
    rng = np.random.RandomState(3)
    x = rng.randint(-4, 5, (2, 5, 5, 3)).astype(np.float32) / 2
    x[0, 0, 0, 0], x[1, 1:3, 1:3, 2] = np.nan, -np.inf
    weights = np.arange(1.0, 55.0, dtype=np.float32).reshape(2, 3, 3, 3)
    dtype = getattr(tf, name)
    outs = []
    for t, w in ((tf.cast(x, dtype), tf.cast(weights, dtype)),
                 (tf.cast(tf.cast(x, dtype), tf.float32), tf.constant(weights))):
        y = tf.nn.max_pool(t, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        grad = tf.gradients(tf.reduce_sum(y * w), t)[0]
        assert y.dtype is t.dtype and grad.dtype is t.dtype
        outs += [tf.cast(y, tf.float32), tf.cast(grad, tf.float32)]
    y, grad, wide_y, wide_grad = session_run(outs)
    np.testing.assert_array_equal(y, wide_y)
    np.testing.assert_array_equal(grad, wide_grad)
    assert sorted(grad[grad != 0].tolist()) == weights.reshape(-1).tolist()


def test_half_precision_pools_as_tf1(tmp_path):
    ours = compat_run(POOL, {})
    theirs = tf1_run(POOL, tmp_path)
    for name in HALVES:
        for i, (got, want) in enumerate(zip(ours[name], theirs[name])):
            overlapping_grad = i in (6, 8, 11, 13)  # half sums of overlapping windows
            if overlapping_grad:  # added in another order and rounding than TF1's kernels
                np.testing.assert_allclose(got, want, rtol=2 ** -6, atol=2 ** -6,
                                           err_msg=f"{name} output {i}")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{name} output {i}")


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("strides", [(2, 2), (1, 1)])
def test_half_precision_max_pool_gradient_of_inf_and_nan(name, strides):
    # An inf or NaN incoming gradient goes to its window's winning cell only (TF1's answer):
    # bfloat16's gradients were multiplied by the 0/1 masks as if finite, 0 * inf putting NaN
    # in every losing cell of those windows (its numpy kind is "V", not "f").
    x = np.array([[1, 5, 2, 0], [3, 4, 7, 1], [np.nan, 2, 0, 0], [1, 1, 6, 2]], np.float32)
    dtype = getattr(tf, name)
    t = tf.constant(x.reshape(1, 4, 4, 1), dtype)
    fetched = []
    for relu in (False, True):  # (a ReLU after the pool: the gradient by the forward's taps)
        y = tf.nn.max_pool(t, [1, 2, 2, 1], [1, *strides, 1], "VALID")
        y = tf.nn.relu(y) if relu else y
        n = int(y.shape[1])
        upstream = np.ones([1, n, n, 1], np.float32)
        upstream[0, 0, 0, 0], upstream[0, -1, -1, 0] = np.inf, np.nan
        grad = tf.gradients(y, t, grad_ys=tf.constant(upstream, dtype))[0]
        fetched.append(tf.cast(grad, tf.float32))
    plain, after_relu = (g.reshape(4, 4) for g in session_run(fetched))
    if strides == (2, 2):  # TF1's (2.21 compat.v1) answers
        want = [[0, np.inf, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0], [0, 0, np.nan, 0]]
    else:
        want = [[0, np.inf, 0, 0], [0, 1, 4, 0], [1, 0, 0, 0], [0, 0, np.nan, 0]]
    np.testing.assert_array_equal(plain, want)
    np.testing.assert_array_equal(after_relu, want)  # (every window's maximum is positive)


@pytest.mark.parametrize("name", HALVES)
def test_half_precision_reductions_and_segments(name):
    # bfloat16 (numpy kind "V") took the integer paths: an empty max/min and the unsorted
    # segment max/min (their identities from iinfo) failed, and segment_mean summed and
    # divided as integers ([1, 0, 3] for TF1's [1.5, 0, 3.5]).
    dtype = getattr(tf, name)
    empty = tf.zeros([0], dtype)
    data = tf.constant([1.0, 2.0, 3.5], dtype)
    got = session_run([tf.cast(t, tf.float32) for t in (
        tf.reduce_max(empty), tf.reduce_min(empty), tf.segment_mean(data, [0, 0, 2]),
        tf.segment_max(data, [0, 0, 2]), tf.unsorted_segment_max(data, [0, 0, 2], 4),
        tf.unsorted_segment_min(data, [0, 0, 2], 4))])
    lowest = float(tf.cast(tf.constant(-np.inf), dtype).dtype.min)
    assert got[0] == -np.inf and got[1] == np.inf
    np.testing.assert_array_equal(got[2], [1.5, 0.0, 3.5])
    np.testing.assert_array_equal(got[3], [2.0, 0.0, 3.5])
    np.testing.assert_array_equal(got[4], [2.0, lowest, 3.5, lowest])
    np.testing.assert_array_equal(got[5], [1.0, -lowest, 3.5, -lowest])


MIXED_LABELS = """
l = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], np.float32)
y = np.array([[0.1, 0.3, 0.6], [0.7, 0.2, 0.1]], np.float32)
cases = []
for dt in (tf.float16, tf.bfloat16):
    logits = tf.constant(l, dt)
    for xent in (tf.nn.softmax_cross_entropy_with_logits_v2,
                 tf.nn.softmax_cross_entropy_with_logits):
        cases += [xent(labels=tf.constant(y), logits=logits), xent(labels=y, logits=logits)]
cases.append(tf.nn.softmax_cross_entropy_with_logits_v2(labels=tf.constant(y, tf.float64),
                                                        logits=tf.constant(l)))
outputs["dtypes"] = np.array([c.dtype.name for c in cases])
with tf.Session() as sess:
    outputs["values"] = sess.run([tf.cast(c, tf.float32) for c in cases])
"""


def test_cross_entropy_labels_of_another_float_dtype(tmp_path):
    # TF1's wrapper converts the labels in their own dtype and casts them to the one the loss
    # is computed in (float32 for half logits): float32 labels with float16 logits ran there
    # and were refused here ("has dtype float32, but float16 was requested"), float32 numpy
    # labels too through softmax_cross_entropy_with_logits (its stop_gradient makes a tensor).
    ours = compat_run(MIXED_LABELS, {})
    assert ours["dtypes"].tolist() == ["float16"] * 4 + ["bfloat16"] * 4 + ["float32"]
    theirs = tf1_run(MIXED_LABELS, tmp_path)
    assert ours["dtypes"].tolist() == theirs["dtypes"].tolist()
    for i, (got, want) in enumerate(zip(ours["values"], theirs["values"])):
        if i == 8:  # float32 logits: float32's sums, in another order than TF1's kernel
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"case {i}")
            continue
        np.testing.assert_array_equal(got, want, err_msg=f"case {i}")
