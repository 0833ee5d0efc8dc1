"""TF1 names added for the issue-36 programs, against TF1 itself where TensorFlow is installed:
``tf.image.decode_jpeg``/``decode_png``/``resize_images``, ``tf.gather_nd`` (and its
gradient), ``TensorShape[i].value`` and ``expand_dims`` with a one-element list axis."""
import io

import numpy as np
import pytest

import asyncflow.compat.v1 as tf
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from tf1_reference import compat_run, tf1_run

Image = pytest.importorskip("PIL.Image")


SNIPPET = """
jpg, gray, png = (inputs[k].tobytes() for k in ("jpg", "gray_jpg", "png"))
rgb = tf.image.decode_jpeg(jpg, channels=3, dct_method="INTEGER_ACCURATE")
as_is = tf.image.decode_jpeg(jpg)
luma = tf.image.decode_jpeg(jpg, channels=1, dct_method="INTEGER_ACCURATE")
from_gray = tf.image.decode_jpeg(gray, channels=3, dct_method="INTEGER_ACCURATE")
pixels = tf.image.decode_png(png)
images = tf.constant(inputs["images"])
sized = [tf.image.resize_images(images, [5, 7]),
         tf.image.resize_images(images, [9, 4], align_corners=True),
         tf.image.resize_images(images, [7, 11], method=tf.image.ResizeMethod.NEAREST_NEIGHBOR),
         tf.image.resize_images(images[0], [9, 4], method=tf.image.ResizeMethod.NEAREST_NEIGHBOR,
                                align_corners=True),
         tf.image.resize_images(tf.cast(images, tf.uint8), [6, 8])]
params = tf.constant(inputs["params"])
picked = tf.gather_nd(params, inputs["index"])
rows = tf.gather_nd(params, inputs["index"][:, :1])
grad = tf.gradients(tf.reduce_sum(picked * inputs["weights"]) + tf.reduce_sum(rows), params)[0]
x = tf.placeholder("float", [None, 3])
wide = tf.expand_dims(x, [1])
outputs["static"] = np.array([x.shape[1].value, x.get_shape()[1].value,
                              wide.shape.as_list()[2], len(wide.shape)])
with tf.Session() as sess:
    outputs["rgb"], outputs["as_is"], outputs["luma"], outputs["from_gray"], \\
        outputs["png"], outputs["sized"], outputs["picked"], outputs["rows"], \\
        outputs["grad"] = sess.run([rgb, as_is, luma, from_gray, pixels, sized, picked, rows,
                                    grad])
"""


def _encoded(array, kind, **options):
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, kind, **options)
    return np.frombuffer(buffer.getvalue(), np.uint8)


def _inputs():
    rng = np.random.RandomState(7)
    yy, xx = np.mgrid[0:24, 0:32]
    photo = np.stack([yy * 10, xx * 7, (yy + xx) * 4], -1).clip(0, 255).astype(np.uint8)
    gray = (yy * 9 + xx * 2).clip(0, 255).astype(np.uint8)
    rgba = (rng.rand(5, 6, 4) * 255).astype(np.uint8)
    return {"jpg": _encoded(photo, "JPEG", quality=90), "gray_jpg": _encoded(gray, "JPEG"),
            "png": _encoded(rgba, "PNG"),
            "images": (rng.rand(2, 6, 5, 3) * 255).astype(np.float32),
            "params": rng.normal(size=[3, 4, 2]).astype(np.float32),
            "index": np.array([[0, 1], [2, 3], [0, 1], [1, 0]], np.int64),
            "weights": rng.normal(size=[4, 2]).astype(np.float32)}


def _ours(inputs):
    return compat_run(SNIPPET, inputs)


def test_image_and_gather_nd_names_match_tf1(tmp_path):
    inputs = _inputs()
    ours = _ours(inputs)
    theirs = tf1_run(SNIPPET, tmp_path, **inputs)
    assert sorted(ours) == sorted(theirs)
    for name in ("rgb", "as_is", "luma", "from_gray"):  # both decode with libjpeg
        assert ours[name].shape == theirs[name].shape and ours[name].dtype == np.uint8, name
        # libjpeg's accurate integer DCT: the same pixels; TF's default is the fast DCT,
        # whose rounding differs by a few levels.
        limit = 4 if name == "as_is" else 0
        assert np.abs(ours[name].astype(int) - theirs[name]).max() <= limit, name
    np.testing.assert_array_equal(ours["png"], theirs["png"])
    for mine, tfs in zip(ours["sized"], theirs["sized"]):
        assert mine.dtype == tfs.dtype and mine.shape == tfs.shape
        np.testing.assert_allclose(mine, tfs, rtol=1e-5, atol=1e-3)
    for name in ("picked", "rows", "grad", "static"):
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-6, err_msg=name)


def test_image_results_without_tf():
    inputs = _inputs()
    out = _ours(inputs)
    assert out["rgb"].shape == (24, 32, 3) and out["luma"].shape == (24, 32, 1)
    assert out["as_is"].shape == (24, 32, 3) and out["from_gray"].shape == (24, 32, 3)
    assert np.array_equal(out["png"], np.asarray(Image.open(io.BytesIO(inputs["png"].tobytes()))))
    images = inputs["images"]
    np.testing.assert_array_equal(out["sized"][2], images[:, [0, 0, 1, 2, 3, 4, 5]][
        :, :, [0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4]])  # nearest: floor(y * 6/7), floor(x * 5/11)
    assert out["sized"][0].dtype == np.float32 and out["sized"][4].dtype == np.float32
    params, index = inputs["params"], inputs["index"]
    np.testing.assert_array_equal(out["picked"], params[index[:, 0], index[:, 1]])
    assert out["static"].tolist() == [3, 3, 3, 3]


def test_image_errors_name_the_op():
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="DecodeJpeg.*Invalid JPEG"):
            sess.run(tf.image.decode_jpeg(b"not a jpeg"))
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"GatherNd.*\[0, 3\)"):
            sess.run(tf.gather_nd(tf.zeros([3, 2]), [[3]]))
    with pytest.raises(ValueError, match="method 3 is not supported"):
        tf.image.resize_images(tf.zeros([4, 4, 1]), [2, 2], method=tf.image.ResizeMethod.AREA)
    unchanged = tf.zeros([4, 4, 1], tf.uint8)
    assert tf.image.resize_images(unchanged, [4, 4]) is unchanged  # TF1 skips a same-size resize


# Every name the issue's TF1 programs used (issue 36), as TF1 spells it.
ISSUE_NAMES = [
    "ConfigProto", "Dimension", "GPUOptions", "InteractiveSession", "RegisterGradient", "Session",
    "app.flags", "app.run", "assert_less_equal", "boolean_mask", "dimension_value",
    "expand_dims", "flags", "gather_nd", "gfile.Exists", "gfile.GFile", "gfile.MakeDirs",
    "group", "image.ResizeMethod", "image.decode_jpeg", "image.decode_png", "image.encode_jpeg",
    "image.resize_bilinear", "image.resize_images", "image.resize_nearest_neighbor",
    "logging.info", "logging.set_verbosity", "nn.dropout", "nn.in_top_k", "nn.l2_normalize",
    "nn.static_bidirectional_rnn", "nn.top_k", "py_func", "read_file", "sequence_mask",
    "test.compute_gradient_error", "train.ClusterSpec", "train.MonitoredTrainingSession",
    "train.Server", "train.latest_checkpoint", "train.replica_device_setter",
    "train.slice_input_producer", "train.start_queue_runners", "Graph.gradient_override_map",
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
outputs["gpu_options"] = np.array([hasattr(tf.ConfigProto().gpu_options, "allow_growth")])
"""


def test_every_name_of_the_issue_exists_here_and_in_tf1(tmp_path):
    names = np.array(ISSUE_NAMES)
    ours = {}
    exec(compile(NAMES_SNIPPET, "names", "exec"), {"tf": tf, "np": np, "inputs": {  # noqa: S102
        "names": names}, "outputs": ours})
    assert ours["missing"].tolist() == [""] and ours["gpu_options"].tolist() == [True]
    theirs = tf1_run(NAMES_SNIPPET, tmp_path, names=names)
    assert theirs["missing"].tolist() == [""]  # the same spellings as TF1's
