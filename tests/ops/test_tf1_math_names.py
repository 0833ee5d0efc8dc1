"""Issue 36's TF1 math names: ``tf.norm``/``tf.linalg.norm``, ``tf.math.reduce_euclidean_norm``,
``tf.cumsum``/``tf.cumprod`` (and ``tf.math.*``), and ``tf.math``/``tf.log_sigmoid`` aliases:
values against numpy (always) and TF1 (when TensorFlow is installed), gradients against finite
differences, and bad input named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import check_gradients
from tf1_reference import compare_groups, tf1_run

X = np.random.default_rng(3).standard_normal((3, 4, 5))

# (name, builder arguments, numpy reference)
NORMS = [
    ("default", {}, lambda x: np.linalg.norm(x.reshape(-1))),
    ("axis_last", {"axis": -1}, lambda x: np.linalg.norm(x, axis=-1)),
    ("ord1_axis0_keep", {"ord": 1, "axis": 0, "keepdims": True},
     lambda x: np.abs(x).sum(0, keepdims=True)),
    ("inf_axis1", {"ord": np.inf, "axis": 1}, lambda x: np.abs(x).max(1)),
    ("p3_axis2", {"ord": 3, "axis": 2}, lambda x: (np.abs(x) ** 3).sum(2) ** (1 / 3)),
    ("p_half_all", {"ord": 0.5}, lambda x: np.sqrt(np.abs(x)).sum() ** 2),
    ("two_axis1", {"ord": 2, "axis": 1}, lambda x: np.linalg.norm(x, axis=1)),
    ("fro_pair", {"ord": "fro", "axis": (1, 2)},
     lambda x: np.linalg.norm(x, "fro", axis=(1, 2))),
    ("euclid_pair_keep", {"axis": [0, 2], "keepdims": True},
     lambda x: np.sqrt((x * x).sum((0, 2), keepdims=True))),
    ("mat1_pair", {"ord": 1, "axis": (-2, -1)}, lambda x: np.linalg.norm(x, 1, axis=(-2, -1))),
    ("matinf_pair", {"ord": np.inf, "axis": (2, 1)},
     lambda x: np.linalg.norm(x, np.inf, axis=(2, 1))),
]
CUMULATIVE = [(op, axis, exclusive, reverse) for op in ("cumsum", "cumprod")
              for axis, exclusive, reverse in [(0, False, False), (1, True, False),
                                               (-1, False, True), (2, True, True)]]


def _cumulative_np(op, x, axis, exclusive, reverse):
    running, identity = (np.cumsum, 0) if op == "cumsum" else (np.cumprod, 1)
    if reverse:
        x = np.flip(x, axis)
    if exclusive:
        x = np.moveaxis(x, axis, 0)
        x = np.moveaxis(np.concatenate([np.full_like(x[:1], identity), x[:-1]]), 0, axis)
    out = running(x, axis=axis)
    return np.flip(out, axis) if reverse else out


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


@pytest.mark.parametrize("name,kwargs,reference", NORMS, ids=[n[0] for n in NORMS])
async def test_norm_values_and_shapes_against_numpy(name, kwargs, reference):
    with af.Graph().as_default():
        out = af.norm(af.constant(X), **kwargs)
        value = await _run(out)
    expected = reference(X)
    assert out.shape.as_list() == list(np.shape(expected))
    np.testing.assert_allclose(value, expected, rtol=1e-12)


async def test_norm_names_and_dtypes():
    x32 = X.astype(np.float32)
    ints = np.array([[3, -4], [-5, 12]], np.int32)
    with af.Graph().as_default():
        outs = [tf.linalg.norm(x32, axis=0), tf.norm(x32, keep_dims=True),
                tf.math.reduce_euclidean_norm(x32, axis=[0, 2]),
                tf.math.reduce_euclidean_norm(ints, 1, keepdims=True),
                tf.norm(ints, ord=1, axis=1)]
        values = await _run(outs)
    assert [v.dtype for v in values] == [np.float32] * 3 + [np.int32] * 2
    np.testing.assert_allclose(values[0], np.linalg.norm(x32, axis=0), rtol=1e-6)
    assert values[1].shape == (1, 1, 1)
    np.testing.assert_allclose(values[2], np.sqrt((X * X).sum((0, 2))), rtol=1e-6)
    np.testing.assert_array_equal(values[3], [[5], [13]])
    np.testing.assert_array_equal(values[4], [7, 17])


@pytest.mark.parametrize("name,kwargs,reference", NORMS[:9], ids=[n[0] for n in NORMS[:9]])
async def test_norm_gradients(name, kwargs, reference):
    # Away from ties (max) and zeros (|x|): finite differences are exact there.
    x = np.random.default_rng(1).uniform(0.5, 2.0, (3, 4, 5)) * np.sign(X)
    await check_gradients(lambda t: af.norm(t, **kwargs), [x])


async def test_reduce_euclidean_norm_gradient():
    await check_gradients(lambda t: tf.math.reduce_euclidean_norm(t, axis=1), [X])


def test_norm_bad_arguments_are_named():
    with af.Graph().as_default():
        c = af.constant(X)
        for kwargs, pattern in [({"ord": "fro"}, "supported vector norm"),
                                ({"ord": -1}, "supported vector norm"),
                                ({"ord": 0}, "supported vector norm"),
                                ({"ord": 3, "axis": (0, 1)}, "supported matrix norm"),
                                ({"ord": 2, "axis": (0, 1)}, "spectral"),
                                ({"axis": (1, 1)}, "2 unique integers"),
                                ({"axis": (0, 1, 2)}, "2 unique integers"),
                                ({"axis": 1.5}, "2 unique integers")]:
            with pytest.raises(ValueError, match=f"norm: .*{pattern}"):
                af.norm(c, **kwargs)
        with pytest.raises(TypeError, match="norm: .*int32"):
            af.norm(af.constant([1, 2]))
        with pytest.raises(ValueError, match="out of range"):
            af.norm(c, axis=3)
        with pytest.raises(TypeError, match="reduce_euclidean_norm: .*bool"):
            tf.math.reduce_euclidean_norm(af.constant([True]))


@pytest.mark.parametrize("op,axis,exclusive,reverse", CUMULATIVE)
async def test_cumulative_values_against_numpy(op, axis, exclusive, reverse):
    with af.Graph().as_default():
        out = getattr(af, op)(af.constant(X), axis, exclusive=exclusive, reverse=reverse)
        ints = getattr(tf.math, op)(af.constant(np.arange(1, 25, dtype=np.int64).reshape(
            2, 3, 4)), axis=af.constant(axis), exclusive=exclusive, reverse=reverse)
        value, int_value = await _run([out, ints])
    assert out.shape.as_list() == [3, 4, 5] and value.dtype == np.float64
    np.testing.assert_allclose(value, _cumulative_np(op, X, axis, exclusive, reverse),
                               rtol=1e-12, atol=1e-15)
    assert int_value.dtype == np.int64
    np.testing.assert_array_equal(int_value, _cumulative_np(
        op, np.arange(1, 25).reshape(2, 3, 4), axis, exclusive, reverse))


@pytest.mark.parametrize("op,axis,exclusive,reverse", CUMULATIVE)
async def test_cumulative_gradients(op, axis, exclusive, reverse):
    x = np.random.default_rng(2).uniform(0.5, 1.5, (2, 3, 4))
    await check_gradients(
        lambda t: getattr(af, op)(t, axis, exclusive=exclusive, reverse=reverse), [x])


async def test_cumulative_unknown_shape_and_float32():
    with af.Graph().as_default():
        p = af.placeholder(af.float32, None)
        out = af.cumsum(p, axis=1, reverse=True)
        value = await _run(out, {p: X[0].astype(np.float32)})
    assert value.dtype == np.float32
    np.testing.assert_allclose(value, np.flip(np.cumsum(np.flip(X[0], 1), 1), 1), atol=2e-6)


def test_cumulative_bad_input_is_named():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Cumsum .*at least 1 dimension"):
            af.cumsum(af.constant(1.0))
        with pytest.raises(ValueError, match="Cumprod .*axis 3 is out of range"):
            af.cumprod(af.constant(X), 3)
        with pytest.raises(TypeError, match="Cumsum.*string"):
            af.cumsum(af.constant(["a"]))
        with pytest.raises(TypeError, match="Cumsum.*bool"):
            af.cumsum(af.constant([True]))
        with pytest.raises(TypeError, match="cumprod: axis must be a scalar integer"):
            af.cumprod(af.constant(X), 1.0)
        with pytest.raises(ValueError, match="cumsum: axis must be a constant"):
            af.cumsum(af.constant(X), af.placeholder(af.int32, []))


async def test_cumulative_axis_out_of_range_at_run_time_names_the_op():
    with af.Graph().as_default():
        p = af.placeholder(af.float64, None)
        out = af.cumsum(p, axis=2, name="running")
        with pytest.raises(af.errors.InvalidArgumentError, match="running"):
            await _run(out, {p: X[0]})


async def test_compat_aliases_are_the_af_ops():
    x = X[0].astype(np.float32)
    with af.Graph().as_default():
        c = tf.constant(x)
        outs = [tf.math.softplus(c), tf.math.log_sigmoid(c), tf.log_sigmoid(c),
                tf.math.top_k(c, 2)[0], tf.math.cumsum(c, 1), tf.math.exp(c),
                tf.nn.softplus(c), tf.nn.log_sigmoid(c), tf.nn.top_k(c, 2)[0]]
        values = await _run(outs)
    np.testing.assert_array_equal(values[0], values[6])
    np.testing.assert_array_equal(values[1], values[7])
    np.testing.assert_array_equal(values[2], values[7])
    np.testing.assert_array_equal(values[3], values[8])
    np.testing.assert_allclose(values[0], np.logaddexp(0, x), rtol=1e-6)
    np.testing.assert_allclose(values[3], -np.sort(-x, 1)[:, :2])
    np.testing.assert_allclose(values[4], np.cumsum(x, 1), rtol=1e-6)
    np.testing.assert_allclose(values[5], np.exp(x), rtol=1e-6)


TF_SNIPPET = """
x = tf.constant(inputs["x"])
norms = [tf.norm(x), tf.norm(x, axis=-1), tf.norm(x, ord=1, axis=0, keepdims=True),
         tf.norm(x, ord=np.inf, axis=1), tf.norm(x, ord=3, axis=2), tf.norm(x, ord=0.5),
         tf.norm(x, ord="fro", axis=(1, 2)), tf.linalg.norm(x, axis=[0, 2], keepdims=True),
         tf.norm(x, ord=1, axis=(-2, -1)), tf.norm(x, ord=np.inf, axis=(2, 1)),
         tf.math.reduce_euclidean_norm(x, axis=1),
         tf.math.reduce_euclidean_norm(inputs["ints"], axis=1, keepdims=True)]
cums = [f(x, axis, exclusive=e, reverse=r) for f in (tf.cumsum, tf.cumprod)
        for axis, e, r in [(0, False, False), (1, True, False), (-1, False, True),
                           (2, True, True)]]
w = tf.constant(inputs["w"])
grads = [tf.gradients(tf.reduce_sum(tf.sin(o) * w[..., :1] if o.shape.ndims == 3
                                    else tf.sin(o)), x)[0] for o in cums + norms[:11]]
aliases = [tf.math.softplus(x), tf.log_sigmoid(x), tf.math.log_sigmoid(x),
           tf.math.top_k(x, 2)[0], tf.math.cumsum(x, 1), tf.math.cumprod(x, 1)]
with tf.Session() as sess:
    outputs["norms"], outputs["cums"], outputs["grads"], outputs["aliases"] = sess.run(
        [norms, cums, grads, aliases])
"""


async def test_against_tf1(tmp_path):
    rng = np.random.default_rng(9)
    x = rng.uniform(0.5, 1.5, (3, 4, 5)) * np.sign(rng.standard_normal((3, 4, 5)))
    ints = np.array([[3, -4], [-5, 12], [7, 1]], np.int32)
    w = rng.standard_normal((3, 4, 5))
    theirs = tf1_run(TF_SNIPPET, tmp_path, x=x, ints=ints, w=w)
    with af.Graph().as_default():
        # The same TF1 program, unchanged, built on asyncflow (up to its Session).
        g = {"tf": tf, "np": np, "inputs": {"x": x, "ints": ints, "w": w}}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)
        values = await _run([g["norms"], g["cums"], g["grads"], g["aliases"]])
    compare_groups(values, theirs, ("norms", "cums", "grads", "aliases"), rtol=1e-10,
                   atol=1e-12)
