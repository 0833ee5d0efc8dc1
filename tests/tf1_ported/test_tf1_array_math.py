"""TensorFlow 1.x's array and math kernel tests (``pack_op_test.py``, ``concat_op_test.py``,
``reshape_op_test.py``, ``math_ops_test.py``), the parts about graph building that
asyncflow must match: auto-packing of lists holding tensors, dtypes of numpy operands,
partially known shapes. Each docstring names the TF test, or says the case is issue 14's
with TF1's behaviour confirmed through ``tf.compat.v1``.
"""
import numpy as np
import pytest

import asyncflow as af


async def test_auto_pack_simple():
    """pack_op_test.py AutomaticPackingTest.testSimple"""
    with af.Graph().as_default():
        t = af.convert_to_tensor([1, af.constant(0), 2])
        async with af.Session() as sess:
            assert (await sess.run(t)).tolist() == [1, 0, 2]


async def test_auto_pack_with_nd_array():
    """pack_op_test.py AutomaticPackingTest.testWithNDArray"""
    with af.Graph().as_default():
        result = af.convert_to_tensor([[[0., 0.], af.constant([1., 1.])],
                                       np.array([[2., 2.], [3., 3.]], dtype=np.float32)])
        async with af.Session() as sess:
            assert (await sess.run(result)).tolist() == [[[0., 0.], [1., 1.]],
                                                         [[2., 2.], [3., 3.]]]


async def test_auto_pack_variable():
    """pack_op_test.py AutomaticPackingTest.testVariable"""
    with af.Graph().as_default():
        v = af.Variable(17)
        result = af.convert_to_tensor([[0, 0, 0], [0, v, 0], [0, 0, 0]])
        async with af.Session() as sess:
            await sess.run(v.initializer)
            assert (await sess.run(result)).tolist() == [[0, 0, 0], [0, 17, 0], [0, 0, 0]]
            await sess.run(v.assign(38).op)
            assert (await sess.run(result)).tolist() == [[0, 0, 0], [0, 38, 0], [0, 0, 0]]


def test_auto_pack_dtype():
    """pack_op_test.py AutomaticPackingTest.testDtype"""
    with af.Graph().as_default():
        t_0 = af.convert_to_tensor([[0., 0., 0.], [0., 0., 0.], [0., 0., 0.]])
        assert t_0.dtype is af.float32
        t_1 = af.convert_to_tensor([[0., 0., 0.], af.constant([0., 0., 0.], dtype=af.float64),
                                    [0., 0., 0.]])
        assert t_1.dtype is af.float64
        t_2 = af.convert_to_tensor([[0., 0., 0.], [0., 0., 0.], [0., 0., 0.]],
                                   dtype=af.float64)
        assert t_2.dtype is af.float64
        with pytest.raises(TypeError):
            af.convert_to_tensor([af.constant([0., 0., 0.], dtype=af.float32),
                                  af.constant([0., 0., 0.], dtype=af.float64), [0., 0., 0.]])


async def test_auto_pack_placeholder():
    """pack_op_test.py AutomaticPackingTest.testPlaceholder"""
    with af.Graph().as_default():
        ph_0 = af.placeholder(af.int32, shape=[])
        result_0 = af.convert_to_tensor([[0, 0, 0], [0, ph_0, 0], [0, 0, 0]])
        async with af.Session() as sess:
            assert (await sess.run(result_0, {ph_0: 1})).tolist() == \
                [[0, 0, 0], [0, 1, 0], [0, 0, 0]]


def test_auto_pack_shape_errors():
    """pack_op_test.py AutomaticPackingTest.testShapeErrors"""
    with af.Graph().as_default():
        c_0 = af.constant([1, 2, 3, 4, 5])
        with pytest.raises(ValueError):
            af.convert_to_tensor([[0, 0, 0], [0, c_0, 0], [0, 0, 0]])


async def test_reshape_with_a_placeholder_in_the_shape_list():
    """Issue 14 case (tf.compat.v1: ``reshape(x, [placeholder(int32), 37])`` auto-packs the
    list; TF infers (2, 37))."""
    with af.Graph().as_default():
        x = af.constant(np.arange(74.0).reshape(2, 37))
        batch = af.placeholder(af.int32)
        r = af.reshape(x, [batch, 37])
        assert r.shape.is_compatible_with(af.TensorShape([2, 37]))
        async with af.Session() as sess:
            np.testing.assert_array_equal(await sess.run(r, {batch: 2}),
                                          np.arange(74.0).reshape(2, 37))


async def test_zeros_with_a_tensor_in_the_shape_list():
    """array_ops.zeros([batch, 3]) with a tensor ``batch`` (TF1 auto-packs the shape)."""
    with af.Graph().as_default():
        batch = af.placeholder(af.int32, [])
        z = af.zeros([batch, 3])
        async with af.Session() as sess:
            assert (await sess.run(z, {batch: 2})).shape == (2, 3)


async def test_concat_unknown_rank_with_known_rank():
    """Issue 14 case (tf.compat.v1: ``concat([unknown_rank, (?, 3)], 0)`` has shape (?, 3),
    along axis 1 (?, ?))."""
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 3])
        u = af.placeholder(af.float32)
        along0 = af.concat([u, x], 0)
        along1 = af.concat([x, u], 1)
        assert along0.shape.as_list() == [None, 3]
        assert along1.shape.as_list() == [None, None]
        async with af.Session() as sess:
            got = await sess.run(along0, {u: np.ones((1, 3)), x: np.zeros((2, 3))})
    np.testing.assert_array_equal(got, [[1, 1, 1], [0, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize("build", [
    lambda: af.add(np.ones(2), np.ones(2)),
    lambda: af.add(np.ones(2), 1),
    lambda: af.multiply(np.float64(2.0), af.constant(1.0, af.float64)),
])
async def test_float64_numpy_operands_stay_float64(build):
    """Issue 14 case (tf.compat.v1: ``add(np.ones(2), np.ones(2))`` and
    ``add(np.ones(2), 1)`` are float64, like ``convert_to_tensor`` of a float64 array)."""
    with af.Graph().as_default():
        t = build()
        assert t.dtype is af.float64
        async with af.Session() as sess:
            assert (await sess.run(t)).dtype == np.float64


def test_python_floats_are_float32():
    """math_ops_test.py: Python floats alone stay float32 (TF1's default)."""
    with af.Graph().as_default():
        assert af.add(1.0, 2.0).dtype is af.float32
        assert af.add([1.0, 2.0], 1).dtype is af.float32


async def test_auto_packed_shape_arguments():
    """tile/slice/pad take lists holding tensors, auto-packed like TF1's convert_to_tensor
    (tile_op: ``multiples``, slice_op: ``begin``, pad_op: ``paddings``)."""
    with af.Graph().as_default():
        n = af.placeholder(af.int32, [])
        x = af.constant(np.arange(6.0).reshape(2, 3))
        outs = {"tile": af.tile(x, [n, 1]), "slice": af.slice(x, [0, n], [-1, 1]),
                "pad": af.pad(x, [[0, n], [0, 0]])}
        async with af.Session() as sess:
            got = await sess.run(outs, {n: 1})
    base = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(got["tile"], np.tile(base, [1, 1]))
    np.testing.assert_array_equal(got["slice"], base[:, 1:2])
    np.testing.assert_array_equal(got["pad"], np.pad(base, [[0, 1], [0, 0]]))


@pytest.mark.parametrize("func", [af.add, af.subtract, af.multiply, af.divide,
                                  lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y,
                                  lambda x, y: x / y, lambda x, y: x // y])
def test_mismatched_dimensions(func):
    """cwise_ops_test.py BinaryOpTest.testMismatchedDimensions"""
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Dimensions must"):
            func(af.convert_to_tensor([10.0, 20.0, 30.0]),
                 af.convert_to_tensor([[40.0, 50.0], [60.0, 70.0]]))


async def test_incompatible_shapes_at_run_time():
    """Shapes known only at run time: TF1's kernel error, InvalidArgumentError
    "Incompatible shapes: [2] vs. [3]"."""
    with af.Graph().as_default():
        a, b = af.placeholder(af.float32), af.placeholder(af.float32)
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"Incompatible shapes: \[2\] vs\. \[3\]"):
                await sess.run(a + b, {a: [1.0, 2.0], b: [1.0, 2.0, 3.0]})
