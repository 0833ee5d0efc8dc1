"""Issue 36's TF1 names ``tf.scatter_nd``, ``tf.tensor_scatter_nd_update`` (with gradients),
``tf.unique``, ``tf.unique_with_counts``, ``tf.setdiff1d`` and ``tf.bincount``: values against
numpy (always) and TF1 (when TensorFlow is installed), and bad input named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import check_gradients
from tf1_reference import compare_groups, tf1_run

INDICES = np.array([[0, 1], [2, 3], [0, 1], [1, 0]], np.int32)  # [0, 1] twice: adds
UPDATES = np.random.default_rng(5).standard_normal((4, 5))
UNIQUE_INDICES = INDICES[1:]
VALUES = np.array([4, 1, 4, 7, 1, 0, 9, 7, 4], np.int32)


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


def _scatter_np(indices, updates, shape):
    out = np.zeros(shape, updates.dtype)
    for index, update in zip(indices, updates):
        out[tuple(index)] += update
    return out


async def test_scatter_values_against_numpy():
    base = np.arange(60.0).reshape(3, 4, 5)
    with af.Graph().as_default():
        p = af.placeholder(af.int64, [None, 2])
        outs = [tf.scatter_nd(INDICES, UPDATES, [3, 4, 5]),
                tf.scatter_nd(p, UPDATES, tf.constant([3, 4, 5])),
                tf.scatter_nd([[1], [3]], [[1, 2], [3, 4]], [5, 2]),
                tf.tensor_scatter_nd_update(base, UNIQUE_INDICES, UPDATES[1:]),
                tf.tensor_scatter_update(base, [[2, 0, 1]], [-1.0])]
        values = await _run(outs, {p: INDICES})
    expected = _scatter_np(INDICES, UPDATES, (3, 4, 5))
    np.testing.assert_allclose(values[0], expected, rtol=1e-15)
    np.testing.assert_allclose(values[1], expected, rtol=1e-15)
    np.testing.assert_array_equal(values[2], [[0, 0], [1, 2], [0, 0], [3, 4], [0, 0]])
    assert values[2].dtype == np.int32 and outs[0].shape.as_list() == [3, 4, 5]
    updated = base.copy()
    updated[tuple(UNIQUE_INDICES.T)] = UPDATES[1:]
    np.testing.assert_array_equal(values[3], updated)
    assert values[4][2, 0, 1] == -1 and (values[4] != base).sum() == 1


@pytest.mark.parametrize("which", ["scatter_nd", "tensor_scatter"])
async def test_scatter_gradients(which):
    if which == "scatter_nd":
        await check_gradients(lambda u: tf.scatter_nd(INDICES, u, [3, 4, 5]), [UPDATES])
    else:
        base = np.random.default_rng(6).standard_normal((3, 4, 5))
        await check_gradients(lambda t, u: tf.tensor_scatter_nd_update(t, UNIQUE_INDICES, u),
                              [base, UPDATES[1:]])


def test_scatter_nd_of_bools_as_tf1():
    # TF 2.21's tf.compat.v1: a tuple given twice is True when either update is (its bool sum);
    # scatter_nd([[1], [3]], [True, True], [5]) -> [F, T, F, T, F],
    # scatter_nd([[1], [1]], [True, False], [3]) -> [F, T, F],
    # scatter_nd([[0, 1]], [[True, False]], [2, 2, 2]) -> True at [0, 1, 0] only.
    with af.Graph().as_default():
        built = [tf.scatter_nd([[1], [3]], tf.constant([True, True]), [5]),
                 tf.scatter_nd([[1], [1]], tf.constant([True, False]), [3]),
                 tf.scatter_nd([[0, 1]], tf.constant([[True, False]]), [2, 2, 2])]
        with tf.Session() as sess:
            spread, repeated, rows = sess.run(built)
    np.testing.assert_array_equal(spread, [False, True, False, True, False])
    np.testing.assert_array_equal(repeated, [False, True, False])
    expected = np.zeros((2, 2, 2), bool)
    expected[0, 1, 0] = True
    np.testing.assert_array_equal(rows, expected)
    assert spread.dtype == repeated.dtype == rows.dtype == np.bool_


def test_scatter_bad_input_is_named():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="ScatterNd .*updates must have shape"):
            tf.scatter_nd(INDICES, UPDATES[:, :4], [3, 4, 5])
        with pytest.raises(ValueError, match="ScatterNd .*last dim of indices"):
            tf.scatter_nd(INDICES, UPDATES, [3])
        with pytest.raises(TypeError, match="ScatterNd.*indices has dtype float32"):
            tf.scatter_nd(INDICES.astype(np.float32), UPDATES, [3, 4, 5])
        with pytest.raises(ValueError, match="ScatterNd .*non-negative"):
            tf.scatter_nd(INDICES, UPDATES, [-3, 4, 5])
        with pytest.raises(TypeError, match="TensorScatterUpdate .*same dtype"):
            tf.tensor_scatter_nd_update(np.zeros((3, 4, 5), np.float32), INDICES,
                                        tf.constant(UPDATES))


async def test_scatter_out_of_range_index_names_the_op():
    with af.Graph().as_default():
        p = af.placeholder(af.int32, [None, 2])
        out = tf.scatter_nd(p, UPDATES, [3, 4, 5], name="spread")
        with pytest.raises(af.errors.InvalidArgumentError, match=r"spread.*indices\[\.\.\., 1\]"):
            await _run(out, {p: INDICES + [[0, 4], [0, 0], [0, 0], [0, 0]]})
        update = tf.tensor_scatter_nd_update(np.zeros((3, 4, 5)), p, UPDATES, name="put")
        with pytest.raises(af.errors.InvalidArgumentError, match="put"):
            await _run(update, {p: INDICES - 1})


async def test_unique_family_against_numpy():
    floats = np.array([3.5, -1.0, 3.5, 2.0, -1.0, 8.0])
    with af.Graph().as_default():
        p = af.placeholder(af.int32, [None])
        y, idx = tf.unique(p)
        fy, fidx, fcount = tf.unique_with_counts(floats, out_idx=tf.int64)
        diff, where = tf.setdiff1d(p, [4, 9, 100])
        counts = [tf.bincount(p), tf.bincount(p, minlength=12), tf.bincount(p, maxlength=5),
                  tf.bincount(p, weights=np.arange(9.0), dtype=tf.float64),
                  tf.bincount(tf.zeros([0], tf.int32))]
        values = await _run([y, idx, fy, fidx, fcount, diff, where] + counts, {p: VALUES})
    np.testing.assert_array_equal(values[0], [4, 1, 7, 0, 9])
    np.testing.assert_array_equal(values[0][values[1]], VALUES)
    assert values[1].dtype == np.int32 and values[3].dtype == np.int64
    np.testing.assert_array_equal(values[2], [3.5, -1.0, 2.0, 8.0])
    np.testing.assert_array_equal(values[3], [0, 1, 0, 2, 1, 3])
    np.testing.assert_array_equal(values[4], [2, 2, 1, 1])
    np.testing.assert_array_equal(values[5], [1, 7, 1, 0, 7])
    np.testing.assert_array_equal(values[6], [1, 3, 4, 5, 7])
    np.testing.assert_array_equal(values[7], np.bincount(VALUES))
    np.testing.assert_array_equal(values[8], np.bincount(VALUES, minlength=12))
    np.testing.assert_array_equal(values[9], np.bincount(VALUES)[:5])
    np.testing.assert_allclose(values[10], np.bincount(VALUES, np.arange(9.0)))
    assert values[10].dtype == np.float64 and values[11].shape == (0,)
    assert y.shape.as_list() == [None] and idx.shape.as_list() == [None]


def test_unique_family_bad_input_is_named():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Unique .*x must be 1-D"):
            tf.unique([[1, 2]])
        with pytest.raises(TypeError, match="UniqueWithCounts .*out_idx"):
            tf.unique_with_counts([1, 2], out_idx=tf.float32)
        with pytest.raises(TypeError, match="ListDiff .*same dtype"):
            tf.setdiff1d(tf.constant([1, 2]), tf.constant([1.0]))
        with pytest.raises(TypeError, match="bincount: arr must be int32"):
            tf.bincount(tf.constant([1.0]))


async def test_bincount_negative_values_name_the_op():
    with af.Graph().as_default():
        p = af.placeholder(af.int32, [None])
        out = tf.bincount(p, minlength=3)
        with pytest.raises(af.errors.InvalidArgumentError, match="Bincount.*non-negative"):
            await _run(out, {p: [1, -2]})


TF_SNIPPET = """
x = tf.constant(inputs["values"])
u = tf.constant(inputs["updates"])
base = tf.constant(inputs["base"])
scattered = tf.scatter_nd(inputs["indices"], u, [3, 4, 5])
replaced = tf.tensor_scatter_nd_update(base, inputs["indices"][1:], u[1:])
w = tf.constant(inputs["w"])
grads = tf.gradients(tf.reduce_sum(tf.sin(scattered) * w) + tf.reduce_sum(tf.sin(replaced) * w),
                     [u, base])
outs = [scattered, replaced, *tf.unique(x), *tf.unique_with_counts(x, out_idx=tf.int64),
        *tf.setdiff1d(x, [4, 9, 100]), tf.bincount(x), tf.bincount(x, minlength=12),
        tf.bincount(x, maxlength=5), tf.bincount(x, weights=inputs["weights"], dtype=tf.float64)]
with tf.Session() as sess:
    outputs["outs"], outputs["grads"] = sess.run([outs, grads])
"""


async def test_against_tf1(tmp_path):
    rng = np.random.default_rng(10)
    inputs = {"values": VALUES, "updates": UPDATES, "indices": INDICES,
              "base": rng.standard_normal((3, 4, 5)), "w": rng.standard_normal((3, 4, 5)),
              "weights": np.arange(9.0)}
    theirs = tf1_run(TF_SNIPPET, tmp_path, **inputs)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": inputs}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run([g["outs"], g["grads"]])
    compare_groups(values, theirs, ("outs", "grads"))
