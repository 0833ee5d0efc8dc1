"""af.layers: TF1's variable names and defaults, reuse, training flags, UPDATE_OPS, and
outputs, gradients and moving statistics equal to TF1's for the same weights; the 2-D layers
(``MODEL``) and the 1-D ones (``MODEL_1D``: conv1d, max_pooling1d, average_pooling1d)."""
import numpy as np
import pytest

import asyncflow as af
from tests.tf1_reference import tf1_run

MODEL = """
def build(tf, x, training):
    h = tf.layers.conv2d(x, 4, 3, padding="same", activation=tf.nn.relu)
    h = tf.layers.max_pooling2d(h, 2, 2)
    h = tf.layers.batch_normalization(h, training=training)
    h = tf.layers.average_pooling2d(h, [2, 2], 1, padding="same")
    h = tf.layers.conv2d(h, 3, [2, 2], strides=2, name="second")
    h = tf.layers.flatten(h)
    h = tf.layers.dense(h, 5, activation=tf.tanh)
    h = tf.layers.dropout(h, rate=0.5, training=False)
    v = tf.layers.batch_normalization(tf.layers.dense(h, 3), training=training, momentum=0.9)
    out = tf.layers.dense(v, 2, use_bias=False)
    variables = sorted(tf.global_variables(), key=lambda v: v.name)
    trainable = sorted(tf.trainable_variables(), key=lambda v: v.name)
    loss = tf.reduce_sum(out * out)
    grads = tf.gradients(loss, [x] + trainable)
    updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    return out, variables, grads, updates
"""
NAMES = ["batch_normalization/beta:0", "batch_normalization/gamma:0",
         "batch_normalization/moving_mean:0", "batch_normalization/moving_variance:0",
         "batch_normalization_1/beta:0", "batch_normalization_1/gamma:0",
         "batch_normalization_1/moving_mean:0", "batch_normalization_1/moving_variance:0",
         "conv2d/bias:0", "conv2d/kernel:0", "dense/bias:0", "dense/kernel:0",
         "dense_1/bias:0", "dense_1/kernel:0", "dense_2/kernel:0", "second/bias:0",
         "second/kernel:0"]


MODEL_1D = """
def build(tf, x, training):
    h = tf.layers.conv1d(x, 4, 3, padding="same", activation=tf.nn.relu)
    h = tf.layers.max_pooling1d(h, 2, 2)
    h = tf.layers.conv1d(h, 3, [2], strides=2, name="second")
    h = tf.layers.average_pooling1d(h, 2, 1, padding="same")
    first = tf.transpose(h, [0, 2, 1])
    g = tf.layers.conv1d(first, 2, 2, data_format="channels_first", name="channels_first")
    g = tf.layers.max_pooling1d(g, [2], [1], padding="same", data_format="channels_first")
    g = tf.layers.average_pooling1d(g, 2, 2, data_format="channels_first")
    out = tf.layers.dense(tf.layers.flatten(g), 2)
    variables = sorted(tf.global_variables(), key=lambda v: v.name)
    trainable = sorted(tf.trainable_variables(), key=lambda v: v.name)
    loss = tf.reduce_sum(out * out)
    grads = tf.gradients(loss, [x] + trainable)
    return out, variables, grads, []
"""
NAMES_1D = ["channels_first/bias:0", "channels_first/kernel:0", "conv1d/bias:0",
            "conv1d/kernel:0", "dense/bias:0", "dense/kernel:0", "second/bias:0",
            "second/kernel:0"]


def _build(model=MODEL):
    space = {}
    exec(model, space)  # noqa: S102 - the test's model source, shared with the TF1 side
    return space["build"]


async def _ours(x0, model=MODEL):
    build = _build(model)
    with af.Graph().as_default():
        x = af.constant(x0)
        out, variables, grads, updates = build(af, x, True)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            rng = np.random.default_rng(5)
            for v in variables:
                if "moving" not in v.name:
                    await v.load(rng.uniform(-0.5, 0.5, v.shape.as_list()).astype(np.float32),
                                 sess)
            weights = await sess.run(variables)
            values = await sess.run([out, grads, updates])
            after = await sess.run(variables)
    return [v.name for v in variables], weights, values, after


def _inputs():
    return np.random.default_rng(4).standard_normal((3, 8, 8, 2)).astype(np.float32)


async def test_names_defaults_and_update_ops():
    names, weights, values, after = await _ours(_inputs())
    assert names == NAMES
    by_name = dict(zip(names, weights))
    assert np.all(by_name["batch_normalization/moving_mean:0"] == 0)
    assert np.all(by_name["batch_normalization/moving_variance:0"] == 1)
    moved = dict(zip(names, after))
    assert np.any(moved["batch_normalization/moving_mean:0"] != 0)  # the updates ran
    assert len(values[2]) == 4


async def test_reuse_shares_variables_and_inference_uses_moving_statistics():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 3])
        training = af.placeholder(af.bool, [])
        first = af.layers.dense(x, 2, name="shared")
        second = af.layers.dense(x, 2, name="shared", reuse=True)
        with pytest.raises(ValueError, match="shared/kernel already exists"):
            af.layers.dense(x, 2, name="shared")
        normed = af.layers.batch_normalization(x, training=training, momentum=0.5)
        dropped = af.layers.dropout(x, rate=0.99, training=training, seed=1)
        assert len(af.trainable_variables()) == 4
        feed = np.arange(6, dtype=np.float32).reshape(2, 3)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            a, b = await sess.run([first, second], {x: feed})
            np.testing.assert_array_equal(a, b)
            inference = await sess.run(normed, {x: feed, training: False})
            np.testing.assert_allclose(inference, feed / np.sqrt(1 + 1e-3), rtol=1e-5)
            np.testing.assert_array_equal(await sess.run(dropped, {x: feed, training: False}), feed)
            updates = af.get_collection(af.GraphKeys.UPDATE_OPS)
            trained, _ = await sess.run([normed, updates], {x: feed, training: True})
            np.testing.assert_allclose(trained, (feed - feed.mean(0)) / np.sqrt(feed.var(0) + 1e-3),
                                       rtol=1e-4)
            moving = [v for v in af.global_variables() if "moving_mean" in v.name][0]
            np.testing.assert_allclose(await sess.run(moving), feed.mean(0) * 0.5, rtol=1e-6)


def test_layer_argument_errors():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="last dimension of the inputs to `Dense`"):
            af.layers.dense(af.placeholder(af.float32, [2, None]), 3)
        with pytest.raises(ValueError, match="padding must be 'valid' or 'same'"):
            af.layers.max_pooling2d(af.zeros([1, 4, 4, 1]), 2, 2, padding="full")


def _inputs_1d():
    return np.random.default_rng(6).standard_normal((3, 17, 2)).astype(np.float32)


async def test_1d_layers_names_and_shapes():
    names, weights, values, _ = await _ours(_inputs_1d(), MODEL_1D)
    assert names == NAMES_1D
    shapes = {name: w.shape for name, w in zip(names, weights)}
    assert shapes["conv1d/kernel:0"] == (3, 2, 4) and shapes["second/kernel:0"] == (2, 4, 3)
    assert shapes["channels_first/kernel:0"] == (2, 3, 2)
    # widths: 17 (same) -> 8 (pool 2/2) -> 4 (conv 2, stride 2) -> 4 (same pool);
    # channels first: 4 -> 3 (conv 2) -> 3 (same pool) -> 1 (pool 2/2); 2 channels
    assert shapes["dense/kernel:0"] == (2, 2) and values[0].shape == (3, 2)


def test_1d_layer_argument_errors():
    with af.Graph().as_default():
        x = af.zeros([1, 8, 2])
        with pytest.raises(NotImplementedError, match="padding='causal'"):
            af.layers.conv1d(x, 2, 3, padding="causal")
        with pytest.raises(ValueError, match="`pool_size` argument must be a tuple of 1"):
            af.layers.max_pooling1d(x, [2, 2], 1)
        with pytest.raises(ValueError, match="last dimension of the inputs to `Conv1D`"):
            af.layers.conv1d(af.placeholder(af.float32, [1, 8, None]), 2, 3)


async def test_outputs_gradients_and_moving_statistics_match_tf1(tmp_path):
    await _match_tf1(tmp_path, _inputs(), MODEL)


async def test_1d_layers_match_tf1(tmp_path):
    await _match_tf1(tmp_path, _inputs_1d(), MODEL_1D)


async def _match_tf1(tmp_path, x0, model):
    names, weights, values, after = await _ours(x0, model)
    theirs = tf1_run(model + f"""
out, variables, grads, updates = build(tf, tf.constant(inputs["x"]), True)
assert [v.name for v in variables] == {names!r}, [v.name for v in variables]
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for k, v in enumerate(variables):
        v.load(inputs[f"w{{k}}"], sess)
    outputs["out"], outputs["grads"], _ = sess.run([out, grads, updates])
    outputs["after"] = sess.run(variables)
""", tmp_path, x=x0, **{f"w{k}": w for k, w in enumerate(weights)})
    np.testing.assert_allclose(values[0], theirs["out"], rtol=1e-4, atol=1e-5)
    for mine, reference in zip(values[1], theirs["grads"]):
        np.testing.assert_allclose(mine, reference, rtol=1e-3, atol=1e-4)
    for name, mine, reference in zip(names, after, theirs["after"]):
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-6, err_msg=name)
