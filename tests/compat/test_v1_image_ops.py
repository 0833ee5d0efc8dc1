"""TF1 ``tf.image`` helpers added for issue 36 (flips, crops, pads, standardization,
grayscale, dtype conversion, random flips and crops): against TF1 where TensorFlow is
installed, numpy always, gradients against finite differences, and bad input named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from gradcheck import check_gradients
from tf1_reference import compare_groups, compat_run, tf1_run


SNIPPET = """
I = tf.image
img, batch, u8 = (tf.constant(inputs[k]) for k in ("img", "batch", "u8"))
results = [
    I.flip_left_right(img), I.flip_up_down(img), I.flip_left_right(batch), I.flip_up_down(batch),
    I.per_image_standardization(img), I.per_image_standardization(batch),
    I.per_image_standardization(u8), I.per_image_standardization(tf.zeros([2, 2, 1])),
    I.crop_to_bounding_box(img, 1, 2, 3, 2), I.crop_to_bounding_box(batch, 0, 1, 4, 3),
    I.pad_to_bounding_box(img, 1, 2, 7, 9), I.pad_to_bounding_box(batch, 0, 1, 5, 6),
    I.resize_image_with_crop_or_pad(img, 3, 8), I.resize_image_with_crop_or_pad(batch, 7, 2),
    I.resize_image_with_crop_or_pad(u8, 2, 3),
    I.central_crop(img, 0.5), I.central_crop(batch, 0.7), I.central_crop(img, 1.0),
    I.rgb_to_grayscale(img), I.rgb_to_grayscale(u8),
    I.convert_image_dtype(u8, tf.float32), I.convert_image_dtype(img, tf.uint8),
    I.convert_image_dtype(img * 2.0, tf.uint8, saturate=True),
    I.convert_image_dtype(u8, tf.int32), I.convert_image_dtype(u8, tf.uint8),
    I.convert_image_dtype(tf.cast(u8, tf.int32) * 1000000, tf.uint8),
    I.convert_image_dtype(img, tf.float64),
]
grads = tf.gradients(tf.reduce_sum(results[4] * inputs["img"]) + tf.reduce_sum(results[12] ** 2)
                     + tf.reduce_sum(results[0] * results[15][0, 0, 0]), img)
shapes = [I.random_flip_left_right(img, seed=3), I.random_crop(batch, [2, 3, 2, 3], seed=5),
          tf.random_crop(img, [2, 2, 3])]
outputs["static"] = [np.array(s.shape.as_list()) for s in shapes]
with tf.Session() as sess:
    outputs["results"], outputs["grads"] = sess.run([results, grads])
"""


def _inputs():
    rng = np.random.RandomState(12)
    return {"img": rng.rand(5, 6, 3).astype(np.float32),
            "batch": rng.rand(2, 4, 5, 3).astype(np.float32),
            "u8": (rng.rand(4, 5, 3) * 255).astype(np.uint8)}


def _ours(inputs):
    return compat_run(SNIPPET, inputs)


def test_image_ops_match_tf1(tmp_path):
    inputs = _inputs()
    ours = _ours(inputs)
    theirs = tf1_run(SNIPPET, tmp_path, **inputs)
    assert sorted(ours) == sorted(theirs)
    for mine, tfs in zip(ours["static"], theirs["static"]):
        np.testing.assert_array_equal(mine, tfs)
    groups = ("results", "grads")
    compare_groups([ours[name] for name in groups], theirs, groups, rtol=1e-5, atol=1e-5)


def test_image_ops_against_numpy():
    inputs = _inputs()
    out = _ours(inputs)["results"]
    img, batch, u8 = inputs["img"], inputs["batch"], inputs["u8"]
    np.testing.assert_array_equal(out[0], img[:, ::-1])
    np.testing.assert_array_equal(out[1], img[::-1])
    np.testing.assert_array_equal(out[2], batch[:, :, ::-1])
    np.testing.assert_array_equal(out[3], batch[:, ::-1])
    std = (img - img.mean()) / max(img.std(), 1 / np.sqrt(img.size))
    np.testing.assert_allclose(out[4], std, rtol=1e-4, atol=1e-5)
    per = [(b - b.mean()) / b.std() for b in batch]
    np.testing.assert_allclose(out[5], per, rtol=1e-4, atol=1e-5)
    assert out[6].dtype == np.float32 and (out[7] == 0).all()
    np.testing.assert_array_equal(out[8], img[1:4, 2:4])
    np.testing.assert_array_equal(out[10][1:6, 2:8], img)
    assert out[10].shape == (7, 9, 3) and out[10].sum() == pytest.approx(img.sum(), rel=1e-5)
    np.testing.assert_array_equal(out[12][:, 1:7], img[1:4])  # crop 5->3 rows, pad 6->8 cols
    np.testing.assert_array_equal(out[15], img[1:4, 1:5])  # int((5 - 2.5) / 2), int(1.5)
    np.testing.assert_array_equal(out[17], img)
    gray = img @ np.array([0.2989, 0.5870, 0.1140], np.float32)
    np.testing.assert_allclose(out[18][..., 0], gray, rtol=1e-5)
    np.testing.assert_allclose(out[20], u8 / np.float32(255), rtol=1e-6)
    np.testing.assert_array_equal(out[21], (img * np.float32(255.5)).astype(np.uint8))
    np.testing.assert_array_equal(out[22], np.clip(img * 2 * np.float32(255.5), 0, 255)
                                  .astype(np.uint8))
    np.testing.assert_array_equal(out[23], u8.astype(np.int32) * 2 ** 23)  # (2**31) // 256
    np.testing.assert_array_equal(out[24], u8)
    assert out[26].dtype == np.float64


def test_random_flips_and_crops_are_seeded():
    rng = np.random.RandomState(1)
    img = rng.rand(4, 5, 3).astype(np.float32)
    batch = rng.rand(16, 4, 5, 3).astype(np.float32)
    af.set_random_seed(7)
    outs = [tf.image.random_flip_left_right(img, seed=1), tf.image.random_flip_up_down(img, seed=1),
            tf.image.random_flip_left_right(batch, seed=2), tf.image.random_flip_up_down(batch),
            tf.random_crop(batch, [3, 2, 3, 3], seed=4)]
    with tf.Session() as sess:
        runs = [sess.run(outs) for _ in range(8)]
    seen = set()
    for lr, ud, blr, bud, crop in runs:
        assert any(np.array_equal(lr, c) for c in (img, img[:, ::-1]))
        assert any(np.array_equal(ud, c) for c in (img, img[::-1]))
        flipped = [np.array_equal(b, x[:, ::-1]) for b, x in zip(blr, batch)]
        assert all(f or np.array_equal(b, x) for f, b, x in zip(flipped, blr, batch))
        seen.add(sum(flipped))
        assert all(np.array_equal(b, x) or np.array_equal(b, x[::-1]) for b, x in zip(bud, batch))
        assert crop.shape == (3, 2, 3, 3)
        starts = [(i, j, k) for i in range(14) for j in range(3) for k in range(3)
                  if np.array_equal(batch[i:i + 3, j:j + 2, k:k + 3], crop)]
        assert len(starts) == 1
    assert len(seen) > 1  # per-image draws differ from step to step
    af.reset_default_graph()
    af.set_random_seed(7)
    again = [tf.image.random_flip_left_right(img, seed=1),
             tf.image.random_flip_up_down(img, seed=1),
             tf.image.random_flip_left_right(batch, seed=2), tf.image.random_flip_up_down(batch),
             tf.random_crop(batch, [3, 2, 3, 3], seed=4)]
    with tf.Session() as sess:
        for expected in runs:  # the same seeds give the same sequence
            for got, want in zip(sess.run(again), expected):
                np.testing.assert_array_equal(got, want)


@pytest.mark.trio
async def test_image_op_gradients_against_finite_differences():
    rng = np.random.RandomState(13)
    point = rng.rand(4, 5, 3)
    # TF1 standardizes and grays in float32 whatever the input: a wider step, looser bounds.
    await check_gradients(af.image.per_image_standardization, [point], delta=1e-3, rtol=1e-2,
                          atol=1e-3)
    await check_gradients(lambda v: af.image.resize_image_with_crop_or_pad(v, 3, 7), [point])
    await check_gradients(lambda v: af.image.flip_up_down(af.image.central_crop(v, 0.6)),
                          [point])
    await check_gradients(lambda v: af.image.rgb_to_grayscale(v), [point], delta=1e-3,
                          rtol=1e-2, atol=1e-3)


def test_image_op_errors_name_the_op():
    with pytest.raises(ValueError, match="flip_left_right: image must be 3-D or 4-D"):
        tf.image.flip_left_right(tf.zeros([3, 4]))
    with pytest.raises(ValueError, match="crop_to_bounding_box: the box"):
        tf.image.crop_to_bounding_box(tf.zeros([4, 4, 1]), 2, 0, 3, 2)
    with pytest.raises(ValueError, match="pad_to_bounding_box: a 4x4 image"):
        tf.image.pad_to_bounding_box(tf.zeros([4, 4, 1]), 1, 0, 4, 4)
    with pytest.raises(ValueError, match="central_crop: central_fraction"):
        tf.image.central_crop(tf.zeros([4, 4, 1]), 0.0)
    with pytest.raises(ValueError, match="random_crop: size"):
        tf.random_crop(tf.zeros([4, 4, 1]), [5, 4, 1])
    with pytest.raises(TypeError, match="convert_image_dtype: image must be a float or integer"):
        tf.image.convert_image_dtype(tf.constant([True]), tf.float32)
    with pytest.raises(ValueError, match="rgb_to_grayscale: images must have 3 channels"):
        tf.image.rgb_to_grayscale(tf.zeros([2, 2, 4]))
