"""TF1's ``tf.sort``, ``tf.argsort``, ``tf.reduce_logsumexp``, ``tf.math.reduce_variance`` and
``tf.math.reduce_std`` without TensorFlow: values against numpy (TF1's answers written out
where they are its own: ties, extremes of integer dtypes, infinite rows), static shapes,
unknown shapes and ranks, negative axes, the refusals, and gradients against central finite
differences. tests/ops/test_tf1_array_fuzz.py compares them with TF1 itself.
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

SETTINGS = settings(max_examples=20, deadline=None)
nan, inf = np.nan, np.inf


def hide_shape(t):
    return af.placeholder_with_default(t, [None] * t.shape.ndims)


def hide_rank(t):
    return af.placeholder_with_default(t, None)


# ---- sort and argsort -------------------------------------------------------------------

def _numpy_sort(x, axis, descending):
    """TF1's order: stable either way (ties in index order), as numpy's stable sort."""
    if not descending:
        order = np.argsort(x, axis=axis, kind="stable")
    else:
        last = x.shape[axis] - 1
        order = last - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    return np.take_along_axis(x, order, axis=axis), order.astype(np.int32)


@pytest.mark.parametrize("direction", ["ASCENDING", "DESCENDING"])
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((7,), -1), ((3, 5), 0), ((3, 5), -1),
                                        ((2, 3, 4), 1), ((2, 3, 4), -2), ((4, 0, 3), 0),
                                        ((1, 1), -2)])
def test_sort_and_argsort_values(shape, axis, direction):
    x = np.random.default_rng(sum(shape)).integers(-3, 4, size=shape).astype(np.float32)
    values, indices = session_run([tf.sort(x, axis=axis, direction=direction),
                                   tf.argsort(x, axis=axis, direction=direction)])
    want_values, want_indices = _numpy_sort(x, axis, direction == "DESCENDING")
    assert values.dtype == np.float32 and indices.dtype == np.int32
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)


def test_ties_keep_their_order_in_both_directions():
    x = np.array([2, 1, 2, 0, 1, 2], np.int64)
    up, down, stable = session_run([tf.argsort(x), tf.argsort(x, direction="DESCENDING"),
                                    tf.argsort(x, stable=True)])
    np.testing.assert_array_equal(up, [3, 1, 4, 0, 2, 5])  # TF1's answers
    np.testing.assert_array_equal(down, [0, 2, 5, 1, 4, 3])
    np.testing.assert_array_equal(stable, up)
    zeros = np.array([0.0, -0.0, 0.0], np.float32)  # equal: index order
    np.testing.assert_array_equal(session_run(tf.argsort(zeros, direction="DESCENDING")),
                                  [0, 1, 2])


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint16,
                                   np.float16, np.float64])
def test_sort_integer_extremes_and_dtypes(dtype):
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else np.finfo(dtype)
    x = np.array([3, info.max, info.min, 0, info.max, 1], dtype)
    up, down = session_run([tf.sort(x), tf.sort(x, direction="DESCENDING")])
    assert up.dtype == dtype
    np.testing.assert_array_equal(up, np.sort(x))
    np.testing.assert_array_equal(down, np.sort(x)[::-1])


def test_sort_infinities_and_nan():
    """Infinities sort as TF1's; a NaN (whose place TF1 leaves to its std::sort) is larger
    than every number here: last ascending, first descending."""
    x = np.array([3, -inf, nan, 1, inf], np.float32)
    up, down, up_order = session_run([tf.sort(x), tf.sort(x, direction="DESCENDING"),
                                      tf.argsort(x)])
    np.testing.assert_array_equal(up, [-inf, 1, 3, inf, nan])
    np.testing.assert_array_equal(down, [nan, inf, 3, 1, -inf])
    np.testing.assert_array_equal(up_order, [1, 3, 0, 4, 2])


def test_sort_unknown_shapes_and_ranks():
    x = np.arange(24.0)[::-1].reshape(2, 3, 4).astype(np.float32)
    some = tf.placeholder(tf.float32, [None, 3, None])
    rank = tf.placeholder(tf.float32, None)
    by_dims = tf.sort(some, axis=1)
    by_rank = tf.sort(rank, axis=-2)
    order = tf.argsort(rank, axis=0, direction="DESCENDING")
    assert by_dims.shape.as_list() == [None, 3, None]
    assert by_rank.shape.ndims is None and order.dtype == tf.int32
    got = session_run([by_dims, by_rank, order], {some: x, rank: x})
    np.testing.assert_array_equal(got[0], np.sort(x, axis=1))
    np.testing.assert_array_equal(got[1], np.sort(x, axis=-2))
    np.testing.assert_array_equal(got[2], _numpy_sort(x, 0, True)[1])


def test_sort_refusals_name_the_op():
    with pytest.raises(ValueError, match="sort: the input must have at least 1 dimension"):
        tf.sort(tf.constant(1.0))
    with pytest.raises(ValueError, match="argsort: axis 2 is out of range .* rank 2"):
        tf.argsort(tf.zeros([2, 3]), axis=2)
    with pytest.raises(ValueError, match="direction must be one of ASCENDING, DESCENDING"):
        tf.sort(tf.zeros([2]), direction="UP")
    with pytest.raises(ValueError, match="axis must be a constant scalar"):
        tf.sort(tf.zeros([2]), axis=tf.placeholder(tf.int32, []))
    with pytest.raises(TypeError, match="Sort .* dtype bool"):
        tf.sort(tf.constant([True, False]))
    rank = tf.placeholder(tf.float32, None)
    out_of_range = tf.sort(rank, axis=3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="axis 3 is out of range"):
        session_run(out_of_range, {rank: np.zeros((2, 2), np.float32)})


@st.composite
def distinct_arrays(draw):
    """Arrays of distinct values (sort is differentiable away from ties) and an axis."""
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    values = draw(hnp.arrays(np.float64, shape, unique=True,
                             elements=st.floats(-4.0, 4.0, width=64)))
    # far enough apart that the finite difference's steps reorder nothing
    values = np.argsort(np.argsort(values.ravel())).reshape(shape) * 0.5 + values * 1e-3
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return values, axis, draw(st.sampled_from(["ASCENDING", "DESCENDING"]))


@SETTINGS
@given(distinct_arrays())
async def test_sort_gradient(case):
    x, axis, direction = case
    await check_gradients(lambda t: af.sort(t, axis=axis, direction=direction), [x])
    await check_gradients(lambda t: af.sort(hide_shape(t), axis=axis, direction=direction),
                          [x])
    await check_gradients(lambda t: af.sort(hide_rank(t), axis=axis, direction=direction),
                          [x])


@SETTINGS
@given(distinct_arrays())
async def test_sort_second_order(case):
    x, axis, direction = case
    x = x / 8  # (values of order 1: the cube's finite differences keep their digits)

    def grad_of_grad(t):
        y = af.sort(af.square(t) * t, axis=axis, direction=direction)
        (g,) = af.gradients(af.reduce_sum(af.square(y)), [t])
        return g
    await check_gradients(grad_of_grad, [x], rtol=1e-3, atol=1e-5)


# ---- reduce_logsumexp -------------------------------------------------------------------

def test_logsumexp_values_and_tf1_rows():
    x = np.array([[-inf, -inf], [inf, 1], [inf, inf], [nan, 1], [1, 2], [1000, 1000]],
                 np.float32)
    rows, kept, everything = session_run([
        tf.reduce_logsumexp(x, axis=1), tf.reduce_logsumexp(x[4:], axis=-1, keepdims=True),
        tf.reduce_logsumexp(x[4:])])
    # TF1's answers: -inf for a row of -inf, inf for one with inf, NaN for one with NaN,
    # and no overflow for large values
    assert_close(rows, [-inf, inf, inf, nan, 2.3132617, 1000.6931472], rtol=1e-6)
    assert kept.shape == (2, 1)
    assert_close(kept[:, 0], rows[4:], rtol=1e-6)
    assert everything.shape == () and everything.dtype == np.float32
    assert np.isclose(everything, 1000.6931472 + np.log1p(np.exp(2.3132617 - 1000.6931472)))


def test_logsumexp_tf1_spellings_empty_and_unknown_rank():
    x = np.arange(12.0).reshape(3, 4)
    rank = tf.placeholder(tf.float64, None)
    got = session_run([tf.reduce_logsumexp(x, reduction_indices=[0], keep_dims=True),
                       tf.math.reduce_logsumexp(np.zeros((0, 3)), axis=0),
                       tf.reduce_logsumexp(rank, axis=-1)], {rank: x})
    want = np.log(np.exp(x).sum(axis=0, keepdims=True))
    assert_close(got[0], want, rtol=1e-12)
    np.testing.assert_array_equal(got[1], [-inf, -inf, -inf])
    assert_close(got[2], np.log(np.exp(x).sum(axis=-1)), rtol=1e-12)
    with pytest.raises(TypeError, match="reduce_logsumexp: .* int32"):
        tf.reduce_logsumexp(np.array([1, 2], np.int32))


def test_logsumexp_gradient_of_infinite_rows_is_tf1s():
    x = tf.constant(np.array([[-inf, -inf], [inf, 1.0], [1.0, 2.0]]))
    (grad,) = session_run(tf.gradients(tf.reduce_logsumexp(x, axis=1), x))
    softmax = np.exp([1.0, 2.0]) / np.exp([1.0, 2.0]).sum()
    assert_close(grad, [[nan, nan], [nan, 0.0], softmax], rtol=1e-12)


@st.composite
def reductions(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3))
    x = draw(hnp.arrays(np.float64, shape, elements=st.floats(-3.0, 3.0, width=64)))
    axis = draw(st.none() | st.lists(st.integers(-max(x.ndim, 1), max(x.ndim - 1, 0)),
                                     unique_by=lambda a: a % max(x.ndim, 1), max_size=x.ndim))
    if x.ndim == 0:
        axis = None
    return x, axis, draw(st.booleans())


@SETTINGS
@given(reductions(), st.sampled_from(["logsumexp", "variance", "std"]))
async def test_reduction_values_and_gradients(case, which):
    x, axis, keepdims = case
    reduce = {"logsumexp": af.reduce_logsumexp, "variance": af.math.reduce_variance,
              "std": af.math.reduce_std}[which]
    numpy_axis = None if axis is None else tuple(axis)
    want = {"logsumexp": lambda: np.log(np.exp(x).sum(axis=numpy_axis, keepdims=keepdims)),
            "variance": lambda: x.var(axis=numpy_axis, keepdims=keepdims),
            "std": lambda: x.std(axis=numpy_axis, keepdims=keepdims)}[which]()
    async with af.Session() as session:
        got = await session.run(reduce(x, axis=axis, keepdims=keepdims))
    assert_close(got, want, rtol=1e-10, atol=1e-12)
    if which == "std" and np.any(x.var(axis=numpy_axis) < 1e-3):
        return  # sqrt's derivative at (near) zero
    await check_gradients(lambda t: reduce(t, axis=axis, keepdims=keepdims), [x])
    await check_gradients(lambda t: reduce(hide_shape(t), axis=axis, keepdims=keepdims), [x])


def test_variance_and_std_dtypes_and_refusals():
    x = np.array([[1, 2, 4], [0, 0, 3]], np.float32)
    variance, std, half, rank = session_run([
        tf.math.reduce_variance(x, axis=-1), tf.math.reduce_std(x, axis=0, keepdims=True),
        tf.math.reduce_variance(x.astype(np.float16)),
        tf.math.reduce_std(tf.placeholder_with_default(x, None), axis=-2)])
    assert variance.dtype == np.float32 and half.dtype == np.float16
    assert_close(variance, x.var(axis=-1), rtol=1e-6)
    assert std.shape == (1, 3)
    assert_close(std, x.std(axis=0, keepdims=True), rtol=1e-6)
    assert_close(half, x.var(), rtol=2e-3)
    assert_close(rank, x.std(axis=0), rtol=1e-6)
    for reduce in (tf.math.reduce_variance, tf.math.reduce_std):
        for dtype in (np.int32, np.bool_):
            with pytest.raises(TypeError, match="must be either real or complex, got"):
                reduce(np.array([1, 0], dtype))
    empty = session_run(tf.math.reduce_variance(np.zeros((0, 2), np.float32), axis=0))
    assert np.isnan(empty).all()
