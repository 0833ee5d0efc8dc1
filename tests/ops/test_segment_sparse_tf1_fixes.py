"""TF1's answers for the sparse idioms where asyncflow differed (found by
tests/ops/test_tf1_segment_sparse_fuzz.py), checked without TensorFlow: ``sparse_concat``
along a negative axis and over mismatched dims, ``sparse_add``'s threshold and mismatched
shapes, ``sparse_tensor_dense_matmul``'s shape check and static shape, ``sparse_reshape``'s
checks, and the static shapes TF1 knows from a constant dense shape."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf


async def run(fetches, feed_dict=None):
    async with af.Session() as sess:
        return await sess.run(fetches, feed_dict)


async def test_sparse_concat_takes_a_negative_axis_from_the_end():
    """``sparse_concat(-1, ...)`` concatenated nothing (a one-hot of -1 is all zeros): the
    entries of the second operand landed on the first's and the dense shape was the first's."""
    with af.Graph().as_default():
        a = tf.SparseTensor([[0, 1], [1, 0]], [1.0, 2.0], [2, 2])
        b = tf.SparseTensor([[0, 2], [1, 0]], [3.0, 4.0], [2, 3])
        negative = tf.sparse_concat(-1, [a, b])
        positive = tf.sparse_concat(1, [a, b])
        *got, shape = await run([tf.sparse_tensor_to_dense(negative),
                                 tf.sparse_tensor_to_dense(positive), negative.dense_shape])
        want = [[0.0, 1.0, 0.0, 0.0, 3.0], [2.0, 0.0, 4.0, 0.0, 0.0]]
        for dense in got:
            np.testing.assert_array_equal(dense, want)
        np.testing.assert_array_equal(shape, [2, 5])
        with pytest.raises(ValueError, match="axis 2 is out of range for rank 2"):
            tf.sparse_concat(2, [a, b])


async def test_sparse_concat_refuses_other_dims_that_differ():
    """Refused when building (TF1 fails the run); asyncflow gave a value."""
    with af.Graph().as_default():
        a = tf.SparseTensor([[0, 1]], [1.0], [2, 2])
        b = tf.SparseTensor([[0, 2]], [3.0], [2, 3])
        with pytest.raises(ValueError, match=r"\[2, 2\] and \[2, 3\] differ.*axis 0"):
            tf.sparse_concat(0, [a, b])
        expanded = tf.sparse_concat(0, [a, b], expand_nonconcat_dim=True)
        np.testing.assert_array_equal(await run(expanded.dense_shape), [4, 3])


async def test_sparse_add_thresholds_only_the_sums_of_shared_indices():
    """TF1's kernel keeps an entry only one operand holds whatever its magnitude; asyncflow
    dropped every entry under the threshold."""
    with af.Graph().as_default():
        a = tf.SparseTensor([[0], [2]], [0.25, 2.0], [3])
        b = tf.SparseTensor([[1], [2]], [0.5, -1.5], [3])
        total = tf.sparse_add(a, b, thresh=1.0)
        indices, values, shape = await run([total.indices, total.values, total.dense_shape])
        np.testing.assert_array_equal(indices, [[0], [1]])  # 2.0 - 1.5 = 0.5 < 1 is dropped
        np.testing.assert_array_equal(values, np.array([0.25, 0.5], np.float32))
        np.testing.assert_array_equal(shape, [3])
        with pytest.raises(ValueError, match=r"dense shapes \[3\] and \[4\] differ"):
            tf.sparse_add(a, tf.SparseTensor([[0]], [1.0], [4]))


async def test_sparse_dense_matmul_checks_the_inner_dims_and_knows_its_shape():
    """A sparse [2, 2] times a dense [3, 3] gave a value (the rows of b its indices reach)."""
    with af.Graph().as_default():
        sp = tf.SparseTensor([[0, 0], [1, 1]], [2.0, 3.0], [2, 2])
        with pytest.raises(ValueError, match="Dimensions must be equal, but are 2.*and 3"):
            tf.sparse_tensor_dense_matmul(sp, np.ones((3, 3), np.float32))
        with pytest.raises(ValueError, match="Dimensions must be equal"):
            tf.sparse_tensor_dense_matmul(sp, np.ones((2, 3), np.float32), adjoint_b=True)
        product = tf.sparse_tensor_dense_matmul(sp, np.ones((2, 3), np.float32), adjoint_a=True)
        assert product.shape.as_list() == [2, 3]
        np.testing.assert_array_equal(await run(product), [[2.0] * 3, [3.0] * 3])


def test_sparse_reshape_refuses_what_tf1_refuses_when_building():
    with af.Graph().as_default():
        sp = tf.SparseTensor([[1, 2]], [1.0], [2, 3])
        with pytest.raises(ValueError, match="at most one dimension can be inferred"):
            tf.sparse_reshape(sp, [-1, -1])
        with pytest.raises(ValueError, match=r"dense shape \[2, 3\] \(6 elements\) to \[7\]"):
            tf.sparse_reshape(sp, [7])


def test_a_constant_dense_shape_gives_static_shapes_as_tf1():
    with af.Graph().as_default():
        sp = tf.SparseTensor([[0, 1]], [1.0], [2, 3])
        assert sp.dense_shape.op.type == "Const"
        assert tf.sparse_tensor_to_dense(sp).shape.as_list() == [2, 3]
        assert tf.sparse_reduce_sum(sp, axis=1, keepdims=True).shape.as_list() == [2, 1]
        ids = tf.SparseTensor([[0, 0], [1, 1]], [2, 0], [2, 2])
        assert tf.sparse.to_indicator(ids, 4).shape.as_list() == [2, 4]
