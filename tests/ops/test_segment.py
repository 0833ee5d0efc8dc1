"""The segment reductions of ops/segment.py: TF1's values (empty segments, negative ids,
ties, -0.0, integer means), its errors, and gradients against finite differences
(tests/ops/test_tf1_segment_sparse_fuzz.py compares them with TF1 itself)."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow import errors
from gradcheck import check_gradients

DATA = np.array([[1.0, 5.0], [3.0, -2.0], [0.0, 4.0], [7.0, 4.0]])


async def run(fetches):
    async with af.Session() as sess:
        return await sess.run(fetches)


async def test_sorted_reductions_fill_empty_segments_with_zero_or_one():
    with af.Graph().as_default():
        ids = [0, 0, 2, 2]
        got = await run([af.segment_max(DATA, ids), af.segment_min(DATA, ids),
                         af.segment_mean(DATA, ids), af.segment_prod(DATA, ids)])
    np.testing.assert_array_equal(got[0], [[3, 5], [0, 0], [7, 4]])
    np.testing.assert_array_equal(got[1], [[1, -2], [0, 0], [0, 4]])
    np.testing.assert_array_equal(got[2], [[2, 1.5], [0, 0], [3.5, 4]])
    np.testing.assert_array_equal(got[3], [[3, -10], [1, 1], [0, 16]])


async def test_unsorted_reductions_drop_negative_ids_and_start_from_finite_identities():
    with af.Graph().as_default():
        ids = [0, -1, 2, 2]
        got = await run([af.unsorted_segment_max(DATA.astype(np.float32), ids, 4),
                         af.unsorted_segment_min(DATA, ids, 4),
                         af.unsorted_segment_prod(DATA, ids, 4),
                         af.unsorted_segment_mean(DATA, ids, 4),
                         af.unsorted_segment_sqrt_n(DATA, [0, 0, 2, 2], 3),
                         af.unsorted_segment_max(np.array([3, 1], np.int32), [1, 1], 2)])
    lowest, highest = np.finfo(np.float32).min, np.finfo(np.float64).max
    np.testing.assert_array_equal(got[0], [[1, 5], [lowest] * 2, [7, 4], [lowest] * 2])
    np.testing.assert_array_equal(got[1], [[1, 5], [highest] * 2, [0, 4], [highest] * 2])
    np.testing.assert_array_equal(got[2], [[1, 5], [1, 1], [0, 16], [1, 1]])
    np.testing.assert_array_equal(got[3], [[1, 5], [0, 0], [3.5, 4], [0, 0]])
    np.testing.assert_allclose(got[4], [[4 / np.sqrt(2), 3 / np.sqrt(2)], [0, 0],
                                        [7 / np.sqrt(2), 8 / np.sqrt(2)]])
    np.testing.assert_array_equal(got[5], [np.iinfo(np.int32).min, 3])


async def test_a_mean_of_negative_zeros_and_an_integer_mean_are_tf1s():
    with af.Graph().as_default():
        got = await run([af.segment_mean(np.array([-0.0, 2.0], np.float32), [0, 1]),
                         af.segment_mean(np.array([-3, -4, 7], np.int32), [0, 0, 1])])
    assert np.signbit(got[0][0]) and got[0][1] == 2.0
    np.testing.assert_array_equal(got[1], [-3, 7])  # -7 / 2 truncates toward zero


async def test_bad_ids_fail_the_run_with_tf1s_messages():
    with af.Graph().as_default():
        unsorted = af.segment_max([1.0, 2.0], [1, 0])
        negative = af.segment_prod([1.0, 2.0], [-1, 0])
        beyond = af.unsorted_segment_min([1.0, 2.0], [0, 2], 2)
        for tensor, message in ((unsorted, "not increasing"), (negative, "must be >= 0"),
                                (beyond, r"segment_ids\[1\] = 2 is not in \[0, 2\)")):
            with pytest.raises(errors.InvalidArgumentError, match=message):
                await run(tensor)
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="must be a prefix"):
            af.unsorted_segment_max(np.zeros((3, 2)), [0, 1], 2)
        with pytest.raises(TypeError, match="must be floating"):
            af.unsorted_segment_sqrt_n([1, 2], [0, 0], 1)


@pytest.mark.parametrize("name", ["segment_max", "segment_min", "segment_mean", "segment_prod"])
async def test_sorted_gradients_match_finite_differences(name):
    data = np.array([[1.0, 5.0], [3.0, -2.0], [0.5, 4.0], [7.0, 0.25], [2.0, 1.5]])
    await check_gradients(lambda d: getattr(af, name)(d, [0, 0, 2, 2, 3]), [data])


@pytest.mark.parametrize("name", ["unsorted_segment_max", "unsorted_segment_min",
                                  "unsorted_segment_prod", "unsorted_segment_mean",
                                  "unsorted_segment_sqrt_n"])
async def test_unsorted_gradients_match_finite_differences(name):
    data = np.array([[1.0, 5.0], [3.0, -2.0], [0.5, 4.0], [7.0, 0.25], [2.0, 1.5]])
    # every segment named (an empty max is the lowest float64: no finite difference there)
    await check_gradients(lambda d: getattr(af, name)(d, [2, -1, 0, 2, 1], 3), [data])


async def test_max_shares_the_gradient_among_ties_and_prod_handles_zeros():
    """At a tie TF1 splits the gradient evenly; a product with one zero passes the product of
    the others to the zero, with two zeros nothing (no finite difference says so)."""
    with af.Graph().as_default():
        data = af.constant([2.0, 2.0, 1.0, 0.0, 3.0, 0.0, 0.0, 5.0])
        tied = af.gradients(af.segment_max(data[:3], [0, 0, 0]), data)[0]
        prod = af.gradients(af.unsorted_segment_prod(data[3:], [0, 0, 1, 1, -1], 2), data)[0]
        got = await run([tied, prod])
    np.testing.assert_array_equal(got[0], [0.5, 0.5, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(got[1], [0, 0, 0, 3.0, 0, 0, 0, 0])


async def test_sparse_segment_reductions_gather_then_reduce():
    with af.Graph().as_default():
        got = await run([af.sparse_segment_sum(DATA, [0, 3, 3], [0, 0, 2]),
                         af.sparse_segment_mean(DATA, [0, 3, 3], [0, 0, 2]),
                         af.sparse_segment_sqrt_n(DATA, [0, 3], [1, 1], num_segments=3),
                         af.sparse.segment_sum(DATA, [1], [0], num_segments=2)])
    np.testing.assert_array_equal(got[0], [[8, 9], [0, 0], [7, 4]])
    np.testing.assert_array_equal(got[1], [[4, 4.5], [0, 0], [7, 4]])
    np.testing.assert_allclose(got[2], [[0, 0], [8 / np.sqrt(2), 9 / np.sqrt(2)], [0, 0]])
    np.testing.assert_array_equal(got[3], [[3, -2], [0, 0]])
    with af.Graph().as_default():
        unsorted = af.sparse_segment_mean(DATA, [0, 1], [1, 0], num_segments=2)
        with pytest.raises(errors.InvalidArgumentError, match="not increasing"):
            await run(unsorted)
        with pytest.raises(TypeError, match="must be floating"):
            af.sparse_segment_mean(np.array([1, 2]), [0], [0])


@pytest.mark.parametrize("name", ["sparse_segment_sum", "sparse_segment_mean",
                                  "sparse_segment_sqrt_n"])
async def test_sparse_segment_gradients_match_finite_differences(name):
    await check_gradients(lambda d: getattr(af, name)(d, [0, 3, 3, 1], [0, 0, 2, 2]), [DATA])


async def test_integer_mean_of_large_int64_sums_is_exact():
    """TF1 divides the int64 sum by the count in integers; a mean through float64 lost the
    low bits of sums past 2**53 (and TF1 wraps an overflowing sum as C++ does)."""
    big = 2 ** 60 + 3
    with af.Graph().as_default():
        got = await run([af.segment_mean(np.array([big, big + 2, -big, -big - 3]), [0, 0, 1, 1]),
                         af.segment_mean(np.array([2 ** 62 + 1, 2 ** 62 + 3]), [0, 0])])
    np.testing.assert_array_equal(got[0], [big + 1, -big - 1])  # -big - 1.5 truncates to -big - 1
    np.testing.assert_array_equal(got[1], [-(2 ** 62) + 2])  # the wrapped sum's half, as TF1


async def test_integer_mean_wraps_its_sum_and_count_in_the_dtype():
    """TF1's int8 mean: 3 x 100 sums to 44 (wrapped), over 3 is 14; 200 ones sum to -56 and
    the count 200 is -56 in int8 too, so the mean is 1."""
    with af.Graph().as_default():
        got = await run([af.segment_mean(np.full(3, 100, np.int8), np.zeros(3, np.int32)),
                         af.segment_mean(np.ones(200, np.int8), np.zeros(200, np.int32)),
                         af.segment_mean(np.array([-7, 0], np.int8), np.zeros(2, np.int32))])
    np.testing.assert_array_equal(got, [[14], [1], [-3]])
    assert {value.dtype for value in got} == {np.dtype(np.int8)}


async def test_a_negative_or_non_scalar_num_segments_is_refused_when_building():
    """TF1 refuses either when building the graph; asyncflow failed the run instead, a
    vector's with "only 0-dimensional arrays can be converted to Python scalars"."""
    builds = (af.unsorted_segment_sum, af.unsorted_segment_max, af.unsorted_segment_min,
              af.unsorted_segment_prod, af.unsorted_segment_mean, af.unsorted_segment_sqrt_n)
    with af.Graph().as_default():
        vector = af.placeholder(af.int32, [1])
        for build in builds:
            with pytest.raises(ValueError, match="must be a non-negative scalar, got -1"):
                build(np.ones(3), [0, 0, 0], -1)
            with pytest.raises(ValueError, match=r"must be a non-negative scalar, got shape"):
                build(np.ones(3), [0, 0, 0], vector)


async def test_a_fed_num_segments_of_rank_one_fails_naming_it():
    with af.Graph().as_default():
        count = af.placeholder(af.int32)  # no shape: only the run can tell
        outs = [af.unsorted_segment_sum(np.ones(3), [0, 0, 1], count),
                af.unsorted_segment_max(np.ones(3), [0, 0, 1], count)]
        async with af.Session() as sess:
            for out in outs:
                with pytest.raises(errors.InvalidArgumentError,
                                   match=r"num_segments should be a scalar, got shape \[1\]"):
                    await sess.run(out, {count: [2]})


async def test_a_nan_wins_a_max_or_min_wherever_it_stands():
    """As reduce_max (docs/porting.md: TF1's kernels keep or drop it by its position)."""
    nan = float("nan")
    with af.Graph().as_default():
        data, ids = np.array([nan, 1.0, 1.0, nan]), [0, 0, 1, 1]
        got = await run([af.segment_max(data, ids), af.segment_min(data, ids),
                         af.unsorted_segment_max(data, ids, 2),
                         af.unsorted_segment_min(data, ids, 2),
                         af.tensor_scatter_nd_max([nan, 1.0], [[0], [1]], [1.0, nan]),
                         af.tensor_scatter_nd_min([nan, 1.0], [[0], [1]], [1.0, nan])])
    for value in got:
        np.testing.assert_array_equal(value, [nan, nan])


@pytest.mark.parametrize("reduction", ["segment_sum", "segment_max"])
async def test_sorted_ids_fed_as_a_matrix_fail_the_run(reduction):
    """TF1's kernel wants a vector; a [2, 1] matrix of ids was flattened and ran (the sum's
    kernel and the others' share one check of their ids)."""
    with af.Graph().as_default():
        ids = af.placeholder(af.int32)  # no shape: only the run can tell
        out = getattr(af, reduction)(np.array([1.0, 2.0]), ids)
        async with af.Session() as sess:
            with pytest.raises(errors.InvalidArgumentError,
                               match=r"segment_ids should be a vector, got shape \[2, 1\]"):
                await sess.run(out, {ids: [[0], [0]]})


async def test_rows_of_zero_elements():
    # data of shape [3, 0]: the kernels reshaped it to (-1, 0), which numpy cannot resolve
    # (TF1 gives [segments, 0]); the gradient of a gather from params with a zero dim is one
    with af.Graph().as_default():
        data = np.zeros([3, 0], np.float32)
        ids = [0, 1, 1]
        params = af.placeholder(af.float32, [None, 0])
        grad = af.gradients(af.reduce_sum(af.gather(params, [0, 1])), params)[0]
        async with af.Session() as sess:
            got = await sess.run([af.unsorted_segment_sum(data, ids, 4), af.segment_sum(data, ids),
                                  af.unsorted_segment_max(data, ids, 4),
                                  af.segment_mean(data, ids), af.convert_to_tensor(grad)],
                                 {params: np.zeros([2, 0], np.float32)})
    assert [g.shape for g in got] == [(4, 0), (2, 0), (4, 0), (2, 0), (2, 0)]
