"""TensorFlow 1.x's ``python/kernel_tests/padding_fifo_queue_test.py``, ported to asyncflow
(the padding-specific tests; the FIFO behaviour it shares is in test_tf1_fifo_queue.py).

Each test keeps TF's inputs, expected values and error classes; its docstring names the TF
method.
"""
import numpy as np
import pytest

import asyncflow as af


async def test_multi_dequeue_many_with_partially_known_shapes():
    """padding_fifo_queue_test.py PaddingFIFOQueueTest.testMultiDequeueManyWithPartiallyKnownShapes"""
    with af.Graph().as_default():
        q = af.PaddingFIFOQueue(10, (af.float32, af.int32), shapes=((), (None,)))
        float_elems = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
        int_elems = [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12], [13, 14],
                     [15, 16], [17, 18], [19, 20]]
        enqueue_op = q.enqueue_many((float_elems, int_elems))
        dequeued_t = q.dequeue_many(4)
        dequeued_single_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            float_val, int_val = await sess.run(dequeued_t)
            np.testing.assert_array_equal(float_val, float_elems[0:4])
            np.testing.assert_array_equal(int_val, int_elems[0:4])
            assert af.TensorShape(float_val.shape).is_compatible_with(dequeued_t[0].shape)
            assert af.TensorShape(int_val.shape).is_compatible_with(dequeued_t[1].shape)
            float_val, int_val = await sess.run(dequeued_t)
            np.testing.assert_array_equal(float_val, float_elems[4:8])
            np.testing.assert_array_equal(int_val, int_elems[4:8])
            float_val, int_val = await sess.run(dequeued_single_t)
            np.testing.assert_array_equal(float_val, float_elems[8])
            np.testing.assert_array_equal(int_val, int_elems[8])
            assert af.TensorShape(int_val.shape).is_compatible_with(dequeued_single_t[1].shape)


@pytest.mark.parametrize("method", ["dequeue_many", "dequeue_up_to"])
async def test_partially_known_shapes_and_variable_size_input(method):
    """padding_fifo_queue_test.py
    PaddingFIFOQueueTest.testMultiDequeueManyWithPartiallyKnownShapesAndVariableSizeInput /
    testMultiDequeueUpToPartiallyKnownShapesAndVariableInputNoBlocking"""
    with af.Graph().as_default():
        q = af.PaddingFIFOQueue(10, (af.string, af.int32), shapes=((None,), (1, None)))
        str_elems = [["a"], ["ab"], ["abc"], ["abc", "d"], ["abc", "d", "e"],
                     ["abc", "d", "e", "f"]]
        int_elems = [[[1]], [[2]], [[3]], [[1, 2]], [[1, 2, 3]], [[1, 2, 3, 4]]]
        enqueue_ops = [q.enqueue((str_elems[i], int_elems[i])) for i in range(6)]
        dequeued_t = getattr(q, method)(5)
        dequeued_single_t = q.dequeue()
        async with af.Session() as sess:
            for op in enqueue_ops:
                await sess.run(op)
            string_val, int_val = await sess.run(dequeued_t)
            assert string_val.tolist() == [[b"a", b"", b""], [b"ab", b"", b""],
                                           [b"abc", b"", b""], [b"abc", b"d", b""],
                                           [b"abc", b"d", b"e"]]
            assert int_val.tolist() == [[[1, 0, 0]], [[2, 0, 0]], [[3, 0, 0]], [[1, 2, 0]],
                                        [[1, 2, 3]]]
            assert af.TensorShape(string_val.shape).is_compatible_with(dequeued_t[0].shape)
            assert af.TensorShape(int_val.shape).is_compatible_with(dequeued_t[1].shape)
            string_val, int_val = await sess.run(dequeued_single_t)
            assert string_val.tolist() == [b"abc", b"d", b"e", b"f"]
            assert int_val.tolist() == [[1, 2, 3, 4]]


@pytest.mark.parametrize("shape", [(4, 4, 4, 4), (4, None, 4, None)])
async def test_high_dimension(shape):
    """padding_fifo_queue_test.py PaddingFIFOQueueTest.testHighDimension /
    testPartiallyKnownHighDimension"""
    with af.Graph().as_default():
        q = af.PaddingFIFOQueue(10, af.int32, (shape,))
        elems = np.array([[[[[x] * 4] * 4] * 4] * 4 for x in range(10)], np.int32)
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = q.dequeue_many(10)
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            np.testing.assert_array_equal(await sess.run(dequeued_t), elems)


def test_enqueue_wrong_shape():
    """padding_fifo_queue_test.py PaddingFIFOQueueTest.testEnqueueWrongShape"""
    with af.Graph().as_default():
        q = af.PaddingFIFOQueue(10, (af.int32, af.int32), ((), (2,)))
        with pytest.raises(ValueError):
            q.enqueue(([1, 2], [2, 2]))
        with pytest.raises(ValueError):
            q.enqueue_many((7, [[1, 2], [3, 4], [5, 6]]))


def test_batch_size_mismatch():
    """padding_fifo_queue_test.py PaddingFIFOQueueTest.testBatchSizeMismatch"""
    with af.Graph().as_default():
        q = af.PaddingFIFOQueue(10, (af.int32, af.int32, af.int32), ((), (), ()))
        with pytest.raises(ValueError):
            q.enqueue_many(([1, 2, 3], [1, 2], [1, 2, 3]))
        with pytest.raises(ValueError):
            q.enqueue_many(([1, 2, 3], [1, 2], af.placeholder(af.int32)))
        with pytest.raises(ValueError):
            q.enqueue_many((af.placeholder(af.int32), [1, 2], [1, 2, 3]))


def test_enqueue_many_empty_type_conversion():
    """padding_fifo_queue_test.py PaddingFIFOQueueTest.testEnqueueManyEmptyTypeConversion"""
    with af.Graph().as_default():
        q = af.PaddingFIFOQueue(10, (af.int32, af.float32), ((), ()))
        enq = q.enqueue_many(([], []))
        assert enq.inputs[1].dtype is af.int32
        assert enq.inputs[2].dtype is af.float32


async def test_enqueue_wrong_partially_known_shape_at_runtime():
    """padding_fifo_queue_test.py PaddingFIFOQueueTest.testEnqueueWrongPartiallyKnownShapeAtRuntime"""
    with af.Graph().as_default():
        q = af.PaddingFIFOQueue(10, (af.int32, af.int32), ((2, 2), (None, 3)))
        elems_ok = np.array([1] * 4).reshape((2, 2)).astype(np.int32)
        elems_bad = af.placeholder(af.int32)
        enqueue_op = q.enqueue((elems_ok, elems_bad))
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"Expected \[\?,3\], got \[3,4\]"):
                await sess.run([enqueue_op], {elems_bad: np.array([1] * 12).reshape((3, 4))})


async def test_enqueue_dequeue_many_wrong_partially_known_shape():
    """padding_fifo_queue_test.py PaddingFIFOQueueTest.testEnqueueDequeueManyWrongPartiallyKnownShape"""
    with af.Graph().as_default():
        q = af.PaddingFIFOQueue(10, (af.int32, af.int32), ((2, 2), (None, 3)))
        elems_ok = np.array([1] * 8).reshape((2, 2, 2)).astype(np.int32)
        elems_bad = af.placeholder(af.int32)
        enqueue_op = q.enqueue_many((elems_ok, elems_bad))
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"Shape mismatch in tuple component 1\. "
                                     r"Expected \[2,\?,3\], got \[2,3,4\]"):
                await sess.run([enqueue_op],
                               {elems_bad: np.array([1] * 24).reshape((2, 3, 4))})


async def test_parallel_dequeue_up_to_from_closed_queue():
    """padding_fifo_queue_test.py PaddingFIFOQueueTest.testParallelDequeueUpTo"""
    import trio
    with af.Graph().as_default():
        q = af.PaddingFIFOQueue(1000, af.float32, shapes=((),))
        elems = [10.0 * x for x in range(1000)]
        enqueue_op = q.enqueue_many((elems,))
        close_op = q.close()
        dequeued_t = q.dequeue_up_to(101)
        dequeued = []
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            await sess.run(close_op)

            async def dequeue():
                dequeued.extend((await sess.run(dequeued_t)).tolist())
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(dequeue)
    assert sorted(dequeued) == elems
