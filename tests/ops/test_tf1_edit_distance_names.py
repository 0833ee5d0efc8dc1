"""TF1's ``tf.edit_distance`` (SparseTensor inputs), which porting.md listed as not provided:
values against a Levenshtein reference (always) and TF1 (when TensorFlow is installed),
static shapes and names as TF1's, string values, refusals named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from tf1_reference import compare_groups, tf1_run

HYP = ([[0, 0, 0], [0, 0, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]], [2, 2, 2])
TRUTH = ([[0, 0, 0], [0, 0, 1], [0, 0, 2], [1, 0, 0], [1, 1, 0]], [2, 2, 3])


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


def _sparse(layout, values):
    return tf.SparseTensor(layout[0], values, layout[1])


async def test_values_shapes_and_names():
    with af.Graph().as_default():
        h, t = _sparse(HYP, ["a", "b", "c", "d", "e"]), _sparse(TRUTH, ["a", "x", "b", "c", "q"])
        ints = (tf.SparseTensor([[0, 0], [0, 1], [2, 0]], [1, 2, 3], [3, 2]),
                tf.SparseTensor([[0, 0], [1, 0]], [1, 5], [2, 4]))
        fed = tf.sparse_placeholder(tf.int32)
        outs = [tf.edit_distance(h, t), tf.edit_distance(h, t, normalize=False, name="ed"),
                tf.edit_distance(*ints), tf.edit_distance(*ints, normalize=False),
                tf.edit_distance(fed, ints[1]),
                tf.edit_distance(tf.SparseTensorValue([[0, 1]], [7.0], [1, 3]),
                                 tf.SparseTensorValue([[0, 0], [0, 2]], [7.0, 7.0], [1, 3]))]
        assert [o.name for o in outs] == ["edit_distance:0", "ed:0", "edit_distance_1:0",
                                          "edit_distance_2:0", "edit_distance_3:0",
                                          "edit_distance_4:0"]
        assert [o.shape.as_list() if o.shape.ndims is not None else None for o in outs] == [
            [2, 2], [2, 2], [3], [3], None, [1]]
        assert af.gradients(outs[5], []) == [] and outs[0].dtype == af.float32
        # (the fed hypothesis out of row-major order: TF1's kernel answers [inf, 1] here)
        fed_value = tf.SparseTensorValue([[1, 0], [0, 0]], [1, 2], [2, 4])
        values = await _run(outs, {fed: fed_value})
    expected = [[[1 / 3, 0], [0, 2]], [[1, 0], [0, 2]], [1, 1, np.inf], [1, 1, 1], [1, 1],
                [0.5]]
    for value, want in zip(values, expected):
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, np.float32(want))


async def test_many_entries_run_off_the_loop_with_the_same_values():
    # (over ~100 entries the executor offloads the kernel to a worker thread)
    rng = np.random.default_rng(2)
    lengths = rng.integers(0, 12, size=(2, 40))
    sides = []
    for row_lengths in lengths:
        index = np.array([[i, j] for i, n in enumerate(row_lengths) for j in range(n)], np.int64)
        sides.append(tf.SparseTensorValue(index, rng.integers(0, 3, len(index)), [40, 12]))
    with af.Graph().as_default():
        h, t = tf.sparse_placeholder(tf.int64), tf.sparse_placeholder(tf.int64)
        value = await _run(tf.edit_distance(h, t, normalize=False), {h: sides[0], t: sides[1]})

    def levenshtein(a, b):
        rows = np.arange(len(b) + 1)
        for i, x in enumerate(a, 1):
            prev, rows = rows, np.concatenate([[i], np.zeros(len(b), int)])
            for j, y in enumerate(b, 1):
                rows[j] = min(prev[j] + 1, rows[j - 1] + 1, prev[j - 1] + (x != y))
        return rows[-1]

    def rows(side):
        return [[v for (r, _), v in zip(side.indices, side.values) if r == i] for i in range(40)]
    want = [levenshtein(a, b) for a, b in zip(rows(sides[0]), rows(sides[1]))]
    np.testing.assert_array_equal(value, np.float32(want))


def test_refusals_are_named():
    with af.Graph().as_default():
        ints = tf.SparseTensor([[0, 0]], [1], [2, 4])
        with pytest.raises(TypeError, match="Hypothesis must be a SparseTensor, got Tensor"):
            tf.edit_distance(af.constant([1, 2]), ints)
        with pytest.raises(TypeError, match="Truth must be a SparseTensor"):
            tf.edit_distance(ints, [[1, 2]])
        with pytest.raises(TypeError, match="EditDistance.*'truth_values' has type float32 "
                                            "that does not match type int32"):
            tf.edit_distance(ints, tf.SparseTensor([[0, 0]], [1.0], [2, 4]))
        with pytest.raises(ValueError, match="EditDistance.*Num elements of hypothesis_shape "
                                             "does not match truth_shape: 2 vs. 3"):
            tf.edit_distance(ints, tf.SparseTensor([[0, 0, 0]], [1], [2, 4, 4]))


async def test_run_time_errors_name_the_op():
    with af.Graph().as_default():
        fed = tf.sparse_placeholder(tf.int32)
        truth = tf.SparseTensor([[0, 0]], [1], [2, 4])
        out = tf.edit_distance(fed, truth, name="dist")
        outside = tf.edit_distance(truth, tf.SparseTensor([[0, 5]], [1], [2, 4]), name="far")
        with pytest.raises(af.errors.InvalidArgumentError,
                           match=r"'dist'.*matching ranks, but their shapes are: \[3\] and "
                                 r"\[2\]"):
            await _run(out, {fed: tf.SparseTensorValue([[0, 0, 0]], [1], [2, 4, 4])})
        with pytest.raises(af.errors.InvalidArgumentError,
                           match=r"'far'.*truth: an index is out of bounds of the dense shape "
                                 r"\[2, 4\]"):
            await _run(outside)


TF_SNIPPET = """
rng = np.random.RandomState(4)
outs = []
for rank, normalize in ((2, True), (3, False), (3, True), (4, True)):
    dense = [rng.randint(1, 4) for _ in range(rank - 1)]
    pair = []
    for side in range(2):
        length = rng.randint(0, 6)
        index = np.array([list(np.unravel_index(k, dense)) + [j] for k in range(int(np.prod(dense)))
                          for j in range(rng.randint(0, length + 1))], np.int64).reshape(-1, rank)
        pair.append(tf.SparseTensor(index, rng.randint(0, 3, len(index)).astype(np.int64),
                                    dense + [length + side]))
    outs.append(tf.edit_distance(pair[0], pair[1], normalize=normalize))
with tf.Session() as sess:
    outputs["outs"] = sess.run(outs)
outputs["static"] = np.array([str(o.shape) for o in outs])
outputs["names"] = np.array([t.name for t in outs])
"""


async def test_against_tf1(tmp_path):
    theirs = tf1_run(TF_SNIPPET, tmp_path)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": {}}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run(g["outs"])
        static = [str(o.shape) for o in g["outs"]]
        names = [t.name for t in g["outs"]]
    assert static == theirs["static"].tolist()
    assert names == theirs["names"].tolist()
    compare_groups([values], theirs, ("outs",), rtol=0)
