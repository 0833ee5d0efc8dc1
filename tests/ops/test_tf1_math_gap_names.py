"""TF1 math names that were on porting.md's "Not provided" list: ``tf.erfc``,
``tf.searchsorted``, ``tf.truncatediv``, ``tf.truncatemod``, ``tf.realdiv``, ``tf.floor_div``,
``tf.accumulate_n``, ``tf.saturate_cast``, ``tf.clip_by_average_norm`` and
``tf.confusion_matrix`` (with their ``tf.math`` spellings): values against numpy and the C
library (always) and TF1 (when TensorFlow is installed), op names and static shapes as TF1's
(copied from TF 2.21's ``tf.compat.v1``), gradients against finite differences, and bad input
named."""
import math

import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import check_gradients
from tf1_reference import compare_groups, tf1_run

XI = np.array([-7, -3, 2, 7, 0, -8, 9], np.int32)
YI = np.array([2, 2, -3, 3, 5, -3, -4], np.int32)
POINTS = np.concatenate([np.linspace(-6, 6, 49), [0.0, 26.5, 27.5, 30.0, -30.0]])


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


async def test_division_values_and_names():
    x, y = XI.astype(np.float32) + 0.5, YI.astype(np.float32)
    with af.Graph().as_default():
        outs = [tf.truncatediv(XI, YI), tf.truncatemod(XI, YI), tf.truncatediv(x, y),
                tf.truncatemod(x, y), tf.realdiv(x, y), tf.floor_div(XI, YI),
                tf.floor_div(x, y), tf.truncatediv(np.uint8([7, 200]), np.uint8([2, 7]))]
        assert [o.name for o in outs[:7]] == [  # TF1's
            "TruncateDiv:0", "TruncateMod:0", "TruncateDiv_1:0", "TruncateMod_1:0",
            "RealDiv:0", "FloorDiv:0", "FloorDiv_1:0"]
        values = await _run(outs)
    expected = [np.fix(XI / YI).astype(np.int32), np.fmod(XI, YI), np.trunc(x / y),
                np.fmod(x, y), x / y, XI // YI, np.floor(x / y), np.uint8([3, 28])]
    assert values[0].tolist() == [-3, -1, 0, 2, 0, 2, -2]  # C's division (TF1's), pinned
    assert values[1].tolist() == [-1, -1, 2, 1, 0, -2, 1]
    for value, want in zip(values, expected):
        assert value.dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(value, want)


async def test_erfc_against_the_c_library():
    with af.Graph().as_default():
        outs = [tf.erfc(POINTS), tf.math.erfc(POINTS.astype(np.float32))]
        assert outs[0].name == "Erfc:0"
        e64, e32 = await _run(outs)
    np.testing.assert_array_equal(e64, [math.erfc(v) for v in POINTS])
    np.testing.assert_array_equal(e32, np.array([math.erfc(float(np.float32(v)))
                                                 for v in POINTS], np.float32))
    assert 0 < e64[-4] < 1e-300 and e64[-2] == 0  # the tail, where 1 - erf is 0


async def test_searchsorted_values_and_shapes():
    seq = np.array([[1.0, 2, 2, 3], [0, 5, 5, 10]])
    vals = np.array([[2.0, 3, 0.5], [5, 11, -1]])
    with af.Graph().as_default():
        p = af.placeholder(af.float64, [None, 4])
        outs = [tf.searchsorted(seq, vals), tf.searchsorted(seq, vals, side="right"),
                tf.searchsorted(seq[0], np.array([2.0, 0.0, 9.0]), out_type=tf.int64),
                tf.searchsorted(p, vals, name="ss"),
                tf.searchsorted(np.arange(24.0).reshape(2, 3, 4), np.full((2, 3, 1), 5.5))]
        assert [o.shape.as_list() for o in outs] == [[2, 3], [2, 3], [3], [2, 3], [2, 3, 1]]
        assert outs[3].op.type == "Reshape" and outs[3].op.inputs[0].op.name == "ss"
        values = await _run(outs, {p: seq})
    expected = [[np.searchsorted(s, v) for s, v in zip(seq, vals)],
                [np.searchsorted(s, v, side="right") for s, v in zip(seq, vals)],
                [1, 0, 4], [np.searchsorted(s, v) for s, v in zip(seq, vals)],
                np.where(np.arange(24.0).reshape(2, 3, 4)[..., :1] <= 5.5,
                         np.minimum(4, 6 - np.arange(0, 24, 4).reshape(2, 3, 1)), 0)]
    assert values[0].tolist() == [[1, 3, 0], [1, 4, 0]] and values[2].dtype == np.int64
    for value, want in zip(values, expected):
        np.testing.assert_array_equal(value, want)


async def test_searchsorted_many_rows_nan_and_edges():
    # TF1 2.21's values, pinned: a NaN value is first for 'left' and last for 'right' (TF1's
    # binary search compares entry < value; numpy's searchsorted sorts NaN last)
    seq = np.array([[1.0, 2, 3], [-np.inf, 0, np.inf]])
    vals = np.array([[np.nan, 2, np.inf, -np.inf], [np.inf, np.nan, -np.inf, 0]])
    rng = np.random.default_rng(3)
    rows = np.sort(rng.integers(-5, 5, (40, 17)), axis=1)  # duplicates in every row
    queries = rng.integers(-7, 7, (40, 9))
    with af.Graph().as_default():
        outs = [tf.searchsorted(seq, vals), tf.searchsorted(seq, vals, side="right"),
                tf.searchsorted(np.uint8([[3, 200, 255]]), np.uint8([[0, 200, 255, 201]])),
                tf.searchsorted(np.uint8([[3, 200, 255]]), np.uint8([[0, 200, 255, 201]]),
                                side="right"),
                tf.searchsorted(np.zeros((2, 0), np.float16), np.zeros((2, 3), np.float16)),
                tf.searchsorted(rows, queries), tf.searchsorted(rows, queries, side="right")]
        values = await _run(outs)
    assert values[0].tolist() == [[0, 1, 3, 0], [2, 0, 0, 1]]
    assert values[1].tolist() == [[3, 2, 3, 0], [3, 3, 1, 2]]
    assert values[2].tolist() == [[0, 1, 2, 2]] and values[3].tolist() == [[0, 2, 3, 2]]
    assert values[4].tolist() == [[0, 0, 0]] * 2
    for value, side in zip(values[5:], ("left", "right")):
        np.testing.assert_array_equal(
            value, [np.searchsorted(r, q, side=side) for r, q in zip(rows, queries)])


async def test_saturate_cast_of_wide_integers():
    # bounds of an integer input taken exactly: float(int64.max) is 2**63, out of int64, and
    # uint64's 2**63 has no nextafter. (TF1 2.21 builds these but its own clamp overflows:
    # int64.max -> float32 gives -9.2e18 there; the values here are the clamp's intent.)
    i64, u64 = np.iinfo(np.int64), np.iinfo(np.uint64)
    with af.Graph().as_default():
        outs = [tf.saturate_cast(np.int64([i64.max, i64.min, 5]), tf.float32),
                tf.saturate_cast(np.int64([i64.max, i64.min, 5]), tf.uint64),
                tf.saturate_cast(np.uint64([u64.max, 5]), tf.int64),
                tf.saturate_cast(np.uint64([u64.max]), tf.float16),
                tf.saturate_cast(np.int64([i64.max, i64.min, -3]), tf.int8)]
        values = await _run(outs)
    np.testing.assert_array_equal(values[0], np.float32([2.0 ** 63, -2.0 ** 63, 5]))
    assert values[1].tolist() == [i64.max, 0, 5] and values[1].dtype == np.uint64
    assert values[2].tolist() == [i64.max, 5] and values[2].dtype == np.int64
    np.testing.assert_array_equal(values[3], np.float16([65504]))
    assert values[4].tolist() == [127, -128, -3]


async def test_confusion_matrix_squeezes_a_last_dim_of_1():
    # TF1's remove_squeezable_dimensions: labels [n, 1] beside predictions [n], or the reverse
    with af.Graph().as_default():
        p = af.placeholder(af.int32, [None, None])
        outs = [tf.confusion_matrix([[1], [2]], [2, 0]),
                tf.confusion_matrix([1, 2], [[2], [0]], num_classes=3),
                tf.confusion_matrix([1, 2], p, weights=[2, 3])]
        assert [o.shape.as_list() for o in outs] == [[3, 3], [3, 3], [None, None]]
        values = await _run(outs, {p: [[2], [0]]})
    assert [v.tolist() for v in values] == [  # TF1 2.21's
        [[0, 0, 0], [0, 0, 1], [1, 0, 0]], [[0, 0, 0], [0, 0, 1], [1, 0, 0]],
        [[0, 0, 0], [0, 0, 2], [3, 0, 0]]]


async def test_accumulate_saturate_clip_and_confusion():
    x = np.array([-7.0, -3, 2, 7, 0], np.float32)
    with af.Graph().as_default():
        q = af.placeholder(af.int32, [None])
        outs = [tf.accumulate_n([x, x * 2, -x]), tf.math.accumulate_n([x], shape=[5]),
                tf.saturate_cast(np.float32([-300, 1.7, 300, -0.5]), tf.uint8),
                tf.saturate_cast(np.float32([-3e10, 3e10, 5.5]), tf.int32),
                tf.saturate_cast(np.int64([-2 ** 40, 70000, 3]), tf.int16),
                tf.saturate_cast(np.float64([1e300, -1e300]), tf.float32),
                tf.clip_by_average_norm(x, 0.5), tf.clip_by_average_norm(x, 100.0),
                tf.confusion_matrix([1, 2, 4], [2, 2, 4]),
                tf.math.confusion_matrix([1, 2, 4], [2, 2, 4], num_classes=6, weights=[1.0, 2, 3],
                                         dtype=tf.float32),
                tf.confusion_matrix(q, q)]
        assert [o.name for o in outs[2:4]] == ["saturate_cast:0", "saturate_cast_1:0"]
        assert [o.name for o in outs[6:10]] == [
            "clip_by_average_norm:0", "clip_by_average_norm_1:0", "confusion_matrix/ScatterNd:0",
            "confusion_matrix_1/ScatterNd:0"]
        assert outs[8].shape.as_list() == [5, 5] and outs[10].shape.as_list() == [None, None]
        values = await _run(outs, {q: [0, 2, 2]})
    norm = np.sqrt(np.sum(x.astype(np.float64) ** 2))
    expected = [2 * x, x, np.uint8([0, 1, 255, 0]),
                np.int32([-2 ** 31, 2 ** 31 - 128, 5]),  # (TF1's: the float32 below 2^31)
                np.int16([-32768, 32767, 3]), np.float32([3.4028235e38, -3.4028235e38]),
                (x * 0.5 * min(5 / norm, 2.0)).astype(np.float32), x,
                np.zeros((5, 5), np.int32), np.zeros((6, 6), np.float32),
                np.diag([1, 0, 2]).astype(np.int32)]
    expected[8][[1, 2, 4], [2, 2, 4]] = 1
    expected[9][[1, 2, 4], [2, 2, 4]] = [1.0, 2, 3]
    for i, (value, want) in enumerate(zip(values, expected)):
        assert value.dtype == want.dtype, i
        np.testing.assert_allclose(value, want, rtol=1e-6, atol=0, err_msg=str(i))


@pytest.mark.parametrize("build,inputs", [
    (tf.erfc, [np.linspace(-2.5, 2.5, 12)]),
    (tf.realdiv, [np.linspace(-2, 2, 6), np.linspace(0.5, 3, 6)]),
    (lambda a, b: tf.accumulate_n([a, b, a * b]), [np.linspace(-1, 1, 6), np.ones(6) * 0.3]),
    (lambda a: tf.clip_by_average_norm(a, 0.2), [np.linspace(-1, 1, 6)]),
    (lambda a: tf.clip_by_average_norm(a, 5.0), [np.linspace(-1, 1, 6)]),
    (lambda a: tf.saturate_cast(a * 3, tf.float64), [np.linspace(-1, 1, 6)]),
], ids=["erfc", "realdiv", "accumulate_n", "clip_by_average_norm",
        "clip_by_average_norm_unclipped", "saturate_cast"])
async def test_gradients(build, inputs):
    await check_gradients(build, inputs)


def test_no_gradients_where_tf1_has_none():
    with af.Graph().as_default():
        x = af.constant([3.0, -4.0])
        assert tf.gradients(tf.reduce_sum(tf.truncatediv(x, 2.0)), x) == [None]
        with pytest.raises(LookupError, match="TruncateMod"):  # TF1 has no gradient either
            tf.gradients(tf.reduce_sum(tf.truncatemod(x, 2.0)), x)


def test_bad_input_is_named():
    with af.Graph().as_default():
        xi = af.constant(XI)
        with pytest.raises(TypeError, match="Erfc: value passed to x has dtype int32"):
            tf.erfc(xi)
        with pytest.raises(TypeError, match="RealDiv: value passed to x has dtype int32"):
            tf.realdiv(xi, xi)
        with pytest.raises(TypeError, match="Input 'values' of 'LowerBound' Op has type int32 "
                                            "that does not match type float32"):
            tf.searchsorted([1.0, 2.0], [1])
        with pytest.raises(ValueError, match="side must be either 'right' or 'left'"):
            tf.searchsorted([1.0, 2.0], [1.0], side="middle")
        with pytest.raises(ValueError, match="leading dims of sorted_sequence"):
            tf.searchsorted([[1.0, 2.0]], [[1.0], [2.0]])
        with pytest.raises(TypeError, match="Cannot find minimum value of string"):
            tf.saturate_cast(xi, tf.string)
        for bad in ([], [af.constant([1.0]), af.constant([1])], [af.constant([1.0, 2.0])] * 2):
            with pytest.raises(ValueError, match="inputs must be a list of at least one Tensor "
                                                 "with the same dtype and shape"):
                tf.accumulate_n(bad, shape=[3] if len(bad) == 2 and bad[0].shape[0] == 2
                                else None)
        with pytest.raises(TypeError, match="Rsqrt: value passed to x has dtype int32"):
            tf.clip_by_average_norm(xi, 1)
        with pytest.raises(ValueError, match="confusion_matrix: labels"):
            tf.confusion_matrix([1, 2], [1])


async def test_run_time_errors_name_the_op():
    with af.Graph().as_default():
        y = af.placeholder(af.int32, [None])
        div = tf.truncatediv(XI[:2], y, name="tdiv")
        mod = tf.truncatemod(XI[:2], y, name="tmod")
        labels = af.placeholder(af.int32, [None])
        matrix = tf.confusion_matrix(labels, [0, 1], num_classes=2, name="cm")
        for op, feed, message in [
                (div, {y: [1, 0]}, "tdiv.*Integer division by zero"),
                (mod, {y: [0, 1]}, "tmod.*Integer division by zero"),
                (matrix, {labels: [0, 2]}, "cm/.*`labels` out of bound"),
                (matrix, {labels: [-1, 0]}, "cm/.*`labels` contains negative values")]:
            with pytest.raises(af.errors.InvalidArgumentError, match=message):
                await _run(op, feed)


TF_SNIPPET = """
xi, yi = tf.constant(inputs["xi"]), tf.constant(inputs["yi"])
x, y = tf.cast(xi, tf.float64) + 0.5, tf.cast(yi, tf.float64)
p = tf.constant(inputs["p"])
outs = [tf.truncatediv(xi, yi), tf.truncatemod(xi, yi), tf.truncatediv(x, y), tf.truncatemod(x, y),
        tf.realdiv(x, y), tf.floor_div(xi, yi), tf.floor_div(x, y), tf.erfc(p),
        tf.math.erfc(tf.cast(p, tf.float32)),
        tf.searchsorted([[1.0, 2, 2, 3], [0, 5, 5, 10]], [[2.0, 3, 0.5], [5, 11, -1]]),
        tf.searchsorted([1.0, 2, 2, 3], [2.0, 0, 9], side="right", out_type=tf.int64),
        tf.accumulate_n([x, y, x * y]), tf.math.accumulate_n([p], shape=p.shape),
        tf.saturate_cast(tf.constant([-300.0, 1.7, 300, -0.5]), tf.uint8),
        tf.saturate_cast(tf.constant([-3e10, 3e10, 5.5]), tf.int32),
        tf.saturate_cast(tf.constant(np.array([-2 ** 40, 70000, 3], np.int64)), tf.int16),
        tf.saturate_cast(x * 1e300, tf.float32),
        tf.clip_by_average_norm(tf.cast(p, tf.float32), 0.5),
        tf.clip_by_average_norm(tf.cast(p, tf.float32), 100.0),
        tf.confusion_matrix([1, 2, 4], [2, 2, 4]),
        tf.math.confusion_matrix([1, 2, 4], [2, 2, 4], num_classes=6, weights=[1.0, 2, 3],
                                 dtype=tf.float32)]
grads = tf.gradients(tf.reduce_sum(tf.sin(tf.erfc(p))) + tf.reduce_sum(tf.realdiv(x, y) ** 2)
                     + tf.reduce_sum(tf.accumulate_n([x, y, x * y]) ** 2)
                     + tf.reduce_sum(tf.cast(tf.clip_by_average_norm(tf.cast(p, tf.float32), 0.5),
                                             tf.float64) ** 3), [x, y, p])
with tf.Session() as sess:
    outputs["outs"], outputs["grads"] = sess.run([outs, grads])
outputs["static"] = np.array([str(o.shape) for o in outs])
outputs["names"] = np.array([o.name for o in outs])
"""


async def test_against_tf1(tmp_path):
    inputs = {"xi": XI, "yi": YI, "p": POINTS[::4]}
    theirs = tf1_run(TF_SNIPPET, tmp_path, **inputs)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": inputs}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run([g["outs"], g["grads"]])
        assert [str(o.shape) for o in g["outs"]] == theirs["static"].tolist()
        # (accumulate_n of one tensor is that tensor: a Const, numbered otherwise than TF1's)
        assert [o.name for o in g["outs"] if o.op.type != "Const"] == [
            n for n in theirs["names"].tolist() if not n.startswith("Const")]
    # float32 erfc: TF1 computes in float32 (a few ulps), ours is float64 rounded once
    compare_groups(values, theirs, ("outs", "grads"), rtol=1e-13, float32=(1e-6, 0))
