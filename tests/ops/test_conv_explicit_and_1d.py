"""TF1's explicit padding for ``tf.nn.conv2d`` and the 1-D pools ``tf.nn.max_pool1d`` /
``avg_pool1d``, against sums worked out by hand and finite differences; TF1's values:
tests/ops/test_tf1_conv_fuzz.py (``_explicit_and_1d``), the layers: tests/test_tf1_layers.py."""
import numpy as np
import pytest

import asyncflow as af
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from gradcheck import check_gradients


def _direct_conv(x, f, pads, strides):
    """NHWC cross-correlation of ``x`` zero-padded by ``pads`` (loops, by definition)."""
    (top, bottom), (left, right) = pads
    x = np.pad(x, [(0, 0), (top, bottom), (left, right), (0, 0)])
    kh, kw, _, out = f.shape
    rows = (x.shape[1] - kh) // strides[0] + 1
    cols = (x.shape[2] - kw) // strides[1] + 1
    y = np.zeros((x.shape[0], rows, cols, out))
    for i in range(rows):
        for j in range(cols):
            window = x[:, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw]
            y[:, i, j] = np.tensordot(window, f, axes=([1, 2, 3], [0, 1, 2]))
    return y


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
async def test_explicit_padding_is_a_zero_padded_valid_convolution(layout):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 6, 3))
    f = rng.standard_normal((2, 3, 3, 4))
    pads = [[1, 2], [3, 0]]
    with af.Graph().as_default():
        if layout == "NHWC":
            y = af.nn.conv2d(x, f, [1, 1, 2, 1], padding=[[0, 0]] + pads + [[0, 0]])
        else:
            y = af.nn.conv2d(x.transpose(0, 3, 1, 2), f, [1, 1, 1, 2],
                             padding=[[0, 0], [0, 0]] + pads, data_format="NCHW")
            y = af.transpose(y, [0, 2, 3, 1])
        # height 5 + 3 - 2 + 1 = 7; width (6 + 3 - 3) // 2 + 1 = 4
        assert y.shape.as_list() == [2, 7, 4, 4]
        async with af.Session() as sess:
            value = await sess.run(y)
    np.testing.assert_allclose(value, _direct_conv(x, f, pads, (1, 2)), rtol=1e-12, atol=1e-12)


async def test_explicit_padding_gradients_match_finite_differences():
    rng = np.random.default_rng(1)
    await check_gradients(
        lambda x, f: af.nn.conv2d(x, f, [1, 2, 1, 1], padding=[[0, 0], [2, 1], [0, 3], [0, 0]]),
        [rng.standard_normal((1, 4, 3, 2)), rng.standard_normal((3, 2, 2, 2))])


def test_explicit_padding_errors_say_what_is_wrong():
    x, f = af.zeros([1, 4, 4, 2]), af.zeros([2, 2, 2, 1])
    with pytest.raises(ValueError, match="nonzero explicit padding in the batch or depth"):
        af.nn.conv2d(x, f, 1, padding=[[0, 0], [1, 1], [1, 1], [0, 1]])
    with pytest.raises(ValueError, match="nonzero explicit padding in the batch or depth"):
        af.nn.conv2d(af.zeros([1, 2, 4, 4]), f, 1, padding=[[0, 0], [1, 0], [1, 1], [1, 1]],
                     data_format="NCHW")
    with pytest.raises(ValueError, match="must be non-negative"):
        af.nn.conv2d(x, f, 1, padding=[[0, 0], [-1, 1], [1, 1], [0, 0]])
    with pytest.raises(ValueError, match="must be of size 4"):
        af.nn.conv2d(x, f, 1, padding=[[1, 1], [1, 1]])
    with pytest.raises(ValueError, match="list/tuple of size 2"):
        af.nn.conv2d(x, f, 1, padding=[0, 1, 1, 0])


ROW = np.array([1.0, 3.0, 2.0, 5.0, 4.0])


@pytest.mark.parametrize("layout", ["NWC", "NCW"])
async def test_1d_pools_by_hand(layout):
    x = ROW.reshape(1, 5, 1) if layout == "NWC" else ROW.reshape(1, 1, 5)
    with af.Graph().as_default():
        pools = [af.nn.max_pool1d(x, 2, 2, "VALID", data_format=layout),
                 af.nn.max_pool1d(x, [2], [2], "SAME", data_format=layout),
                 af.nn.avg_pool1d(x, 2, 2, "SAME", data_format=layout),
                 af.nn.avg_pool1d(x, 3, 1, "VALID", data_format=layout)]
        async with af.Session() as sess:
            values = await sess.run(pools)
    assert [v.reshape(-1).tolist() for v in values] == [
        [3.0, 5.0], [3.0, 5.0, 4.0],
        [2.0, 3.5, 4.0],  # SAME: the last window holds one cell, and averages it alone
        [2.0, 10 / 3, 11 / 3]]
    assert values[0].shape == ((1, 2, 1) if layout == "NWC" else (1, 1, 2))


async def test_1d_pool_gradients_match_finite_differences():
    rng = np.random.default_rng(2)
    x = rng.permutation(24).reshape(2, 6, 2) * 0.5  # distinct: max pooling's kinks far away
    await check_gradients(lambda v: af.nn.max_pool1d(v, 3, 2, "SAME"), [x])
    await check_gradients(lambda v: af.nn.avg_pool1d(v, 2, 1, "VALID", data_format="NCW"), [x])


def test_1d_pool_errors():
    with pytest.raises(ValueError, match="max_pool1d: data_format must be 'NWC' or 'NCW'"):
        af.nn.max_pool1d(af.zeros([1, 4, 1]), 2, 2, "VALID", data_format="NHWC")
    with pytest.raises(ValueError, match="avg_pool1d: input must have rank 3"):
        af.nn.avg_pool1d(af.zeros([1, 4, 4, 1]), 2, 2, "VALID")
    with pytest.raises(ValueError, match="ksize must be an int or a list of 1 or 3"):
        af.nn.max_pool1d(af.zeros([1, 4, 1]), [2, 2], 2, "VALID")


async def test_depthwise_and_separable_convolutions_take_explicit_padding_too():
    # As TF1's (through conv2d): the same as VALID on the zero-padded input, dilated or not.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 5, 6, 2))
    depthwise, pointwise = rng.standard_normal((2, 3, 2, 2)), rng.standard_normal((1, 1, 4, 3))
    padding = [[0, 0], [1, 2], [0, 3], [0, 0]]
    padded = np.pad(x, padding)
    with af.Graph().as_default():
        pairs = [(af.nn.depthwise_conv2d(x, depthwise, [1, 1, 1, 1], padding, rate=rate),
                  af.nn.depthwise_conv2d(padded, depthwise, [1, 1, 1, 1], "VALID", rate=rate))
                 for rate in (1, 2)]
        pairs.append((af.nn.separable_conv2d(x, depthwise, pointwise, [1, 1, 1, 1], padding),
                      af.nn.separable_conv2d(padded, depthwise, pointwise, [1, 1, 1, 1],
                                             "VALID")))
        async with af.Session() as sess:
            values = await sess.run(pairs)
    assert [got.shape for got, _ in values] == [(1, 7, 7, 4), (1, 6, 5, 4), (1, 7, 7, 3)]
    for got, want in values:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
