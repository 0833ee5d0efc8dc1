"""TensorFlow 1.x's ``python/kernel_tests/fifo_queue_test.py``, ported to asyncflow.

Each test keeps TF's inputs, expected values and error classes; its docstring names the TF
method. TF's threads become trio tasks, and TF's ``time.sleep(0.1)`` "until the op has
blocked" becomes ``wait_all_tasks_blocked()``. One deliberate change of TF's own
history: enqueueing to a closed queue is ``CancelledError`` (TF 1.x and later; the 2016
test file still said ``AbortedError``).
"""
import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
from blocked_tasks import start_blocked


def test_constructor():
    """fifo_queue_test.py FIFOQueueTest.testConstructor"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32, name="Q")
    assert isinstance(q.queue_ref, af.Tensor)
    op = q.queue_ref.op
    assert (op.name, op.type) == ("Q", "FIFOQueue")
    assert list(op.get_attr("component_types")) == [af.float32]
    assert list(op.get_attr("shapes")) == []
    assert op.get_attr("capacity") == 10
    assert (op.get_attr("container"), op.get_attr("shared_name")) == ("", "")


def test_multi_queue_constructor():
    """fifo_queue_test.py FIFOQueueTest.testMultiQueueConstructor"""
    with af.Graph().as_default():
        q = af.FIFOQueue(5, (af.int32, af.float32), shared_name="foo", name="Q")
    op = q.queue_ref.op
    assert list(op.get_attr("component_types")) == [af.int32, af.float32]
    assert op.get_attr("capacity") == 5
    assert op.get_attr("shared_name") == "foo"


def test_constructor_with_shapes():
    """fifo_queue_test.py FIFOQueueTest.testConstructorWithShapes"""
    with af.Graph().as_default():
        q = af.FIFOQueue(5, (af.int32, af.float32),
                         shapes=(af.TensorShape([1, 1, 2, 3]), af.TensorShape([5, 8])), name="Q")
    shapes = q.queue_ref.op.get_attr("shapes")
    assert [s.as_list() for s in shapes] == [[1, 1, 2, 3], [5, 8]]


def test_scalar_shape_tuple_is_one_component():
    """fifo_queue_test.py FIFOQueueTest.testDequeueMany: ``FIFOQueue(10, float32, ())``
    holds scalars (TF's _as_shape_list reads ``()`` as one component's shape)."""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32, ())
    assert [s.as_list() for s in q.shapes] == [[]]


async def test_enqueue():
    """fifo_queue_test.py FIFOQueueTest.testEnqueue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        enqueue_op = q.enqueue((10.0,))
        async with af.Session() as sess:
            assert await sess.run(enqueue_op) is None


async def test_enqueue_with_shape():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueWithShape"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32, shapes=(3, 2))
        enqueue_correct_op = q.enqueue(([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],))
        with pytest.raises(ValueError):
            q.enqueue(([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],))
        async with af.Session() as sess:
            await sess.run(enqueue_correct_op)
            assert await sess.run(q.size()) == 1


async def test_enqueue_many_with_shape():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueManyWithShape"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, [af.int32, af.int32], shapes=[(), (2,)])
        enq = q.enqueue_many([[1, 2, 3, 4], [[1, 1], [2, 2], [3, 3], [4, 4]]])
        async with af.Session() as sess:
            await sess.run(enq)
            assert await sess.run(q.size()) == 4


def test_enqueue_dict_without_names():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueDictWithoutNames"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        with pytest.raises(ValueError, match="must have names"):
            q.enqueue({"a": 12.0})
        with pytest.raises(ValueError, match="must have names"):
            q.enqueue_many({"a": [12.0, 13.0]})


async def test_parallel_enqueue():
    """fifo_queue_test.py FIFOQueueTest.testParallelEnqueue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
        enqueue_ops = [q.enqueue((x,)) for x in elems]
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                for op in enqueue_ops:
                    nursery.start_soon(sess.run, op)
            results = [await sess.run(dequeued_t) for _ in elems]
    assert sorted(results) == sorted(elems)


async def test_parallel_dequeue():
    """fifo_queue_test.py FIFOQueueTest.testParallelDequeue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
        enqueue_ops = [q.enqueue((x,)) for x in elems]
        dequeued_t = q.dequeue()
        results = []
        async with af.Session() as sess:
            for op in enqueue_ops:
                await sess.run(op)

            async def dequeue():
                results.append(await sess.run(dequeued_t))
            async with trio.open_nursery() as nursery:
                for _ in elems:
                    nursery.start_soon(dequeue)
    assert sorted(results) == sorted(elems)


async def test_dequeue():
    """fifo_queue_test.py FIFOQueueTest.testDequeue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        elems = [10.0, 20.0, 30.0]
        enqueue_ops = [q.enqueue((x,)) for x in elems]
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            for op in enqueue_ops:
                await sess.run(op)
            for elem in elems:
                assert await sess.run(dequeued_t) == elem


async def test_enqueue_and_blocking_dequeue():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueAndBlockingDequeue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(3, af.float32)
        elems = [10.0, 20.0, 30.0]
        enqueue_ops = [q.enqueue((x,)) for x in elems]
        dequeued_t = q.dequeue()
        results = []
        async with af.Session() as sess:
            async def dequeue():
                for _ in elems:
                    results.append(await sess.run(dequeued_t))
            async with trio.open_nursery() as nursery:
                await start_blocked(nursery, dequeue)
                for op in enqueue_ops:
                    await sess.run(op)
    assert results == elems


async def test_multi_enqueue_and_dequeue():
    """fifo_queue_test.py FIFOQueueTest.testMultiEnqueueAndDequeue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, (af.int32, af.float32))
        elems = [(5, 10.0), (10, 20.0), (15, 30.0)]
        enqueue_ops = [q.enqueue((x, y)) for x, y in elems]
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            for op in enqueue_ops:
                await sess.run(op)
            for x, y in elems:
                x_val, y_val = await sess.run(dequeued_t)
                assert (x_val, y_val) == (x, y)


async def test_queue_size_empty():
    """fifo_queue_test.py FIFOQueueTest.testQueueSizeEmpty"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        async with af.Session() as sess:
            assert await sess.run(q.size()) == 0


async def test_queue_size_after_enqueue_and_dequeue():
    """fifo_queue_test.py FIFOQueueTest.testQueueSizeAfterEnqueueAndDequeue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        enqueue_op = q.enqueue((10.0,))
        dequeued_t = q.dequeue()
        size = q.size()
        assert size.shape.as_list() == []
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            assert await sess.run(size) == 1
            await sess.run(dequeued_t.op)
            assert await sess.run(size) == 0


async def test_enqueue_many():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            await sess.run(enqueue_op)
            for i in range(8):
                assert await sess.run(dequeued_t) == elems[i % 4]


async def test_empty_enqueue_many():
    """fifo_queue_test.py FIFOQueueTest.testEmptyEnqueueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        empty_t = af.constant([], dtype=af.float32, shape=[0, 2, 3])
        enqueue_op = q.enqueue_many((empty_t,))
        size_t = q.size()
        async with af.Session() as sess:
            assert await sess.run(size_t) == 0
            await sess.run(enqueue_op)
            assert await sess.run(size_t) == 0


async def test_empty_dequeue_many():
    """fifo_queue_test.py FIFOQueueTest.testEmptyDequeueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32, shapes=())
        enqueue_op = q.enqueue((10.0,))
        dequeued_t = q.dequeue_many(0)
        async with af.Session() as sess:
            assert (await sess.run(dequeued_t)).tolist() == []
            await sess.run(enqueue_op)
            assert (await sess.run(dequeued_t)).tolist() == []


async def test_empty_dequeue_many_with_no_shape():
    """fifo_queue_test.py FIFOQueueTest.testEmptyDequeueManyWithNoShape"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        async with af.Session() as sess:
            with pytest.raises(af.errors.OpError, match="specified shapes"):
                await sess.run(q.dequeue_many(0))


async def test_multi_enqueue_many():
    """fifo_queue_test.py FIFOQueueTest.testMultiEnqueueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, (af.float32, af.int32))
        float_elems = [10.0, 20.0, 30.0, 40.0]
        int_elems = [[1, 2], [3, 4], [5, 6], [7, 8]]
        enqueue_op = q.enqueue_many((float_elems, int_elems))
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            await sess.run(enqueue_op)
            for i in range(8):
                float_val, int_val = await sess.run(dequeued_t)
                assert float_val == float_elems[i % 4]
                np.testing.assert_array_equal(int_val, int_elems[i % 4])


async def test_dequeue_many():
    """fifo_queue_test.py FIFOQueueTest.testDequeueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32, ())
        elems = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = q.dequeue_many(4)
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            np.testing.assert_array_equal(await sess.run(dequeued_t), elems[0:4])
            np.testing.assert_array_equal(await sess.run(dequeued_t), elems[4:8])


async def test_multi_dequeue_many():
    """fifo_queue_test.py FIFOQueueTest.testMultiDequeueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, (af.float32, af.int32), shapes=((), (2,)))
        float_elems = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
        int_elems = [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10],
                     [11, 12], [13, 14], [15, 16], [17, 18], [19, 20]]
        enqueue_op = q.enqueue_many((float_elems, int_elems))
        dequeued_t = q.dequeue_many(4)
        dequeued_single_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            float_val, int_val = await sess.run(dequeued_t)
            np.testing.assert_array_equal(float_val, float_elems[0:4])
            np.testing.assert_array_equal(int_val, int_elems[0:4])
            assert list(float_val.shape) == dequeued_t[0].shape.as_list()
            assert list(int_val.shape) == dequeued_t[1].shape.as_list()
            float_val, int_val = await sess.run(dequeued_t)
            np.testing.assert_array_equal(float_val, float_elems[4:8])
            np.testing.assert_array_equal(int_val, int_elems[4:8])
            float_val, int_val = await sess.run(dequeued_single_t)
            assert float_val == float_elems[8]
            np.testing.assert_array_equal(int_val, int_elems[8])
            assert list(float_val.shape) == dequeued_single_t[0].shape.as_list()
            assert list(int_val.shape) == dequeued_single_t[1].shape.as_list()


async def test_high_dimension():
    """fifo_queue_test.py FIFOQueueTest.testHighDimension"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.int32, (4, 4, 4, 4))
        elems = np.array([[[[[x] * 4] * 4] * 4] * 4 for x in range(10)], np.int32)
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = q.dequeue_many(10)
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            np.testing.assert_array_equal(await sess.run(dequeued_t), elems)


def test_enqueue_wrong_shape():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueWrongShape"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, (af.int32, af.int32), ((), (2,)))
        with pytest.raises(ValueError):
            q.enqueue(([1, 2], [2, 2]))
        with pytest.raises(ValueError):
            q.enqueue_many((7, [[1, 2], [3, 4], [5, 6]]))


def test_batch_size_mismatch():
    """fifo_queue_test.py FIFOQueueTest.testBatchSizeMismatch"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, (af.int32, af.int32, af.int32), ((), (), ()))
        with pytest.raises(ValueError):
            q.enqueue_many(([1, 2, 3], [1, 2], [1, 2, 3]))
        with pytest.raises(ValueError):
            q.enqueue_many(([1, 2, 3], [1, 2], af.placeholder(af.int32)))
        with pytest.raises(ValueError):
            q.enqueue_many((af.placeholder(af.int32), [1, 2], [1, 2, 3]))


def test_enqueue_many_empty_type_conversion():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueManyEmptyTypeConversion"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, (af.int32, af.float32), ((), ()))
        enq = q.enqueue_many(([], []))
        assert enq.inputs[1].dtype is af.int32
        assert enq.inputs[2].dtype is af.float32


def test_enqueue_wrong_type():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueWrongType: TF raises ValueError from
    its op-def checks; a dtype mismatch is a TypeError in asyncflow, as everywhere else in
    TF1's graph building (documented in docs/porting.md)."""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, (af.int32, af.float32), ((), ()))
        with pytest.raises(TypeError):
            q.enqueue((af.placeholder(af.int32), af.placeholder(af.int32)))
        with pytest.raises(TypeError):
            q.enqueue_many((af.placeholder(af.int32), af.placeholder(af.int32)))


async def test_enqueue_wrong_shape_at_runtime():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueWrongShapeAtRuntime"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, (af.int32, af.int32), ((2, 2), (3, 3)))
        elems_ok = np.array([1] * 4).reshape((2, 2)).astype(np.int32)
        elems_bad = af.placeholder(af.int32)
        enqueue_op = q.enqueue((elems_ok, elems_bad))
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"Expected \[3,3\], got \[3,4\]"):
                await sess.run([enqueue_op],
                               {elems_bad: np.array([1] * 12).reshape((3, 4))})


async def test_enqueue_dequeue_many_wrong_shape():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueDequeueManyWrongShape"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, (af.int32, af.int32), ((2, 2), (3, 3)))
        elems_ok = np.array([1] * 8).reshape((2, 2, 2)).astype(np.int32)
        elems_bad = af.placeholder(af.int32)
        enqueue_op = q.enqueue_many((elems_ok, elems_bad))
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"Shape mismatch in tuple component 1\b.*"
                                     r"Expected \[2,3,3\], got \[2,3,4\]"):
                await sess.run([enqueue_op],
                               {elems_bad: np.array([1] * 24).reshape((2, 3, 4))})


async def test_parallel_enqueue_many():
    """fifo_queue_test.py FIFOQueueTest.testParallelEnqueueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(1000, af.float32, shapes=())
        elems = [10.0 * x for x in range(100)]
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = q.dequeue_many(1000)
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(sess.run, enqueue_op)
            assert sorted((await sess.run(dequeued_t)).tolist()) == sorted(elems * 10)


async def test_parallel_dequeue_many():
    """fifo_queue_test.py FIFOQueueTest.testParallelDequeueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(1000, af.float32, shapes=())
        elems = [10.0 * x for x in range(1000)]
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = q.dequeue_many(100)
        dequeued = []
        async with af.Session() as sess:
            await sess.run(enqueue_op)

            async def dequeue():
                dequeued.extend((await sess.run(dequeued_t)).tolist())
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(dequeue)
    assert sorted(dequeued) == sorted(elems)


async def test_parallel_enqueue_and_dequeue():
    """fifo_queue_test.py FIFOQueueTest.testParallelEnqueueAndDequeue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(50, af.float32, shapes=())
        initial = q.enqueue_many(([10.0] * 49,))
        enqueue_op = q.enqueue((20.0,))
        dequeued_t = q.dequeue()
        cleanup = q.dequeue_many(49)
        async with af.Session() as sess:
            await sess.run(initial)

            async def enqueue():
                for _ in range(100):
                    await sess.run(enqueue_op)

            async def dequeue():
                for _ in range(100):
                    assert await sess.run(dequeued_t) in (10.0, 20.0)
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(enqueue)
                for _ in range(10):
                    nursery.start_soon(dequeue)
            for elem in await sess.run(cleanup):
                assert elem in (10.0, 20.0)


async def test_mixture_of_dequeue_and_dequeue_many():
    """fifo_queue_test.py FIFOQueueTest.testMixtureOfDequeueAndDequeueMany (a fixed
    pattern of counts instead of ``random``)"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.int32, shapes=())
        enqueue_op = q.enqueue_many((np.arange(250, dtype=np.int32),))
        dequeued_t = q.dequeue()
        count_placeholder = af.placeholder(af.int32, shape=())
        dequeuemany_t = q.dequeue_many(count_placeholder)
        counts = [1, 7, 0, 20, 1, 13, 3]
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sess.run, enqueue_op)
                done = 0
                step = 0
                while done < 250:
                    count = min(counts[step % len(counts)], 250 - done)
                    step += 1
                    if count == 1:
                        assert await sess.run(dequeued_t) == done
                    else:
                        np.testing.assert_array_equal(
                            await sess.run(dequeuemany_t, {count_placeholder: count}),
                            np.arange(done, done + count))
                    done += count
            await sess.run(q.close())
            assert await sess.run(q.size()) == 0


async def test_blocking_dequeue_many():
    """fifo_queue_test.py FIFOQueueTest.testBlockingDequeueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32, ())
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = q.dequeue_many(4)
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, dequeued_t)
                assert box == {}
                await sess.run(enqueue_op)
    assert box["value"].tolist() == elems


async def test_dequeue_many_with_tensor_parameter():
    """fifo_queue_test.py FIFOQueueTest.testDequeueManyWithTensorParameter (fixed counts)"""
    with af.Graph().as_default():
        dequeue_counts = [3, 1, 10, 4, 7, 2, 9, 5, 6, 8] * 10
        count_q = af.FIFOQueue(100, af.int32, ())
        enqueue_counts_op = count_q.enqueue_many((dequeue_counts,))
        total_count = sum(dequeue_counts)
        elems = [(7 * i) % 101 for i in range(total_count)]
        q = af.FIFOQueue(total_count, af.int32, ())
        enqueue_elems_op = q.enqueue_many((elems,))
        dequeued_t = q.dequeue_many(count_q.dequeue())
        async with af.Session() as sess:
            await sess.run(enqueue_counts_op)
            await sess.run(enqueue_elems_op)
            dequeued = []
            for _ in dequeue_counts:
                dequeued.extend((await sess.run(dequeued_t)).tolist())
    assert dequeued == elems


async def test_dequeue_from_closed_queue():
    """fifo_queue_test.py FIFOQueueTest.testDequeueFromClosedQueue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        close_op = q.close()
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            await sess.run(close_op)
            for elem in elems:
                assert await sess.run(dequeued_t) == elem
            with pytest.raises(af.errors.OutOfRangeError, match="is closed and has insufficient"):
                await sess.run(dequeued_t)


async def test_blocking_dequeue_from_closed_queue():
    """fifo_queue_test.py FIFOQueueTest.testBlockingDequeueFromClosedQueue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        close_op = q.close()
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)

            async def dequeue():
                for elem in elems:
                    assert await sess.run(dequeued_t) == elem
                with pytest.raises(af.errors.OutOfRangeError,
                                   match="is closed and has insufficient"):
                    await sess.run(dequeued_t)
                return "done"
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, dequeue)
                await sess.run(close_op)
    assert box == {"value": "done"}


async def test_blocking_dequeue_from_closed_empty_queue():
    """fifo_queue_test.py FIFOQueueTest.testBlockingDequeueFromClosedEmptyQueue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        close_op = q.close()
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, dequeued_t)
                await sess.run(close_op)
    assert isinstance(box["error"], af.errors.OutOfRangeError)
    assert "is closed and has insufficient" in str(box["error"])


async def test_blocking_dequeue_many_from_closed_queue():
    """fifo_queue_test.py FIFOQueueTest.testBlockingDequeueManyFromClosedQueue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32, ())
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        close_op = q.close()
        dequeued_t = q.dequeue_many(4)
        async with af.Session() as sess:
            await sess.run(enqueue_op)

            async def dequeue():
                np.testing.assert_array_equal(await sess.run(dequeued_t), elems)
                with pytest.raises(af.errors.OutOfRangeError,
                                   match="is closed and has insufficient"):
                    await sess.run(dequeued_t)
                return "done"
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, dequeue)
                await sess.run(close_op)
    assert box == {"value": "done"}


async def test_enqueue_many_larger_than_capacity_with_concurrent_dequeue_many():
    """fifo_queue_test.py
    FIFOQueueTest.testEnqueueManyLargerThanCapacityWithConcurrentDequeueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(4, af.float32, ())
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        close_op = q.close()
        dequeued_t = q.dequeue_many(3)
        cleanup_dequeue_t = q.dequeue()
        async with af.Session() as sess:
            async def dequeue():
                np.testing.assert_array_equal(await sess.run(dequeued_t), elems[0:3])
                with pytest.raises(af.errors.OutOfRangeError):
                    await sess.run(dequeued_t)
                assert await sess.run(cleanup_dequeue_t) == elems[3]
                return "done"
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sess.run, enqueue_op)
                box = await start_blocked(nursery, dequeue)
                await sess.run(close_op)
    assert box == {"value": "done"}


async def test_closed_blocking_dequeue_many_restores_partial_batch():
    """fifo_queue_test.py FIFOQueueTest.testClosedBlockingDequeueManyRestoresPartialBatch"""
    with af.Graph().as_default():
        q = af.FIFOQueue(4, (af.float32, af.float32), ((), ()))
        elems_a = [1.0, 2.0, 3.0]
        elems_b = [10.0, 20.0, 30.0]
        enqueue_op = q.enqueue_many((elems_a, elems_b))
        dequeued_a_t, dequeued_b_t = q.dequeue_many(4)
        cleanup_dequeue_a_t, cleanup_dequeue_b_t = q.dequeue()
        close_op = q.close()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, [dequeued_a_t, dequeued_b_t])
                await sess.run(close_op)
            assert isinstance(box["error"], af.errors.OutOfRangeError)
            for elem_a, elem_b in zip(elems_a, elems_b):
                val_a, val_b = await sess.run([cleanup_dequeue_a_t, cleanup_dequeue_b_t])
                assert (val_a, val_b) == (elem_a, elem_b)
            assert await sess.run(q.size()) == 0


async def test_blocking_dequeue_many_from_closed_empty_queue():
    """fifo_queue_test.py FIFOQueueTest.testBlockingDequeueManyFromClosedEmptyQueue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32, ())
        close_op = q.close()
        dequeued_t = q.dequeue_many(4)
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, dequeued_t)
                await sess.run(close_op)
    assert isinstance(box["error"], af.errors.OutOfRangeError)
    assert "is closed and has insufficient" in str(box["error"])


async def test_enqueue_to_closed_queue():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueToClosedQueue (CancelledError, TF 1.x)"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        enqueue_op = q.enqueue((10.0,))
        close_op = q.close()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            await sess.run(close_op)
            with pytest.raises(af.errors.CancelledError, match="is closed"):
                await sess.run(enqueue_op)


async def test_enqueue_many_to_closed_queue():
    """fifo_queue_test.py FIFOQueueTest.testEnqueueManyToClosedQueue (CancelledError, TF 1.x)"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32)
        enqueue_op = q.enqueue_many(([10.0, 20.0, 30.0, 40.0],))
        close_op = q.close()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            await sess.run(close_op)
            with pytest.raises(af.errors.CancelledError, match="is closed"):
                await sess.run(enqueue_op)


async def test_blocking_enqueue_to_full_queue():
    """fifo_queue_test.py FIFOQueueTest.testBlockingEnqueueToFullQueue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(4, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        blocking_enqueue_op = q.enqueue((50.0,))
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, blocking_enqueue_op)
                for elem in elems:
                    assert await sess.run(dequeued_t) == elem
                assert await sess.run(dequeued_t) == 50.0
    assert box == {"value": None}


async def test_blocking_enqueue_many_to_full_queue():
    """fifo_queue_test.py FIFOQueueTest.testBlockingEnqueueManyToFullQueue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(4, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        blocking_enqueue_op = q.enqueue_many(([50.0, 60.0],))
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            async with trio.open_nursery() as nursery:
                await start_blocked(nursery, sess.run, blocking_enqueue_op)
                for elem in elems + [50.0, 60.0]:
                    assert await sess.run(dequeued_t) == elem


async def test_blocking_enqueue_before_close():
    """fifo_queue_test.py FIFOQueueTest.testBlockingEnqueueBeforeClose"""
    with af.Graph().as_default():
        q = af.FIFOQueue(4, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        blocking_enqueue_op = q.enqueue((50.0,))
        close_op = q.close()
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, blocking_enqueue_op)
                nursery.start_soon(sess.run, close_op)
                assert await sess.run(dequeued_t) == 10.0
            assert box == {"value": None}
            for elem in [20.0, 30.0, 40.0, 50.0]:
                assert await sess.run(dequeued_t) == elem
            assert await sess.run(q.size()) == 0


async def test_blocking_enqueue_many_before_close():
    """fifo_queue_test.py FIFOQueueTest.testBlockingEnqueueManyBeforeClose"""
    with af.Graph().as_default():
        q = af.FIFOQueue(4, af.float32)
        enqueue_op = q.enqueue_many(([10.0, 20.0, 30.0],))
        blocking_enqueue_op = q.enqueue_many(([50.0, 60.0],))
        close_op = q.close()
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            async with trio.open_nursery() as nursery:
                await start_blocked(nursery, sess.run, blocking_enqueue_op)
                nursery.start_soon(sess.run, close_op)
                assert await sess.run(dequeued_t) == 10.0
            for elem in [20.0, 30.0, 50.0, 60.0]:
                assert await sess.run(dequeued_t) == elem


async def test_does_not_lose_value():
    """fifo_queue_test.py FIFOQueueTest.testDoesNotLoseValue"""
    with af.Graph().as_default():
        q = af.FIFOQueue(1, af.float32)
        enqueue_op = q.enqueue((10.0,))
        size_t = q.size()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            for _ in range(500):
                assert await sess.run(size_t) == 1


async def test_shared_queue_same_session():
    """fifo_queue_test.py FIFOQueueTest.testSharedQueueSameSession"""
    with af.Graph().as_default():
        q1 = af.FIFOQueue(1, af.float32, shared_name="shared_queue")
        q2 = af.FIFOQueue(1, af.float32, shared_name="shared_queue")
        q1_size_t, q2_size_t = q1.size(), q2.size()
        async with af.Session() as sess:
            await sess.run(q1.enqueue((10.0,)))
            assert await sess.run([q1_size_t, q2_size_t]) == [1, 1]
            assert await sess.run(q2.dequeue()) == 10.0
            assert await sess.run([q1_size_t, q2_size_t]) == [0, 0]
            await sess.run(q2.enqueue((20.0,)))
            assert await sess.run([q1_size_t, q2_size_t]) == [1, 1]
            assert await sess.run(q1.dequeue()) == 20.0
            assert await sess.run([q1_size_t, q2_size_t]) == [0, 0]


@pytest.mark.parametrize("first, second, message", [
    (dict(capacity=10), dict(capacity=15), "capacity"),
    (dict(dtypes=af.float32), dict(dtypes=af.int32), "component types"),
    (dict(), dict(shapes=[(1, 1, 2, 3)]), "component shapes"),
    (dict(shapes=[(1, 1, 2, 3)]), dict(), "component shapes"),
    (dict(shapes=[(1, 1, 2, 3)]), dict(shapes=[(1, 1, 2, 4)]), "component shapes"),
    (dict(), dict(dtypes=(af.float32, af.int32)), "component types"),
])
async def test_incompatible_shared_queue_errors(first, second, message):
    """fifo_queue_test.py FIFOQueueTest.testIncompatibleSharedQueueErrors"""
    def queue(kwargs, name):
        args = dict(capacity=10, dtypes=af.float32, shapes=None)
        args.update(kwargs)
        return af.FIFOQueue(args["capacity"], args["dtypes"], shapes=args["shapes"],
                            shared_name=name)
    name = "q_" + message.replace(" ", "_")
    with af.Graph().as_default():
        q_1, q_2 = queue(first, name), queue(second, name)
        async with af.Session() as sess:
            await sess.run(q_1.queue_ref)
            with pytest.raises(af.errors.OpError, match=message):
                await sess.run(q_2.queue_ref)


async def test_big_enqueue_many():
    """fifo_queue_test.py FIFOQueueTest.testBigEnqueueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(5, af.int32, ((),))
        elem = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
        enq = q.enqueue_many((elem,))
        deq = q.dequeue()
        size_op = q.size()
        results = []
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, enq)
                results.append(await sess.run(deq))
                assert await sess.run(size_op) == 5
                for _ in range(3):
                    results.append(await sess.run(deq))
                await trio.testing.wait_all_tasks_blocked()
                assert box == {} and await sess.run(size_op) == 5
                results.append(await sess.run(deq))  # unblocks the enqueue
            assert box == {"value": None}
            for i in range(5):
                assert await sess.run(size_op) == 5 - i
                results.append(await sess.run(deq))
                assert await sess.run(size_op) == 5 - i - 1
    assert results == elem


async def test_big_dequeue_many():
    """fifo_queue_test.py FIFOQueueTest.testBigDequeueMany"""
    with af.Graph().as_default():
        q = af.FIFOQueue(2, af.int32, ((),))
        elem = np.arange(4, dtype=np.int32)
        enq_list = [q.enqueue((e,)) for e in elem]
        deq = q.dequeue_many(4)
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, deq)
                for enq in enq_list:
                    await trio.testing.wait_all_tasks_blocked()
                    assert box == {}
                    await sess.run(enq)
    np.testing.assert_array_equal(box["value"], elem)


async def test_dtypes():
    """fifo_queue_test.py FIFOQueueTest.testDtypes (asyncflow's dtypes: no int16 or
    complex64)"""
    dtypes = [af.float32, af.float64, af.int32, af.uint8, af.int8, af.int64, af.bool]
    shape = (32, 4, 128)
    rng = np.random.RandomState(0)
    with af.Graph().as_default():
        q = af.FIFOQueue(32, dtypes, [shape[1:]] * len(dtypes))
        inputs = []
        for dtype in dtypes:
            array = rng.randint(-10, 10, shape)
            inputs.append(array > 0 if dtype is af.bool else array.astype(dtype.np))
        enq = q.enqueue_many(inputs)
        out = q.dequeue_many(32)
        async with af.Session() as sess:
            await sess.run(enq)
            outputs = await sess.run(out)
    for given, got in zip(inputs, outputs):
        np.testing.assert_array_equal(given, got)


def test_device_colocation():
    """fifo_queue_test.py FIFOQueueTest.testDeviceColocation"""
    with af.Graph().as_default():
        with af.device("/job:ps"):
            q = af.FIFOQueue(32, [af.int32], name="q")
        with af.device("/job:worker/task:7"):
            dequeued_t = q.dequeue()
    assert "/job:ps" in dequeued_t.device


def test_dict_constructor():
    """fifo_queue_test.py FIFOQueueDictTest.testConstructor"""
    with af.Graph().as_default():
        q = af.FIFOQueue(5, (af.int32, af.float32), names=("i", "j"), shared_name="foo",
                         name="Q")
    assert q.queue_ref.op.get_attr("shared_name") == "foo"
    assert q.names == ["i", "j"]


async def test_dict_enqueue_dequeue_one_component():
    """fifo_queue_test.py FIFOQueueDictTest.testEnqueueDequeueOneComponent"""
    with af.Graph().as_default():
        q = af.FIFOQueue(10, af.float32, shapes=((),), names="f")
        with pytest.raises(ValueError, match="enqueue a dictionary"):
            q.enqueue(10.0)
        with pytest.raises(ValueError, match="enqueue a dictionary"):
            q.enqueue((10.0,))
        for bad in ({}, {"x": 12}, {"f": 10.0, "s": "aa"}):
            with pytest.raises(ValueError, match="match names of Queue"):
                q.enqueue(bad)
        ops = [q.enqueue({"f": 10.0}), q.enqueue({"f": 20.0}), q.enqueue({"f": 30.0})]
        with pytest.raises(ValueError, match="enqueue a dictionary"):
            q.enqueue_many([40.0, 50.0])
        for bad in ({}, {"x": 12}, {"f": [40.0, 50.0], "s": ["aa", "bb"]}):
            with pytest.raises(ValueError, match="match names of Queue"):
                q.enqueue_many(bad)
        ops.append(q.enqueue_many({"f": [40.0, 50.0]}))
        dequeue = q.dequeue()
        dequeue_2 = q.dequeue_many(2)
        async with af.Session() as sess:
            for op in ops:
                await sess.run(op)
            assert await sess.run(dequeue["f"]) == 10.0
            assert list(await sess.run(dequeue_2["f"])) == [20.0, 30.0]
            assert list(await sess.run(dequeue_2["f"])) == [40.0, 50.0]


async def test_negative_capacity_is_unbounded():
    """control_flow_ops_py_test.py ControlFlowTest.testWhileQueue_1 builds
    ``FIFOQueue(-1, int32)``: a negative capacity means no bound."""
    with af.Graph().as_default():
        q = af.FIFOQueue(-1, af.int32)
        i = af.constant(0)

        def body(i):
            with af.control_dependencies([q.enqueue((i,))]):
                return af.add(i, 1)
        r = af.while_loop(lambda i: af.less(i, 10), body, [i], parallel_iterations=1)
        dequeue = q.dequeue()
        async with af.Session() as sess:
            assert await sess.run(r) == 10
            for i in range(10):
                assert await sess.run(dequeue) == i
