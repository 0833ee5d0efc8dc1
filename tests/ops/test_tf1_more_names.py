"""TF1 names that programs use and asyncflow lacked (the list in docs/porting.md, "Not
provided", holds the rest): ``tf.tan`` and the inverse and hyperbolic functions, ``expm1``,
``atan2``, ``rint``, ``is_inf``; ``div_no_nan``, ``scalar_mul``, ``zero_fraction``;
``matrix_transpose``, ``linalg.matvec``; ``nn.xw_plus_b``, ``nn.relu_layer``; TF1's deprecated
spellings (``arg_max``, ``to_int32``, ``initialize_all_variables``, ...) and the ``tf.math``,
``tf.linalg`` aliases of names asyncflow had.

Values against numpy, refusals, gradients against central finite differences (hypothesis
draws inputs in each function's domain) without TensorFlow; the last test compares them all
with TF1 (``run_fuzz``; it skips without TensorFlow: ``ASYNCFLOW_TF_PYTHON``).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (autouse fixture)
from gradcheck import assert_close, check_gradients
from test_tf1_array_fuzz import _compare, run_fuzz

SETTINGS = settings(max_examples=15, deadline=None)

# name -> (numpy function, the open interval its inputs are drawn from)
UNARY = {"tan": (np.tan, (-1.4, 1.4)), "asin": (np.arcsin, (-0.9, 0.9)),
         "acos": (np.arccos, (-0.9, 0.9)), "atan": (np.arctan, (-5.0, 5.0)),
         "sinh": (np.sinh, (-3.0, 3.0)), "cosh": (np.cosh, (-3.0, 3.0)),
         "asinh": (np.arcsinh, (-5.0, 5.0)), "acosh": (np.arccosh, (1.1, 5.0)),
         "atanh": (np.arctanh, (-0.9, 0.9)), "expm1": (np.expm1, (-3.0, 3.0))}


@st.composite
def unary_cases(draw):
    name = draw(st.sampled_from(sorted(UNARY)))
    low, high = UNARY[name][1]
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3))
    x = draw(hnp.arrays(np.float64, shape, elements=st.floats(low, high, width=64)))
    return name, x


@SETTINGS
@given(unary_cases())
async def test_unary_values_and_gradients(case):
    name, x = case
    build = getattr(af, name)
    async with af.Session() as session:
        got = await session.run(build(x))
    assert_close(got, UNARY[name][0](x), rtol=1e-12, atol=1e-14)
    assert getattr(tf.math, name) is build
    await check_gradients(build, [x])
    await check_gradients(lambda t: build(af.placeholder_with_default(t, None)), [x])


@SETTINGS
@given(hnp.arrays(np.float64, st.sampled_from([(3,), (2, 3)]),
                  elements=st.floats(0.2, 3.0, width=64)),
       hnp.arrays(np.float64, (3,), elements=st.floats(-3.0, 3.0, width=64)),
       st.booleans())
async def test_atan2_broadcasts_with_its_gradient(y, x, negate):
    y = -y if negate else y  # (y kept away from 0 with x: atan2 jumps on the negative axis)
    async with af.Session() as session:
        got = await session.run(af.atan2(y, x))
    assert_close(got, np.arctan2(y, x), rtol=1e-12)
    await check_gradients(lambda a, b: af.atan2(a, b), [y, x])


def test_float_only_functions_refuse_integers_and_float32_values():
    x = np.array([-2.5, -0.5, 0.5, 1.5, 2.5, np.inf, -np.inf, np.nan], np.float32)
    rint, is_inf, expm1 = session_run([tf.rint(x), tf.is_inf(x), tf.math.expm1(x[:5])])
    np.testing.assert_array_equal(rint[:5], [-2, -0, 0, 2, 2])  # half to even, as TF1's
    np.testing.assert_array_equal(is_inf, [False] * 5 + [True, True, False])
    assert rint.dtype == np.float32 and is_inf.dtype == np.bool_
    assert_close(expm1, np.expm1(x[:5].astype(np.float64)), rtol=1e-6)
    for build in (tf.tan, tf.acosh, tf.rint, tf.is_inf):
        with pytest.raises(TypeError, match="int32"):
            build(np.array([1, 2], np.int32))
    with pytest.raises(TypeError, match="Atan2 .*float32.*float64|operands have different"):
        tf.atan2(np.float32(1.0), np.float64(1.0))


def test_div_no_nan_values_gradients_and_broadcasting():
    x = tf.constant(np.array([[1.0, np.nan, 3.0], [np.inf, 5.0, -6.0]]))
    y = tf.constant(np.array([0.0, 2.0, 0.0]))
    value = tf.div_no_nan(x, y)
    grad_x, grad_y = tf.gradients(tf.reduce_sum(value), [x, y])
    got = session_run([value, grad_x, grad_y, tf.math.divide_no_nan(y, x)])
    np.testing.assert_array_equal(got[0], [[0, np.nan, 0], [0, 2.5, 0]])
    np.testing.assert_array_equal(got[1], [[0, 0.5, 0], [0, 0.5, 0]])  # TF1's: 0 where y is 0
    np.testing.assert_array_equal(got[2][[0, 2]], [0, 0])
    assert got[3].shape == (2, 3)
    with pytest.raises(TypeError, match="div_no_nan: .* int32"):
        tf.div_no_nan(np.array([1], np.int32), np.array([0], np.int32))


async def test_xlogy_xdivy_reciprocal_no_nan():
    x = np.array([[0.0, 2.0, -1.5], [0.5, 0.0, 1.0]])
    y = np.array([0.0, 3.0, 0.5])
    async with af.Session() as session:
        got = await session.run([af.math.xlogy(x, y), af.math.xdivy(x, y),
                                 af.math.reciprocal_no_nan(y)])
    with np.errstate(divide="ignore", invalid="ignore"):
        want = [np.where(x == 0, 0, x * np.log(y)), np.where(x == 0, 0, x / y),
                np.where(y == 0, 0, 1 / y)]
    for value, expected in zip(got, want):
        np.testing.assert_array_equal(np.isnan(value), np.isnan(expected))
        assert_close(value, expected, rtol=1e-12)
    # (away from x == 0, where TF1's gradient in x is 0 by definition, not the limit)
    nonzero, positive = np.array([[2.0, -1.5], [0.5, 1.0]]), np.array([3.0, 1.5])
    await check_gradients(lambda a, b: af.math.xlogy(a, b), [nonzero, positive])
    await check_gradients(lambda a, b: af.math.xdivy(a, b), [nonzero, positive])


async def test_div_no_nan_gradient_away_from_zero():
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    y = np.array([0.5, -1.5])
    await check_gradients(lambda a, b: af.div_no_nan(a, b), [x, y])


def test_scalar_mul_zero_fraction_and_deprecated_spellings():
    x = np.array([[1.0, 0.0, 3.0], [0.0, -1.0, 5.0]], np.float32)
    v = tf.Variable(1.0)
    local = tf.Variable(2.0, collections=[tf.GraphKeys.LOCAL_VARIABLES])
    assert tf.all_variables() == tf.global_variables() == [v]
    with tf.Session() as session:
        session.run([tf.initialize_all_variables(), tf.initialize_local_variables(),
                     tf.initialize_variables([v])])
        got = session.run([tf.scalar_mul(2.0, x), tf.math.zero_fraction(x),
                           tf.nn.zero_fraction(x[:0]), tf.arg_max(x, 1),
                           tf.arg_min(x, dimension=0, output_type=tf.int32), tf.to_int32(x),
                           tf.to_int64(x), tf.to_double(x), local])
    np.testing.assert_array_equal(got[0], 2 * x)
    assert got[1] == np.float32(1 / 3) and got[1].dtype == np.float32 and np.isnan(got[2])
    np.testing.assert_array_equal(got[3], [2, 2])
    assert got[3].dtype == np.int64 and got[4].dtype == np.int32
    np.testing.assert_array_equal(got[4], [1, 1, 0])
    assert [g.dtype for g in got[5:8]] == [np.int32, np.int64, np.float64]
    assert got[8] == 2.0
    with pytest.raises(ValueError, match="scalar_mul: scalar must be a 0-D tensor"):
        tf.scalar_mul([1.0, 2.0], x)


def test_math_and_linalg_aliases_are_the_builders():
    assert tf.math.softmax is af.nn.softmax and tf.math.log_softmax is af.nn.log_softmax
    assert tf.math.l2_normalize is af.nn.l2_normalize and tf.math.softsign is af.nn.softsign
    assert tf.math.invert_permutation is af.invert_permutation
    assert tf.math.mod is af.floormod and tf.math.bincount is af.bincount
    assert tf.linalg.global_norm is af.global_norm and tf.linalg.l2_normalize is af.nn.l2_normalize
    assert tf.linalg.transpose is tf.linalg.adjoint is tf.linalg.matrix_transpose
    assert tf.linalg.matrix_transpose is tf.matrix_transpose
    assert tf.math.scalar_mul is tf.scalar_mul and tf.math.segment_sum is af.segment_sum
    assert tf.math.unsorted_segment_sum is af.unsorted_segment_sum


def test_reverse_sequence_tf1_spellings():
    x = np.arange(12.0).reshape(2, 6)
    got = session_run([tf.reverse_sequence(x, [3, 6], seq_dim=1, batch_dim=0),
                       tf.reverse_sequence(x.T, [3, 6], seq_axis=0, batch_axis=1)])
    want = np.array([[2, 1, 0, 3, 4, 5], [11, 10, 9, 8, 7, 6]], np.float64)
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(got[1], want.T)
    with pytest.raises(ValueError, match="reverse_sequence: seq_axis is required"):
        tf.reverse_sequence(x, [1, 1])


async def test_matrix_transpose_and_matvec():
    a = np.arange(24.0).reshape(2, 3, 4)
    b = np.arange(4.0)
    hidden = af.placeholder(af.float64, None)
    transposed = af.matrix_transpose(a)
    assert transposed.shape.as_list() == [2, 4, 3]
    async with af.Session() as session:
        got = await session.run([transposed, af.matrix_transpose(hidden),
                                 af.linalg.matvec(a, b),
                                 af.linalg.matvec(a, b[:3], adjoint_a=True)], {hidden: a})
    np.testing.assert_array_equal(got[0], np.swapaxes(a, -1, -2))
    np.testing.assert_array_equal(got[1], np.swapaxes(a, -1, -2))
    np.testing.assert_array_equal(got[2], a @ b)
    np.testing.assert_array_equal(got[3], np.swapaxes(a, -1, -2) @ b[:3])
    with pytest.raises(ValueError, match="matrix_transpose: .* rank at least 2"):
        af.matrix_transpose(np.zeros(3))
    await check_gradients(lambda t, v: af.linalg.matvec(af.matrix_transpose(t), v),
                          [a[0], np.arange(3.0)])


async def test_xw_plus_b_and_relu_layer():
    x = np.array([[1.0, -2.0], [0.5, 3.0], [-1.0, -1.0]])
    w = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]])
    b = np.array([0.1, -0.2, 0.3])
    async with af.Session() as session:
        affine, layer = await session.run([af.nn.xw_plus_b(x, w, b),
                                           af.nn.relu_layer(x, w, b)])
    assert_close(affine, x @ w + b, rtol=1e-12)
    assert_close(layer, np.maximum(x @ w + b, 0), rtol=1e-12)
    await check_gradients(lambda *t: af.nn.xw_plus_b(*t), [x, w, b])


# ---- against TF1 --------------------------------------------------------------------------

def _cases(seed):
    rng = np.random.default_rng(seed)
    cases = []
    for name, (_, (low, high)) in sorted(UNARY.items()):
        for dtype in ("float32", "float64"):
            x = rng.uniform(low, high, size=(2, 3)).astype(dtype)
            cases.append((f"tf.{name}(a)", {"a": x}))
            cases.append((f"tf.gradients(tf.math.{name}(a), a)", {"a": x}))
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = np.array([0.0, 2.0, 0.0], np.float32)
    special = np.array([-2.5, -0.5, 0.5, 1.5, np.inf, -np.inf, np.nan], np.float64)
    cases += [
        ("tf.atan2(a, b)", {"a": x, "b": x[::-1].copy()}),
        ("tf.gradients(tf.atan2(a, b), [a, b])", {"a": x, "b": x[:1].copy() + 3}),
        ("tf.rint(a)", {"a": special}), ("tf.is_inf(a)", {"a": special}),
        ("tf.div_no_nan(a, b)", {"a": x, "b": y}),
        ("tf.gradients(tf.div_no_nan(a, b), [a, b])", {"a": x, "b": y}),
        ("tf.math.divide_no_nan(b, a)", {"a": x, "b": y}),
        ("tf.scalar_mul(2.0, a)", {"a": x}),
        ("tf.math.zero_fraction(a)", {"a": np.array([[0, 1, 0], [2, 0, 3]], np.int32)}),
        ("tf.nn.zero_fraction(a)", {"a": np.zeros((0, 2), np.float32)}),
        ("tf.matrix_transpose(a)", {"a": rng.standard_normal((2, 3, 4))}),
        ("tf.linalg.transpose(a)", {"a": x}),
        ("tf.matrix_transpose(a)", {"a": np.zeros(3)}),
        ("tf.linalg.matvec(a, b)", {"a": rng.standard_normal((2, 3, 4)),
                                    "b": rng.standard_normal((2, 4))}),
        ("tf.nn.xw_plus_b(a, b, c)", {"a": x, "b": rng.standard_normal((3, 2)).astype("f"),
                                      "c": np.array([1.0, -1.0], np.float32)}),
        ("tf.nn.relu_layer(a, b, c)", {"a": x, "b": rng.standard_normal((3, 2)).astype("f"),
                                       "c": np.array([1.0, -1.0], np.float32)}),
        ("tf.arg_max(a, 1)", {"a": x}), ("tf.arg_min(a, 0)", {"a": x}),
        ("tf.to_int32(a)", {"a": x * 3}), ("tf.to_int64(a)", {"a": x * 3}),
        ("tf.to_double(a)", {"a": x}),
        ("tf.math.mod(a, b)", {"a": np.array([5, -5], np.int32), "b": np.array([3, 3], np.int32)}),
        ("tf.math.log_softmax(a)", {"a": x}), ("tf.math.softmax(a)", {"a": x}),
        ("tf.math.xlogy(a, b)", {"a": np.array([0.0, 2.0, 0.0, -1.5]),
                                 "b": np.array([0.0, 3.0, np.inf, 0.5])}),
        ("tf.gradients(tf.math.xlogy(a, b), [a, b])", {"a": np.array([[0.0], [2.0]]),
                                                       "b": np.array([0.0, 3.0, 0.5])}),
        ("tf.math.xdivy(a, b)", {"a": np.array([0.0, 2.0, 0.0]), "b": np.array([0.0, 4.0, 0.0])}),
        ("tf.gradients(tf.math.xdivy(a, b), [a, b])", {"a": np.array([0.0, 2.0, 1.0]),
                                                       "b": np.array([0.0, 4.0, -2.0])}),
        ("tf.math.reciprocal_no_nan(a)", {"a": np.array([0.0, 2.0, -0.5], np.float32)}),
        ("tf.gradients(tf.math.reciprocal_no_nan(a), a)", {"a": np.array([0.0, 2.0, -0.5])}),
        ("tf.reverse_sequence(a, [3, 1], seq_dim=1, batch_dim=0)", {"a": x}),
        ("tf.reverse_sequence(a, [2, 0, 3], seq_axis=0, batch_axis=1)", {"a": x}),
    ]
    return cases


def test_more_names_agree_with_tf1(tmp_path):
    run_fuzz(tmp_path, _cases(20261206), _compare)
