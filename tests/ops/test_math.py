"""Math ops against numpy: hypothesis draws broadcastable shapes and values."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import asyncflow as af


async def run(fetch, feed=None):
    async with af.Session() as sess:
        return await sess.run(fetch, feed)


def floats(dtype=np.float64, low=-10, high=10):
    width = 64 if dtype == np.float64 else 32
    low, high = (float(np.dtype(dtype).type(v)) for v in (low, high))
    return st.floats(low, high, allow_nan=False, width=width)


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
UNARY = [
    ("negative", np.negative, None), ("abs", np.abs, None), ("square", np.square, None),
    ("sqrt", np.sqrt, (0.0, 10.0)), ("exp", np.exp, None), ("log", np.log, (0.01, 10.0)),
    ("tanh", np.tanh, None), ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), None),
    ("log1p", np.log1p, (0.0, 10.0)), ("sign", np.sign, None), ("floor", np.floor, None),
    ("ceil", np.ceil, None), ("reciprocal", np.reciprocal, (0.5, 10.0)),
    ("rsqrt", lambda x: 1 / np.sqrt(x), (0.5, 10.0)), ("sin", np.sin, None), ("cos", np.cos, None),
]


@pytest.mark.parametrize("name,reference,domain", UNARY, ids=[u[0] for u in UNARY])
@given(data=st.data())
async def test_unary(name, reference, domain, data):
    low, high = domain or (-5.0, 5.0)
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    x = data.draw(hnp.arrays(dtype, shapes, elements=floats(dtype, low, high)))
    with af.Graph().as_default():
        p = af.placeholder(af.as_dtype(dtype), x.shape)
        out = await run(getattr(af, name)(p), {p: x})
    expected = reference(x)
    assert np.asarray(out).dtype == dtype
    np.testing.assert_allclose(out, expected, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)


BINARY = [
    ("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
    ("maximum", np.maximum), ("minimum", np.minimum), ("squared_difference", lambda a, b: (a - b) ** 2),
]
COMPARE = [("equal", np.equal), ("not_equal", np.not_equal), ("less", np.less),
           ("less_equal", np.less_equal), ("greater", np.greater), ("greater_equal", np.greater_equal)]


@pytest.mark.parametrize("name,reference", BINARY + COMPARE, ids=[b[0] for b in BINARY + COMPARE])
@given(data=st.data())
async def test_binary_broadcasting(name, reference, data):
    dtype = data.draw(st.sampled_from([np.float32, np.int32, np.int64, np.float64]))
    a_shape, b_shape = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4)).input_shapes
    elements = st.integers(-50, 50) if np.dtype(dtype).kind == "i" else floats(dtype, -50, 50)
    a = data.draw(hnp.arrays(dtype, a_shape, elements=elements))
    b = data.draw(hnp.arrays(dtype, b_shape, elements=elements))
    with af.Graph().as_default():
        pa = af.placeholder(af.as_dtype(dtype), a.shape)
        pb = af.placeholder(af.as_dtype(dtype), b.shape)
        t = getattr(af, name)(pa, pb)
        assert t.shape.as_list() == list(np.broadcast_shapes(a.shape, b.shape))
        out = await run(t, {pa: a, pb: b})
    expected = reference(a, b)
    assert np.asarray(out).dtype == expected.dtype
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@given(data=st.data())
async def test_division_family(data):
    a = data.draw(hnp.arrays(np.int32, (5,), elements=st.integers(-100, 100)))
    b = data.draw(hnp.arrays(np.int32, (5,), elements=st.integers(1, 20) | st.integers(-20, -1)))
    with af.Graph().as_default():
        pa, pb = af.constant(a), af.constant(b)
        out = await run([pa / pb, pa // pb, pa % pb, af.divide(pa, pb)])
    np.testing.assert_allclose(out[0], a / b)
    assert out[0].dtype == np.float64  # TF1 truediv of int32 gives float64
    np.testing.assert_array_equal(out[1], a // b)
    np.testing.assert_array_equal(out[2], a % b)


async def test_pow_and_logic():
    with af.Graph().as_default():
        x = af.constant([1.0, 2.0, 3.0])
        b = af.constant([True, False, True])
        c = af.constant([True, True, False])
        out = await run([x ** 2.0, 2.0 ** x, b & c, b | c, ~b, af.logical_xor(b, c)])
    np.testing.assert_allclose(out[0], [1, 4, 9])
    np.testing.assert_allclose(out[1], [2, 4, 8])
    np.testing.assert_array_equal(out[2], [True, False, False])
    np.testing.assert_array_equal(out[3], [True, True, True])
    np.testing.assert_array_equal(out[4], [False, True, False])
    np.testing.assert_array_equal(out[5], [False, True, True])


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
@given(m=st.integers(0, 4), k=st.integers(1, 4), n=st.integers(0, 4), batch=st.sampled_from([(), (2,)]))
async def test_matmul(transpose_a, transpose_b, m, k, n, batch):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(batch + ((k, m) if transpose_a else (m, k))).astype(np.float32)
    b = rng.standard_normal(batch + ((n, k) if transpose_b else (k, n))).astype(np.float32)
    with af.Graph().as_default():
        t = af.matmul(af.constant(a), af.constant(b), transpose_a=transpose_a, transpose_b=transpose_b)
        assert t.shape.as_list() == list(batch) + [m, n]
        out = await run(t)
    ea = np.swapaxes(a, -1, -2) if transpose_a else a
    eb = np.swapaxes(b, -1, -2) if transpose_b else b
    np.testing.assert_allclose(out, ea @ eb, rtol=1e-5, atol=1e-5)


REDUCE = [("reduce_sum", np.sum), ("reduce_mean", np.mean), ("reduce_max", np.max),
          ("reduce_min", np.min), ("reduce_prod", np.prod)]


@pytest.mark.parametrize("name,reference", REDUCE, ids=[r[0] for r in REDUCE])
@given(data=st.data())
async def test_reductions(name, reference, data):
    x = data.draw(hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4),
                             elements=floats(np.float64, -3, 3)))
    keepdims = data.draw(st.booleans())
    axis = data.draw(st.none() | (st.integers(-x.ndim, x.ndim - 1) if x.ndim else st.none()))
    with af.Graph().as_default():
        p = af.placeholder(af.float64, x.shape)
        t = getattr(af, name)(p, axis=axis, keepdims=keepdims)
        out = await run(t, {p: x})
    expected = reference(x, axis=axis, keepdims=keepdims)
    assert t.shape.as_list() == list(np.shape(expected))
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)


async def test_reduction_edge_cases():
    with af.Graph().as_default():
        empty = af.constant(np.zeros((0, 3), np.float32))
        ints = af.constant(np.array([[1, 2], [3, 4]], np.int32))
        out = await run([af.reduce_sum(empty, axis=0), af.reduce_max(empty, axis=0),
                         af.reduce_sum(ints), af.reduce_mean(ints, axis=1), af.reduce_sum(ints, axis=[0, -1])])
    np.testing.assert_array_equal(out[0], [0, 0, 0])
    assert np.all(np.isneginf(out[1]))
    assert out[2] == 10 and out[2].dtype == np.int32
    np.testing.assert_array_equal(out[3], [1, 3])  # integer mean truncates
    assert out[4] == 10
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="reduce_sum: axis 2 is out of range"):
            af.reduce_sum(af.constant([[1.0]]), axis=2)


async def test_argmax_cast_where_add_n():
    x = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 7.0]], np.float32)
    with af.Graph().as_default():
        c = af.constant(x)
        cond = c > 1.5
        out = await run([af.argmax(c, 1), af.argmin(c, 0), af.cast(c, af.int32), af.where(cond, c, -c),
                         af.where(cond), af.add_n([c, c, c]), af.cast(c, af.bfloat16)])
    np.testing.assert_array_equal(out[0], [1, 0])
    assert out[0].dtype == np.int64
    np.testing.assert_array_equal(out[1], [0, 1, 0])
    np.testing.assert_array_equal(out[2], x.astype(np.int32))
    np.testing.assert_array_equal(out[3], np.where(x > 1.5, x, -x))
    np.testing.assert_array_equal(out[4], np.argwhere(x > 1.5))
    np.testing.assert_array_equal(out[5], 3 * x)
    assert str(out[6].dtype) == "bfloat16"


async def test_dtype_restrictions():
    with af.Graph().as_default():
        with pytest.raises(TypeError, match="Sqrt"):
            af.sqrt(af.constant([1, 2]))
        with pytest.raises(TypeError, match="LogicalAnd"):
            af.logical_and(af.constant([1.0]), af.constant([2.0]))
        with pytest.raises(TypeError, match="cast"):
            af.cast(af.constant([b"x"]), af.float32)
