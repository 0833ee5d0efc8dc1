"""TF1 shape and layout names that were on porting.md's "Not provided" list: ``tf.roll``,
``tf.repeat``, ``tf.shape_n``, ``tf.identity_n``, ``tf.ensure_shape``, ``tf.unravel_index``,
``tf.broadcast_dynamic_shape``, ``tf.broadcast_static_shape`` and ``tf.where_v2``: values
against numpy (always) and TF1 (when TensorFlow is installed), static shapes and op names as
TF1's (copied from TF 2.21's ``tf.compat.v1``), gradients against finite differences, and bad
input named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from asyncflow.graph.shape import TensorShape
from gradcheck import check_gradients
from tf1_reference import compare_groups, tf1_run

X = np.arange(12.0).reshape(3, 4) * 0.5 - 2
Y = np.random.default_rng(5).standard_normal((2, 3, 4))


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


async def test_roll_values_shapes_and_names():
    with af.Graph().as_default():
        p = af.placeholder(af.float64)
        q = af.placeholder(af.float64, [None, 4])
        shift = af.placeholder(af.int32, [2])
        outs = [tf.roll(X, [1, -1], [0, 1]), tf.roll(X, 2, 1), tf.roll(Y, [1, 2, -5], [0, 2, -1]),
                tf.roll(p, 1, 0), tf.roll(q, shift, [0, 1]), tf.roll(X, np.int64(7), 0),
                tf.roll(X, [], [])]
        assert [o.name for o in outs[:2]] == ["Roll:0", "Roll_1:0"]
        assert outs[3].shape.ndims is None and outs[4].shape.as_list() == [None, 4]
        values = await _run(outs, {p: Y, q: X, shift: [2, 3]})
    expected = [np.roll(X, [1, -1], [0, 1]), np.roll(X, 2, 1), np.roll(Y, [1, -3], [0, 2]),
                np.roll(Y, 1, 0), np.roll(X, [2, 3], [0, 1]), np.roll(X, 1, 0), X]
    expected[0][0] = [2.5, 3.0, 3.5, 2.0]  # TF1's, pinned: row 0 is the old last row, left 1
    for value, want in zip(values, expected):
        np.testing.assert_array_equal(value, want)


async def test_repeat_values_shapes_and_names():
    with af.Graph().as_default():
        q = af.placeholder(af.float64, [None, 4])
        u = af.placeholder(af.float64)
        counts = af.placeholder(af.int32, [None])
        outs = [tf.repeat(X, 2, axis=0), tf.repeat(X, [1, 0, 2], axis=0), tf.repeat(X, 2),
                tf.repeat(q, 3, axis=1), tf.repeat(q, [1, 2, 3, 4], axis=-1),
                tf.repeat(u, [1, 2, 3, 4], axis=1), tf.repeat(X, counts, axis=0),
                tf.repeat(5.0, 3, axis=0), tf.repeat(X, [2], axis=1),
                tf.repeat(X, np.int64(0), axis=1)]
        # TF1's scopes and static shapes
        assert [o.name.split("/")[0] for o in outs[:3]] == ["Repeat", "Repeat_1", "Repeat_2"]
        assert [o.shape.as_list() if o.shape.ndims is not None else None for o in outs] == [
            [6, 4], [None, 4], [24], [None, 12], [None, 10], None, [None, 4], [3], [3, 8], [3, 0]]
        values = await _run(outs, {q: X, u: Y[0], counts: [3, 0, 1]})
    expected = [np.repeat(X, 2, 0), np.repeat(X, [1, 0, 2], 0), np.repeat(X, 2),
                np.repeat(X, 3, 1), np.repeat(X, [1, 2, 3, 4], 1), np.repeat(Y[0], [1, 2, 3, 4], 1),
                np.repeat(X, [3, 0, 1], 0), [5.0, 5.0, 5.0], np.repeat(X, 2, 1), X[:, :0]]
    np.testing.assert_array_equal(values[1], [X[0], X[2], X[2]])  # pinned beside numpy's
    for value, want in zip(values, expected):
        np.testing.assert_array_equal(value, want)


async def test_repeat_counts_of_unknown_rank_or_size():
    # TF1 broadcasts repeats to the axis's size: a fed scalar, or one count, serves every entry
    with af.Graph().as_default():
        q = af.placeholder(af.float64, [None, 3])
        anything = af.placeholder(af.int32)
        some = af.placeholder(af.int32, [None])
        outs = [tf.repeat(q, anything, axis=1), tf.repeat(q, some, axis=1),
                tf.repeat(q, anything, axis=0)]
        grad = af.gradients(af.reduce_sum(outs[0] * outs[0]), [q])[0]
        values = await _run(outs + [grad], {q: X[:, :3], anything: 2, some: [3]})
    expected = [np.repeat(X[:, :3], 2, 1), np.repeat(X[:, :3], 3, 1), np.repeat(X[:, :3], 2, 0),
                4 * X[:, :3]]
    for value, want in zip(values, expected):
        np.testing.assert_array_equal(value, want)


async def test_repeat_refuses_negative_counts_by_name():
    # TF1 refuses a negative count of one element (its Tile: "Expected multiples[1] >= 0, but
    # got -1"), fails a Reshape off axis 0, and copies the entry 0 times on axis 0 (a fed
    # scalar of unknown shape, or a vector): here each is refused, naming Repeat.
    with af.Graph().as_default():
        cases = []
        for shape, value, axis in [(None, -1, 0), ([], -2, 1), ([None], [-1], 0),
                                   ([None], [1, -1], 0), ([None], [2, -1, 1], 1),
                                   ([2], [0, -1], 0)]:
            counts = af.placeholder(af.int32, shape)
            cases.append((tf.repeat(X[:2, :3], counts, axis=axis), {counts: value}))
        for out, feed in cases:
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"Assert 'Repeat(_\d+)?/check_repeats'.*repeats must be "
                                     r"non-negative, got\] \[.*-"):
                await _run(out, feed)
        fine = await _run(cases[3][0], {list(cases[3][1])[0]: [1, 0]})
        np.testing.assert_array_equal(fine, X[:1, :3])
        with pytest.raises(ValueError, match=r"Repeat: repeats must be non-negative, got -1"):
            tf.repeat(X, -1, axis=0)
        with pytest.raises(ValueError, match=r"Repeat: repeats must be non-negative, got "
                                             r"\[1, -1, 0\]"):
            tf.repeat(X, [1, -1, 0], axis=0)


async def test_shape_n_identity_n_ensure_shape():
    with af.Graph().as_default():
        q = af.placeholder(af.float32, [None, 2])
        u = af.placeholder(af.float32)
        shapes = tf.shape_n([X, q, u])
        shapes64 = tf.shape_n([X], out_type=tf.int64)
        same = tf.identity_n([X, 3, q])
        ensured = tf.ensure_shape(u, [None, 2])
        ensured_any = tf.ensure_shape(q, None)
        assert [t.name for t in shapes] == ["ShapeN:0", "ShapeN:1", "ShapeN:2"]
        assert [t.shape.as_list() if t.shape.ndims is not None else None for t in shapes] == [
            [2], [2], [None]]
        assert shapes64[0].dtype == tf.int64 and shapes[0].dtype == tf.int32
        assert [t.name for t in same] == ["IdentityN:0", "IdentityN:1", "IdentityN:2"]
        assert same[1].dtype == tf.int32 and same[2].shape.as_list() == [None, 2]
        assert ensured.name == "EnsureShape:0" and ensured.shape.as_list() == [None, 2]
        assert ensured_any.shape.as_list() == [None, 2]
        feed = {q: np.ones((5, 2), np.float32), u: np.ones((7, 2), np.float32)}
        values = await _run([shapes, shapes64, same, ensured], feed)
        with pytest.raises(af.errors.InvalidArgumentError,
                           match=r"EnsureShape.*Shape of tensor EnsureShape \[7,3\] is not "
                                 r"compatible with expected shape \[\?,2\]"):
            await _run(ensured, {u: np.ones((7, 3), np.float32)})
    assert [v.tolist() for v in values[0]] == [[3, 4], [5, 2], [7, 2]]
    assert values[1][0].dtype == np.int64 and values[1][0].tolist() == [3, 4]
    np.testing.assert_array_equal(values[2][0], X)
    assert values[2][1] == 3 and values[2][2].shape == (5, 2)
    assert values[3].shape == (7, 2)


async def test_unravel_index_and_broadcast_shapes():
    with af.Graph().as_default():
        fed = af.placeholder(af.int64, [None])
        outs = [tf.unravel_index([1, 5, 7], [3, 4]), tf.unravel_index(5, [3, 4]),
                tf.unravel_index(fed, np.array([2, 3, 4], np.int64)),
                tf.broadcast_dynamic_shape([2, 1, 3], [4, 1]),
                tf.broadcast_dynamic_shape(np.array([5], np.int64), np.array([1, 1], np.int64)),
                tf.broadcast_dynamic_shape([], [2, 0])]
        assert [o.name for o in outs[:2]] == ["UnravelIndex:0", "UnravelIndex_1:0"]
        assert [o.shape.as_list() for o in outs] == [[2, 3], [2], [3, None], [3], [2], [2]]
        assert [o.dtype for o in outs] == [tf.int32, tf.int32, tf.int64, tf.int32, tf.int64,
                                           tf.int32]
        values = await _run(outs, {fed: [0, 23, 13]})
    assert [v.tolist() for v in values] == [
        [[0, 1, 1], [1, 1, 3]], [1, 1], [[0, 1, 1], [0, 2, 0], [0, 3, 1]], [2, 4, 3], [1, 5],
        [2, 0]]
    assert tf.broadcast_static_shape(tf.TensorShape([2, None, 3]),
                                     tf.TensorShape([4, 1])).as_list() == [2, 4, 3]
    assert tf.broadcast_static_shape(tf.TensorShape([None, 1]),
                                     tf.TensorShape([None, 5])).as_list() == [None, 5]
    assert tf.broadcast_static_shape(tf.TensorShape(None), tf.TensorShape([2])).ndims is None


async def test_where_v2_broadcasts_all_three():
    cond = np.array([[True], [False], [True]])
    with af.Graph().as_default():
        outs = [tf.where_v2([True, False], X[:, :2], 0.0), tf.where_v2(cond, X, X[0]),
                tf.where_v2(cond, 1.0, -1.0), tf.where_v2([[True, False]])]
        assert outs[0].name == "SelectV2:0"
        assert [o.shape.as_list() for o in outs] == [[3, 2], [3, 4], [3, 1], [None, 2]]
        values = await _run(outs)
    expected = [np.where([True, False], X[:, :2], 0.0), np.where(cond, X, X[0]),
                np.where(cond, 1.0, -1.0).astype(np.float32), [[0, 0]]]
    for value, want in zip(values, expected):
        np.testing.assert_array_equal(value, want)
    assert values[2].dtype == np.float32


@pytest.mark.parametrize("build,shapes", [
    (lambda x: tf.roll(x, [1, -2, 1], [0, 2, 0]), [(2, 3, 4)]),
    (lambda x: tf.repeat(x, 2, axis=1), [(2, 3, 2)]),
    (lambda x: tf.repeat(x, [2, 0, 3], axis=-2), [(2, 3, 2)]),
    (lambda x: tf.repeat(x, 3), [(2, 3)]),
    (lambda x: tf.identity_n([x * 2, x])[0], [(3, 2)]),
    (lambda x: tf.ensure_shape(x, [None, 2]) * x, [(3, 2)]),
    (lambda c, x, y: tf.where_v2(c > 0, x, y), [(3, 1), (4,), (2, 3, 4)]),
], ids=["roll", "repeat", "repeat_counts", "repeat_flat", "identity_n", "ensure_shape",
        "where_v2"])
async def test_gradients(build, shapes):
    rng = np.random.default_rng(11)
    await check_gradients(build, [rng.standard_normal(s) for s in shapes])


def test_bad_input_is_named():
    with af.Graph().as_default():
        x = af.constant(X)
        with pytest.raises(ValueError, match="Roll.*shift and axis must have the same size"):
            tf.roll(x, [1], [0, 1])
        with pytest.raises(ValueError, match="Roll.*axis 5 is out of range"):
            tf.roll(x, 1, 5)
        with pytest.raises(TypeError, match="Roll: value passed to shift has dtype float32"):
            tf.roll(x, 1.5, 0)
        with pytest.raises(ValueError, match="Roll.*1-D or higher"):
            tf.roll(3.0, 1, 0)
        with pytest.raises(ValueError, match="Repeat: repeats has 2 entries, but dimension 0"):
            tf.repeat(x, [1, 2], axis=0)
        with pytest.raises(ValueError, match="Repeat: axis 3 is out of range"):
            tf.repeat(x, 2, axis=3)
        with pytest.raises(TypeError, match="Repeat: value passed to repeats has dtype float32"):
            tf.repeat(x, 2.0)
        with pytest.raises(ValueError, match="ShapeN: needs at least one input"):
            tf.shape_n([])
        with pytest.raises(ValueError, match="IdentityN: needs at least one input"):
            tf.identity_n([])
        with pytest.raises(ValueError, match=r"EnsureShape.*\(3, 4\) is not compatible with "
                                             r"the expected shape \(3, 5\)"):
            tf.ensure_shape(x, [3, 5])
        with pytest.raises(TypeError, match="UnravelIndex: value passed to indices has dtype "
                                            "float32"):
            tf.unravel_index([1.0], [3])
        with pytest.raises(ValueError, match="Incompatible shapes for broadcasting.*"
                                             r"Received: \(2,\) and \(3,\)"):
            tf.broadcast_static_shape(tf.TensorShape([2]), tf.TensorShape([3]))
        with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
            tf.broadcast_dynamic_shape([2], [3])
        with pytest.raises(ValueError, match="SelectV2.*Dimensions must be equal, but are 4 "
                                             "and 3"):
            tf.where_v2([True, False, True], x, 0.0)
        with pytest.raises(TypeError, match="SelectV2.*condition must be bool"):
            tf.where_v2([1, 0], [1.0, 2.0], 0.0)


async def test_run_time_errors_name_the_op():
    with af.Graph().as_default():
        i = af.placeholder(af.int32, [None])
        s = af.placeholder(af.int32, [None])
        a = af.placeholder(af.int32)
        outs = {"unravel": tf.unravel_index(i, [3, 4], name="unravel"),
                "bargs": tf.broadcast_dynamic_shape(s, [3]),
                "roll": tf.roll(X, 1, a, name="roll")}
        for key, feed in [("unravel", {i: [12]}), ("bargs", {s: [2]}), ("roll", {a: 2})]:
            with pytest.raises(af.errors.InvalidArgumentError, match=outs[key].op.name):
                await _run(outs[key], feed)
        with pytest.raises(af.errors.InvalidArgumentError,
                           match="index 12 is out of bound as with dims"):
            await _run(outs["unravel"], {i: [12]})
        with pytest.raises(af.errors.InvalidArgumentError, match=r"Incompatible shapes: \[2\] "
                                                                  r"vs. \[3\]"):
            await _run(outs["bargs"], {s: [2]})


def _dims(text):
    """A TensorShape's printed form as dims (None for "?")."""
    inner = text.strip("()").rstrip(",")
    return [None if d.strip() == "?" else int(d) for d in inner.split(",")] if inner else []


TF_SNIPPET = """
x = tf.constant(inputs["x"])
y = tf.constant(inputs["y"])
q = tf.placeholder(tf.float64, [None, 4])
c = tf.constant(inputs["c"])
outs = [tf.roll(x, [1, -1], [0, 1]), tf.roll(y, [1, 2, -5], [0, 2, -1]), tf.roll(q, 3, 1),
        tf.repeat(x, 2, axis=0), tf.repeat(x, [1, 0, 2], axis=0), tf.repeat(y, 2),
        tf.repeat(q, [1, 2, 3, 4], axis=1), tf.repeat(q, 3, axis=-1),
        tf.identity_n([x, y])[1], tf.ensure_shape(q, [None, 4]),
        tf.where_v2(c, x, x[0]), tf.where_v2(c, y, -1.0), tf.where_v2([True, False], x[:, :2], 0.0)]
ints = tf.shape_n([x, y, q]) + [tf.shape_n([y], out_type=tf.int64)[0],
        tf.unravel_index([1, 5, 7], [3, 4]), tf.unravel_index(np.int64(9), np.array([2, 5])),
        tf.broadcast_dynamic_shape([2, 1, 3], [4, 1]), tf.where_v2([[True, False], [True, True]])]
grads = [g for i in (0, 1, 3, 4, 5, 8, 10, 11, 12)
         for g in tf.gradients(tf.reduce_sum(tf.sin(outs[i])), [x, y]) if g is not None]
static = [str(o.shape) for o in outs + ints] + [str(tf.broadcast_static_shape(
    tf.TensorShape([2, None, 3]), tf.TensorShape([4, 1])))]
with tf.Session() as sess:
    feed = {q: inputs["x"]}
    outputs["outs"], outputs["ints"], outputs["grads"] = sess.run([outs, ints, grads], feed)
outputs["static"] = np.array(static)
outputs["names"] = np.array([t.name for t in outs + ints])
"""


async def test_against_tf1(tmp_path):
    inputs = {"x": X, "y": Y, "c": np.array([[True], [False], [True]])}
    theirs = tf1_run(TF_SNIPPET, tmp_path, **inputs)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": inputs}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run([g["outs"], g["ints"], g["grads"]], {g["q"]: X})
        static, names = g["static"], [t.name for t in g["outs"] + g["ints"]]
    for ours, their in zip(static, theirs["static"].tolist()):  # as TF1's, or more known
        assert ours == their or (TensorShape(_dims(their)).is_compatible_with(_dims(ours))
                                 and their.count("?") > ours.count("?")), (ours, their)
    # (repeat is TF1's scope with a GatherV2 inside: the names inside scopes differ)
    assert [n.split("/")[0] for n in names] == [n.split("/")[0] for n in theirs["names"]]
    compare_groups(values, theirs, ("outs", "ints", "grads"))


async def test_tf_manip_namespace_is_tf1s():
    """TF1's ``tf.manip`` names the same builders (``tf.manip.roll`` of TF 1.6-1.12)."""
    assert sorted(n for n in dir(tf.manip) if not n.startswith("_")) == [  # TF1's list
        "batch_to_space_nd", "gather_nd", "reshape", "reverse", "roll", "scatter_nd",
        "space_to_batch_nd", "tile"]
    with af.Graph().as_default():
        rolled = tf.manip.roll(X, 1, 0)
        values = await _run([rolled, tf.manip.tile(X[:1], [2, 1])])
    np.testing.assert_array_equal(values[0], np.roll(X, 1, 0))
    np.testing.assert_array_equal(values[1], np.tile(X[:1], [2, 1]))
