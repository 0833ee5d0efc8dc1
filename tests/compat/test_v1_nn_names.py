"""TF1 ``tf.nn`` names added for issue 36 (softsign, selu, swish/silu, conv1d, atrous_conv2d):
values and gradients against TF1 where TensorFlow is installed, numpy always, gradients
against finite differences, and bad input named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from gradcheck import check_gradients
from tf1_reference import compare_groups, compat_run, tf1_run


SNIPPET = """
x = tf.constant(inputs["x"])
acts = [tf.nn.softsign(x), tf.nn.selu(x), tf.nn.swish(x), tf.nn.silu(x)]
act_grads = tf.gradients(tf.reduce_sum(acts[0] * inputs["x"]) + tf.reduce_sum(acts[1] * x)
                         + tf.reduce_sum(acts[2] * x), x)
seq, f1 = tf.constant(inputs["seq"]), tf.constant(inputs["f1"])
convs = [tf.nn.conv1d(seq, f1, 1, "SAME"), tf.nn.conv1d(seq, f1, stride=2, padding="VALID"),
         tf.nn.conv1d(seq, f1, 1, "VALID", dilations=2)]
img, f2 = tf.constant(inputs["img"]), tf.constant(inputs["f2"])
atrous = [tf.nn.atrous_conv2d(img, f2, 2, "SAME"), tf.nn.atrous_conv2d(img, f2, 1, "VALID")]
conv_grads = tf.gradients(tf.reduce_sum(convs[0] * convs[0]) + tf.reduce_sum(atrous[0] ** 2),
                          [seq, f1, img, f2])
with tf.Session() as sess:
    outputs["acts"], outputs["act_grads"], outputs["convs"], outputs["atrous"], \\
        outputs["conv_grads"] = sess.run([acts, act_grads, convs, atrous, conv_grads])
"""


def _inputs():
    rng = np.random.RandomState(2)
    x = rng.normal(scale=2.0, size=[3, 5]).astype(np.float32)
    x[0, 0] = 0.0
    return {"x": x, "seq": rng.normal(size=[2, 9, 3]).astype(np.float32),
            "f1": rng.normal(size=[3, 3, 4]).astype(np.float32),
            "img": rng.normal(size=[2, 7, 8, 3]).astype(np.float32),
            "f2": rng.normal(size=[3, 3, 3, 2]).astype(np.float32)}


def _ours(inputs):
    return compat_run(SNIPPET, inputs)


def test_nn_names_match_tf1(tmp_path):
    inputs = _inputs()
    ours = _ours(inputs)
    theirs = tf1_run(SNIPPET, tmp_path, **inputs)
    assert sorted(ours) == sorted(theirs)
    compare_groups([ours[name] for name in sorted(ours)], theirs, sorted(ours), rtol=1e-5, atol=1e-5)


def _conv1d(seq, filters, stride, dilation, padding):
    width, taps = seq.shape[1], filters.shape[0]
    span = (taps - 1) * dilation + 1
    if padding == "SAME":
        out_w = -(-width // stride)
        pad = max((out_w - 1) * stride + span - width, 0)
        seq = np.pad(seq, [(0, 0), (pad // 2, pad - pad // 2), (0, 0)])
    else:
        out_w = (width - span) // stride + 1
    rows = [sum(seq[:, o * stride + t * dilation] @ filters[t] for t in range(taps))
            for o in range(out_w)]
    return np.stack(rows, 1)


def test_nn_names_against_numpy():
    inputs = _inputs()
    out = _ours(inputs)
    x = inputs["x"].astype(np.float64)
    scale, alpha = 1.0507009873554805, 1.6732632423543772
    np.testing.assert_allclose(out["acts"][0], x / (1 + np.abs(x)), rtol=1e-6)
    np.testing.assert_allclose(out["acts"][1], np.where(x > 0, scale * x,
                                                        scale * alpha * np.expm1(x)), rtol=1e-5)
    np.testing.assert_allclose(out["acts"][2], x / (1 + np.exp(-x)), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(out["acts"][2], out["acts"][3])
    seq, f1 = inputs["seq"].astype(np.float64), inputs["f1"].astype(np.float64)
    for got, args in zip(out["convs"], [(1, 1, "SAME"), (2, 1, "VALID"), (1, 2, "VALID")]):
        np.testing.assert_allclose(got, _conv1d(seq, f1, *args), rtol=1e-4, atol=1e-5)
    img, f2 = inputs["img"].astype(np.float64), inputs["f2"].astype(np.float64)
    valid = sum(img[:, i:i + 5, j:j + 6] @ f2[i, j] for i in range(3) for j in range(3))
    np.testing.assert_allclose(out["atrous"][1], valid, rtol=1e-4, atol=1e-5)
    padded = np.pad(img, [(0, 0), (2, 2), (2, 2), (0, 0)])
    dilated = sum(padded[:, 2 * i:2 * i + 7, 2 * j:2 * j + 8] @ f2[i, j]
                  for i in range(3) for j in range(3))
    np.testing.assert_allclose(out["atrous"][0], dilated, rtol=1e-4, atol=1e-5)


@pytest.mark.trio
async def test_nn_name_gradients_against_finite_differences():
    rng = np.random.RandomState(4)
    point = rng.normal(scale=2.0, size=[3, 4])
    point[np.abs(point) < 0.05] = 0.3  # away from selu's kink
    await check_gradients(af.nn.softsign, [point])
    await check_gradients(af.nn.selu, [point])
    await check_gradients(lambda v: af.nn.swish(v, beta=1.5), [point])
    await check_gradients(lambda s, f: af.nn.conv1d(s, f, 2, "SAME", dilations=1),
                          [rng.normal(size=[2, 7, 2]), rng.normal(size=[3, 2, 3])])
    await check_gradients(lambda s, f: af.nn.conv1d(s, f, 1, "VALID", dilations=2),
                          [rng.normal(size=[1, 8, 2]), rng.normal(size=[2, 2, 2])])
    await check_gradients(lambda i, f: af.nn.atrous_conv2d(i, f, 2, "SAME"),
                          [rng.normal(size=[1, 6, 5, 2]), rng.normal(size=[2, 3, 2, 2])])


def test_nn_name_errors_name_the_op():
    with pytest.raises(TypeError, match="Selu"):
        tf.nn.selu(tf.constant([1, 2]))
    with pytest.raises(TypeError, match="Softsign"):
        tf.nn.softsign(tf.constant([1, 2]))
    with pytest.raises(ValueError, match="conv1d: value must have rank 3"):
        tf.nn.conv1d(tf.zeros([2, 3]), tf.zeros([1, 3, 2]), 1, "SAME")
    with pytest.raises(ValueError, match="conv1d: data_format"):
        tf.nn.conv1d(tf.zeros([2, 3, 3]), tf.zeros([1, 3, 2]), 1, "SAME", data_format="NHC")
    with pytest.raises(ValueError, match="atrous_conv2d: rate must be at least 1"):
        tf.nn.atrous_conv2d(tf.zeros([1, 4, 4, 1]), tf.zeros([2, 2, 1, 1]), 0, "SAME")


DEPTHWISE_SNIPPET = """
img, dw, pw = (tf.constant(inputs[k]) for k in ("img", "dw", "pw"))
results = [tf.nn.depthwise_conv2d(img, dw, [1, 1, 1, 1], "SAME"),
           tf.nn.depthwise_conv2d(img, dw, [1, 2, 2, 1], "VALID"),
           tf.nn.depthwise_conv2d(img, dw, [1, 1, 1, 1], "SAME", rate=[2, 2]),
           tf.nn.separable_conv2d(img, dw, pw, [1, 1, 1, 1], "SAME"),
           tf.nn.separable_conv2d(img, dw, pw, [1, 2, 2, 1], "VALID")]
grads = tf.gradients(tf.reduce_sum(results[0] ** 2) + tf.reduce_sum(results[3] * results[3]),
                     [img, dw, pw])
with tf.Session() as sess:
    outputs["results"], outputs["grads"] = sess.run([results, grads])
"""


def _depthwise_inputs():
    rng = np.random.RandomState(9)
    return {"img": rng.normal(size=[2, 7, 6, 3]).astype(np.float32),
            "dw": rng.normal(size=[3, 2, 3, 2]).astype(np.float32),
            "pw": rng.normal(size=[1, 1, 6, 4]).astype(np.float32)}


def _run_depthwise(inputs):
    outputs = {}
    exec(compile(DEPTHWISE_SNIPPET, "snippet", "exec"),  # noqa: S102
         {"tf": tf, "np": np, "inputs": inputs, "outputs": outputs})
    return outputs


def test_depthwise_and_separable_match_tf1(tmp_path):
    inputs = _depthwise_inputs()
    ours = _run_depthwise(inputs)
    theirs = tf1_run(DEPTHWISE_SNIPPET, tmp_path, **inputs)
    for name in ("results", "grads"):
        for i, (mine, tfs) in enumerate(zip(ours[name], theirs[name])):
            assert mine.dtype == tfs.dtype and mine.shape == tfs.shape, (name, i)
            np.testing.assert_allclose(mine, tfs, rtol=1e-4, atol=1e-4, err_msg=f"{name} {i}")


def test_depthwise_and_separable_against_numpy():
    inputs = _depthwise_inputs()
    out = _run_depthwise(inputs)["results"]
    img, dw, pw = (inputs[k].astype(np.float64) for k in ("img", "dw", "pw"))
    padded = np.pad(img, [(0, 0), (1, 1), (0, 1), (0, 0)])  # SAME for a 3x2 window
    same = sum(padded[:, i:i + 7, j:j + 6, :, None] * dw[i, j] for i in range(3) for j in range(2))
    np.testing.assert_allclose(out[0], same.reshape(2, 7, 6, 6), rtol=1e-4, atol=1e-5)
    valid = sum(img[:, i:i + 5:2, j:j + 5:2, :, None] * dw[i, j]
                for i in range(3) for j in range(2))
    np.testing.assert_allclose(out[1], valid.reshape(2, 3, 3, 6), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[3], same.reshape(2, 7, 6, 6) @ pw[0, 0], rtol=1e-4, atol=1e-5)


@pytest.mark.trio
async def test_depthwise_gradients_against_finite_differences():
    rng = np.random.RandomState(10)
    await check_gradients(lambda i, f: af.nn.depthwise_conv2d(i, f, [1, 1, 1, 1], "SAME"),
                          [rng.normal(size=[1, 4, 5, 2]), rng.normal(size=[2, 3, 2, 2])])
    await check_gradients(lambda i, d, p: af.nn.separable_conv2d(i, d, p, [1, 2, 2, 1], "SAME"),
                          [rng.normal(size=[1, 5, 4, 2]), rng.normal(size=[3, 3, 2, 1]),
                           rng.normal(size=[1, 1, 2, 3])])


def test_depthwise_errors_name_the_op():
    with pytest.raises(ValueError, match="depthwise_conv2d: input must be 4-D"):
        tf.nn.depthwise_conv2d(tf.zeros([4, 4, 2]), tf.zeros([2, 2, 2, 1]), [1, 1, 1, 1], "SAME")
    with pytest.raises(ValueError, match="depthwise_conv2d: filter in_channels 3"):
        tf.nn.depthwise_conv2d(tf.zeros([1, 4, 4, 2]), tf.zeros([2, 2, 3, 1]), [1, 1, 1, 1],
                               "SAME")
    with pytest.raises(ValueError, match="separable_conv2d: pointwise_filter"):
        tf.nn.separable_conv2d(tf.zeros([1, 4, 4, 2]), tf.zeros([2, 2, 2, 1]),
                               tf.zeros([2, 2, 2, 3]), [1, 1, 1, 1], "SAME")


# Every TF1 name of issue 36's nn/image/losses/metrics group, as TF1 spells it.
GROUP_NAMES = [
    "losses.softmax_cross_entropy", "losses.sparse_softmax_cross_entropy",
    "losses.sigmoid_cross_entropy", "losses.mean_squared_error", "losses.absolute_difference",
    "losses.huber_loss", "losses.log_loss", "losses.hinge_loss", "losses.compute_weighted_loss",
    "losses.Reduction.SUM_BY_NONZERO_WEIGHTS", "losses.Reduction.MEAN", "losses.add_loss",
    "losses.get_losses", "losses.get_regularization_loss", "losses.get_regularization_losses",
    "losses.get_total_loss", "GraphKeys.LOSSES", "GraphKeys.REGULARIZATION_LOSSES",
    "GraphKeys.METRIC_VARIABLES", "metrics.accuracy", "metrics.mean",
    "metrics.mean_squared_error", "metrics.precision", "metrics.recall", "metrics.auc",
    "nn.softsign", "nn.selu", "nn.swish", "nn.silu", "nn.lrn", "nn.local_response_normalization",
    "nn.conv1d", "nn.depthwise_conv2d", "nn.separable_conv2d", "nn.atrous_conv2d",
    "nn.fused_batch_norm", "image.flip_left_right", "image.flip_up_down",
    "image.random_flip_left_right", "image.random_flip_up_down",
    "image.per_image_standardization", "image.crop_to_bounding_box", "image.pad_to_bounding_box",
    "image.resize_image_with_crop_or_pad", "image.central_crop", "image.random_crop",
    "random_crop", "image.rgb_to_grayscale", "image.convert_image_dtype",
]

NAMES_SNIPPET = """
missing = []
for name in inputs["names"].tolist():
    owner = tf
    for part in name.split("."):
        owner = getattr(owner, part, None)
    if owner is None:
        missing.append(name)
outputs["missing"] = np.array(missing or [""])
"""


def test_every_group_name_exists_here_and_in_tf1(tmp_path):
    names = np.array(GROUP_NAMES)
    ours = {}
    exec(compile(NAMES_SNIPPET, "names", "exec"), {"tf": tf, "np": np, "inputs": {  # noqa: S102
        "names": names}, "outputs": ours})
    assert ours["missing"].tolist() == [""]
    theirs = tf1_run(NAMES_SNIPPET, tmp_path, names=names)
    assert theirs["missing"].tolist() == [""]  # the same spellings as TF1's
