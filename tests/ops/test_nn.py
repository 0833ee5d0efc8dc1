"""af.nn against numpy and naive-loop references, error cases, and gradients vs finite differences."""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import asyncflow as af
from gradcheck import check_gradients

nn = af.nn


async def run(fetch, feed=None):
    async with af.Session() as sess:
        return await sess.run(fetch, feed)


def floats(low=-10.0, high=10.0):
    return st.floats(low, high, allow_nan=False, width=64)


def np_log_softmax(x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


# -- elementwise activations ------------------------------------------------------------------
ACTIVATIONS = [
    ("relu", lambda x: np.maximum(x, 0)),
    ("relu6", lambda x: np.clip(x, 0, 6)),
    ("elu", lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))),
    ("leaky_relu", lambda x: np.where(x > 0, x, 0.2 * x)),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("tanh", np.tanh),
]


@pytest.mark.parametrize("name,reference", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
                    elements=floats()))
async def test_activation_matches_numpy(name, reference, x):
    with af.Graph().as_default():
        out = await run(getattr(nn, name)(af.constant(x)))
    np.testing.assert_allclose(out, reference(x), rtol=1e-12, atol=1e-12)


async def test_relu_keeps_integer_dtype():
    with af.Graph().as_default():
        out = await run(nn.relu(af.constant([-3, 0, 5])))
    assert out.dtype == np.int32 and out.tolist() == [0, 0, 5]


@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5),
                    elements=floats(-50, 50)), data=st.data())
async def test_softmax_and_log_softmax(x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    with af.Graph().as_default():
        soft, log_soft = await run([nn.softmax(af.constant(x), axis=axis),
                                    nn.log_softmax(af.constant(x), axis=axis)])
    np.testing.assert_allclose(log_soft, np_log_softmax(x, axis), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(soft, np.exp(np_log_softmax(x, axis)), rtol=1e-10, atol=1e-12)


async def test_softmax_is_stable_for_huge_logits():
    with af.Graph().as_default():
        out = await run(nn.softmax(af.constant([[1000.0, 1000.0, -1000.0]])))
    np.testing.assert_allclose(out, [[0.5, 0.5, 0.0]])


@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=4),
                    elements=floats()))
async def test_bias_add_and_l2_loss(x):
    bias = np.arange(x.shape[-1], dtype=np.float64)
    with af.Graph().as_default():
        added, l2 = await run([nn.bias_add(af.constant(x), bias), nn.l2_loss(af.constant(x))])
    np.testing.assert_allclose(added, x + bias)
    np.testing.assert_allclose(l2, np.sum(x ** 2) / 2, rtol=1e-12)


def test_bias_add_shape_errors_name_the_op():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="BiasAdd 'BiasAdd'.*last dimension"):
            nn.bias_add(af.zeros([2, 3]), af.zeros([4]))
        with pytest.raises(ValueError, match="at least 2-D"):
            nn.bias_add(af.zeros([3]), af.zeros([3]))


# -- cross entropies ----------------------------------------------------------------------
@given(logits=hnp.arrays(np.float64, st.tuples(st.integers(0, 4), st.integers(1, 5)),
                         elements=floats(-30, 30)), data=st.data())
async def test_softmax_cross_entropy_matches_numpy(logits, data):
    raw = data.draw(hnp.arrays(np.float64, logits.shape, elements=floats(0.01, 1)))
    labels = raw / raw.sum(axis=-1, keepdims=True)
    with af.Graph().as_default():
        loss = nn.softmax_cross_entropy_with_logits(labels=labels, logits=af.constant(logits))
        assert loss.shape.as_list() == [logits.shape[0]]
        value = await run(loss)
    np.testing.assert_allclose(value, -(labels * np_log_softmax(logits)).sum(-1), rtol=1e-10,
                               atol=1e-10)


@given(logits=hnp.arrays(np.float64, st.tuples(st.integers(0, 4), st.integers(1, 5)),
                         elements=floats(-30, 30)), data=st.data())
async def test_sparse_softmax_cross_entropy_matches_numpy(logits, data):
    dtype = data.draw(st.sampled_from([np.int32, np.int64]))
    labels = np.asarray(data.draw(st.lists(st.integers(0, logits.shape[1] - 1),
                                           min_size=logits.shape[0], max_size=logits.shape[0])),
                        dtype=dtype)
    with af.Graph().as_default():
        value = await run(nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=af.constant(logits)))
    expected = -np_log_softmax(logits)[np.arange(len(labels)), labels]
    np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-10)


async def test_sparse_label_out_of_range_fails_naming_the_op():
    with af.Graph().as_default():
        labels = af.placeholder(af.int32, [2])
        loss = nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=af.zeros([2, 3]), name="xent")
        with pytest.raises(af.errors.InvalidArgumentError) as info:
            await run(loss, {labels: [1, 3]})
    assert "xent" in str(info.value)
    assert "label value of 3" in str(info.value) and "[0, 3)" in str(info.value)


def test_cross_entropy_argument_errors():
    with af.Graph().as_default():
        logits = af.zeros([2, 3])
        with pytest.raises(ValueError, match="named arguments"):
            nn.softmax_cross_entropy_with_logits(logits, logits)
        with pytest.raises(ValueError, match="Rank mismatch"):
            nn.sparse_softmax_cross_entropy_with_logits(labels=af.zeros([2, 1], af.int32),
                                                        logits=logits)
        with pytest.raises(ValueError, match="do not broadcast to logits"):
            nn.softmax_cross_entropy_with_logits(labels=af.zeros([2, 4]), logits=logits)


def test_softmax_cross_entropy_gives_labels_no_gradient():
    with af.Graph().as_default():
        logits, labels = af.zeros([2, 3]), af.zeros([2, 3])
        loss = nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        grad_logits, grad_labels = af.gradients(loss, [logits, labels])
    assert grad_logits is not None and grad_labels is None


@given(x=hnp.arrays(np.float64, hnp.array_shapes(max_dims=2, max_side=4), elements=floats(-200, 200)),
       data=st.data())
async def test_sigmoid_cross_entropy_is_stable(x, data):
    z = data.draw(hnp.arrays(np.float64, x.shape, elements=floats(0, 1)))
    with af.Graph().as_default():
        value = await run(nn.sigmoid_cross_entropy_with_logits(labels=z, logits=af.constant(x)))
    expected = np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))
    assert np.all(np.isfinite(value))
    np.testing.assert_allclose(value, expected, rtol=1e-12, atol=1e-12)


# -- convolution and pooling against naive loops ----------------------------------------------
def geometry(size, kernel, stride, dilation, padding):
    effective = (kernel - 1) * dilation + 1
    if padding == "VALID":
        return (size - effective) // stride + 1, 0
    out = -(-size // stride)
    return out, max((out - 1) * stride + effective - size, 0) // 2


def conv_reference(x, f, strides, padding, dilations=(1, 1)):
    n, h, w, _ = x.shape
    kh, kw, _, depth_out = f.shape
    oh, top = geometry(h, kh, strides[0], dilations[0], padding)
    ow, left = geometry(w, kw, strides[1], dilations[1], padding)
    out = np.zeros((n, oh, ow, depth_out))
    for y in range(oh):
        for xx in range(ow):
            for i in range(kh):
                for j in range(kw):
                    row = y * strides[0] - top + i * dilations[0]
                    col = xx * strides[1] - left + j * dilations[1]
                    if 0 <= row < h and 0 <= col < w:
                        out[:, y, xx, :] += x[:, row, col, :] @ f[i, j]
    return out


def pool_reference(x, ksize, strides, padding, reduce):
    n, h, w, c = x.shape
    oh, top = geometry(h, ksize[0], strides[0], 1, padding)
    ow, left = geometry(w, ksize[1], strides[1], 1, padding)
    out = np.zeros((n, oh, ow, c))
    for y in range(oh):
        for xx in range(ow):
            rows = range(max(y * strides[0] - top, 0), min(y * strides[0] - top + ksize[0], h))
            cols = range(max(xx * strides[1] - left, 0), min(xx * strides[1] - left + ksize[1], w))
            window = x[:, list(rows)][:, :, list(cols)]
            out[:, y, xx, :] = reduce(window.reshape(n, -1, c), axis=1)
    return out


spatial = st.fixed_dictionaries({
    "n": st.integers(1, 2), "h": st.integers(1, 6), "w": st.integers(1, 6),
    "c": st.integers(1, 3), "o": st.integers(1, 3), "kh": st.integers(1, 3),
    "kw": st.integers(1, 3), "sh": st.integers(1, 2), "sw": st.integers(1, 2),
    "dh": st.integers(1, 2), "dw": st.integers(1, 2),
    "padding": st.sampled_from(["SAME", "VALID"]), "seed": st.integers(0, 2 ** 16)})


def fits(p, dilated=True):
    dh, dw = (p["dh"], p["dw"]) if dilated else (1, 1)
    return p["padding"] == "SAME" or ((p["kh"] - 1) * dh < p["h"] and (p["kw"] - 1) * dw < p["w"])


@settings(max_examples=40)
@given(p=spatial)
async def test_conv2d_matches_naive_loops(p):
    assume(fits(p))
    rng = np.random.default_rng(p["seed"])
    x = rng.standard_normal((p["n"], p["h"], p["w"], p["c"]))
    f = rng.standard_normal((p["kh"], p["kw"], p["c"], p["o"]))
    strides, dilations = (p["sh"], p["sw"]), (p["dh"], p["dw"])
    with af.Graph().as_default():
        out = nn.conv2d(af.constant(x), af.constant(f), strides=[1, *strides, 1],
                        padding=p["padding"], dilations=[1, *dilations, 1])
        expected = conv_reference(x, f, strides, p["padding"], dilations)
        assert out.shape.as_list() == list(expected.shape)
        value = await run(out)
    np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-10)


@settings(max_examples=40)
@given(p=spatial)
async def test_pooling_matches_naive_loops(p):
    assume(fits(p, dilated=False))
    x = np.random.default_rng(p["seed"]).standard_normal((p["n"], p["h"], p["w"], p["c"]))
    ksize, strides = (p["kh"], p["kw"]), (p["sh"], p["sw"])
    with af.Graph().as_default():
        maxed, averaged = await run([
            nn.max_pool(af.constant(x), ksize=list(ksize), strides=list(strides), padding=p["padding"]),
            nn.avg_pool(af.constant(x), ksize=[1, *ksize, 1], strides=[1, *strides, 1],
                        padding=p["padding"])])
    np.testing.assert_allclose(maxed, pool_reference(x, ksize, strides, p["padding"], np.max))
    np.testing.assert_allclose(averaged, pool_reference(x, ksize, strides, p["padding"], np.mean),
                               rtol=1e-12)


async def test_same_padding_puts_the_extra_cell_last_as_tf():
    image = np.arange(1, 10, dtype=np.float32).reshape(1, 3, 3, 1)
    with af.Graph().as_default():
        conv, avg = await run([nn.conv2d(image, np.ones((2, 2, 1, 1), np.float32), 2, "SAME"),
                               nn.avg_pool(image, 2, 2, "SAME")])
    assert conv[0, :, :, 0].tolist() == [[12, 9], [15, 9]]
    assert avg[0, :, :, 0].tolist() == [[3, 4.5], [7.5, 9]]


async def test_conv2d_with_unknown_batch_and_empty_batch():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 4, 4, 2])
        y = nn.conv2d(x, af.ones([3, 3, 2, 5]), 1, "SAME")
        assert y.shape.as_list() == [None, 4, 4, 5]
        value = await run(y, {x: np.zeros((0, 4, 4, 2), np.float32)})
    assert value.shape == (0, 4, 4, 5)


def test_conv_and_pool_build_errors():
    with af.Graph().as_default():
        x = af.zeros([1, 4, 4, 3])
        with pytest.raises(ValueError, match="Conv2D 'Conv2D'.*input depth 3"):
            nn.conv2d(x, af.zeros([2, 2, 4, 1]), 1, "SAME")
        with pytest.raises(ValueError, match="Negative dimension size"):
            nn.conv2d(x, af.zeros([5, 5, 3, 1]), 1, "VALID")
        with pytest.raises(ValueError, match="padding must be 'SAME' or 'VALID'"):
            nn.max_pool(x, 2, 2, "FULL")
        with pytest.raises(ValueError, match="batch and depth"):
            nn.conv2d(x, af.zeros([1, 1, 3, 1]), [2, 1, 1, 1], "SAME")
        with pytest.raises(TypeError):
            nn.conv2d(af.zeros([1, 4, 4, 3], af.int32), af.zeros([1, 1, 3, 1], af.int32), 1, "SAME")


async def test_conv2d_runtime_depth_mismatch_names_the_op():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [1, 3, 3, None])
        y = nn.conv2d(x, af.ones([1, 1, 2, 1]), 1, "VALID", name="conv")
        with pytest.raises(af.errors.InvalidArgumentError, match="conv"):
            await run(y, {x: np.zeros((1, 3, 3, 3), np.float32)})


# -- dropout, moments, batch normalization ------------------------------------------------
async def test_dropout_scales_kept_values_and_drops_about_rate():
    x = np.ones((200, 50), np.float32)
    with af.Graph().as_default():
        value = await run(nn.dropout(x, rate=0.25, seed=3))
    kept = value != 0
    np.testing.assert_allclose(value[kept], 1 / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02


async def test_dropout_keep_prob_noise_shape_and_identity():
    with af.Graph().as_default():
        x = af.ones([6, 40])
        assert nn.dropout(x, rate=0.0) is x
        assert nn.dropout(x, keep_prob=1.0) is x
        value = await run(nn.dropout(x, keep_prob=0.5, noise_shape=[1, 40], seed=1))
    assert set(np.unique(value).tolist()) <= {0.0, 2.0}
    assert (value == value[0]).all()  # one mask shared by every row


def test_dropout_argument_errors():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match=r"range \[0, 1\)"):
            nn.dropout(af.ones([2]), rate=1.0)
        with pytest.raises(ValueError, match="exactly one"):
            nn.dropout(af.ones([2]), rate=0.5, keep_prob=0.5)
        with pytest.raises(ValueError, match="floating point"):
            nn.dropout(af.ones([2], af.int32), rate=0.5)


@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3)),
                    elements=floats()),
       axes=st.sampled_from([[0], [0, 1], [1, 2], [-1]]), keepdims=st.booleans())
async def test_moments_and_batch_normalization(x, axes, keepdims):
    with af.Graph().as_default():
        mean, variance = nn.moments(af.constant(x), axes, keepdims=keepdims)
        m_kept, v_kept = nn.moments(af.constant(x), axes, keepdims=True)
        normalized = nn.batch_normalization(af.constant(x), m_kept, v_kept, offset=1.0, scale=2.0,
                                            variance_epsilon=1e-3)
        mean_v, var_v, norm_v = await run([mean, variance, normalized])
    axes = tuple(a % 3 for a in axes)
    np.testing.assert_allclose(mean_v, x.mean(axis=axes, keepdims=keepdims), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(var_v, x.var(axis=axes, keepdims=keepdims), rtol=1e-8, atol=1e-8)
    expected = 2 * (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-3) + 1
    np.testing.assert_allclose(norm_v, expected, rtol=1e-8, atol=1e-8)


# -- gradients vs central finite differences -------------------------------------------------
def away_from(values, points, margin=1e-2):
    for point in points:
        close = np.abs(values - point) < margin
        values = np.where(close, point + margin * np.sign(values - point + 1e-12) * 2, values)
    return values


def distinct(rng, shape):
    """Values at least 0.05 apart, so max-pool windows never tie."""
    return rng.permutation(int(np.prod(shape))).reshape(shape) * 0.05 + rng.uniform(0, 0.01)


def probabilities(rng, shape):
    raw = rng.uniform(0.1, 1, shape)
    return raw / raw.sum(-1, keepdims=True)


GRADIENT_CASES = {
    "relu": (lambda x: nn.relu(x), lambda r, s: [away_from(r.standard_normal(s), [0])]),
    "relu6": (lambda x: nn.relu6(x), lambda r, s: [away_from(4 * r.standard_normal(s), [0, 6])]),
    "elu": (lambda x: nn.elu(x), lambda r, s: [away_from(r.standard_normal(s), [0])]),
    "leaky_relu": (lambda x: nn.leaky_relu(x, 0.3), lambda r, s: [away_from(r.standard_normal(s), [0])]),
    "softmax": (lambda x: nn.softmax(x, axis=1), lambda r, s: [r.standard_normal(s)]),
    "log_softmax": (lambda x: nn.log_softmax(x), lambda r, s: [r.standard_normal(s)]),
    "bias_add": (lambda x, b: nn.bias_add(x, b), lambda r, s: [r.standard_normal(s), r.standard_normal(s[-1:])]),
    "l2_loss": (lambda x: nn.l2_loss(x), lambda r, s: [r.standard_normal(s)]),
    "softmax_xent": (lambda x: nn.softmax_cross_entropy_with_logits(
        labels=probabilities(np.random.default_rng(1), x.shape.as_list()), logits=x),
        lambda r, s: [r.standard_normal(s)]),
    "softmax_xent_v2": (lambda x, z: nn.softmax_cross_entropy_with_logits_v2(labels=z, logits=x),
                        lambda r, s: [r.standard_normal(s), probabilities(r, s)]),
    "sparse_xent": (lambda x: nn.sparse_softmax_cross_entropy_with_logits(
        labels=np.zeros(x.shape.as_list()[:-1], np.int32), logits=x), lambda r, s: [r.standard_normal(s)]),
    "sigmoid_xent": (lambda x, z: nn.sigmoid_cross_entropy_with_logits(labels=z, logits=x),
                     lambda r, s: [3 * r.standard_normal(s), r.uniform(0, 1, s)]),
    "moments": (lambda x: af.add_n(list(nn.moments(x, [0, 1, 2]))),
                lambda r, s: [r.standard_normal(s)]),
    "batch_normalization": (lambda x, m, v: nn.batch_normalization(x, m, v, 0.5, 2.0, 1e-3),
                            lambda r, s: [r.standard_normal(s), r.standard_normal(s[-1:]),
                                          r.uniform(0.5, 2, s[-1:])]),
}


@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
@settings(max_examples=6)
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 3), st.integers(2, 3)),
       seed=st.integers(0, 2 ** 16))
async def test_gradient(name, shape, seed):
    build, make_inputs = GRADIENT_CASES[name]
    await check_gradients(build, make_inputs(np.random.default_rng(seed), shape))


@settings(max_examples=12)
@given(p=spatial)
async def test_conv2d_gradient(p):
    p = {**p, "h": min(p["h"], 4), "w": min(p["w"], 4), "n": 1}
    assume(fits(p))
    rng = np.random.default_rng(p["seed"])
    x = rng.standard_normal((1, p["h"], p["w"], p["c"]))
    f = rng.standard_normal((p["kh"], p["kw"], p["c"], p["o"]))
    await check_gradients(lambda a, b: nn.conv2d(a, b, [p["sh"], p["sw"]], p["padding"],
                                                 dilations=[p["dh"], p["dw"]]), [x, f])


@settings(max_examples=12)
@given(p=spatial)
async def test_pool_gradients(p):
    p = {**p, "h": min(p["h"], 4), "w": min(p["w"], 5)}
    assume(fits(p, dilated=False))
    x = distinct(np.random.default_rng(p["seed"]), (p["n"], p["h"], p["w"], p["c"]))
    args = dict(ksize=[p["kh"], p["kw"]], strides=[p["sh"], p["sw"]], padding=p["padding"])
    await check_gradients(lambda a: nn.max_pool(a, **args), [x])
    await check_gradients(lambda a: nn.avg_pool(a, **args), [x])


async def test_conv2d_transpose_gradient_and_shape():
    rng = np.random.default_rng(0)
    value, f = rng.standard_normal((1, 2, 3, 2)), rng.standard_normal((3, 2, 1, 2))

    def build(a, b):
        out = nn.conv2d_transpose(a, b, [1, 4, 5, 1], [1, 2, 2, 1], "SAME")
        assert out.shape.as_list() == [1, 4, 5, 1]
        return out
    await check_gradients(build, [value, f])


async def test_relu_second_order_gradient():
    x = np.array([[-1.0, 0.5], [2.0, -0.3]])

    def build(a):
        return af.gradients(af.reduce_sum(nn.relu(a) * a), [a])[0]
    await check_gradients(build, [x])


def test_math_builders_are_reexported():
    assert nn.sigmoid is af.sigmoid and nn.tanh is af.tanh
