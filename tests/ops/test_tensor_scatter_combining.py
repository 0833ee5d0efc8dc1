"""``tensor_scatter_nd_add/sub/max/min`` (ops/scatter_nd.py): TF1's values with repeated
tuples, its errors, and gradients against finite differences and at ties
(tests/ops/test_tf1_segment_sparse_fuzz.py compares them with TF1 itself)."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from asyncflow import errors
from gradcheck import check_gradients

BASE = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
INDICES = np.array([[0], [2], [0]], np.int32)
UPDATES = np.array([[10.0, -1.0], [0.0, 7.0], [1.0, 3.0]])


async def run(fetches):
    async with af.Session() as sess:
        return await sess.run(fetches)


async def test_repeated_tuples_combine():
    with af.Graph().as_default():
        got = await run([tf.tensor_scatter_add(BASE, INDICES, UPDATES),
                         tf.tensor_scatter_sub(BASE, INDICES, UPDATES),
                         af.tensor_scatter_nd_max(BASE, INDICES, UPDATES),
                         af.tensor_scatter_nd_min(BASE, INDICES, UPDATES)])
    np.testing.assert_array_equal(got[0], [[12, 4], [3, 4], [5, 13]])
    np.testing.assert_array_equal(got[1], [[-10, 0], [3, 4], [5, -1]])
    np.testing.assert_array_equal(got[2], [[10, 3], [3, 4], [5, 7]])
    np.testing.assert_array_equal(got[3], [[1, -1], [3, 4], [0, 6]])


async def test_an_index_out_of_range_fails_the_run_and_shapes_are_checked_when_built():
    with af.Graph().as_default():
        with pytest.raises(errors.InvalidArgumentError, match=r"indices\[..., 0\]\[1\] = 3"):
            await run(af.tensor_scatter_nd_max(BASE, [[0], [3]], UPDATES[:2]))
        with pytest.raises(ValueError, match="updates must have shape"):
            af.tensor_scatter_nd_add(BASE, INDICES, UPDATES[:, :1])


@pytest.mark.parametrize("name", ["tensor_scatter_nd_add", "tensor_scatter_nd_sub",
                                  "tensor_scatter_nd_max", "tensor_scatter_nd_min"])
async def test_gradients_match_finite_differences(name):
    updates = UPDATES + 0.25  # no ties with the tensor
    await check_gradients(lambda t, u: getattr(af, name)(t, INDICES, u), [BASE, updates])


async def test_max_shares_the_gradient_at_a_tie():
    with af.Graph().as_default():
        t = af.constant([1.0, 2.0])
        u = af.constant([[2.0], [2.0]])[:, 0]
        grads = af.gradients(af.tensor_scatter_nd_max(t, [[1], [1]], u), [t, u])
        got = await run(grads)
    np.testing.assert_allclose(got[0], [1.0, 1 / 3])
    np.testing.assert_allclose(got[1], [1 / 3, 1 / 3])
