"""The fast elementwise forms of issue 37: Sigmoid as ``1/(1+e)`` / ``e/(1+e)`` with
``e = exp(-|x|)`` and an arithmetic mask, and the fused SigmoidGrad/TanhGrad kernels, against
float64 references, the old form, and finite differences (first and second order)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncflow as af
from gradcheck import check_gradients


async def run(fetch):
    async with af.Session() as session:
        return await session.run(fetch)


SPECIAL = [-1e4, -100.0, -88.0, -30.0, -17.5, -5.0, -1e-8, -0.0, 0.0, 1e-8, 3.0, 17.5, 30.0,
           100.0, 1e4, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
async def test_sigmoid_keeps_relative_precision_everywhere(dtype):
    rng = np.random.default_rng(0)
    x = np.concatenate([np.array(SPECIAL), rng.standard_normal(997) * 12]).astype(dtype)
    with af.Graph().as_default():
        value = await run(af.sigmoid(af.constant(x.reshape(5, 203))))
    assert value.dtype == dtype and value.shape == (5, 203)
    with np.errstate(over="ignore"):
        exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    tiny = np.finfo(dtype).tiny
    # Relative error within a few ulps wherever the exact result is a normal number.
    normal = np.isfinite(x) & (exact > tiny * 4)
    eps = np.finfo(dtype).eps
    rel = np.abs(value.reshape(-1)[normal].astype(np.float64) - exact[normal]) / exact[normal]
    assert rel.max() <= 4 * eps
    flat = value.reshape(-1)
    assert flat[SPECIAL.index(np.inf)] == 1 and flat[SPECIAL.index(-np.inf)] == 0
    assert np.isnan(flat[len(SPECIAL) - 1])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
async def test_sigmoid_without_overflowing_values_keeps_its_precision(dtype):
    # No NaN and nothing below -log(max): the in-place 1 / (1 + exp(-x)) form.
    bound = float(np.log(np.finfo(dtype).max))
    rng = np.random.default_rng(2)
    x = np.clip(rng.standard_normal(1015) * bound / 3, -bound * 0.999, None)
    x = np.concatenate([x, [-bound * 0.999, -30.0, -17.5, -0.0, 0.0, 1e4, np.inf]]).astype(dtype)
    with af.Graph().as_default():
        value = (await run(af.sigmoid(af.constant(x.reshape(2, -1))))).reshape(-1)
    exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    normal = np.isfinite(x) & (exact > np.finfo(dtype).tiny * 4)
    rel = np.abs(value[normal].astype(np.float64) - exact[normal]) / exact[normal]
    assert rel.max() <= 4 * np.finfo(dtype).eps
    assert value[-1] == 1 and value[-2] == 1


async def test_sigmoid_keeps_subnormal_results_without_nan():
    # One value whose exp(-x) overflows sends the array to the masked form: sigmoid(-100)
    # is 3.7e-44 in float32 (subnormal), not the 0 that 1 / (1 + inf) would give.
    x = np.array([-100.0, -95.0, 0.5, 3.0], np.float32)
    with af.Graph().as_default():
        value = await run(af.sigmoid(af.constant(x)))
    exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert value[0] > 0 and value[1] > 0
    np.testing.assert_allclose(value, exact, rtol=0.05)


async def test_sigmoid_matches_the_old_form_and_handles_scalars():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 33)) * 8).astype(np.float32)
    old = np.exp(-np.logaddexp(np.float32(0), -x)).astype(np.float32)
    with af.Graph().as_default():
        value, scalar = await run([af.sigmoid(af.constant(x)),
                                   af.sigmoid(af.constant(np.float32(-3.0)))])
    # The old form is itself off by up to 6e-7 relative (the new one by 3e-7, see above).
    np.testing.assert_allclose(value, old, rtol=1.5e-6, atol=0)
    assert scalar.shape == () and abs(float(scalar) - 1 / (1 + np.exp(3.0))) < 1e-7


@pytest.mark.parametrize("activation", [af.sigmoid, af.tanh])
async def test_activation_gradients_first_and_second_order(activation):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4)) * 2
    await check_gradients(lambda a: activation(a), [x])

    def first_derivative(a):
        return af.gradients(af.reduce_sum(activation(a) * af.constant(np.linspace(
            -1, 1, 12).reshape(3, 4))), [a])[0]
    await check_gradients(first_derivative, [x])


@pytest.mark.parametrize("activation, op_type", [(af.sigmoid, "SigmoidGrad"),
                                                 (af.tanh, "TanhGrad")])
async def test_activation_gradient_is_one_fused_op(activation, op_type):
    with af.Graph().as_default() as graph:
        x = af.constant(np.array([[-2.0, 0.5], [3.0, -0.25]], np.float32))
        y = activation(x)
        (grad,) = af.gradients(af.reduce_sum(y * 3.0), [x])
        assert grad.op.type == op_type or op_type in {op.type for op in graph.get_operations()}
        value, y_value = await run([grad, y])
    expected = (3 * y_value * (1 - y_value) if op_type == "SigmoidGrad"
                else 3 * (1 - y_value ** 2))
    np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_activation_grad_ops_check_their_operands():
    from asyncflow.ops.math_grad import sigmoid_grad
    with af.Graph().as_default():
        with pytest.raises(TypeError, match="SigmoidGrad"):
            sigmoid_grad(af.constant([1.0], af.float32), af.constant([1.0], af.float64))
        with pytest.raises(ValueError, match="SigmoidGrad"):
            sigmoid_grad(af.constant([1.0, 2.0]), af.constant([1.0, 2.0, 3.0]))


def _sigmoid_with_reciprocal(x):
    """The Sigmoid kernel's two forms as they were with numpy's ``reciprocal``, chosen per
    value: the masked one where exp(-x) overflows (or x is NaN), so that a fused epilogue's
    blocks give the whole array's bits (tests/ops/test_matmul_split.py)."""
    one = x.dtype.type(1)
    with np.errstate(all="ignore"):
        fast = np.reciprocal(np.exp(np.negative(x)) + one)
        e = np.exp(-np.abs(x))
        factor = (one - e) * (x >= 0) + e
        masked = np.reciprocal(e + one) * factor
        return np.where(np.isfinite(np.exp(np.negative(x))), fast, masked)


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       size=st.integers(1, 300), seed=st.integers(0, 2 ** 16),
       special=st.lists(st.sampled_from(SPECIAL + [-1e-40, 1e-45]), max_size=4))
async def test_sigmoid_and_rsqrt_keep_the_bits_of_the_reciprocal_forms(dtype, size, seed,
                                                                      special):
    # ``1 / r`` as a division (vectorized) instead of numpy's reciprocal: the same bits, in
    # the in-place form and the masked one (a NaN or a value below -log(max) in the array).
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        x = np.concatenate([rng.standard_normal(size) * 20, special]).astype(dtype)
        positive = np.abs(x)
    with af.Graph().as_default():
        value, root = await run([af.sigmoid(af.constant(x)), af.rsqrt(af.constant(positive))])
    assert value.tobytes() == _sigmoid_with_reciprocal(x).tobytes()
    with np.errstate(all="ignore"):
        assert root.tobytes() == np.reciprocal(np.sqrt(positive)).tobytes()


@pytest.mark.parametrize("shape", [(), (1,), (7, 13), (3, 5, 9)])
async def test_tanh_grad_in_the_squares_array_keeps_the_bits(shape):
    # 1 - y^2 written into y^2's own array: the same bits as the two-array form, specials too.
    rng = np.random.default_rng(4)
    y = np.tanh(rng.standard_normal(shape) * 3).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    if y.size > 3:
        y.reshape(-1)[:4] = [-0.0, 1.0, np.nan, -1.0]
        dy.reshape(-1)[:4] = [np.inf, -0.0, 2.0, 1e-40]
    with af.Graph().as_default():
        yt, dyt = af.constant(y), af.constant(dy)
        (grad,) = af.gradients(af.tanh(yt), [yt], grad_ys=[dyt])
        tanh_grad = [op for op in grad.graph.get_operations() if op.type == "TanhGrad"][0]
        value = await run(tanh_grad.outputs[0])
    with np.errstate(all="ignore"):
        expected = (np.float32(1) - np.square(np.tanh(y))) * dy
    assert np.asarray(value).shape == shape
    assert np.asarray(value).tobytes() == np.asarray(expected, np.float32).tobytes()


@pytest.mark.parametrize("block", [None, (3, 11)])
@pytest.mark.parametrize("overflowing", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_fused_sigmoid_epilogue_has_the_unfused_bits(dtype, overflowing, block):
    """The fused MatMul's sigmoid epilogue computes ``-(rows + bias)`` in one pass as
    ``(-bias) - rows`` (no negation pass): the bits of ``rows + bias`` then ``sigmoid_into``,
    exact zeros from cancellation, NaN and infinities included, on a block of columns too, and
    with values where ``exp`` overflows (the masked form, from the values negated back)."""
    from asyncflow.kernels import epilogue as kernel_epilogue
    rng = np.random.default_rng(3)
    rows = (rng.standard_normal((7, 16)) * 6).astype(dtype)
    bias = (rng.standard_normal(16) * 3).astype(dtype)
    rows[0, :5] = -bias[:5]                           # exact zeros
    rows[1, :4] = [np.nan, np.inf, -np.inf, 0.0]
    bias[5] = -0.0
    if overflowing:
        rows[2, 6] = -1e4
    start, stop = block or (0, 16)
    fused = rows[:, start:stop].copy()
    kernel_epilogue.fused_epilogue(np, ("BiasAdd", "Sigmoid"), bias)(fused, *(block or ()))
    unfused = rows[:, start:stop] + bias[start:stop]
    kernel_epilogue.sigmoid_into(np, unfused, unfused)
    assert fused.dtype == dtype
    nan = np.isnan(unfused)  # (a NaN's sign bit is not compared)
    assert np.array_equal(np.isnan(fused), nan) and nan.any() == (start == 0)
    assert fused[~nan].tobytes() == unfused[~nan].tobytes()


def _overflow_bound_neighbours(dtype):
    """``-log(max)`` rounded to ``dtype`` (whose ``exp(-x)`` overflows in float16 and float32)
    and its neighbours either side."""
    bound = dtype(-np.log(np.finfo(dtype).max))
    return np.array([np.nextafter(bound, dtype(0)), bound,
                     np.nextafter(bound, dtype(-np.inf))], dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
async def test_sigmoid_at_the_overflow_bound_is_not_flushed_to_zero(dtype):
    """At ``-log(max)`` rounded to the dtype, ``exp(-x)`` overflows in float16 (-11.09) and
    float32 (-88.72284): the fast form gave 0 there (TF1's float16 Sigmoid: 1.52e-5) between
    two neighbours that it does not flush; the masked form's bits, as either neighbour's."""
    from asyncflow.kernels import epilogue as kernel_epilogue
    x = _overflow_bound_neighbours(dtype)
    with af.Graph().as_default():
        value = await run(af.sigmoid(af.constant(x)))
    expected = kernel_epilogue._sigmoid_masked(np, x.copy())
    assert value.tobytes() == expected.tobytes() and np.all(value > 0)
    assert np.all(np.diff(value) <= 0)  # (x decreasing)
    fused = np.stack([x, x])
    kernel_epilogue.fused_epilogue(np, ("BiasAdd", "Sigmoid"), np.zeros(3, dtype))(fused)
    assert fused.tobytes() == np.stack([expected, expected]).tobytes()


@pytest.mark.parametrize("activation", [None, "Relu", "Tanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows_count, channels", [(50176 // 64, 32), (811, 64), (16384, 1),
                                                 (97, 256), (70, 257), (9, 3)])
def test_fused_epilogue_adds_a_tiled_bias_with_the_unfused_bits(rows_count, channels, dtype,
                                                                activation):
    """The bias add over large ``[r, C]`` blocks with few columns runs over ``[r / k, k C]``
    views by the bias tiled (``kernels/epilogue.py`` ``_add_bias``): the bits of ``rows += bias``
    then the activation, rows left over after the views included (811 rows of 64 channels:
    16 per view), NaN, infinities and exact zeros, for the shapes it leaves to the broadcast
    add (257 columns, few rows, non-contiguous rows, another dtype) too."""
    from asyncflow.kernels import epilogue as kernel_epilogue
    rng = np.random.default_rng(rows_count)
    rows = (rng.standard_normal((rows_count, channels)) * 4).astype(dtype)
    bias = rng.standard_normal(channels).astype(dtype)
    rows[0, 0], rows[-1, -1], rows[rows_count // 2, 0] = np.nan, np.inf, -bias[0]
    ops = ("BiasAdd",) + ((activation,) if activation else ())
    apply = kernel_epilogue.fused_epilogue(np, ops, bias)
    fused = rows.copy()
    apply(fused)
    apply(fused)  # a second block through the same epilogue (its tiled bias kept)
    unfused = rows.copy()
    for _ in range(2):
        unfused += bias
        if activation == "Relu":
            np.maximum(unfused, dtype(0), out=unfused)
        elif activation == "Tanh":
            np.tanh(unfused, out=unfused)
    assert fused.dtype == dtype and fused.tobytes() == unfused.tobytes()
    strided = np.repeat(rows, 2, axis=1)[:, ::2]  # not contiguous: the broadcast add
    apply(strided)
    once = rows.copy()
    apply(once)
    assert np.ascontiguousarray(strided).tobytes() == once.tobytes()
    wider = rows.astype(np.float64 if dtype == np.float32 else np.float32)
    expected = wider.copy()
    expected += bias  # another dtype than the bias's: numpy's broadcast add
    if activation == "Relu":
        np.maximum(expected, 0, out=expected)
    elif activation == "Tanh":
        np.tanh(expected, out=expected)
    apply(wider)
    assert wider.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [1, 2, 32])
def test_fused_epilogue_bias_add_keeps_the_broadcast_nans(channels, dtype):
    """Where a row's value and its bias are both NaN, the fused BiasAdd keeps the NaN (sign
    and payload) that ``rows += bias`` keeps: for one column numpy's broadcast add is a pass
    by a scalar, which keeps the bias's, so ``_add_bias`` leaves that shape to it."""
    from asyncflow.kernels import epilogue as kernel_epilogue
    rows = np.ones((32768 // channels, channels), dtype=dtype)
    rows[::3] = -np.nan
    bias = np.full(channels, np.nan, dtype=dtype)
    fused = rows.copy()
    kernel_epilogue.fused_epilogue(np, ("BiasAdd",), bias)(fused)
    unfused = rows.copy()
    unfused += bias
    assert np.isnan(fused).all() and fused.tobytes() == unfused.tobytes()
