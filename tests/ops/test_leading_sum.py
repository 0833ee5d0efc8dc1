"""``Sum`` over leading axes (the bias gradients of an ``Add``) as a GEMV with ones (issue 37):
within float32/float64 rounding of numpy's sum, no less accurate than it against a float64
(longdouble) reference, keepdims and several leading axes, NaN and inf where numpy has them,
and the shapes it leaves to numpy's sum (few rows or columns, inner axes, strided, integer)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncflow as af
from asyncflow.kernels import math as kmath


class Ctx:
    def __init__(self, axis, keepdims=False):
        self.attrs = {"axis": axis, "keepdims": keepdims}
        self.xp = np
        self.name = "sum"


def ours(x, axis, keepdims=False):
    return kmath._sum(Ctx(axis, keepdims), x)[0]


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 300), columns=st.integers(1, 70), lead=st.integers(1, 2),
       keepdims=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2 ** 16))
def test_leading_sum_within_rounding_of_numpy(rows, columns, lead, keepdims, dtype, seed):
    rng = np.random.default_rng(seed)
    shape = (rows, columns) if lead == 1 else (2, rows, columns)
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    axes = tuple(range(lead))
    got = ours(x, axes, keepdims)
    want = x.sum(axis=axes, keepdims=keepdims)
    assert got.dtype == x.dtype and got.shape == want.shape
    exact = x.astype(np.longdouble).sum(axis=axes, keepdims=keepdims)
    eps = np.finfo(dtype).eps
    # Both sums are within the n*eps*sum|x| bound of the exact one.
    bound = eps * x.shape[0] * (len(shape) - 1) * np.abs(x).astype(np.longdouble).sum(
        axis=axes, keepdims=keepdims)
    assert np.all(np.abs(got - exact) <= bound)
    assert np.all(np.abs(want - exact) <= bound)


def test_leading_sum_uses_the_gemv_and_is_no_less_accurate():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 784)).astype(np.float32)
    got = ours(x, (0,))
    assert got.shape == (784,) and got.dtype == np.float32
    assert got.tobytes() == (np.ones(256, np.float32) @ x).tobytes()  # the GEMV's own bits
    exact = x.astype(np.float64).sum(axis=0)
    assert np.abs(got - exact).max() <= np.abs(x.sum(axis=0) - exact).max()


def test_leading_sum_keeps_nan_and_inf():
    x = np.ones((16, 12), np.float32)
    x[3, 0], x[5, 1], x[6, 2], x[7, 2] = np.nan, np.inf, np.inf, -np.inf
    x[:, 3] = -0.0
    got = ours(x, (0,))
    assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2])
    assert got[3] == 0 and np.all(got[4:] == 16)


@pytest.mark.parametrize("x, axis", [
    (np.ones((4, 100), np.float32), (0,)),                  # few rows
    (np.ones((100, 4), np.float32), (0,)),                  # few columns
    (np.ones((30, 40), np.float32), (1,)),                  # an inner axis
    (np.ones((40, 30), np.float32).T, (0,)),                # not C-contiguous
    (np.ones((30, 40), np.int32), (0,)),                    # integers
    (np.ones((30, 40), np.float16), (0,)),                  # accumulated in float32
    (np.ones((30, 40), np.float32), None),                  # every axis
    (np.ones((0, 40), np.float32), (0,)),                   # empty
])
def test_other_sums_are_numpys(x, axis):
    got = ours(x, axis)
    want = np.asarray(x.sum(axis=axis, dtype=np.float32 if x.dtype == np.float16 else None)
                      ).astype(x.dtype)
    assert got.dtype == x.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("axis", [(2, 1), (1, 0), (1, 1), (0, 0, 1)])
def test_only_the_leading_axes_in_order_take_the_gemv(axis):
    """Axes that are not exactly ``0, ..., k-1`` (unsorted or repeated, as a graph of unknown
    rank may carry them) sum over the axes given, never over the leading ones."""
    x = np.random.default_rng(2).standard_normal((8, 9, 10)).astype(np.float32)
    want = x.sum(axis=tuple(sorted(set(axis))))
    got = ours(x, tuple(sorted(set(axis))))
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5)
    if len(set(axis)) == len(axis):
        got = ours(x, axis)
        assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        with pytest.raises(ValueError):
            ours(x, axis)


@pytest.mark.parametrize("axis, summed", [([2, 1], (1, 2)), ([1, 1], (1,)), ([1, 0, 1], (0, 1))])
async def test_reduce_sum_of_unknown_rank_sums_the_axes_given(axis, summed):
    """``reduce_sum`` of a tensor of unknown rank keeps its axes sorted, as for a known rank:
    the sum over the axes given (it once took ``[2, 1]`` for the leading two). An axis named
    twice is refused, as TF1 does ("Axes contains duplicate dimension")."""
    graph = af.Graph()
    with graph.as_default():
        x = af.placeholder(af.float32, None, name="x")
        if len(set(axis)) != len(axis):
            with pytest.raises(ValueError, match="reduce_sum: .*names an axis twice"):
                af.reduce_sum(x, axis=axis)
            return
        total = af.reduce_sum(x, axis=axis)
    assert total.op.get_attr("axis") == summed
    value = np.random.default_rng(3).standard_normal((8, 9, 10)).astype(np.float32)
    async with af.Session(graph=graph) as session:
        got = await session.run(total, {x: value})
    want = value.sum(axis=summed)
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5)
