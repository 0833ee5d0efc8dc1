"""Wrong answers the TF1 differential fuzz of ``tf.nn`` and ``tf.losses``
(tests/ops/test_tf1_nn_fuzz.py) found, each pinned by a check that needs no TensorFlow: the
value TF1 (TensorFlow 2.21's ``tf.compat.v1`` on CPU) gives on the same input, worked out by
hand, or finite differences."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf


@pytest.fixture(autouse=True)
def fresh_graph():
    af.reset_default_graph()


def _run(fetches, feed_dict=None):
    with tf.Session() as session:
        return session.run(fetches, feed_dict)


@pytest.mark.parametrize("op", [tf.nn.elu, tf.nn.selu])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_elu_and_selu_keep_the_sign_of_negative_zero(op, dtype):
    # TF's kernels are ``x < 0 ? ... : x`` (selu: ``scale * x``): -0.0 stays -0.0. asyncflow's
    # max(x, 0) + expm1(min(x, 0)) gave 0.0.
    x = np.array([-0.0, 0.0, -1.0, 2.0, np.nan], dtype)
    got = _run(op(tf.constant(x)))
    assert got.dtype == dtype
    assert np.signbit(got[:2]).tolist() == [True, False]
    assert got[2] < 0 and got[3] > 0 and np.isnan(got[4])
    assert np.signbit(_run(op(tf.constant(dtype(-0.0)))))


@pytest.mark.parametrize("op", [tf.nn.softmax_cross_entropy_with_logits,
                                tf.nn.softmax_cross_entropy_with_logits_v2])
@pytest.mark.parametrize("shape,dim", [((3, 1), -1), ((1, 4), 0), ((2, 3, 1), -1), ((1,), -1)])
def test_a_certain_class_loses_positive_zero(op, shape, dim):
    # TF's kernel sums labels * (log(sum(exp)) - shifted): one class (or one row along dim)
    # gives +0.0; asyncflow negated sum(labels * log p) and gave -0.0.
    logits = np.random.default_rng(0).standard_normal(shape)
    got = _run(op(labels=tf.constant(np.ones(shape)), logits=tf.constant(logits), dim=dim))
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
    got = _run(y, {value: np.zeros((2, 3), np.float32), bias: np.arange(3, dtype=np.float32)})
    np.testing.assert_array_equal(got, [[0, 1, 2], [0, 1, 2]])


def test_top_k_names_its_values_and_indices():
    # TF1's top_k returns the namedtuple TopKV2(values, indices); asyncflow's plain tuple
    # had no ``.values``.
    result = tf.nn.top_k(tf.constant([[1.0, 3.0, 1.0, 3.0]]), 3)
    values, indices = result
    assert result.values is values and result.indices is indices
    got_values, got_indices = _run([result.values, result.indices])
    np.testing.assert_array_equal(got_values, [[3.0, 3.0, 1.0]])
    np.testing.assert_array_equal(got_indices, [[1, 3, 0]])  # ties: the lower index first
