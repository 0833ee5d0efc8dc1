"""Wrong answers the TF1 differential fuzz of convolutions, pools and image ops
(tests/ops/test_tf1_conv_fuzz.py) found, each pinned by a check that needs no TensorFlow:
finite differences, or the value TF1 (TensorFlow 2.21's ``tf.compat.v1`` on CPU) gives on
the same input."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)
from gradcheck import check_gradients


async def _together_and_alone(build, inputs):
    """The gradients of ``sum(build(*inputs) * r)`` fetched in one run, and each alone."""
    with af.Graph().as_default():
        placeholders = [tf.placeholder(tf.float64, np.shape(a)) for a in inputs]
        y = build(*placeholders)
        r = np.random.default_rng(1).standard_normal(y.shape.as_list())
        grads = tf.gradients(tf.reduce_sum(y * r), placeholders)
        feeds = dict(zip(placeholders, inputs))
        async with af.Session() as session:
            together = await session.run(grads, feeds)
            alone = [await session.run(g, feeds) for g in grads]
    return together, alone


async def test_gradients_of_stacked_convolutions_fetched_together():
    # separable_conv2d's gradients for input, depthwise and pointwise filters in one run
    # failed ("Conv2DBackpropInput:0 has no slot"): each conv's two gradients are fused into
    # one _FusedConv2DBackprop, and the depthwise pair still read the pointwise pair's input
    # gradient from the node the fusion had removed. Any conv feeding a conv directly did so.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 4, 2))
    depthwise, pointwise = rng.standard_normal((2, 3, 2, 2)), rng.standard_normal((1, 1, 4, 3))
    first, second = rng.standard_normal((3, 3, 2, 3)), rng.standard_normal((2, 2, 3, 2))
    cases = [(lambda a, f, p: tf.nn.separable_conv2d(a, f, p, [1, 1, 1, 1], "SAME"),
              [x, depthwise, pointwise]),
             (lambda a, f, g: tf.nn.conv2d(tf.nn.conv2d(a, f, [1, 2, 1, 1], "VALID"), g,
                                           [1, 1, 1, 1], "SAME"), [x, first, second])]
    for build, inputs in cases:
        await check_gradients(build, inputs)  # each gradient alone, against differences
        together, alone = await _together_and_alone(build, inputs)
        for mine, reference in zip(together, alone):
            np.testing.assert_allclose(mine, reference, rtol=1e-12, atol=1e-12)


LOWEST = np.finfo(np.float32).min


@pytest.mark.parametrize("fetch_pool", [True, False], ids=["pool_fetched", "gradient_only"])
def test_max_pool_and_its_gradient_with_nan_and_infinities_as_tf1(fetch_pool):
    # TF1's CPU MaxPool starts every window at the lowest finite value and takes a cell only
    # when strictly greater: NaN never wins, a window of -inf gives the lowest value. Its
    # gradient starts at the window's first real cell and moves on only to a strictly greater
    # one. asyncflow propagated NaN, gave -inf, routed to the first NaN, and sent a -inf
    # window's gradient to a padded cell (lost). (The kernels' own tests check MaxPoolGrad's
    # recomputing kernel and the compile pass's taps path against TF's rule directly:
    # tests/ops/test_conv_kernels.py ``tf_cpu_max_pool``.)
    cases = [  # (row, ksize, stride, padding, upstream, TF1's max_pool, TF1's gradient)
        ([-np.inf, -np.inf, np.nan, 1, 1, np.nan, np.nan, np.nan, 2, 2, -np.inf, 3], 2, 2,
         "VALID", [1, 2, 3, 4, 5, 6], [LOWEST, 1, 1, LOWEST, 2, 3],
         [1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 0, 6]),
        ([-np.inf, -np.inf, np.nan, 1, -np.inf], 4, 2, "SAME", [1, 2, 3], [LOWEST, 1, 1],
         [1, 0, 0, 5, 0]),
        ([-np.inf, -np.inf, -np.inf], 3, 2, "SAME", [1, 2], [LOWEST, LOWEST], [1, 2, 0]),
    ]
    for row, k, s, padding, upstream, pooled, gradient in cases:
        for fmt in ("NHWC", "NCHW"):
            x = np.array(row, np.float32).reshape(1, 1, -1, 1)
            x = x.transpose(0, 3, 1, 2) if fmt == "NCHW" else x
            shape = [1, 1, 1, k] if fmt == "NCHW" else [1, 1, k, 1]
            strides = [1, 1, 1, s] if fmt == "NCHW" else [1, 1, s, 1]
            xt = tf.constant(x)
            y = tf.nn.max_pool(xt, shape, strides, padding, data_format=fmt)
            w = tf.constant(np.array(upstream, np.float32).reshape(y.shape.as_list()))
            g = tf.gradients(y, xt, grad_ys=w)[0]
            if fetch_pool:
                y_value, g_value = session_run([y, g])
                np.testing.assert_array_equal(y_value.ravel(), pooled)
            else:
                g_value = session_run(g)
            np.testing.assert_array_equal(g_value.ravel(), gradient)


async def test_resize_bilinear_has_tf1s_gradient():
    # TF1 differentiates ResizeBilinear (ResizeBilinearGrad); asyncflow gave None.
    rng = np.random.default_rng(3)
    for shape, size, align in [((2, 3, 4, 2), [5, 7], False), ((1, 4, 3, 1), [2, 8], True),
                               ((1, 1, 5, 1), [3, 1], True), ((1, 5, 4, 1), [2, 3], False)]:
        await check_gradients(
            lambda x: tf.image.resize_bilinear(x, size, align_corners=align),
            [rng.standard_normal(shape)], delta=0.5, rtol=1e-4, atol=1e-5)  # float32 but linear
    # TF1's value for one float32 case: grads of ones over a 1x2 -> 1x3 resize.
    x = tf.constant(np.zeros((1, 1, 2, 1), np.float32))
    grad = tf.gradients(tf.image.resize_bilinear(x, [1, 3]), x)[0]
    async with af.Session() as session:
        np.testing.assert_allclose((await session.run(grad)).ravel(), [4 / 3, 5 / 3], rtol=1e-6)
    assert tf.gradients(tf.image.resize_bilinear(tf.constant(np.zeros((1, 2, 2, 1), np.int32)),
                                                 [3, 3]), x)[0] is None


async def test_resize_bilinear_gradient_keeps_a_nan_or_inf_in_the_cells_it_weighs():
    # TF1's values: each gradient reaches only the (up to) four cells it weighs, the upper
    # one min(ceil, size - 1) (at a whole position a zero-weight term, inf * 0, lands on the
    # lower cell); the first form summed through 0/1 matrices (0 * NaN everywhere) and gave
    # NaN over the whole image, in time quadratic in its size.
    x = tf.constant(np.zeros((1, 1, 4, 1), np.float32))
    ys = tf.constant(np.array([1, np.inf, np.nan, 1], np.float32).reshape(1, 1, 4, 1))
    same = tf.gradients(tf.image.resize_bilinear(x, [1, 4]), x, grad_ys=ys)[0]
    x2 = tf.constant(np.zeros((1, 3, 3, 1), np.float32))
    one_nan = np.zeros((1, 5, 5, 1), np.float32)
    one_nan[0, 0, 0, 0] = np.nan
    up = tf.gradients(tf.image.resize_bilinear(x2, [5, 5]), x2, grad_ys=tf.constant(one_nan))[0]
    async with af.Session() as session:
        same_value, up_value = await session.run([same, up])
    np.testing.assert_array_equal(same_value.ravel(), [1, np.nan, np.nan, 1])
    expected = np.zeros(9, np.float32)
    expected[0] = np.nan
    np.testing.assert_array_equal(up_value.ravel(), expected)


async def test_resize_bilinear_next_to_an_inf_keeps_the_pixels_on_whole_coordinates():
    # TF1's values: the upper source index is min(ceil(coordinate), size - 1), so a pixel
    # whose coordinate is a whole number reads only its source (asyncflow read the next one
    # too, with weight 0, and gave inf * 0 = NaN there); elsewhere inf and NaN spread.
    x = tf.constant(np.array([1.0, 2.0, 3.0, -np.inf], np.float32).reshape(1, 2, 2, 1))
    row = tf.constant(np.array([1.0, np.inf], np.float32).reshape(1, 1, 2, 1))
    big = tf.constant(np.array([3e38, -3e38], np.float32).reshape(1, 1, 2, 1))
    async with af.Session() as session:
        square, line, wide = await session.run([tf.image.resize_bilinear(x, [4, 4]),
                                                tf.image.resize_bilinear(row, [1, 4]),
                                                tf.image.resize_bilinear(big, [1, 4])])
    nan, inf = np.nan, np.inf
    np.testing.assert_array_equal(square[0, :, :, 0], [[1.0, 1.5, 2.0, 2.0],
                                                      [2.0, -inf, nan, nan],
                                                      [3.0, nan, nan, nan],
                                                      [3.0, nan, nan, nan]])
    # Column 1 is 1 + (inf - 1) / 2 = inf along x, then inf + (inf - inf) * 0 along y: NaN.
    np.testing.assert_array_equal(line.ravel(), [1.0, nan, nan, nan])
    # -3e38 - 3e38 overflows to -inf, but the whole coordinate 0 never subtracts.
    np.testing.assert_array_equal(wide.ravel()[[0, 2, 3]], np.float32([3e38, -3e38, -3e38]))


async def test_avg_pool_gradient_is_its_derivative_where_tf1s_is_not():
    # On purpose unlike TF1: its CPU AvgPoolGrad sizes a SAME window that starts in the
    # padding and is larger than the input as the whole input (4x4, ksize 5, stride 3: g/16 on
    # 16 cells where AvgPool averaged 9 of them). asyncflow's is AvgPool's derivative.
    rng = np.random.default_rng(4)
    for ksize, strides in (([1, 5, 5, 1], [1, 3, 3, 1]), ([1, 5, 3, 1], [1, 1, 2, 1])):
        await check_gradients(lambda x: tf.nn.avg_pool(x, ksize, strides, "SAME"),
                              [rng.standard_normal((2, 4, 4, 3))])
