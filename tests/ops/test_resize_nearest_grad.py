"""The gradient of ``ResizeNearestNeighbor`` (TF1's ``ResizeNearestNeighborGrad``): each output
cell's gradient goes to the input cell it copied, by the forward op's rule in every mode
(legacy, ``align_corners``, ``half_pixel_centers``). Against finite differences (the resize is
linear in the image) and sums worked out by hand; TF1's values:
tests/ops/test_tf1_conv_fuzz.py."""
import numpy as np
import pytest

import asyncflow as af
from gradcheck import check_gradients

MODES = {"legacy": (False, False), "align_corners": (True, False),
         "half_pixel_centers": (False, True)}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("size", [(2, 3), (7, 9), (3, 5), (1, 1)])
async def test_gradient_matches_finite_differences(mode, size):
    corners, half = MODES[mode]
    x = np.random.default_rng(3).standard_normal((2, 3, 5, 2))
    await check_gradients(
        lambda images: af.image.resize_nearest_neighbor(images, size, align_corners=corners,
                                                        half_pixel_centers=half), [x])


# One row of 2 pixels resized to 5 columns: which input column each output column copies.
#   legacy        floor(x * 2/5)          = [0, 0, 0, 1, 1]
#   align_corners round(x * 1/4)          = [0, 0, 1, 1, 1]   (round(0.5) = 1)
#   half_pixel    floor((x + 0.5) * 2/5)  = [0, 0, 1, 1, 1]
# and 4 columns down to 2: legacy floor(x * 2) = [0, 2]; align round(x * 3) = [0, 3];
# half floor((x + 0.5) * 2) = [1, 3].
UP = {"legacy": [1 + 2 + 4, 8 + 16], "align_corners": [1 + 2, 4 + 8 + 16],
      "half_pixel_centers": [1 + 2, 4 + 8 + 16]}
DOWN = {"legacy": [1, 0, 2, 0], "align_corners": [1, 0, 0, 2],
        "half_pixel_centers": [0, 1, 0, 2]}


@pytest.mark.parametrize("mode", list(MODES))
async def test_gradient_sums_by_hand(mode):
    corners, half = MODES[mode]
    with af.Graph().as_default():
        narrow = af.placeholder(af.float32, [1, 1, 2, 1])
        wide = af.placeholder(af.float32, [1, 1, 4, 1])
        up = af.image.resize_nearest_neighbor(narrow, [1, 5], align_corners=corners,
                                              half_pixel_centers=half)
        down = af.image.resize_nearest_neighbor(wide, [1, 2], align_corners=corners,
                                                half_pixel_centers=half)
        weights_up = np.array([1, 2, 4, 8, 16], np.float32).reshape(1, 1, 5, 1)
        weights_down = np.array([1, 2], np.float32).reshape(1, 1, 2, 1)
        grads = af.gradients([af.reduce_sum(up * weights_up), af.reduce_sum(down * weights_down)],
                             [narrow, wide])
        async with af.Session() as sess:
            grad_up, grad_down = await sess.run(grads, {narrow: np.zeros([1, 1, 2, 1]),
                                                        wide: np.zeros([1, 1, 4, 1])})
    assert grad_up.reshape(-1).tolist() == UP[mode]
    assert grad_down.reshape(-1).tolist() == DOWN[mode]


async def test_unknown_sizes_read_the_image_shape_when_the_step_runs():
    with af.Graph().as_default():
        images = af.placeholder(af.float64, [None, None, None, 1])
        resized = af.image.resize_images(images, [5, 3],
                                         method=af.image.ResizeMethod.NEAREST_NEIGHBOR)
        grad, = af.gradients(af.reduce_sum(resized), [images])
        assert grad.shape.as_list() == [None, None, None, 1]
        async with af.Session() as sess:
            value = await sess.run(grad, {images: np.zeros([2, 2, 3, 1])})
    # Rows floor(y * 2/5) = [0, 0, 0, 1, 1], columns x: each cell copied 3 or 2 times.
    np.testing.assert_array_equal(value[0, :, :, 0], [[3, 3, 3], [2, 2, 2]])
    assert value.shape == (2, 2, 3, 1) and value.dtype == np.float64


async def test_float16_gradients_add_in_float16():
    with af.Graph().as_default():
        images = af.placeholder(af.float16, [1, 1, 1, 1])
        resized = af.image.resize_nearest_neighbor(images, [1, 3])
        upstream = af.constant(np.array([2048, 1, 1], np.float16).reshape(1, 1, 3, 1))
        grad, = af.gradients(resized, [images], grad_ys=upstream)
        async with af.Session() as sess:
            value = await sess.run(grad, {images: np.zeros([1, 1, 1, 1], np.float16)})
    # TF1's order in float16: (2048 + 1) rounds to 2048, + 1 again: 2048 (not 2050).
    assert value.dtype == np.float16 and value.reshape(-1).tolist() == [2048.0]


async def test_align_corners_with_half_pixel_centers_fails_when_the_op_runs():
    with af.Graph().as_default():
        resized = af.image.resize_nearest_neighbor(af.zeros([1, 2, 2, 1]), [3, 3],
                                                   align_corners=True, half_pixel_centers=True)
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError,
                               match="ResizeNearestNeighbor.*half_pixel_centers is True, "
                                     "align_corners must be False"):
                await sess.run(resized)


async def test_align_corners_rounds_the_float32_coordinate_as_roundf():
    # 2 rows to 83 with align_corners: row 41's coordinate is float32(41 * float32(1/82)) =
    # 0.49999997, which TF1's roundf takes to 0; floor(0.49999997 + 0.5) would be 1, since
    # the float32 sum rounds up to 1.0. Rows 0-41 copy input row 0 (42 rows), 42-82 row 1.
    with af.Graph().as_default():
        images = af.placeholder(af.float32, [1, 2, 1, 1])
        resized = af.image.resize_nearest_neighbor(images, [83, 1], align_corners=True)
        weights = np.arange(83, dtype=np.float32).reshape(1, 83, 1, 1)
        grad, = af.gradients(af.reduce_sum(resized * weights), [images])
        async with af.Session() as sess:
            value, grad_value = await sess.run(
                [resized, grad], {images: np.array([0, 1], np.float32).reshape(1, 2, 1, 1)})
    assert value.reshape(-1).tolist() == [0.0] * 42 + [1.0] * 41
    assert grad_value.reshape(-1).tolist() == [sum(range(42)), sum(range(42, 83))]


def _nearest_index(in_size, out_size, corners, half):
    """The input index each output index copies (TF1's rule, roundf for align_corners)."""
    scale = np.float32((in_size - 1) / (out_size - 1) if corners and out_size > 1
                       else in_size / out_size)
    where = (np.arange(out_size, dtype=np.float32) + np.float32(0.5 if half else 0)) * scale
    picked = np.floor(where.astype(np.float64) + 0.5) if corners else np.floor(where)
    return np.minimum(picked.astype(np.int64), in_size - 1)


@pytest.mark.parametrize("mode", list(MODES))
async def test_gradient_adds_in_tf1s_order_on_every_scale(mode):
    # float16 sums depend on their order: each input cell's gradient must add its cells row by
    # row, left to right, as an unbuffered scatter in that order does (np.add.at), whether the
    # scale is an integer factor (strided passes), another ratio (gathered passes) or < 1.
    corners, half = MODES[mode]
    rng = np.random.default_rng(5)
    sizes = [((2, 3), (4, 6)), ((3, 2), (7, 5)), ((5, 4), (2, 3)), ((1, 3), (9, 1)),
             ((2, 2), (8, 8)), ((4, 6), (4, 6))]
    with af.Graph().as_default():
        cases = []
        for (h, w), (oh, ow) in sizes:
            images = af.placeholder(af.float16, [2, h, w, 3])
            upstream = (rng.standard_normal((2, oh, ow, 3)) * 300).astype(np.float16)
            resized = af.image.resize_nearest_neighbor(images, [oh, ow], align_corners=corners,
                                                       half_pixel_centers=half)
            grad, = af.gradients(resized, [images], grad_ys=af.constant(upstream))
            cases.append((images, grad, upstream, (h, w)))
        async with af.Session() as sess:
            values = await sess.run([g for _, g, _, _ in cases],
                                    {i: np.zeros(i.shape.as_list(), np.float16)
                                     for i, _, _, _ in cases})
    for (_, _, upstream, (h, w)), value in zip(cases, values):
        _, oh, ow, _ = upstream.shape
        rows = _nearest_index(h, oh, corners, half)
        cols = _nearest_index(w, ow, corners, half)
        want = np.zeros((h * w, 2, 3), np.float16)
        np.add.at(want, (rows[:, None] * w + cols[None, :]).reshape(-1),
                  upstream.transpose(1, 2, 0, 3).reshape(oh * ow, 2, 3))
        np.testing.assert_array_equal(value, want.reshape(h, w, 2, 3).transpose(2, 0, 1, 3))
