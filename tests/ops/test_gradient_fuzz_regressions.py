"""Wrong gradients the differential gradient fuzzer (``test_tf1_gradient_fuzz.py``) found, each
pinned without TensorFlow: against finite differences and hand-derived values."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from gradcheck import check_gradients


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


@pytest.mark.trio
async def test_sparse_softmax_cross_entropy_second_derivative():
    """The logits' gradient of sparse_softmax_cross_entropy_with_logits, differentiated: it was
    silently 0 (the backprop output's gradient was dropped); TF1 and the differences give the
    softmax Jacobian's term, as the dense form already did."""
    rng = np.random.default_rng(1)
    labels = np.array([0, 2, 1], np.int32)

    def logits_grad(logits, weights):
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        return tf.gradients(tf.reduce_sum(loss * weights), logits)[0]
    grads = await check_gradients(logits_grad, [rng.normal(size=(3, 4)), rng.normal(size=(3,))])
    assert np.abs(grads[0]).max() > 1e-3  # the term that was missing is not negligible here


@pytest.mark.trio
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
async def test_cumprod_gradient_with_zeros(exclusive, reverse):
    """Zeros in cumprod's input: TF1's gradient divides by x (NaN there), TF 2 gives 0; the
    derivative is finite and usually not 0."""
    point = np.array([[1.5, 0.0, 2.0, -1.0, 0.0], [0.0, 0.0, 3.0, 2.0, 0.5],
                      [2.0, 0.5, -1.0, 1.5, 3.0]])
    for axis in (1, 0):
        grads = await check_gradients(
            lambda x: tf.cumprod(x, axis=axis, exclusive=exclusive, reverse=reverse), [point])
        assert np.isfinite(grads[0]).all()


@pytest.mark.trio
async def test_cumprod_gradient_at_a_zero_by_hand():
    """cumprod([2, 0, 3]) = [2, 0, 0]; with an upstream gradient of ones, d/dx = [1 + x1 +
    x1 x2, x0 + x0 x2, x0 x1] = [1, 8, 0] (TF1: [1, nan, 0]; TF 2: [1, 0, 0])."""
    with af.Graph().as_default():
        x = tf.constant([2.0, 0.0, 3.0], tf.float64)
        grad = tf.gradients(tf.reduce_sum(tf.cumprod(x)), x)[0]
        np.testing.assert_array_equal(await _run(grad), [1.0, 8.0, 0.0])


@pytest.mark.trio
async def test_sparse_to_dense_default_and_scalar_value_gradients():
    """The default value's gradient is the sum of the upstream gradient away from the indices
    (it was None, as was a broadcast scalar value's, whose gradient is the sum at them)."""
    rng = np.random.default_rng(2)
    indices = np.array([[0, 1], [1, 0], [1, 2]], np.int32)
    await check_gradients(lambda v, d: tf.sparse_to_dense(indices, [2, 3], v, d),
                          [rng.normal(size=(3,)), rng.normal()])
    await check_gradients(lambda v, d: tf.sparse_to_dense(indices, [2, 3], v, d),
                          [rng.normal(), rng.normal()])
    with af.Graph().as_default():
        value, default = tf.constant(1.5, tf.float64), tf.constant(-1.0, tf.float64)
        dense = tf.sparse_to_dense(indices, [2, 3], value, default)
        weights = np.arange(6.0).reshape(2, 3)
        grads = tf.gradients(tf.reduce_sum(dense * weights), [value, default])
        got = await _run(grads)
    assert got == [1.0 + 3.0 + 5.0, 0.0 + 2.0 + 4.0]


@pytest.mark.trio
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
async def test_cumprod_gradient_without_zeros_is_tf1s_bit_for_bit(exclusive, reverse):
    """With no zero in x the gradient is still TF1's ``cumsum(cumprod(x) * grad) / x``, to the
    bit, and zeros anywhere in a row leave the rows without one untouched."""
    rng = np.random.default_rng(3)
    x = tf.constant(rng.uniform(0.5, 1.5, (4, 7)).astype(np.float32))
    weights = tf.constant(rng.normal(size=(4, 7)).astype(np.float32))
    product = tf.cumprod(x, axis=1, exclusive=exclusive, reverse=reverse)
    grad = tf.gradients(tf.reduce_sum(product * weights), x)[0]
    tf1s = tf.cumsum(product * weights, axis=1, exclusive=exclusive, reverse=not reverse) / x
    with_zero = tf.concat([x[:2], tf.zeros([1, 7]), x[3:]], 0)
    zero_grad = tf.gradients(tf.reduce_sum(
        tf.cumprod(with_zero, axis=1, exclusive=exclusive, reverse=reverse) * weights),
        with_zero)[0]
    ours, theirs, zeroed = await _run([grad, tf1s, zero_grad])
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(zeroed[[0, 1, 3]], theirs[[0, 1, 3]])


@pytest.mark.trio
async def test_gather_nd_batch_dims_gradient_with_an_unknown_batch():
    """gather_nd(params, indices, batch_dims=1) differentiated where params' batch dim is
    unknown at build time: the composed GatherNd lost its indices' last dim and refused."""
    rng = np.random.default_rng(5)
    indices = np.array([[[1], [0], [1]], [[2], [2], [0]]])
    weights = rng.normal(size=(2, 3, 4))
    params = tf.placeholder(tf.float64, [None, 3, 4])
    loss = tf.reduce_sum(tf.gather_nd(params, indices, batch_dims=1) * weights)
    grad = tf.gradients(loss, params)[0]
    value = rng.normal(size=(2, 3, 4))
    got = await _run(grad, {params: value})
    expected = np.zeros((2, 3, 4))
    for b in range(2):
        for j in range(3):
            expected[b, indices[b, j, 0]] += weights[b, j]
    np.testing.assert_allclose(got, expected)
