"""Regressions that the array fixes of the TF1 differential fuzz brought into real programs,
each pinned to what TensorFlow 2.21's ``tf.compat.v1`` gives on CPU for the same program.
These tests need no TensorFlow."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf


@pytest.fixture(autouse=True)
def fresh_graph():
    af.reset_default_graph()


def _run(fetches, feed_dict=None):
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        return session.run(fetches, feed_dict)


def test_numpy_numbers_still_convert_to_bool_constants():
    # TF1 refuses Python ints and floats for a bool tensor ("Expected bool, got 1") but casts
    # numpy arrays and numpy scalars: constant(np.array([2, 0]), bool) -> [True, False],
    # convert_to_tensor(np.int32(0), bool) -> False, Variable(np.array([1, 0]), dtype=bool)
    # -> [True, False]. The bool check refused them all, which worked before it.
    values = _run([tf.constant(np.array([2, 0]), dtype=tf.bool),
                   tf.constant(np.array([2.5, 0.0]), dtype=tf.bool),
                   tf.convert_to_tensor(np.int32(0), dtype=tf.bool),
                   tf.constant(np.array(1), dtype=tf.bool, shape=[2]),
                   tf.Variable(np.array([1, 0]), dtype=tf.bool)])
    expected = [[True, False], [True, False], False, [True, True], [True, False]]
    for value, want in zip(values, expected):
        assert value.dtype == np.bool_
        np.testing.assert_array_equal(value, want)
    for python_number in (1, [0, 1], 0.0, [np.int64(1)]):  # still refused, as in TF1
        with pytest.raises(TypeError, match="dtype bool"):
            tf.constant(python_number, dtype=tf.bool)
