"""``resize_bilinear(..., half_pixel_centers=True)`` as TF1's: the source coordinate of output
index ``y`` is ``(y + 0.5) * in / out - 0.5`` in float32, below 0 the edge pixel, and its
gradient (``ResizeBilinearGrad`` with the attr) weighs the same cells. asyncflow refused the
argument (ValueError). Values worked out by hand and checked with TF1 (2.21's
``tf.compat.v1``); TF1 on random shapes and dtypes: tests/ops/test_tf1_conv_fuzz.py."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)
from gradcheck import check_gradients


def test_values_and_gradient_worked_out_by_hand():
    # Two pixels [1, 3] to four: coordinates -0.25, 0.25, 0.75, 1.25, so the first reads
    # pixel 0 alone (the edge), the last pixel 1 alone: [1, 1.5, 2.5, 3] (legacy: [1, 2, 3, 3]).
    # Gradient of ones: pixel 0 gets 1 + 0.75 + 0.25, pixel 1 gets 0.25 + 0.75 + 1.
    x = tf.constant(np.array([1.0, 3.0], np.float32).reshape(1, 1, 2, 1))
    y = tf.image.resize_bilinear(x, [1, 4], half_pixel_centers=True)
    tall = tf.image.resize_bilinear(x, [3, 4], half_pixel_centers=True)
    # 2x3 to 1x2: rows at 0.5 (their mean), columns at 0.25 and 1.75.
    x3 = tf.constant(np.arange(6.0, dtype=np.float32).reshape(1, 2, 3, 1))
    y3 = tf.image.resize_bilinear(x3, [1, 2], half_pixel_centers=True)
    values = session_run([y, tf.gradients(y, x)[0], tall, y3, tf.gradients(y3, x3)[0]])
    np.testing.assert_array_equal(values[0].ravel(), [1.0, 1.5, 2.5, 3.0])
    np.testing.assert_array_equal(values[1].ravel(), [2.0, 2.0])
    np.testing.assert_array_equal(values[2][0, :, :, 0], [[1.0, 1.5, 2.5, 3.0]] * 3)
    np.testing.assert_array_equal(values[3].ravel(), [1.75, 3.25])
    np.testing.assert_array_equal(values[4].ravel(), [0.375, 0.25, 0.375] * 2)
    assert y.op.get_attr("half_pixel_centers") is True
    assert tf.gradients(y, x)[0].op.get_attr("half_pixel_centers") is True


@pytest.mark.parametrize("size", [(5, 7), (2, 3), (1, 1), (3, 9)])
async def test_gradient_matches_finite_differences(size):
    x = np.random.default_rng(5).standard_normal((2, 3, 4, 2))
    await check_gradients(
        lambda images: tf.image.resize_bilinear(images, size, half_pixel_centers=True), [x],
        delta=0.5, rtol=1e-4, atol=1e-5)  # float32 inside, but linear in the image


def test_align_corners_with_half_pixel_centers_fails_when_the_op_or_its_gradient_runs():
    x = tf.constant(np.ones((1, 2, 2, 1), np.float32))
    y = tf.image.resize_bilinear(x, [3, 3], align_corners=True, half_pixel_centers=True)
    grad = tf.gradients(y, x)[0]
    for fetch, op in ((y, "ResizeBilinear"), (grad, "ResizeBilinearGrad")):
        with pytest.raises(af.errors.InvalidArgumentError,
                           match=f"{op} .*half_pixel_centers is True, align_corners must be"):
            session_run(fetch)
