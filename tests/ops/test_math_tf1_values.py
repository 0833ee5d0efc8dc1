"""Wrong answers the differential fuzz against TF1 found in the math family
(test_tf1_math_fuzz.py), pinned without TensorFlow: each expected array is what TF1
(``tf.compat.v1`` on TF 2.21, CPU) printed for the same graph, and each refusal is one TF1
makes too."""
import numpy as np
import pytest

import asyncflow as af

NAN, INF = np.nan, np.inf
MAX32 = np.finfo(np.float32).max


async def _run(fetches):
    async with af.Session() as session:
        return await session.run(fetches)


def _same(got, want):
    """Equal values and dtype, NaN where NaN, and the sign of every zero."""
    want = np.asarray(want, dtype=got.dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


async def test_float_floordiv_is_floor_of_the_quotient():
    # numpy's floor_divide gave 2499, nan, -1, nan: it floors the exact quotient.
    with af.Graph().as_default():
        x = af.constant([2.5, INF, -3.25, -INF, 7.0, -7.0], af.float64)
        y = af.constant([0.001, 2.0, INF, 1.0, 2.0, 2.0], af.float64)
        out = await _run([af.floordiv(x, y), x // y])
    for got in out:  # TF1: tf.floordiv(...) -> [2500., inf, -0., -inf, 3., -4.]
        _same(got, [2500.0, INF, -0.0, -INF, 3.0, -4.0])


async def test_float_floormod_zero_keeps_the_dividends_sign():
    # numpy's mod gave -0.0 and 0.0 for the first two (the divisor's sign).
    with af.Graph().as_default():
        x = af.constant([2.0, -2.0, 5.5, -5.5, 5.5, -1.0, 1.0], af.float64)
        y = af.constant([-1.0, 1.0, 2.0, 2.0, -2.0, INF, -INF], af.float64)
        out = await _run([af.floormod(x, y), x % y])
    for got in out:  # TF1: [0., -0., 1.5, 0.5, -0.5, inf, -inf]
        _same(got, [0.0, -0.0, 1.5, 0.5, -0.5, INF, -INF])


@pytest.mark.parametrize("op", [af.floordiv, af.floormod, af.div])
async def test_integer_division_by_zero_is_refused(op):
    # numpy gave 0 (and a warning); TF1: InvalidArgumentError "Integer division by zero".
    with af.Graph().as_default():
        out = op(af.constant([7, -7, 3], af.int32), af.constant([2, 0, 1], af.int32),
                 name="divided")
        with pytest.raises(af.errors.InvalidArgumentError, match="divided.*Integer division by zero"):
            await _run(out)


async def test_pow_with_a_scalar_half_is_cs_pow_not_sqrt():
    # numpy's power takes a scalar 0.5 as sqrt: nan and -0.0 for the first two.
    with af.Graph().as_default():
        out = await _run(af.pow(af.constant([-INF, -0.0, 4.0, 0.0], af.float32),
                                np.float32(0.5)))
    _same(out, [INF, 0.0, 2.0, 0.0])  # TF1: tf.pow(x, np.float32(0.5))


async def test_integer_pow_refuses_negative_exponents_and_unsigned_dtypes():
    with af.Graph().as_default():
        out = af.pow(af.constant([2, 3], af.int32), af.constant([1, -1], af.int32), name="p")
        with pytest.raises(af.errors.InvalidArgumentError,
                           match="p.*Integers to negative integer powers are not allowed"):
            await _run(out)
        with pytest.raises(TypeError, match="Pow.*uint8"):  # TF1 has no unsigned Pow
            af.pow(af.constant([2], af.uint8), 3)


async def test_round_of_integers_and_tf_div():
    with af.Graph().as_default():
        ints = af.constant([-7, 7], af.int32)
        out = await _run([af.round(af.constant([-3, 0, 7], af.int32)),
                          af.div(ints, 2), af.div(af.constant([-7.0, 7.0]), 2.0)])
    _same(out[0], np.array([-3, 0, 7], np.int32))   # TF1: tf.round of int32
    _same(out[1], np.array([-4, 3], np.int32))      # TF1: tf.div floors integers
    _same(out[2], np.array([-3.5, 3.5], np.float32))  # ... and divides floats


async def test_float_argmax_and_argmin_skip_nan_as_tf1():
    # numpy picked the first NaN: [0, 2, 0, 1, 2, 0] for both.
    rows = [[NAN, 1, 2], [1, 2, NAN], [NAN] * 3, [-INF, NAN, -INF], [-INF, -MAX32, -1],
            [-INF, -MAX32, -INF]]
    with af.Graph().as_default():
        x = af.constant(np.array(rows, np.float32))
        out = await _run([af.argmax(x, 1), af.argmin(-x, 1)])
    _same(out[0], np.array([2, 1, 0, 0, 2, 0], np.int64))  # TF1: tf.argmax(x, 1)
    _same(out[1], np.array([2, 1, 0, 0, 2, 0], np.int64))  # TF1: tf.argmin(-x, 1)


def test_scalar_and_repeated_axes_are_refused():
    # TF1: "Expected dimension in the range [0, 0)", "Invalid reduction dimension 0 for input
    # with 0 dimensions", "Axes contains duplicate dimension: 1"; asyncflow gave a value.
    with af.Graph().as_default():
        scalar = af.constant(3.0)
        matrix = af.constant(np.ones((2, 3)))
        with pytest.raises(ValueError, match="ArgMax: axis 0 out of range for rank 0"):
            af.argmax(scalar, 0)
        with pytest.raises(ValueError, match="reduce_sum: axis 0 is out of range"):
            af.reduce_sum(scalar, axis=0)
        with pytest.raises(ValueError, match="reduce_mean: .*names an axis twice"):
            af.reduce_mean(matrix, axis=[1, -1])


async def test_lgamma_of_huge_values_is_inf():
    # It failed the run with Python's "OverflowError: math range error".
    with af.Graph().as_default():
        out = await _run(af.lgamma(af.constant([1e306, -1e306, 3.0], af.float64)))
    np.testing.assert_allclose(out, [INF, INF, np.log(2.0)])  # TF1: [inf, inf, 0.69314718]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
async def test_half_precision_argmax_and_argmin_skip_nan_as_tf1(dtype):
    # bfloat16 (numpy kind "V", not "f") took numpy's pick: [0, 0, 0, 1].
    rows = [[NAN, 1, 2], [-INF] * 3, [NAN] * 3, [-INF, 1, -INF]]
    with af.Graph().as_default():
        x = af.cast(af.constant(np.array(rows, np.float32)), getattr(af, dtype))
        out = await _run([af.argmax(x, 1), af.argmin(-x, 1)])
    for got in out:  # TF1: tf.argmax(x, 1) and tf.argmin(-x, 1) of bfloat16 and float16
        _same(got, np.array([2, 0, 0, 1], np.int64))


async def test_large_argmax_checks_the_picked_values():
    # Over 2**14 values the kernel tests only the values numpy picked (rows and columns).
    rows = np.random.default_rng(5).standard_normal((4, 8192)).astype(np.float32)
    rows[0, 3], rows[1, :] = NAN, -INF
    rows[2, :] = -MAX32
    rows[2, 7] = NAN
    best = int(np.argmax(np.where(np.isnan(rows[0]), -INF, rows[0])))
    with af.Graph().as_default():
        x = af.constant(rows)
        out = await _run([af.argmax(x, 1), af.argmin(-x, 1), af.argmax(af.transpose(x), 0)])
    for got in out:  # TF1's rule: NaN never wins; nothing beats the lowest finite: index 0
        _same(got, np.array([best, 0, 0, int(np.argmax(rows[3]))], np.int64))


@pytest.mark.parametrize("divisor, want", [(2.0, [-0.0, 0.0, 1.0, 1.0, 0.5, -0.0]),
                                           (-2.0, [-0.0, 0.0, -1.0, -1.0, -1.5, -0.0])])
async def test_float_floormod_by_a_scalar_as_tf1(divisor, want):
    # The scalar divisor takes an arithmetic path (no where over every value): same answers.
    with af.Graph().as_default():
        x = af.constant(np.array([-4.0, 4.0, -3.0, 3.0, 2.5, -1e-45 * 0], np.float32))
        out = await _run([af.floormod(x, divisor), af.floormod(x, af.constant([divisor]))])
    for got in out:  # TF1: tf.floormod(x, 2.0) and tf.floormod(x, -2.0)
        _same(got, np.array(want, np.float32))


async def test_pow_half_of_a_nonpositive_base_as_tf1():
    # The -inf/-0.0 fix now runs only when some base is not positive: both ways checked.
    with af.Graph().as_default():
        x = af.constant(np.array([-INF, -0.0, 4.0, 0.25], np.float32))
        y = af.constant(np.array([9.0, 4.0], np.float32))
        out = await _run([af.pow(x, 0.5), af.pow(y, 0.5)])
    _same(out[0], np.array([INF, 0.0, 2.0, 0.5], np.float32))  # TF1: tf.pow(x, 0.5)
    _same(out[1], np.array([3.0, 2.0], np.float32))
