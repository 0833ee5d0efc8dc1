"""``data_format="NCHW"`` for conv2d, max_pool, avg_pool and their gradients (issue 37):
the same bits as transposing around the NHWC ops (odd sizes, SAME/VALID, strides,
dilations, ties, NaN and inf), static shapes, gradients against finite differences, a
split over intra-op threads against one thread, and bad layouts named."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.kernels import nn_conv
from gradcheck import check_gradients

from test_conv_kernels import CONV_CASES, KernelContext, tied_input  # same folder

TO_NCHW, TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


async def run(fetches):
    async with af.Session() as session:
        return await session.run(fetches)


def conv_case(case, seed=0, dtype=np.float32):
    n, h, w, c, o, kh, kw, sh, sw, dh, dw, padding = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(dtype)
    f = rng.standard_normal((kh, kw, c, o)).astype(dtype)
    return x, f, (sh, sw), (dh, dw), padding


def conv_both_ways(x, f, strides, dilations, padding):
    """``[y, dx, df]`` of the NCHW ops, and of the NHWC ops on transposed data, both NCHW."""
    results = []
    for data_format in ("NCHW", "NHWC"):
        nchw = af.constant(x.transpose(TO_NCHW))
        filters = af.constant(f)
        data = nchw if data_format == "NCHW" else af.transpose(nchw, TO_NHWC)
        y = af.nn.conv2d(data, filters, strides=list(strides), padding=padding,
                         dilations=list(dilations), data_format=data_format)
        if data_format == "NHWC":
            y = af.transpose(y, TO_NCHW)
        weights = af.constant(np.linspace(-1, 1, int(np.prod(y.shape.as_list())),
                                          dtype=x.dtype).reshape(y.shape.as_list()))
        grads = af.gradients(af.reduce_sum(y * weights), [nchw, filters])
        results.append([y] + grads)
    return results


@pytest.mark.parametrize("case", CONV_CASES)
async def test_conv2d_nchw_is_the_nhwc_op_transposed(case):
    x, f, strides, dilations, padding = conv_case(case)
    with af.Graph().as_default():
        (nchw, nhwc) = conv_both_ways(x, f, strides, dilations, padding)
        expected_shape = [x.shape[0], f.shape[3]] + nhwc[0].shape.as_list()[2:]
        assert nchw[0].shape.as_list() == expected_shape
        assert [g.shape.as_list() for g in nchw[1:]] == [list(x.transpose(TO_NCHW).shape),
                                                         list(f.shape)]
        ours, theirs = await run([nchw, nhwc])
    for name, mine, reference in zip(("y", "dx", "dfilter"), ours, theirs):
        np.testing.assert_array_equal(mine, reference, err_msg=name)


def pool_both_ways(x, ksize, strides, padding, pool):
    results = []
    for data_format in ("NCHW", "NHWC"):
        nchw = af.constant(x.transpose(TO_NCHW))
        data = nchw if data_format == "NCHW" else af.transpose(nchw, TO_NHWC)
        y = pool(data, ksize=list(ksize), strides=list(strides), padding=padding,
                 data_format=data_format)
        if data_format == "NHWC":
            y = af.transpose(y, TO_NCHW)
        weights = af.constant(np.arange(int(np.prod(y.shape.as_list())), dtype=x.dtype)
                              .reshape(y.shape.as_list()) % 7 + 1)
        results.append([y, af.gradients(af.reduce_sum(y * weights), [nchw])[0]])
    return results


POOL_CASES = [((2, 2), (2, 2), "VALID"), ((3, 3), (2, 2), "SAME"), ((3, 2), (1, 2), "VALID"),
              ((2, 3), (3, 1), "SAME")]


@pytest.mark.parametrize("pool", [af.nn.max_pool, af.nn.avg_pool], ids=["max", "avg"])
@pytest.mark.parametrize("ksize, strides, padding", POOL_CASES)
async def test_pools_nchw_are_the_nhwc_ops_transposed(pool, ksize, strides, padding):
    rng = np.random.default_rng(4)
    x = tied_input(rng, (3, 9, 7, 5))
    if pool is af.nn.max_pool:
        x.reshape(-1)[[3, 40, 41, 200]] = [np.nan, np.inf, -np.inf, np.nan]
    with af.Graph().as_default():
        (nchw, nhwc) = pool_both_ways(x, ksize, strides, padding, pool)
        assert nchw[0].shape.as_list()[:2] == [3, 5]
        ours, theirs = await run([nchw, nhwc])
    for name, mine, reference in zip(("y", "dx"), ours, theirs):
        np.testing.assert_array_equal(mine, reference, err_msg=name)


@pytest.mark.parametrize("layer", ["conv", "max", "avg"])
async def test_nchw_gradients_against_finite_differences(layer):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 6, 5))  # NCHW
    if layer == "conv":
        f = rng.standard_normal((3, 2, 3, 4))
        await check_gradients(lambda a, b: af.nn.conv2d(
            a, b, strides=[1, 1, 2, 1], padding="SAME", data_format="NCHW"), [x, f])
        await check_gradients(lambda a, b: af.nn.conv2d(
            a, b, strides=1, padding="VALID", dilations=[1, 1, 2, 2], data_format="NCHW"),
            [x, f])
    else:
        pool = af.nn.max_pool if layer == "max" else af.nn.avg_pool
        await check_gradients(lambda a: pool(a, ksize=[1, 1, 3, 2], strides=[1, 1, 2, 2],
                                             padding="SAME", data_format="NCHW"), [x])


@pytest.mark.parametrize("case", CONV_CASES[:4])
def test_nchw_split_over_threads_gives_the_same_bits(case, monkeypatch):
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 512)
    x, f, (sh, sw), (dh, dw), padding = conv_case(case, seed=2)
    x = x.transpose(TO_NCHW).copy()
    attrs = {"strides": (1, 1, sh, sw), "dilations": (1, 1, dh, dw), "padding": padding,
             "data_format": "NCHW"}
    outputs = []
    for threads in (1, 2, 3):
        ctx = KernelContext(attrs, threads)
        (y,) = nn_conv._conv2d(ctx, x, f)
        grad = np.random.default_rng(3).standard_normal(y.shape).astype(np.float32)
        (dx,) = nn_conv._conv2d_backprop_input(ctx, np.array(x.shape, np.int32), f, grad)
        (df,) = nn_conv._conv2d_backprop_filter(ctx, x, np.array(f.shape, np.int32), grad)
        (pooled,) = nn_conv._max_pool(KernelContext(
            {"ksize": (1, 1, 2, 2), "strides": (1, 1, 2, 2), "padding": "SAME",
             "data_format": "NCHW"}, threads), x)
        outputs.append((y, dx, df, pooled))
    assert outputs[0][0].shape[1] == f.shape[3] and outputs[0][1].shape == x.shape
    for other in outputs[1:]:
        for mine, reference in zip(other[:2] + other[3:], outputs[0][:2] + outputs[0][3:]):
            np.testing.assert_array_equal(mine, reference)
        # The filter gradient reduces over chunks: the same chunks for every thread count
        # here (many chunks), so the same bits as well.
        np.testing.assert_array_equal(other[2], outputs[0][2])


def test_bad_layouts_and_strides_are_named():
    with af.Graph().as_default():
        x = af.constant(np.zeros((1, 3, 8, 8), np.float32))
        f = af.constant(np.zeros((3, 3, 3, 2), np.float32))
        with pytest.raises(ValueError, match="conv2d: data_format 'NCWH'"):
            af.nn.conv2d(x, f, strides=1, padding="SAME", data_format="NCWH")
        with pytest.raises(ValueError, match="conv2d: strides .* batch and depth.*NCHW"):
            af.nn.conv2d(x, f, strides=[1, 2, 2, 1], padding="SAME", data_format="NCHW")
        with pytest.raises(ValueError, match="input depth 8 does not match"):
            af.nn.conv2d(x, f, strides=1, padding="SAME")  # NCHW data read as NHWC
        with pytest.raises(ValueError, match="max_pool: ksize"):
            af.nn.max_pool(x, ksize=[1, 2, 2, 1], strides=[1, 1, 2, 2], padding="SAME",
                           data_format="NCHW")


async def test_an_nchw_conv_is_not_fused_with_an_nhwc_bias_add():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    f = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    bias = np.arange(4, dtype=np.float32)  # over the last dim: W in NCHW
    with af.Graph().as_default():
        y = af.nn.relu(af.nn.bias_add(af.nn.conv2d(af.constant(x), af.constant(f), strides=1,
                                                   padding="SAME", data_format="NCHW"),
                                      af.constant(bias)))
        unfused = af.nn.conv2d(af.constant(x), af.constant(f), strides=1, padding="SAME",
                               data_format="NCHW")
        value, plain = await run([y, unfused])
    np.testing.assert_allclose(value, np.maximum(plain + bias, 0), rtol=1e-6)


async def test_bias_add_nchw_adds_along_dimension_1_and_sums_its_gradient():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)  # NCHW
    f = rng.standard_normal((3, 3, 4, 2)).astype(np.float32)
    bias = np.array([0.5, -1.0], np.float32)
    with af.Graph().as_default():
        data, b = af.constant(x), af.constant(bias)
        nchw = af.nn.relu(af.nn.bias_add(af.nn.conv2d(data, af.constant(f), strides=1,
                                                      padding="SAME", data_format="NCHW"),
                                         b, data_format="NCHW"))
        nhwc = af.transpose(af.nn.relu(af.nn.bias_add(af.nn.conv2d(
            af.transpose(data, TO_NHWC), af.constant(f), strides=1, padding="SAME"), b)),
            TO_NCHW)
        weights = af.constant(rng.standard_normal((3, 2, 5, 6)).astype(np.float32))
        grads = [af.gradients(af.reduce_sum(y * weights), [data, b]) for y in (nchw, nhwc)]
        assert nchw.shape.as_list() == [3, 2, 5, 6] and grads[0][1].shape.as_list() == [2]
        ours, theirs, (g_ours, g_theirs) = await run([nchw, nhwc, grads])
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    for mine, reference in zip(g_ours, g_theirs):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-5)
    await check_gradients(lambda v, c: af.nn.bias_add(v, c, data_format="NCHW"),
                          [rng.standard_normal((2, 3, 4)), rng.standard_normal(3)])
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="bias has 2 elements but the dimension 1"):
            af.nn.bias_add(af.constant(x), af.constant(bias), data_format="NCHW")
        # A value known to be rank 2 is refused in NCHW (TF1's shape function); fed at run
        # time, its channels are last (TF's kernel: tests/ops/test_nn_tf1_values.py).
        with pytest.raises(ValueError, match="NCHW needs a value of rank at least 3"):
            af.nn.bias_add(af.constant(np.zeros((4, 2), np.float32)), af.constant(bias),
                           data_format="NCHW")


async def test_layers_channels_first_match_channels_last():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)  # NCHW
    outputs = {}
    for data_format in ("channels_first", "channels_last"):
        with af.Graph().as_default():
            data = af.constant(x if data_format == "channels_first" else x.transpose(TO_NHWC))
            init = af.constant_initializer(np.linspace(-1, 1, 3 * 3 * 3 * 4).reshape(3, 3, 3, 4))
            y = af.layers.conv2d(data, 4, 3, strides=(1, 2), padding="same",
                                 data_format=data_format, kernel_initializer=init,
                                 bias_initializer=af.constant_initializer([0.1, 0.2, 0.3, 0.4]),
                                 activation=af.nn.relu)
            y = af.layers.max_pooling2d(y, 2, 2, data_format=data_format)
            flat = af.layers.flatten(y, data_format=data_format)
            (grad,) = af.gradients(af.reduce_sum(flat * flat), [data])
            async with af.Session() as session:
                await session.run(af.global_variables_initializer())
                outputs[data_format] = await session.run([y, flat, grad])
    first, last = outputs["channels_first"], outputs["channels_last"]
    np.testing.assert_allclose(first[0], last[0].transpose(TO_NCHW), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(first[1], last[1], rtol=1e-6, atol=1e-6)  # same feature order
    np.testing.assert_allclose(first[2], last[2].transpose(TO_NCHW), rtol=1e-5, atol=1e-5)
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="conv2d: data_format must be"):
            af.layers.conv2d(af.constant(x), 4, 3, data_format="NWHC")
