"""map_fn, scan, foldl, foldr: values, nested structures, gradients, TF1 agreement."""
import collections
import inspect
import textwrap

import numpy as np
import pytest

import asyncflow as af
from tests.tf1_reference import tf1_run

Pair = collections.namedtuple("Pair", "a b")


async def _run(fetches, feed_dict=None):
    async with af.Session() as sess:
        return await sess.run(fetches, feed_dict)


async def test_map_fn_plain_nested_and_with_dtype():
    with af.Graph().as_default():
        x = af.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
        y = af.constant([1, 2, 3])
        squares = af.map_fn(lambda row: row * row, x)
        nested = af.map_fn(lambda p: Pair(p.a * 2.0, p.b + 1), Pair(x, y))
        sums = af.map_fn(lambda pair: af.cast(af.reduce_sum(pair[0]), af.int32) + pair[1],
                         (x, y), dtype=af.int32, parallel_iterations=1)
        assert squares.shape.as_list() == [3, 2]
        out = await _run([squares, nested, sums])
    np.testing.assert_array_equal(out[0], np.arange(6).reshape(3, 2) ** 2)
    assert isinstance(out[1], Pair)
    np.testing.assert_array_equal(out[1].a, np.arange(6).reshape(3, 2) * 2)
    np.testing.assert_array_equal(out[1].b, [2, 3, 4])
    np.testing.assert_array_equal(out[2], [2, 7, 12])


async def test_scan_foldl_foldr():
    with af.Graph().as_default():
        x = af.constant([1.0, 2.0, 3.0, 4.0])
        out = await _run([
            af.scan(lambda acc, v: acc + v, x),
            af.scan(lambda acc, v: acc * v, x, initializer=af.constant(2.0)),
            af.scan(lambda acc, v: acc + v, x, reverse=True),
            af.scan(lambda acc, v: (acc[0] + v, acc[1] * v), x,
                    initializer=(af.constant(0.0), af.constant(1.0))),
            af.foldl(lambda acc, v: acc * 10.0 + v, x),
            af.foldr(lambda acc, v: acc * 10.0 + v, x),
            af.foldl(lambda acc, v: acc - v, x, initializer=af.constant(100.0)),
        ])
    np.testing.assert_array_equal(out[0], [1, 3, 6, 10])
    np.testing.assert_array_equal(out[1], [2, 4, 12, 48])
    np.testing.assert_array_equal(out[2], [10, 9, 7, 4])
    np.testing.assert_array_equal(out[3][0], [1, 3, 6, 10])
    np.testing.assert_array_equal(out[3][1], [1, 2, 6, 24])
    assert out[4] == 1234.0 and out[5] == 4321.0 and out[6] == 90.0


def test_errors_name_the_function():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="map_fn: elements in elems must be 1\\+ dimensional"):
            af.map_fn(lambda v: v, af.constant(1.0))
        with pytest.raises(ValueError, match="fn returned 2 tensors"):
            af.map_fn(lambda v: (v, v), af.constant([1.0]))


async def test_gradients_through_map_fn_and_scan_match_tf1(tmp_path):
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((4, 3)).astype(np.float32)
    w0 = rng.standard_normal((3,)).astype(np.float32)

    def build(tf, x, w):
        mapped = tf.map_fn(lambda row: tf.tanh(row * w), x)
        scanned = tf.scan(lambda acc, row: acc * 0.5 + tf.sin(row * w), x)
        folded = tf.foldr(lambda acc, row: acc + tf.reduce_sum(row * w), x,
                          initializer=tf.constant(0.0))
        loss = tf.reduce_sum(mapped * mapped) + tf.reduce_sum(scanned) + folded * folded
        return [mapped, scanned, folded] + tf.gradients(loss, [x, w])

    with af.Graph().as_default():
        ours = await _run(build(af, af.constant(x0), af.constant(w0)))
    # TF1 runs build's own source.
    theirs = tf1_run(textwrap.dedent(inspect.getsource(build)) + """
with tf.Session() as sess:
    outputs["all"] = sess.run(build(tf, tf.constant(inputs["x"]), tf.constant(inputs["w"])))
""", tmp_path, x=x0, w=w0)
    for mine, reference in zip(ours, theirs["all"]):
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-5)
