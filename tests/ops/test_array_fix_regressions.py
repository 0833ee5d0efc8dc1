"""Regressions that the array fixes of the TF1 differential fuzz brought into real programs,
each pinned to what TensorFlow 2.21's ``tf.compat.v1`` gives on CPU for the same program.
These tests need no TensorFlow."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)


def test_numpy_numbers_still_convert_to_bool_constants():
    # TF1 refuses Python ints and floats for a bool tensor ("Expected bool, got 1") but casts
    # numpy arrays and numpy scalars: constant(np.array([2, 0]), bool) -> [True, False],
    # convert_to_tensor(np.int32(0), bool) -> False, Variable(np.array([1, 0]), dtype=bool)
    # -> [True, False]. The bool check refused them all, which worked before it.
    values = session_run([tf.constant(np.array([2, 0]), dtype=tf.bool),
                          tf.constant(np.array([2.5, 0.0]), dtype=tf.bool),
                          tf.convert_to_tensor(np.int32(0), dtype=tf.bool),
                          tf.constant(np.array(1), dtype=tf.bool, shape=[2]),
                          tf.Variable(np.array([1, 0]), dtype=tf.bool)], initialize=True)
    expected = [[True, False], [True, False], False, [True, True], [True, False]]
    for value, want in zip(values, expected):
        assert value.dtype == np.bool_
        np.testing.assert_array_equal(value, want)
    for python_number in (1, [0, 1], 0.0, [np.int64(1)]):  # still refused, as in TF1
        with pytest.raises(TypeError, match="dtype bool"):
            tf.constant(python_number, dtype=tf.bool)


def test_numpy_floats_truncate_to_integer_constants_as_tf1():
    # TF 2.21's tf.compat.v1: constant(np.array([1.5, -1.7], np.float32), int32) -> [1, -1],
    # constant(np.float64(2.9), int32) -> 2; constant(1.5, int32) and constant([1.5], int32)
    # -> TypeError "Expected int32, but got 1.5 of type 'float'".
    values = session_run([tf.constant(np.array([1.5, -1.7], np.float32), tf.int32),
                          tf.constant(np.float64(2.9), tf.int32)])
    np.testing.assert_array_equal(values[0], [1, -1])
    assert values[0].dtype == np.int32 and values[1] == 2
    for python_number in (1.5, [1.5]):
        with pytest.raises(TypeError, match="fractional part"):
            tf.constant(python_number, tf.int32)
    with pytest.raises(TypeError, match="out of range"):  # (numpy's cast would be undefined)
        tf.constant(np.array([3e9]), tf.int32)


def test_top_k_and_in_top_k_keep_tf1s_answers_on_their_faster_paths():
    # TF1: top_k([[3, 1, 3, 2, 3]], k) -> indices [0, 2, 4, 3, 1][:k] for every k, k=0 too;
    # in_top_k with finite predictions whose sum overflows float32 still counts the row
    # ([[3e38, 3e38, 1]], target 0, k=1 -> True), a NaN or inf anywhere in a row -> False.
    x = tf.constant([[3.0, 1.0, 3.0, 2.0, 3.0]])
    orders = session_run([tf.nn.top_k(x, k)[1] for k in range(6)])
    for k, order in enumerate(orders):
        np.testing.assert_array_equal(order, [[0, 2, 4, 3, 1][:k]])
    predictions = tf.constant([[3e38, 3e38, 1.0], [1.0, np.inf, 0.0], [2.0, 1.0, np.nan],
                               [0.0, 2.0, 1.0]], tf.float32)
    hits = session_run(tf.nn.in_top_k(predictions, [0, 0, 0, 1], 1))
    np.testing.assert_array_equal(hits, [True, False, False, True])
    np.testing.assert_array_equal(session_run(tf.nn.in_top_k(predictions[:1], [0], 1)), [True])


def test_reshape_errors_and_empty_tensors_after_the_fast_path():
    # TF1: reshape of a (0, 3) tensor to [0, -1] -> (0, 3), to [-1, 0] -> (3, 0); of a (3, 4)
    # to [0, -1] -> "Input to reshape is a tensor with 12 values"; of (2, 3) to [4, -1] too.
    x = tf.placeholder(tf.float32, None)
    shapes = [tf.reshape(x, [0, -1]), tf.reshape(x, [-1, 0]), tf.reshape(x, [-1, 3])]
    values = session_run(shapes, {x: np.zeros((0, 3), np.float32)})
    assert [v.shape for v in values] == [(0, 3), (3, 0), (0, 3)]
    for value, target in ((np.zeros((3, 4)), [0, -1]), (np.zeros((2, 3)), [4, -1])):
        with pytest.raises(af.errors.InvalidArgumentError, match="Input to reshape is a tensor "
                           f"with {value.size} values"):
            session_run(tf.reshape(x, target), {x: value})


def test_boolean_mask_with_a_mask_of_unknown_dims_builds():
    # TF1: boolean_mask(placeholder [3, 4], placeholder bool [None]) -> static (?, 4);
    # boolean_mask(placeholder [2, 3, 5], placeholder bool [None, 3]) -> (?, 5). The empty
    # tensor fix counted such a mask's elements as a [1, 1] piece of the shape and failed.
    x = tf.placeholder(tf.float32, [3, 4])
    mask = tf.placeholder(tf.bool, [None])
    rows = tf.boolean_mask(x, mask)
    cube = tf.placeholder(tf.float32, [2, 3, 5])
    mask2 = tf.placeholder(tf.bool, [None, 3])
    cells = tf.boolean_mask(cube, mask2)
    assert rows.shape.as_list() == [None, 4] and cells.shape.as_list() == [None, 5]
    pick = np.array([[True, False, True], [False, False, True]])
    values = session_run([rows, cells], {x: np.arange(12).reshape(3, 4), mask: [True, False, True],
                                         cube: np.arange(30).reshape(2, 3, 5), mask2: pick})
    np.testing.assert_array_equal(values[0], [[0, 1, 2, 3], [8, 9, 10, 11]])
    np.testing.assert_array_equal(values[1], np.arange(30).reshape(2, 3, 5)[pick])


def test_static_shapes_of_gather_nd_with_batch_dims_and_of_an_empty_reshape():
    # TF1: gather_nd(params [None, 3, 4], indices [None, 5, 1], batch_dims=1) -> (?, 5, 4),
    # params [2, 3, 4] and indices [None, 7, 1] -> (2, 7, 4), indices [2, None, 2] -> (2, ?);
    # reshape(placeholder [0, None], [-1, 3]) -> (0, 3). asyncflow knew no dim of the first
    # three and only the 3 of the last.
    params = tf.placeholder(tf.float32, [None, 3, 4])
    known = tf.placeholder(tf.float32, [2, 3, 4])
    assert tf.gather_nd(params, tf.placeholder(tf.int32, [None, 5, 1]),
                        batch_dims=1).shape.as_list() == [None, 5, 4]
    assert tf.gather_nd(known, tf.placeholder(tf.int32, [None, 7, 1]),
                        batch_dims=1).shape.as_list() == [2, 7, 4]
    assert tf.gather_nd(known, tf.placeholder(tf.int32, [2, None, 2]),
                        batch_dims=1).shape.as_list() == [2, None]
    empty = tf.placeholder(tf.float32, [0, None])
    assert tf.reshape(empty, [-1, 3]).shape.as_list() == [0, 3]
    assert session_run(tf.reshape(empty, [-1, 3]), {empty: np.zeros((0, 6))}).shape == (0, 3)
