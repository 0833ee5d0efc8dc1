"""Wrong answers the TF1 differential fuzz of ``tf.nn`` and ``tf.losses``
(tests/ops/test_tf1_nn_fuzz.py) found, each pinned by a check that needs no TensorFlow: the
value TF1 (TensorFlow 2.21's ``tf.compat.v1`` on CPU) gives on the same input, worked out by
hand, or finite differences."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)
from gradcheck import check_gradients


@pytest.mark.parametrize("op", [tf.nn.elu, tf.nn.selu])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_elu_and_selu_keep_the_sign_of_negative_zero(op, dtype):
    # TF's kernels are ``x < 0 ? ... : x`` (selu: ``scale * x``): -0.0 stays -0.0. asyncflow's
    # max(x, 0) + expm1(min(x, 0)) gave 0.0.
    x = np.array([-0.0, 0.0, -1.0, 2.0, np.nan], dtype)
    got = session_run(op(tf.constant(x)))
    assert got.dtype == dtype
    assert np.signbit(got[:2]).tolist() == [True, False]
    assert got[2] < 0 and got[3] > 0 and np.isnan(got[4])
    assert np.signbit(session_run(op(tf.constant(dtype(-0.0)))))


@pytest.mark.parametrize("op", [tf.nn.softmax_cross_entropy_with_logits,
                                tf.nn.softmax_cross_entropy_with_logits_v2])
@pytest.mark.parametrize("shape,dim", [((3, 1), -1), ((1, 4), 0), ((2, 3, 1), -1), ((1,), -1)])
def test_a_certain_class_loses_positive_zero(op, shape, dim):
    # TF's kernel sums labels * (log(sum(exp)) - shifted): one class (or one row along dim)
    # gives +0.0; asyncflow negated sum(labels * log p) and gave -0.0.
    logits = np.random.default_rng(0).standard_normal(shape)
    got = session_run(op(labels=tf.constant(np.ones(shape)), logits=tf.constant(logits), dim=dim))
    assert got.shape == tuple(d for k, d in enumerate(shape) if k != dim % len(shape))
    assert np.all(got == 0) and not np.any(np.signbit(got))


def test_bias_add_nchw_refuses_a_matrix_it_knows():
    # TF1's BiasAdd shape function: "Shape must be at least rank 3 but is rank 2" for NCHW.
    # asyncflow added along the last axis.
    with pytest.raises(ValueError, match="NCHW needs a value of rank at least 3"):
        tf.nn.bias_add(tf.zeros([4, 3]), tf.zeros([3]), data_format="NCHW")


def test_bias_add_nchw_of_a_matrix_fed_at_run_time_adds_along_the_last_axis():
    # TF1's kernel (the shape unknown when building) adds a matrix's bias on its last axis.
    value, bias = tf.placeholder(tf.float32), tf.placeholder(tf.float32)
    y = tf.nn.bias_add(value, bias, data_format="NCHW")
    got = session_run(y, {value: np.zeros((2, 3), np.float32),
                          bias: np.arange(3, dtype=np.float32)})
    np.testing.assert_array_equal(got, [[0, 1, 2], [0, 1, 2]])


def test_top_k_names_its_values_and_indices():
    # TF1's top_k returns the namedtuple TopKV2(values, indices); asyncflow's plain tuple
    # had no ``.values``.
    result = tf.nn.top_k(tf.constant([[1.0, 3.0, 1.0, 3.0]]), 3)
    values, indices = result
    assert result.values is values and result.indices is indices
    got_values, got_indices = session_run([result.values, result.indices])
    np.testing.assert_array_equal(got_values, [[3.0, 3.0, 1.0]])
    np.testing.assert_array_equal(got_indices, [[1, 3, 0]])  # ties: the lower index first


# -- names TF1 has that asyncflow lacked -------------------------------------------------------

def test_crelu_concatenates_relu_of_x_and_of_minus_x():
    x = np.array([[-2.0, 0.5], [3.0, -1.0]])
    np.testing.assert_array_equal(session_run(tf.nn.crelu(tf.constant(x))),
                                  [[0, 0.5, 2, 0], [3, 0, 0, 1]])
    np.testing.assert_array_equal(session_run(tf.nn.crelu(tf.constant(x), axis=0)),
                                  [[0, 0.5], [3, 0], [2, 0], [0, 1]])


async def test_crelu_gradient_matches_finite_differences():
    x = np.array([[-2.0, 0.5, 1.5], [3.0, -1.0, -0.25]])
    await check_gradients(lambda a: af.nn.crelu(a, axis=0), [x])


def test_weighted_cross_entropy_with_logits_by_hand():
    # TF1: (1 - z) x + (1 + (q - 1) z) (log1p(exp(-|x|)) + relu(-x)), q = pos_weight = 3.
    x, z = np.array([-2.0, 0.0, 3.0]), np.array([1.0, 0.5, 0.0])
    got = session_run(tf.nn.weighted_cross_entropy_with_logits(labels=z, logits=tf.constant(x),
                                                               pos_weight=3.0))
    np.testing.assert_allclose(got, [3 * (np.log1p(np.exp(-2.0)) + 2), 2 * np.log(2.0),
                                     3 + np.log1p(np.exp(-3.0))], rtol=1e-12)
    # pos_weight 1 is sigmoid_cross_entropy_with_logits
    plain = session_run(tf.nn.sigmoid_cross_entropy_with_logits(labels=z, logits=tf.constant(x)))
    same = session_run(tf.nn.weighted_cross_entropy_with_logits(labels=z, logits=tf.constant(x),
                                                                pos_weight=1.0))
    np.testing.assert_allclose(same, plain, rtol=1e-12)
    with pytest.raises(ValueError, match="same shape"):
        tf.nn.weighted_cross_entropy_with_logits(labels=tf.zeros([2]), logits=tf.zeros([3]),
                                                 pos_weight=2.0)


async def test_weighted_cross_entropy_gradient_matches_finite_differences():
    x, z = np.array([-2.0, 0.3, 3.0, -0.7]), np.array([1.0, 0.5, 0.0, 0.2])
    await check_gradients(lambda a, b: af.nn.weighted_cross_entropy_with_logits(
        labels=b, logits=a, pos_weight=2.5), [x, z])


def test_cosine_distance_by_hand_and_in_losses():
    # TF1: 1 - sum(l * p, axis) kept as [batch, 1], in float32, reduced over nonzero weights.
    labels = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    predictions = np.array([[0.6, 0.8], [0.0, 1.0], [0.8, -0.6]])
    loss = tf.losses.cosine_distance(labels, tf.constant(predictions), axis=1)
    none = tf.losses.cosine_distance(labels, tf.constant(predictions), axis=1,
                                     weights=[[2.0], [0.0], [1.0]],
                                     reduction=tf.losses.Reduction.NONE)
    assert none.shape.as_list() == [3, 1] and none.dtype == tf.float32
    assert tf.get_collection(tf.GraphKeys.LOSSES) == [loss, none]
    got, got_none = session_run([loss, none])
    np.testing.assert_allclose(got, (0.4 + 0.0 + 1.0) / 3, rtol=1e-6)
    np.testing.assert_allclose(got_none, [[0.8], [0.0], [1.0]], rtol=1e-6)
    with pytest.raises(ValueError, match="axis"):
        tf.losses.cosine_distance(labels, predictions)


def test_mean_pairwise_squared_error_by_hand():
    # Per row, the mean over pairs (i, j) of ((p_i - p_j) - (l_i - l_j))**2; rows weighted
    # and summed, float32, added to LOSSES.
    labels = np.arange(6.0).reshape(2, 3)
    predictions = np.array([[1.0, 0.0, 3.0], [2.0, 2.0, 2.0]])
    diffs = predictions - labels

    def pairs(d):
        return np.mean([(d[i] - d[j]) ** 2 for i in range(3) for j in range(3) if i != j])
    loss = tf.losses.mean_pairwise_squared_error(labels, tf.constant(predictions),
                                                 weights=[[1.0], [0.5]])
    assert loss.dtype == tf.float32 and tf.get_collection(tf.GraphKeys.LOSSES) == [loss]
    np.testing.assert_allclose(session_run(loss), pairs(diffs[0]) + 0.5 * pairs(diffs[1]),
                               rtol=1e-6)
    one = tf.losses.mean_pairwise_squared_error(tf.zeros([2, 1]), tf.ones([2, 1]))
    assert session_run(one) == 0  # a single element per row has no pairs


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_leaky_relu_of_integers_is_float32(dtype):
    # TF1's leaky_relu casts integer features to float32 (LeakyRelu itself is floating only);
    # asyncflow refused them.
    y = tf.nn.leaky_relu(tf.constant(np.array([-3, 0, 2], dtype)), alpha=0.5)
    assert y.dtype == tf.float32
    np.testing.assert_array_equal(session_run(y), np.array([-1.5, 0.0, 2.0], np.float32))


@pytest.mark.parametrize("given", [{"rate": 0.0}, {"keep_prob": 1.0}, {"rate": 0.25}])
def test_dropout_refuses_a_rate_tensor_of_another_dtype(given):
    # TF1: "`x.dtype` must be compatible with `rate.dtype`" (a ValueError) for a float32 rate
    # or keep_prob tensor and float64 x, even a constant 0; asyncflow returned x for a
    # constant rate 0 and raised a TypeError for keep_prob.
    (key, value), = given.items()
    with pytest.raises(ValueError, match="dtype"):
        tf.nn.dropout(tf.zeros([3], tf.float64), **{key: tf.constant(value)})
    same = tf.nn.dropout(tf.ones([3], tf.float64), **{key: tf.constant(value, tf.float64)})
    assert same.dtype == tf.float64 and same.shape.as_list() == [3]
    if value in (0.0, 1.0):
        np.testing.assert_array_equal(session_run(same), np.ones(3))


def test_elu_gradient_passes_the_upstream_gradient_at_nan():
    # TF's EluGrad is ``outputs < 0 ? grad * (outputs + 1) : grad``: at x = NaN the gradient
    # is the upstream one (TF1: 1 here); asyncflow's grad * (min(outputs, 0) + 1) gave NaN.
    x = tf.constant(np.array([np.nan, -np.inf, -1.0, 0.0, 2.0]))
    got, = session_run(tf.gradients(tf.nn.elu(x), [x]))
    np.testing.assert_allclose(got, [1.0, 0.0, np.exp(-1.0), 1.0, 1.0], rtol=1e-12)


def test_bias_add_knows_the_channel_dim_from_the_bias():
    # TF1's BiasAdd shape function merges the value's channel dim with the bias's size:
    # [?, ?, 3] (NHWC) and [?, 3, ?] (NCHW) where asyncflow kept the value's [?, ?, ?].
    value = tf.placeholder(tf.float32, [None, None, None])
    assert tf.nn.bias_add(value, tf.zeros([3])).shape.as_list() == [None, None, 3]
    assert tf.nn.bias_add(value, tf.zeros([3]), data_format="NCHW").shape.as_list() == \
        [None, 3, None]


@pytest.mark.parametrize("layout,axis", [("NDHWC", -1), ("NWC", -1), ("NCDHW", 1), ("NCW", 1)])
def test_bias_add_reads_data_format_as_tf1(layout, axis):
    # TF1: "NC..." is channels-first, any other "N...C" channels-last; asyncflow refused
    # every name but NHWC/NCHW/N...C/NC...
    value = np.zeros((2, 3, 3, 3, 3), np.float32)[(slice(None),) * len(layout)
                                                   + (0,) * (5 - len(layout))]
    assert value.ndim == len(layout)
    bias = np.arange(3, dtype=np.float32)
    got = session_run(tf.nn.bias_add(tf.constant(value), tf.constant(bias), data_format=layout))
    shape = [1] * value.ndim
    shape[axis] = 3
    np.testing.assert_array_equal(got, value + bias.reshape(shape))
    with pytest.raises(ValueError, match="N...C or NC"):
        tf.nn.bias_add(tf.constant(value), tf.constant(bias), data_format="CHWN")


def test_in_top_k_checks_its_inputs_when_built_and_knows_the_batch():
    # TF1's InTopKV2 shape function: float32 predictions only, targets of rank 1 and the
    # batch size of predictions; the result's [batch] comes from either input. asyncflow
    # took float64 predictions, refused bad targets only when run, and knew [?] from
    # targets of a known size.
    predictions = tf.placeholder(tf.float32, [None, 3])
    assert tf.nn.in_top_k(predictions, tf.zeros([4], tf.int32), 1).shape.as_list() == [4]
    with pytest.raises(TypeError, match="float32"):
        tf.nn.in_top_k(tf.zeros([2, 3], tf.float64), tf.zeros([2], tf.int32), 1)
    with pytest.raises(ValueError, match="1-D"):
        tf.nn.in_top_k(tf.zeros([2, 3]), tf.zeros([2, 1], tf.int32), 1)
    with pytest.raises(ValueError, match="batch size"):
        tf.nn.in_top_k(tf.zeros([2, 3]), tf.zeros([3], tf.int32), 1)
    got = session_run(tf.nn.in_top_k(predictions, tf.constant([2, 0], tf.int64), 1),
                      {predictions: np.array([[0.0, 1.0, 2.0], [1.0, 1.0, 0.0]], np.float32)})
    np.testing.assert_array_equal(got, [True, True])  # a tie at the k-th value counts as in


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("training", [True, False])
def test_fused_batch_norm_knows_the_channel_dim_from_scale(layout, training):
    # TF1's FusedBatchNorm shape function reads the channel count from scale/offset: y is
    # [?, ?, ?, 3] (NHWC) or [?, 3, ?, ?] (NCHW) and the statistics [3] where asyncflow knew
    # none of them for an x of unknown dims.
    x = tf.placeholder(tf.float32, [None] * 4)
    stats = {} if training else {"mean": tf.zeros([3]), "variance": tf.ones([3])}
    y, mean, variance = tf.nn.fused_batch_norm(x, tf.ones([3]), tf.zeros([3]),
                                               data_format=layout, is_training=training, **stats)
    assert y.shape.as_list() == ([None, None, None, 3] if layout == "NHWC" else [None, 3, None, None])
    assert mean.shape.as_list() == [3] and variance.shape.as_list() == [3]
    value = np.arange(24, dtype=np.float32).reshape((2, 2, 2, 3) if layout == "NHWC" else (2, 3, 2, 2))
    got = session_run(y, {x: value})
    assert got.shape == value.shape


@pytest.mark.parametrize("op", [tf.nn.relu, tf.nn.relu6])
def test_relu_takes_unsigned_integers(op):
    # TF's Relu and Relu6 are defined for every real number type, uint8 included; asyncflow
    # refused unsigned dtypes.
    got = session_run(op(tf.constant(np.array([0, 3, 200], np.uint8))))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, [0, 3, 200] if op is tf.nn.relu else [0, 3, 6])


def test_loss_weights_must_broadcast_as_tf1_asserts():
    # TF1's weights_broadcast_ops.assert_broadcastable: a scalar, or the losses' rank with
    # each dim 1 or the losses'. asyncflow broadcast [3] weights against [2, 3] losses
    # numpy's way.
    labels, predictions = tf.zeros([2, 3]), tf.ones([2, 3])
    with pytest.raises(ValueError, match="values.rank=2, weights.rank=1"):
        tf.losses.mean_squared_error(labels, predictions, weights=tf.ones([3]))
    with pytest.raises(ValueError, match="mismatch at dim 1"):
        tf.losses.absolute_difference(labels, predictions, weights=tf.ones([2, 2]))
    loss = tf.losses.mean_squared_error(labels, predictions, weights=[[1.0], [0.0]])
    assert session_run(loss) == 1.0  # 3 nonzero weights, each error 1
    assert session_run(tf.losses.mean_squared_error(labels, predictions, weights=2.0)) == 2.0


def test_dropout_of_integers_is_a_value_error():
    # TF1 raises ValueError ("`x.dtype` must be a floating point tensor"); asyncflow raised
    # a TypeError, which TF1 code catching ValueError would miss.
    with pytest.raises(ValueError, match="floating point"):
        tf.nn.dropout(tf.constant([1, 2, 3]), 0.5)


@pytest.mark.parametrize("op", [tf.nn.softmax, tf.nn.log_softmax])
def test_softmax_axis_out_of_range_is_invalid_argument(op):
    # TF1 raises InvalidArgumentError while building ("`dim` must be in the range [-2, 2)");
    # asyncflow raised ValueError.
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"range \[-2, 2\)"):
        op(tf.zeros([2, 3]), axis=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="dim=-3"):
        op(tf.zeros([2, 3]), axis=-3)


@pytest.mark.parametrize("op", [tf.nn.softmax_cross_entropy_with_logits,
                                tf.nn.softmax_cross_entropy_with_logits_v2])
def test_cross_entropy_loss_knows_what_tf1_knows(op):
    # TF1 merges labels' dims into the loss only for matrices (its 2-D kernel); other ranks
    # take the logits' static shape. asyncflow also read [1, 1] from labels of a rank-3 case.
    loose = tf.placeholder(tf.float32, [None, None, None])
    assert op(labels=tf.zeros([1, 1, 2]), logits=loose).shape.as_list() == [None, None]
    assert op(labels=tf.zeros([1, 1, 2]), logits=loose, dim=1).shape.as_list() == [None, None]
    matrix = tf.placeholder(tf.float32, [None, None])
    assert op(labels=tf.zeros([4, 2]), logits=matrix).shape.as_list() == [4]
    got = session_run(op(labels=tf.fill([1, 1, 2], 0.5), logits=loose),
                      {loose: np.zeros((1, 1, 2), np.float32)})
    np.testing.assert_allclose(got, [[np.log(2.0)]], rtol=1e-6)
