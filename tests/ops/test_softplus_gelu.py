"""Softplus, log_sigmoid and gelu (issue 37's stable fast forms): values against float64
references and the naive forms, large |x|, inf and NaN, gradients against finite
differences, and TF's own ops (``tf.nn.softplus``, ``tf.log_sigmoid``, ``tf.nn.gelu``)."""
import math

import numpy as np
import pytest

import asyncflow as af
from gradcheck import check_gradients
from tests.tf1_reference import tf1_run

SPECIAL = [-1e4, -100.0, -88.0, -30.0, -17.5, -5.0, -1.0, -1e-8, -0.0, 0.0, 1e-8, 0.5, 3.0,
           17.5, 30.0, 100.0, 1e4, np.inf, -np.inf, np.nan]


async def run(fetch):
    async with af.Session() as session:
        return await session.run(fetch)


def _inputs(dtype, count=480):
    rng = np.random.default_rng(7)
    return np.concatenate([np.array(SPECIAL), rng.standard_normal(count) * 12]).astype(dtype)


def _softplus64(x):
    with np.errstate(invalid="ignore"):
        return np.logaddexp(0.0, x.astype(np.float64))


def _gelu64(x, approximate):
    x = x.astype(np.float64)
    if approximate:
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))
        with np.errstate(over="ignore", invalid="ignore"):
            return x / (1 + np.exp(-2 * u))
    with np.errstate(invalid="ignore"):
        return x * 0.5 * np.frompyfunc(math.erfc, 1, 1)(-x / math.sqrt(2)).astype(np.float64)


def _relative_error(value, exact, dtype):
    """The largest relative error where the exact result is a normal number of ``dtype``."""
    value = value.astype(np.float64)
    normal = np.isfinite(exact) & (np.abs(exact) > np.finfo(dtype).tiny * 4)
    return float((np.abs(value[normal] - exact[normal]) / np.abs(exact[normal])).max())


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
async def test_softplus_and_log_sigmoid_keep_relative_precision(dtype):
    x = _inputs(dtype)
    with af.Graph().as_default():
        c = af.constant(x)
        soft, logsig = await run([af.nn.softplus(c), af.nn.log_sigmoid(c)])
    assert soft.dtype == dtype and logsig.dtype == dtype
    eps = np.finfo(dtype).eps
    assert _relative_error(soft, _softplus64(x), dtype) <= 4 * eps
    assert _relative_error(logsig, -_softplus64(-x), dtype) <= 4 * eps
    at = {v: i for i, v in enumerate(SPECIAL) if not np.isnan(v)}
    assert soft[at[np.inf]] == np.inf and soft[at[-np.inf]] == 0 and np.isnan(soft[-481])
    assert logsig[at[np.inf]] == 0 and logsig[at[-np.inf]] == -np.inf
    # Tiny results (exp(-100) in float64) keep their digits: the naive log(1 + exp(x)) is 0.
    if dtype == np.float64:
        assert soft[at[-100.0]] == pytest.approx(math.exp(-100), rel=1e-15)


async def test_softplus_matches_the_naive_form_where_it_is_accurate():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((37, 29)) * 4).astype(np.float32)
    with af.Graph().as_default():
        value, scalar = await run([af.nn.softplus(af.constant(x)),
                                   af.nn.softplus(af.constant(np.float32(2.0)))])
    np.testing.assert_allclose(value, np.logaddexp(np.float32(0), x), rtol=4e-7, atol=0)
    assert scalar.shape == () and scalar == pytest.approx(math.log1p(math.exp(2.0)), rel=1e-7)


@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
async def test_gelu_values_everywhere(dtype, approximate):
    x = _inputs(dtype, count=240 if dtype == np.float64 else 480)
    with af.Graph().as_default():
        value = await run(af.nn.gelu(af.constant(x), approximate=approximate))
    assert value.dtype == dtype and value.shape == x.shape
    exact = _gelu64(x, approximate)
    # Within a few ulps even where 1 + erf(x) would cancel (x < -5: gelu(-30) ~ 1e-197).
    # The tanh form's sigmoid(2u) is ill-conditioned in float64 itself: an ulp of u moves
    # it by |2u| ulps, so that much is allowed on top.
    eps = np.finfo(dtype).eps
    if approximate and dtype == np.float64:
        u = np.abs(math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x)))
        normal = np.isfinite(exact) & (np.abs(exact) > np.finfo(dtype).tiny * 4)
        error = np.abs(value[normal] - exact[normal]) / np.abs(exact[normal])
        assert (error <= 8 * eps * (1 + 2 * u[normal])).all()
    else:
        assert _relative_error(value, exact, dtype) <= 8 * eps
    at = {v: i for i, v in enumerate(SPECIAL) if not np.isnan(v)}
    assert value[at[np.inf]] == np.inf and value[at[1e4]] == 1e4
    assert value[at[-1e4]] == 0 and np.isnan(value[len(SPECIAL) - 1])


def _smooth_point(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape) * 3


@pytest.mark.parametrize("build", [
    af.nn.softplus, af.nn.log_sigmoid, af.nn.gelu,
    lambda a: af.nn.gelu(a, approximate=True),
], ids=["softplus", "log_sigmoid", "gelu", "gelu_tanh"])
async def test_gradients_against_finite_differences(build):
    await check_gradients(build, [_smooth_point((4, 5), 11)])


async def test_gradients_at_large_inputs_are_finite_limits():
    x = np.array([-1e4, -60.0, 60.0, 1e4], np.float32)
    with af.Graph().as_default():
        c = af.constant(x)
        grads = await run([af.gradients(af.reduce_sum(f(c)), [c])[0] for f in (
            af.nn.softplus, af.nn.log_sigmoid, af.nn.gelu,
            lambda a: af.nn.gelu(a, approximate=True))])
    tail = math.exp(-60)  # sigmoid(-60), as float32 keeps it
    np.testing.assert_allclose(grads[0], [0, tail, 1, 1], rtol=1e-6, atol=0)
    np.testing.assert_allclose(grads[1], [1, 1, tail, 0], rtol=1e-6, atol=0)
    # gelu's derivative vanishes far faster: Phi(-60) and 60 * phi(60) underflow float32.
    np.testing.assert_array_equal(grads[2], [0, 0, 1, 1])
    np.testing.assert_array_equal(grads[3], [0, 0, 1, 1])


def test_bad_dtypes_are_named():
    with af.Graph().as_default():
        with pytest.raises(TypeError, match="Softplus"):
            af.nn.softplus(af.constant([1, 2]))
        with pytest.raises(TypeError, match="Gelu"):
            af.nn.gelu(af.constant([1, 2]))


async def test_against_tf(tmp_path):
    rng = np.random.default_rng(5)
    x = np.concatenate([np.array([-90.0, -30.0, -8.0, 0.0, 8.0, 30.0, 90.0]),
                        rng.standard_normal(57) * 5]).astype(np.float32)

    with af.Graph().as_default():
        ours = await run(_build_af(af.constant(x)))
    theirs = tf1_run("""
import tensorflow as tf2
c = tf.constant(inputs["x"])
outs = [tf.nn.softplus(c), tf.log_sigmoid(c), tf2.nn.gelu(c),
        tf2.nn.gelu(c, approximate=True)]
outs += [tf.gradients(tf.reduce_sum(o * o), [c])[0] for o in outs]
with tf.Session() as sess:
    outputs["all"] = sess.run(outs)
""", tmp_path, x=x)["all"]
    assert len(theirs) == len(ours) == 8
    for index, (mine, reference) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(mine, reference, rtol=2e-5, atol=1e-6,
                                   err_msg=f"output {index}")


def _build_af(c):
    outs = [af.nn.softplus(c), af.nn.log_sigmoid(c), af.nn.gelu(c),
            af.nn.gelu(c, approximate=True)]
    return outs + [af.gradients(af.reduce_sum(o * o), [c])[0] for o in outs]


async def test_scalars_keep_their_shape():
    with af.Graph().as_default():
        c = af.constant(np.float32(-1.5))
        fetches = []
        for f in (af.nn.softplus, af.nn.log_sigmoid, af.nn.gelu):
            y = f(c)
            fetches += [y, af.gradients(y, [c])[0]]
        values = await run(fetches)
    assert all(np.shape(v) == () for v in values)
    assert values[1] == pytest.approx(1 / (1 + math.exp(1.5)), rel=1e-6)


async def test_softplus_second_order_against_finite_differences():
    direction = np.linspace(-1, 1, 12).reshape(3, 4)

    def first_derivative(a):
        return af.gradients(af.reduce_sum(af.nn.softplus(a) * af.constant(direction)), [a])[0]
    await check_gradients(first_derivative, [_smooth_point((3, 4), 13)])
    await check_gradients(lambda a: af.gradients(af.reduce_sum(af.nn.log_sigmoid(a)), [a])[0],
                          [_smooth_point((3, 4), 14)])
