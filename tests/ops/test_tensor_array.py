"""af.TensorArray: element ops, errors, while loops with gradients, and TF1 agreement."""
import inspect
import types

import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import tensor_array as kernels

from tests.tf1_reference import tf1_run


async def _run(fetches, feed_dict=None):
    async with af.Session() as sess:
        return await sess.run(fetches, feed_dict)


async def test_write_read_stack_gather_concat_size():
    with af.Graph().as_default():
        ta = af.TensorArray(af.float32, size=3, clear_after_read=False)
        ta = ta.write(0, [1.0, 2.0]).write(1, [3.0, 4.0]).write(2, [5.0, 6.0])
        assert ta.element_shape.as_list() == [2]
        parts = af.TensorArray(af.float32, size=0, dynamic_size=True, clear_after_read=False).split(
            af.constant([1.0, 2.0, 3.0, 4.0, 5.0]), [2, 0, 3])
        out = await _run([ta.read(1), ta.stack(), ta.gather([2, 0]), ta.concat(), ta.size(),
                          parts.concat(), parts.size(), parts.read(2)])
    np.testing.assert_array_equal(out[0], [3, 4])
    np.testing.assert_array_equal(out[1], [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(out[2], [[5, 6], [1, 2]])
    np.testing.assert_array_equal(out[3], [1, 2, 3, 4, 5, 6])
    assert out[4] == 3 and out[6] == 3
    np.testing.assert_array_equal(out[5], [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(out[7], [3, 4, 5])


async def test_unstack_scatter_and_dynamic_size():
    with af.Graph().as_default():
        value = af.placeholder(af.float32, [None, 2])
        ta = af.TensorArray(af.float32, size=0, dynamic_size=True).unstack(value)
        scattered = af.TensorArray(af.int32, size=4, element_shape=[]).scatter([3, 1], [7, 8])
        grown = af.TensorArray(af.int32, size=1, dynamic_size=True).write(4, 9)
        out = await _run([ta.stack(), ta.size(), scattered.read(1), scattered.read(0),
                          grown.size()], {value: np.arange(6, dtype=np.float32).reshape(3, 2)})
    np.testing.assert_array_equal(out[0], np.arange(6).reshape(3, 2))
    assert out[1] == 3 and out[2] == 8
    assert out[3] == 0  # never written, fully defined element shape: zeros (TF1)
    assert out[4] == 5


async def test_errors_name_the_array_and_index():
    with af.Graph().as_default():
        ta = af.TensorArray(af.float32, size=2, tensor_array_name="things")
        twice = ta.write(0, 1.0).write(0, 2.0)
        with pytest.raises(af.errors.InvalidArgumentError, match="things.*already been written"):
            await _run(twice.read(0))
        with pytest.raises(af.errors.InvalidArgumentError, match="not resizeable and size is: 2"):
            await _run(ta.write(5, 1.0).flow)
        once = ta.write(0, 1.0)
        with pytest.raises(af.errors.InvalidArgumentError, match="cleared after a previous read"):
            await _run(once.read(0) + once.read(0))
        with pytest.raises(af.errors.InvalidArgumentError, match="not yet been written"):
            await _run(af.TensorArray(af.float32, size=2).read(1))
        with pytest.raises(ValueError, match="Inconsistent shapes"):
            af.TensorArray(af.float32, size=2).write(0, [1.0]).write(1, [1.0, 2.0])
        with pytest.raises(TypeError, match="has dtype int32, but float32 was requested"):
            af.TensorArray(af.float32, size=2, infer_shape=False).write(
                0, af.constant(1, dtype=af.int32))


def test_a_write_stores_the_element_itself():
    """O(element) writes: the array keeps a reference, it never copies what it holds."""
    ctx = types.SimpleNamespace(xp=np, name="ta", attrs={})
    array = kernels._TensorArray("ta", np.dtype(np.float32), 1000, False, True, [256])
    elements = [np.full(256, k, np.float32) for k in range(1000)]
    for k, element in enumerate(elements):
        kernels._write(ctx, array, np.int32(k), element, np.float32(0))
    assert all(stored is element for stored, element in zip(array.elements, elements))


def _rnn_like(tf, x, w, dtype):
    """A loop that reads x_t from one TensorArray and writes h_t to another; returns
    (y, loss, gradients of loss for [x, w]). ``tf`` is asyncflow or TF1: the TF1 side runs
    this function's own source."""
    steps = 5
    inputs = tf.TensorArray(dtype, size=steps).unstack(x)
    outputs = tf.TensorArray(dtype, size=steps)

    def body(t, h, out):
        h = tf.tanh(tf.matmul(inputs.read(t), w) + h)
        return t + 1, h, out.write(t, h)
    _, h, outputs = tf.while_loop(lambda t, *_: t < steps, body,
                                  [tf.constant(0), tf.zeros([2, 3], dtype), outputs])
    y = outputs.stack()
    loss = tf.reduce_sum(y * y) + tf.reduce_sum(h)
    return y, loss, tf.gradients(loss, [x, w])


async def test_loop_gradients_match_numeric_differences():
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((5, 2, 4)).astype(np.float64)
    w0 = (rng.standard_normal((4, 3)) * 0.5).astype(np.float64)
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [5, 2, 4])
        w = af.placeholder(af.float64, [4, 3])
        _, loss, grads = _rnn_like(af, x, w, af.float64)
        async with af.Session() as sess:
            gx, gw = await sess.run(grads, {x: x0, w: w0})
            eps = 1e-6
            for name, base, analytic in (("w", w0, gw), ("x", x0, gx)):
                direction = rng.standard_normal(base.shape)
                plus = {x: x0, w: w0}
                minus = {x: x0, w: w0}
                target = x if name == "x" else w
                plus[target] = base + eps * direction
                minus[target] = base - eps * direction
                numeric = (await sess.run(loss, plus) - await sess.run(loss, minus)) / (2 * eps)
                assert np.isclose(numeric, np.sum(analytic * direction), rtol=1e-5), name


async def test_loop_outputs_and_gradients_match_tf1(tmp_path):
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal((5, 2, 4)).astype(np.float32)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    with af.Graph().as_default():
        y, _, grads = _rnn_like(af, af.constant(x0), af.constant(w0), af.float32)
        ours = await _run([y, grads])
    theirs = tf1_run(inspect.getsource(_rnn_like) + """
y, _, grads = _rnn_like(tf, tf.constant(inputs["x"]), tf.constant(inputs["w"]), tf.float32)
with tf.Session() as sess:
    outputs["y"], outputs["grads"] = sess.run([y, grads])
""", tmp_path, x=x0, w=w0)
    np.testing.assert_allclose(ours[0], theirs["y"], rtol=1e-5, atol=1e-6)
    for mine, reference in zip(ours[1], theirs["grads"]):
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-5)


async def test_gradients_of_gather_scatter_concat_split():
    with af.Graph().as_default():
        value = af.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
        ta = af.TensorArray(af.float32, size=3).scatter([2, 0, 1], value)
        gathered = ta.gather([1, 2])
        pieces = af.TensorArray(af.float32, size=2).split(af.reshape(value, [6]), [2, 4])
        joined = pieces.concat()
        grads = af.gradients(af.reduce_sum(gathered * 3.0) + af.reduce_sum(joined * joined),
                             value)
        out = await _run(grads)
    # rows 0 and 2 are gathered; every row is in the concat
    expected = np.array([[3, 3], [0, 0], [3, 3]], np.float32) + 2 * np.arange(6).reshape(3, 2)
    np.testing.assert_allclose(out[0], expected)
