"""TF1 names that were on porting.md's "Not provided" list: ``tf.hessians``, ``tf.cross``
(``tf.linalg.cross``), ``tf.bitcast``, ``tf.parallel_stack``, ``tf.histogram_fixed_width``
(and ``_bins``) and ``tf.required_space_to_batch_paddings``: values against numpy (always)
and TF1 (when TensorFlow is installed), static shapes and op names as TF1's (TF 2.21's
``tf.compat.v1``), gradients against finite differences, and bad input named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import assert_close, check_gradients
from tf1_reference import compare_groups, tf1_run

RNG = np.random.default_rng(7)
A = RNG.standard_normal((4, 3))
B = RNG.standard_normal((4, 3))


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


async def test_hessians_values_shapes_and_names():
    m = RNG.standard_normal((3, 3))
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [3])
        w = af.constant(np.array([[0.5, -1.0], [2.0, 0.25]]))
        fed = af.placeholder(af.float64, [None])
        y = af.reduce_sum(x * af.matmul(af.constant(m), af.reshape(x, [3, 1]))[:, 0]) + \
            af.reduce_sum(x * x * x) + af.reduce_sum(af.sin(w) * af.reduce_prod(w))
        hx, hw = tf.hessians(y, [x, w])
        (hf,) = tf.hessians([af.reduce_sum(fed ** 3), af.reduce_sum(fed) ** 2], fed)
        # (Reshape is y's; each x then a Reshape of its gradient and one of its Hessian)
        assert [h.name for h in (hx, hw, hf)] == ["Reshape_2:0", "Reshape_4:0", "Reshape_6:0"]
        assert [h.shape.as_list() for h in (hx, hw, hf)] == [[3, 3], [2, 2, 2, 2], [None, None]]
        point = np.array([0.3, -1.2, 2.0])
        hx_v, hf_v = await _run([hx, hf], {x: point, fed: [1.0, 2.0]})
        # hw against central differences of the first gradient
        grad = af.gradients(y, w)[0]
        delta, wv = 1e-6, np.array([[0.5, -1.0], [2.0, 0.25]])
        async with af.Session() as session:
            hw_v = await session.run(hw, {x: point})
            columns = []
            for j in range(4):
                step = np.zeros(4)
                step[j] = delta
                up, down = [await session.run(grad, {x: point, w: wv + s.reshape(2, 2)})
                            for s in (step, -step)]
                columns.append((up - down) / (2 * delta))
    np.testing.assert_allclose(hx_v, m + m.T + np.diag(6 * point), rtol=1e-12)
    np.testing.assert_array_equal(hf_v, np.diag([6.0, 12.0]) + 2)
    assert_close(hw_v.reshape(4, 4), np.stack(columns).reshape(4, 4), rtol=1e-6, atol=1e-7,
                 what="hessians of w")


def test_hessians_refuse_what_has_none():
    with af.Graph().as_default():
        x = af.constant([1.0, 2.0])
        with pytest.raises(ValueError, match="hessians: ys does not depend on Const"):
            tf.hessians(af.reduce_sum(x * x), af.constant([3.0]))
        with pytest.raises(ValueError, match="hessians: ys does not depend on"):
            tf.hessians(af.reduce_sum(x * x), af.constant([3, 4]))
        with pytest.raises(ValueError, match="hessians: the gradient of ys with respect to "
                                             "Const:0 does not depend on it"):
            tf.hessians(af.reduce_sum(x) * 2.0, x)


async def test_cross_values_shapes_names_gradient():
    with af.Graph().as_default():
        p = af.placeholder(af.float32, [None, 3])
        q = af.placeholder(af.float32)
        outs = [tf.cross(A, B), tf.linalg.cross(A[:1], B[:1]), tf.cross([1, 2, 3], [4, 5, 6]),
                tf.cross(p, q)]
        assert [o.name for o in outs] == ["Cross:0", "Cross_1:0", "Cross_2:0", "Cross_3:0"]
        assert [o.shape.as_list() for o in outs] == [[4, 3], [1, 3], [3], [None, 3]]
        values = await _run(outs, {p: A.astype(np.float32), q: B.astype(np.float32)})
    np.testing.assert_array_equal(values[0], np.cross(A, B))
    np.testing.assert_array_equal(values[1], np.cross(A[:1], B[:1]))
    assert values[2].dtype == np.int32 and values[2].tolist() == [-3, 6, -3]
    np.testing.assert_allclose(values[3], np.cross(A, B), rtol=1e-5, atol=1e-6)
    await check_gradients(lambda a, b: tf.cross(a, b), [A, B])


async def test_bitcast_values_and_shapes():
    floats = np.array([1.0, -2.0, 0.5], np.float32)
    with af.Graph().as_default():
        fed = af.placeholder(af.int8, [None, None])
        outs = [tf.bitcast(floats, tf.int32), tf.bitcast(floats.astype(np.float64), tf.uint8),
                tf.bitcast(np.arange(8, dtype=np.int8).reshape(2, 4), tf.int32),
                tf.bitcast(np.float64(1.5), tf.float64), tf.bitcast(fed, tf.float32),
                tf.bitcast(np.array([15360, -16384], np.int16), tf.float16)]
        assert [o.name for o in outs[:2]] == ["Bitcast:0", "Bitcast_1:0"]
        assert [o.shape.as_list() for o in outs] == [[3], [3, 8], [2], [], [None], [2]]
        assert af.gradients(af.reduce_sum(af.cast(outs[0], af.float32)), []) == []
        values = await _run(outs, {fed: np.arange(8, dtype=np.int8).reshape(2, 4)})
        with pytest.raises(af.errors.InvalidArgumentError,
                           match=r"Bitcast 'Bitcast_4'.*last dimension of shape \[2, 3\] must "
                                 r"be 4"):
            await _run(outs[4], {fed: np.zeros((2, 3), np.int8)})
    expected = [floats.view(np.int32), floats.astype(np.float64).view(np.uint8).reshape(3, 8),
                np.arange(8, dtype=np.int8).view(np.int32), 1.5,
                np.arange(8, dtype=np.int8).view(np.float32), [1.0, -2.0]]
    for value, want in zip(values, expected):
        np.testing.assert_array_equal(value, want)
    assert [v.dtype for v in values] == [np.int32, np.uint8, np.int32, np.float64, np.float32,
                                        np.float16]


async def test_parallel_stack_values_names():
    with af.Graph().as_default():
        outs = [tf.parallel_stack([A, B]), tf.parallel_stack([1.0, 2.0, 3.0])]
        assert [o.name for o in outs] == ["parallel_stack/ParallelConcat:0",
                                          "parallel_stack_1/ParallelConcat:0"]
        assert outs[0].op.inputs[0].op.name == "parallel_stack/ExpandDims"
        assert [o.shape.as_list() for o in outs] == [[2, 4, 3], [3]]
        values = await _run(outs)
    np.testing.assert_array_equal(values[0], np.stack([A, B]))
    np.testing.assert_array_equal(values[1], np.float32([1, 2, 3]))


async def test_histogram_fixed_width_values_and_bins():
    data = np.array([1.0, 2.0, 5.0, -1.0, 4.99, 0.0, np.inf, -np.inf, 2.5])
    with af.Graph().as_default():
        nbins = af.placeholder(af.int32, [])
        outs = [tf.histogram_fixed_width(data, [0.0, 5.0], nbins=5),
                tf.histogram_fixed_width([1, 2, 5, -1, 3], [0, 5], nbins=3, dtype=tf.int64),
                tf.histogram_fixed_width(data.astype(np.float32), [0.0, 5.0], nbins=nbins),
                tf.histogram_fixed_width_bins(data.reshape(3, 3), np.array([0.0, 5.0]), nbins=5)]
        assert [o.name for o in outs] == [
            "histogram_fixed_width:0", "histogram_fixed_width_1:0", "histogram_fixed_width_2:0",
            "histogram_fixed_width_bins/Reshape_1:0"]
        assert [o.shape.as_list() for o in outs] == [[5], [3], [None], [3, 3]]
        values = await _run(outs, {nbins: 2})
    assert values[0].dtype == np.int32 and values[0].tolist() == [3, 1, 2, 0, 3]
    assert values[1].dtype == np.int64 and values[1].tolist() == [2, 2, 1]
    assert values[2].tolist() == [5, 4]
    assert values[3].tolist() == [[1, 2, 4], [0, 4, 0], [4, 0, 2]]


async def test_required_space_to_batch_paddings():
    with af.Graph().as_default():
        fed = af.placeholder(af.int32, [2])
        pads, crops = tf.required_space_to_batch_paddings([5, 7], [2, 3])
        fed_pads, fed_crops = tf.required_space_to_batch_paddings(
            fed, [2, 3], base_paddings=[[1, 0], [0, 2]], name="fit")
        empty = tf.required_space_to_batch_paddings(af.zeros([0], af.int32),
                                                    af.zeros([0], af.int32))
        assert [t.name for t in (pads, crops, fed_pads, fed_crops)] == [
            "required_space_to_batch_paddings/paddings:0",
            "required_space_to_batch_paddings/crops:0", "fit/paddings:0", "fit/crops:0"]
        assert pads.op.inputs[0].op.type == "Const"  # (known now: TF1 folds it in Python)
        values = await _run([pads, crops, fed_pads, fed_crops, empty], {fed: [5, 7]})
    assert [v.tolist() for v in values[:4]] == [[[0, 1], [0, 2]], [[0, 1], [0, 2]],
                                                [[1, 0], [0, 2]], [[0, 0], [0, 0]]]
    assert [v.shape for v in values[4]] == [(0, 2), (0, 2)]


def test_bad_input_is_named():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Cross.*Dimension must be 3 but is 4"):
            tf.cross(np.ones((2, 4)), np.ones((2, 4)))
        with pytest.raises(ValueError, match="Cross.*Both inputs must be of same shape"):
            tf.cross(np.ones((1, 3)), np.ones((3, 3)))
        with pytest.raises(TypeError, match="Cross.*float64 that does not match type float32"):
            tf.cross(af.ones([3]), af.ones([3], af.float64))
        with pytest.raises(TypeError, match="Cross: value passed to a has dtype bool"):
            tf.cross(af.ones([3], af.bool), af.ones([3], af.bool))
        with pytest.raises(ValueError, match="Bitcast.*Cannot bitcast from 3 to 2 due to shape"):
            tf.bitcast(af.ones([2, 3], af.int32), tf.float64)
        with pytest.raises(TypeError, match="Bitcast: value passed to input has dtype bool"):
            tf.bitcast(af.ones([2], af.bool), tf.int8)
        with pytest.raises(TypeError, match="Bitcast: value passed to type has dtype bool"):
            tf.bitcast(af.ones([2], af.int8), tf.bool)
        with pytest.raises(ValueError, match=r"parallel_stack: shape attr must be fully "
                                             r"defined, got \(2, \?, 3\)"):
            tf.parallel_stack([af.placeholder(af.float32, [None, 3])] * 2)
        with pytest.raises(ValueError, match="ParallelConcat.*values\\[1\\] has shape"):
            tf.parallel_stack([af.ones([2, 3]), af.ones([3, 2])])
        with pytest.raises(LookupError, match="ParallelConcat"):
            x = af.constant(A)
            af.gradients(tf.parallel_stack([x, x]), x)
        with pytest.raises(ValueError, match="HistogramFixedWidth.*Requires nbins > 0: 0"):
            tf.histogram_fixed_width([1.0], [0.0, 5.0], nbins=0)
        with pytest.raises(ValueError, match="HistogramFixedWidth.*value_range must have "
                                             "shape \\[2\\]"):
            tf.histogram_fixed_width([1.0], [0.0, 5.0, 6.0], nbins=2)
        with pytest.raises(TypeError, match="histogram_fixed_width: dtype must be int32 or "
                                            "int64, got float32"):
            tf.histogram_fixed_width([1.0], [0.0, 5.0], dtype=tf.float32)
        half = af.constant([0.0, 1.0], af.float16)
        with pytest.raises(TypeError, match="HistogramFixedWidth.*values.*float16"):
            tf.histogram_fixed_width(af.ones([2], af.float16), half)  # (TF1's op: no halves)
        assert tf.histogram_fixed_width_bins(af.ones([2], af.float16), half).dtype == af.int32
        with pytest.raises(TypeError, match="Sub.*float32"):  # (TF1's: a list range is float32)
            tf.histogram_fixed_width_bins(np.array([1.0]), [0.0, 5.0], nbins=2)
        with pytest.raises(ValueError, match="required_space_to_batch_paddings: input_shape "
                                             "must have shape \\[2\\]"):
            tf.required_space_to_batch_paddings([5, 7, 1], [2, 3])
        with pytest.raises(ValueError, match="required_space_to_batch_paddings: block_shape "
                                             "must be a vector of known size"):
            tf.required_space_to_batch_paddings([5], af.placeholder(af.int32, [None]))


async def test_run_time_errors_name_the_op():
    with af.Graph().as_default():
        p = af.placeholder(af.float32, [None, 3])
        q = af.placeholder(af.float32)
        values = af.placeholder(af.float64)
        bounds = af.placeholder(af.float64, [2])
        nbins = af.placeholder(af.int32, [])
        crossed = tf.cross(p, q, name="crossed")
        counted = tf.histogram_fixed_width(values, bounds, nbins=nbins, name="counted")
        cases = [(crossed, {p: np.ones((2, 3)), q: np.ones((2, 4))},
                  r"Cross 'crossed'.*Both inputs must be of same shape: \[2, 3\] vs. \[2, 4\]"),
                 (counted, {values: [1.0, np.nan], bounds: [0.0, 1.0], nbins: 2},
                  "HistogramFixedWidth 'counted'.*Histogram values must not contain NaN"),
                 (counted, {values: [1.0], bounds: [5.0, 5.0], nbins: 2},
                  r"'counted'.*value_range\[0\] < value_range\[1\], but got '\[5.0, 5.0\]'"),
                 (counted, {values: [1.0], bounds: [0.0, 1.0], nbins: 0},
                  "'counted'.*nbins should be a positive number, but got '0'")]
        for out, feed, message in cases:
            with pytest.raises(af.errors.InvalidArgumentError, match=message):
                await _run(out, feed)


TF_SNIPPET = """
a = tf.constant(inputs["a"])
b = tf.constant(inputs["b"])
w = tf.constant(inputs["w"])
p = tf.placeholder(tf.float64, [None])
y = tf.reduce_sum(tf.sin(w) * tf.reduce_prod(w)) + tf.reduce_sum(tf.exp(a[0] * 0.5) * w[:, :1])
outs = tf.hessians(y, [w, a]) + tf.hessians(tf.reduce_sum(p * p * tf.cos(p)), p) + [
    tf.cross(a, b), tf.linalg.cross(a[:1], tf.sin(b[:1])),
    tf.parallel_stack([a, b, a * b]), tf.parallel_stack([1.0, 2.0]),
    tf.bitcast(tf.bitcast(a, tf.int32), tf.float64), tf.bitcast(tf.cast(a, tf.float32), tf.float16)]
ints = [tf.bitcast(a, tf.uint8), tf.bitcast(tf.cast(a, tf.float32), tf.int32),
        tf.cross([1, 2, 3], [4, 5, 6]),
        tf.histogram_fixed_width(inputs["h"], [-1.0, 1.5], nbins=7),
        tf.histogram_fixed_width(tf.cast(inputs["h"] * 10, tf.int32), [-10, 15], nbins=4,
                                 dtype=tf.int64),
        tf.histogram_fixed_width(tf.cast(inputs["h"], tf.float32), [-0.5, 0.5], nbins=3),
        tf.histogram_fixed_width_bins(inputs["h"], np.array([-1.0, 1.5]), nbins=7)]
ints += list(tf.required_space_to_batch_paddings([5, 7, 4], [2, 3, 4]))
ints += list(tf.required_space_to_batch_paddings(tf.placeholder_with_default([9, 2], [2]),
                                                 [4, 3], base_paddings=[[1, 2], [0, 3]]))
grads = [g for i in (1, 3, 4)
         for g in tf.gradients(tf.reduce_sum(tf.sin(outs[i])), [a, b]) if g is not None]
with tf.Session() as sess:
    outputs["outs"], outputs["ints"], outputs["grads"] = sess.run([outs, ints, grads],
                                                                  {p: [0.5, -1.5, 2.0]})
outputs["static"] = np.array([str(o.shape) for o in outs + ints])
outputs["names"] = np.array([t.name for t in outs + ints])
"""


async def test_against_tf1(tmp_path):
    inputs = {"a": A, "b": B, "w": RNG.standard_normal((3, 2)),
              "h": RNG.standard_normal(40) * 0.8}
    theirs = tf1_run(TF_SNIPPET, tmp_path, **inputs)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": inputs}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run([g["outs"], g["ints"], g["grads"]], {g["p"]: [0.5, -1.5, 2.0]})
        static = [str(o.shape) for o in g["outs"] + g["ints"]]
        names = [t.name for t in g["outs"] + g["ints"]]
    assert static == theirs["static"].tolist()
    assert names == theirs["names"].tolist()
    compare_groups(values, theirs, ("outs", "ints", "grads"), rtol=1e-12, atol=1e-14)
