"""TensorFlow 1.x's ``control_flow_ops_py_test.py``: IndexedSlices and SparseTensor as
``while_loop`` variables and ``cond`` results, ported to asyncflow.

A composite value rides through the loop or the cond as its component tensors. Its shape
invariant follows TF1: an IndexedSlices' invariant is its values' shape; a SparseTensor's is
the shape of its ``dense_shape`` vector. ``TensorShape[i]`` is an int here where TF1 has a
``Dimension`` (``.value``). Every test runs with simple loops compiled and all dynamic.
"""
import numpy as np
import pytest

import asyncflow as af
import loop_modes


@pytest.fixture(autouse=True, params=["compiled", "dynamic"])
def loop_mode(request):
    loop_modes.use(request.param)
    yield request.param
    loop_modes.use("compiled")


async def run(fetches, feed_dict=None):
    async with af.Session(config=loop_modes.config()) as sess:
        return await sess.run(fetches, feed_dict)


def _sparse():
    values = af.constant([2.0, 4.0], name="values")
    indices = af.constant([[0], [3]], dtype=af.int64, name="indices")
    shape = af.constant([10], dtype=af.int64, name="dense_shape")
    return af.SparseTensor(indices, values, dense_shape=shape)


def _double_sparse(i, x):
    return [i + 1, af.SparseTensor(x.indices, x.values * 2.0, x.dense_shape)]


async def test_while_shape_inference_sparse_tensor():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileShapeInferenceSparseTensor"""
    with af.Graph().as_default():
        i = af.constant(0)
        x = _sparse()
        _, r = af.while_loop(lambda i, _: i < 10, _double_sparse, [i, x])
        assert isinstance(r, af.SparseTensor)
        assert r.dense_shape.get_shape()[0] == 1
        value = await run(r)
        np.testing.assert_array_equal(value.values, [2048.0, 4096.0])
        np.testing.assert_array_equal(value.indices, [[0], [3]])
        np.testing.assert_array_equal(value.dense_shape, [10])

        _, r = af.while_loop(lambda i, _: i < 10, _double_sparse, [i, x],
                             [i.get_shape(), af.TensorShape([None])])
        assert r.dense_shape.get_shape()[0] is None
        with pytest.raises(ValueError, match="is not compatible with"):
            af.while_loop(lambda i, _: i < 10, _double_sparse, [i, x],
                          [i.get_shape(), af.TensorShape([5])])


async def test_while_shape_inference_indexed_slices():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileShapeInferenceIndexedSlices"""
    with af.Graph().as_default():
        values = af.constant([[2.0, 4.0], [3.0, 5.0]], name="values")
        indices = af.constant([0, 3], name="indices")
        shape = af.constant([10, 2], name="dense_shape")
        i = af.constant(0)
        x = af.IndexedSlices(values, indices, dense_shape=shape)

        def b(i, x):
            return [i + 1, af.IndexedSlices(x.values * 2.0, x.indices, x.dense_shape)]
        _, r = af.while_loop(lambda i, _: i < 10, b, [i, x])
        assert isinstance(r, af.IndexedSlices)
        assert r.dense_shape.get_shape()[0] == 2
        assert r.values.get_shape() == af.TensorShape([2, 2])
        value = await run(r)
        np.testing.assert_array_equal(value.values, [[2048.0, 4096.0], [3072.0, 5120.0]])
        np.testing.assert_array_equal(value.indices, [0, 3])
        np.testing.assert_array_equal(value.dense_shape, [10, 2])

        _, r = af.while_loop(lambda i, _: i < 10, b, [i, x],
                             [i.get_shape(), af.TensorShape([None, 2])])
        assert r.dense_shape.get_shape()[0] == 2
        assert r.values.get_shape()[0] is None
        assert r.values.get_shape()[1] == 2
        with pytest.raises(ValueError, match="is not compatible with"):
            af.while_loop(lambda i, _: i < 10, b, [i, x],
                          [i.get_shape(), af.TensorShape([None, 5])])


async def test_cond_indexed_slices():
    """control_flow_ops_py_test.py ControlFlowTest.testCondIndexedSlices (no dense_shape)"""
    with af.Graph().as_default():
        values = af.constant(10)
        indices = af.constant(0)
        x = af.IndexedSlices(values, indices)
        pred = af.less(1, 2)
        r = af.cond(pred, lambda: af.IndexedSlices(af.add(x.values, 1), indices),
                    lambda: af.IndexedSlices(af.subtract(x.values, 1), indices))
        assert isinstance(r, af.IndexedSlices) and r.dense_shape is None
        assert await run([r.values, r.indices]) == [11, 0]


async def test_cond_sparse_tensor():
    """control_flow_ops_py_test.py ControlFlowTest.testCondSparseTensor"""
    with af.Graph().as_default():
        x = _sparse()
        shape = x.dense_shape
        pred = af.less(1, 2)
        r = af.cond(pred, lambda: af.SparseTensor(x.indices + 1, x.values + 1, dense_shape=shape),
                    lambda: af.SparseTensor(x.indices, x.values - 1, dense_shape=shape))
        values, indices = await run([r.values, r.indices])
        np.testing.assert_array_equal(values, [3.0, 5.0])
        np.testing.assert_array_equal(indices, [[1], [4]])
        assert r.values.get_shape() == af.TensorShape([2])


def test_composite_structures_must_match():
    with af.Graph().as_default():
        x = _sparse()
        with pytest.raises(ValueError, match="same structure"):
            af.cond(af.less(1, 2), lambda: x, lambda: x.values)
        with pytest.raises(ValueError, match="a shape with 1 dimension"):
            af.while_loop(lambda i, _: i < 10, _double_sparse, [af.constant(0), x],
                          [af.TensorShape([]), af.TensorShape([None, None])])


def test_map_fn_and_scan_refuse_composite_elems():
    """TF1's map_fn and scan take tensors; a composite is refused by name, not split into
    its parts."""
    with af.Graph().as_default():
        x = _sparse()
        with pytest.raises(TypeError, match=r"map_fn: elems holds a composite value \(Sparse"):
            af.map_fn(lambda v: v, x)
        with pytest.raises(TypeError, match=r"scan: elems holds a composite value \(Indexed"):
            af.scan(lambda a, v: a, af.IndexedSlices(x.values, af.constant([0, 1])))
