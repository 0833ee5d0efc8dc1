"""Wrong answers the TF1 differential fuzz (tests/ops/test_tf1_array_fuzz.py) found in the
array, indexing and nn ops, each pinned to the value or the refusal TF1 gives: the expected
literals come from TensorFlow 2.21's ``tf.compat.v1`` on CPU, run on the same input. These
tests need no TensorFlow."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)


def test_reshape_of_an_empty_tensor_solves_the_minus_one_from_its_nonzero_dims():
    # TF1: reshape(zeros([0, 3], int32), [0, -1]) -> int32 (0, 3), static shape (0, ?);
    # reshape(zeros([0, 3]), [0, -1, 2]) -> (0, 1, 2). asyncflow refused both.
    empty = tf.placeholder(tf.int32, [0, 3])
    wide, split = tf.reshape(empty, [0, -1]), tf.reshape(tf.zeros([0, 3]), [0, -1, 2])
    assert wide.shape.as_list() == [0, None] and split.shape.as_list() == [0, None, 2]
    values = session_run([wide, split], {empty: np.zeros((0, 3), np.int32)})
    assert values[0].shape == (0, 3) and values[0].dtype == np.int32
    assert values[1].shape == (0, 1, 2)
    unknown = tf.placeholder(tf.float32, [None, 3])
    assert session_run(tf.reshape(unknown, [0, -1]), {unknown: np.zeros((0, 3))}).shape == (0, 3)
    with pytest.raises(ValueError, match="Reshape .*cannot reshape a tensor with 6 elements"):
        tf.reshape(tf.zeros([2, 3]), [0, -1])


def test_boolean_mask_of_an_empty_tensor_and_its_static_shape():
    # TF1: boolean_mask(zeros([0, 1]), [True], axis=1) -> (0, 1), static (0, ?); asyncflow
    # failed in its Reshape. boolean_mask(arange(12).reshape(3, 2, 2), [[T, F], [F, T]],
    # axis=1) -> [[0, 3], [4, 7], [8, 11]], static (3, ?) where asyncflow knew no dim.
    empty = tf.boolean_mask(tf.zeros([0, 1]), [True], axis=1)
    x = tf.placeholder(tf.float64, [3, 2, 2])
    picked = tf.boolean_mask(x, [[True, False], [False, True]], axis=1)
    assert empty.shape.as_list() == [0, None] and picked.shape.as_list() == [3, None]
    values = session_run([empty, picked], {x: np.arange(12.0).reshape(3, 2, 2)})
    assert values[0].shape == (0, 1)
    np.testing.assert_array_equal(values[1], [[0.0, 3.0], [4.0, 7.0], [8.0, 11.0]])


def test_one_hot_takes_its_dtype_from_the_given_values():
    # TF1: one_hot([0, -1, 3, 2], 3, on_value=5, off_value=-1) is int32 (asyncflow: float32);
    # on_value=2 with dtype=float64 is fine; on_value=1.0 with dtype=int64 is a TypeError.
    ints = tf.one_hot([0, -1, 3, 2], 3, on_value=5, off_value=-1)
    floats = tf.one_hot([0, 2], 3, on_value=2, dtype=tf.float64)
    values = session_run([ints, floats])
    assert values[0].dtype == np.int32 and values[1].dtype == np.float64
    np.testing.assert_array_equal(values[0], [[5, -1, -1], [-1, -1, -1], [-1, -1, -1], [-1, -1, 5]])
    np.testing.assert_array_equal(values[1], [[2.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    with pytest.raises(TypeError, match="one_hot: dtype float32 of on_value does not match"):
        tf.one_hot([0, 2], 3, on_value=1.0, dtype=tf.int64)


def test_range_whose_delta_points_away_from_the_limit_is_refused():
    # TF1: range(5, 1) -> ValueError "Requires start <= limit when delta > 0: 5/1";
    # asyncflow gave []. The same check at run time when the bounds are fed.
    with pytest.raises(ValueError, match="Range .*requires start <= limit when delta > 0"):
        tf.range(5, 1)
    with pytest.raises(ValueError, match="requires start >= limit when delta < 0"):
        tf.range(-2.0, 3.0, -1.0)
    limit = tf.placeholder(tf.int32, [])
    counted = tf.range(0, limit, name="counted")
    np.testing.assert_array_equal(session_run(counted, {limit: 3}), [0, 1, 2])
    with pytest.raises(af.errors.InvalidArgumentError, match="counted.*start <= limit"):
        session_run(counted, {limit: -1})
    # sequence_mask of no lengths still has zero columns, as in TF1: a bool (0, 0)
    assert session_run(tf.sequence_mask(tf.zeros([0], tf.int32))).shape == (0, 0)


def test_where_of_a_scalar_condition_is_refused():
    # TF1: where(scalar) -> InvalidArgumentError "WhereOp: Unhandled input dimensions: 0";
    # asyncflow answered an int64 [1, 0].
    cond = tf.placeholder(tf.bool, [])
    with pytest.raises(af.errors.InvalidArgumentError, match="Where.*rank at least 1"):
        session_run(tf.where(cond), {cond: True})


def test_top_k_of_the_smallest_int():
    # TF1: top_k([[-2**31, 0, 5, -2**31]] int32, 3) -> values [[5, 0, -2147483648]], indices
    # [[2, 1, 0]]; asyncflow negated the values and the minimum wrapped around to the top.
    values, indices = session_run(tf.nn.top_k(np.array([[-2 ** 31, 0, 5, -2 ** 31]], np.int32), 3))
    np.testing.assert_array_equal(values, [[5, 0, -2147483648]])
    np.testing.assert_array_equal(indices, [[2, 1, 0]])
    ties, order = session_run(tf.nn.top_k([3.0, 1.0, 3.0, 2.0, 3.0], 4))
    np.testing.assert_array_equal(order, [0, 2, 4, 3])  # equal values: lower index first


def test_in_top_k_answers_each_row_alone():
    # TF1: in_top_k([[1, 2, 3], [3, 2, 1]], [5, 0], 2) -> [False, True] (asyncflow: all False
    # once any target was out of range); in_top_k([[inf, 2, 3], [3, 2, 1], [1, nan, 2]],
    # [2, 1, 2], 2) -> [False, True, False] (a row holding a non-finite value "cannot say").
    first = tf.nn.in_top_k(np.array([[1.0, 2, 3], [3, 2, 1]], np.float32), [5, 0], 2)
    second = tf.nn.in_top_k(np.array([[np.inf, 2, 3], [3, 2, 1], [1, np.nan, 2]], np.float32),
                            [2, 1, 2], 2)
    values = session_run([first, second])
    np.testing.assert_array_equal(values[0], [False, True])
    np.testing.assert_array_equal(values[1], [False, True, False])


def test_an_index_with_a_negative_step_is_refused():
    # TF1: strided_slice(arange(4), [1], [2], [-1], shrink_axis_mask=1) -> ValueError "only
    # stride 1 allowed on non-range indexing"; asyncflow gave 1.
    with pytest.raises(ValueError, match="StridedSlice .*only stride 1 allowed"):
        tf.strided_slice(np.arange(4), [1], [2], [-1], shrink_axis_mask=1)
    strides = tf.placeholder(tf.int32, [1])
    sliced = tf.strided_slice(np.arange(4), [1], [2], strides, shrink_axis_mask=1, name="picked")
    assert session_run(sliced, {strides: [1]}) == 1
    with pytest.raises(af.errors.InvalidArgumentError, match="picked.*only stride 1 allowed"):
        session_run(sliced, {strides: [-1]})


def test_a_band_wider_than_the_matrix_is_refused():
    # TF1: matrix_band_part(zeros((2, 3)), 3, -1) and (..., 0, 4) -> InvalidArgumentError
    # ("num_lower must be negative or less or equal to number of rows"); asyncflow kept all.
    with pytest.raises(ValueError, match="MatrixBandPart .*num_lower must be negative or at most 2"):
        tf.matrix_band_part(np.zeros((2, 3), np.float32), 3, -1)
    with pytest.raises(ValueError, match="MatrixBandPart .*num_upper must be negative or at most 3"):
        tf.matrix_band_part(np.zeros((2, 3), np.float32), 0, 4)
    x = tf.placeholder(tf.float32, [None, None])
    band = tf.matrix_band_part(x, 2, 3, name="band")
    assert session_run(band, {x: np.ones((2, 3))}).sum() == 6
    with pytest.raises(af.errors.InvalidArgumentError, match="band.*num_lower"):
        session_run(band, {x: np.ones((1, 3))})


def test_bool_pad_and_constant_take_only_bools():
    # TF1: pad([True, False], [[1, 1]], constant_values=-1) -> TypeError "Expected bool";
    # constant(1, dtype=bool) -> TypeError; pad([True, False], [[1, 1]]) -> [F, T, F, F].
    # asyncflow turned -1 and 1 into True.
    with pytest.raises(TypeError, match="dtype bool"):
        tf.pad([True, False], [[1, 1]], constant_values=-1)
    with pytest.raises(TypeError, match="dtype bool"):
        tf.constant(1, dtype=tf.bool)
    np.testing.assert_array_equal(session_run(tf.pad([True, False], [[1, 1]])), [False, True, False, False])


def test_mirror_pad_of_an_empty_tensor_pads_its_other_dims():
    # TF1: pad(zeros([0, 4, 1]), [[0, 0], [2, 1], [1, 0]], "SYMMETRIC") -> shape (0, 7, 2);
    # pad(zeros([3, 0]), [[1, 1], [0, 0]], "SYMMETRIC") -> (5, 0). asyncflow returned the
    # input's shape.
    x = tf.placeholder(tf.float32, [None, 4, 1])
    padded = tf.pad(x, [[0, 0], [2, 1], [1, 0]], mode="SYMMETRIC")
    rows = tf.pad(tf.zeros([3, 0]), [[1, 1], [0, 0]], mode="SYMMETRIC")
    values = session_run([padded, rows], {x: np.zeros((0, 4, 1), np.float32)})
    assert values[0].shape == (0, 7, 2) and values[1].shape == (5, 0)


def test_gather_nd_with_batch_dims():
    # TF1: gather_nd(arange(24).reshape(2, 3, 4), [[[1], [0]], [[2], [2]]], batch_dims=1) ->
    # [[[4, 5, 6, 7], [0, 1, 2, 3]], [[20, 21, 22, 23], [20, 21, 22, 23]]] (asyncflow refused
    # batch_dims), and with batch_dims=2 and indices [[[1], [0], [3]], [[2], [2], [0]]] ->
    # [[1, 4, 11], [14, 18, 20]].
    params = tf.placeholder(tf.int64, [None, 3, 4])
    rows = tf.gather_nd(params, [[[1], [0]], [[2], [2]]], batch_dims=1)
    cells = tf.gather_nd(params, [[[1], [0], [3]], [[2], [2], [0]]], batch_dims=2)
    assert rows.shape.as_list() == [2, 2, 4] and cells.shape.as_list() == [2, 3]
    values = session_run([rows, cells], {params: np.arange(24).reshape(2, 3, 4)})
    np.testing.assert_array_equal(values[0], [[[4, 5, 6, 7], [0, 1, 2, 3]],
                                              [[20, 21, 22, 23], [20, 21, 22, 23]]])
    np.testing.assert_array_equal(values[1], [[1, 4, 11], [14, 18, 20]])
    with pytest.raises(ValueError, match="gather_nd: batch_dims=1 does not fit"):
        tf.gather_nd(np.zeros((2, 3)), np.zeros((3, 1), np.int32), batch_dims=1)
    bad = tf.gather_nd(params, [[[1], [4]], [[2], [2]]], batch_dims=1)
    with pytest.raises(af.errors.InvalidArgumentError, match="GatherNd.*4 is not in \\[0, 3\\)"):
        session_run(bad, {params: np.arange(24).reshape(2, 3, 4)})


def test_reshape_to_the_shape_of_another_tensor_knows_its_static_shape():
    # Found by the conv fuzz (tests/ops/test_tf1_conv_fuzz.py), whose upstream gradients are
    # ``reshape(w, shape(y))``: TF1 reads a Shape op's input's static shape there (its one
    # unknown dim solved from a fully known input), so the gradients built on it keep their
    # static shapes; asyncflow knew only the rank. TF1: (2, 3), (2, 3), (?, 3), <unknown>.
    x = tf.placeholder(tf.float32, [6])
    assert tf.reshape(x, tf.shape(tf.placeholder(tf.float32, [2, 3]))).shape.as_list() == [2, 3]
    batch = tf.placeholder(tf.float32, [None, 3])
    assert tf.reshape(x, tf.shape(batch)).shape.as_list() == [2, 3]
    unknown = tf.placeholder(tf.float32, [None])
    assert tf.reshape(unknown, tf.shape(batch)).shape.as_list() == [None, 3]
    assert tf.reshape(x, tf.shape(tf.placeholder(tf.float32))).shape.ndims is None
    value = session_run(tf.reshape(unknown, tf.shape(batch)), {unknown: np.arange(6.0),
                                                              batch: np.zeros((2, 3))})
    np.testing.assert_array_equal(value, np.arange(6.0).reshape(2, 3))


def test_reshape_to_the_shape_of_another_tensor_refuses_what_cannot_fit():
    # TF1 checks y's static shape against x's element count when the graph is built:
    # reshape(x[7], shape(y[?, 3])) "Dimension size must be evenly divisible by 3 but is 7",
    # reshape(x[6], shape(y[2, 4])) and reshape(x[6], shape(y[?, 0])) "Cannot reshape a
    # tensor with 6 elements". asyncflow inferred (2, 3), (2, 4) and (?, 0) there, a static
    # shape the value could never have. An empty x fits (0, 3) and (?, 0), as in TF1.
    def shaped_as(x_shape, y_shape):
        return tf.reshape(tf.placeholder(tf.float32, x_shape),
                          tf.shape(tf.placeholder(tf.float32, y_shape), out_type=tf.int64))
    for x_shape, y_shape in (([7], [None, 3]), ([6], [2, 4]), ([6], [None, 0]),
                             ([2, 3], [None, 4]), ([6], [None, None, 0]), ([0], [2, 3])):
        with pytest.raises(ValueError, match="Reshape .*cannot reshape a tensor with"):
            shaped_as(x_shape, y_shape)
    assert shaped_as([0], [None, 3]).shape.as_list() == [0, 3]
    assert shaped_as([0], [None, 0]).shape.as_list() == [None, 0]
    assert shaped_as([2, 3], [None, 2]).shape.as_list() == [3, 2]
    assert shaped_as([None, 6], [None, 4]).shape.as_list() == [None, 4]
    assert shaped_as([7], [None, None, 3]).shape.as_list() == [None, None, 3]  # (TF1 too)
