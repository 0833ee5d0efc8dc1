"""TensorFlow 1.x's ``python/kernel_tests/random_shuffle_queue_test.py``, ported to asyncflow.

Each test keeps TF's inputs, expected values and error classes; its docstring names the TF
method. TF's threads become trio tasks; "sleep until the op has blocked" becomes
``wait_all_tasks_blocked()``. ``close`` returns at once instead of waiting behind blocked
enqueues (documented in docs/porting.md); what a caller observes about elements is TF's.
"""
import numpy as np
import pytest
import trio

import asyncflow as af
from blocked_tasks import start_blocked


async def test_enqueue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testEnqueue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 5, af.float32)
        enqueue_op = q.enqueue((10.0,))
        async with af.Session() as sess:
            assert await sess.run(q.size()) == 0
            await sess.run(enqueue_op)
            assert await sess.run(q.size()) == 1


async def test_enqueue_with_shape():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testEnqueueWithShape"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 5, af.float32, shapes=af.TensorShape([3, 2]))
        enqueue_correct_op = q.enqueue(([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],))
        async with af.Session() as sess:
            await sess.run(enqueue_correct_op)
            assert await sess.run(q.size()) == 1
        with pytest.raises(ValueError):
            q.enqueue(([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],))


async def test_enqueue_many_with_shape():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testEnqueueManyWithShape"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 5, [af.int32, af.int32], shapes=[(), (2,)])
        enq = q.enqueue_many([[1, 2, 3, 4], [[1, 1], [2, 2], [3, 3], [4, 4]]])
        q2 = af.RandomShuffleQueue(10, 5, af.int32, shapes=af.TensorShape([3]))
        q2.enqueue(([1, 2, 3],))
        q2.enqueue_many(([[1, 2, 3]],))
        async with af.Session() as sess:
            await sess.run(enq)
            assert await sess.run(q.size()) == 4


async def test_scalar_shapes():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testScalarShapes"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, [af.int32, af.int32], shapes=[(), (1,)])
        enq_many = q.enqueue_many([[1, 2, 3, 4], [[5], [6], [7], [8]]])
        enq = q.enqueue([9, [10]])
        dequeue_t = q.dequeue()
        dequeue_3 = q.dequeue_many(3)
        results = []
        async with af.Session() as sess:
            await sess.run(enq_many)
            await sess.run(enq)
            for _ in range(2):
                a, b = await sess.run(dequeue_t)
                results.append((int(a), b.tolist()))
            a, b = await sess.run(dequeue_3)
            results.extend((int(a[i]), b[i].tolist()) for i in range(3))
    assert sorted(results) == [(1, [5]), (2, [6]), (3, [7]), (4, [8]), (9, [10])]


async def test_parallel_enqueue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testParallelEnqueue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
        enqueue_ops = [q.enqueue((x,)) for x in elems]
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                for op in enqueue_ops:
                    nursery.start_soon(sess.run, op)
            results = [await sess.run(dequeued_t) for _ in elems]
    assert sorted(results) == elems


async def test_dequeue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testDequeue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.float32)
        elems = [10.0, 20.0, 30.0]
        enqueue_ops = [q.enqueue((x,)) for x in elems]
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            for op in enqueue_ops:
                await sess.run(op)
            vals = [await sess.run(dequeued_t) for _ in elems]
    assert sorted(vals) == elems


async def test_enqueue_and_blocking_dequeue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testEnqueueAndBlockingDequeue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(3, 0, af.float32)
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
    assert sorted(results) == elems


async def test_queue_size_after_enqueue_and_dequeue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testQueueSizeAfterEnqueueAndDequeue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.float32)
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
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testEnqueueMany"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            await sess.run(enqueue_op)
            results = [await sess.run(dequeued_t) for _ in range(8)]
    assert sorted(results) == sorted(elems + elems)


@pytest.mark.parametrize("method", ["dequeue_many", "dequeue_up_to"])
async def test_empty_dequeue(method):
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testEmptyDequeueMany /
    testEmptyDequeueUpTo"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.float32, shapes=())
        enqueue_op = q.enqueue((10.0,))
        dequeued_t = getattr(q, method)(0)
        async with af.Session() as sess:
            assert (await sess.run(dequeued_t)).tolist() == []
            await sess.run(enqueue_op)
            assert (await sess.run(dequeued_t)).tolist() == []


@pytest.mark.parametrize("method", ["dequeue_many", "dequeue_up_to"])
async def test_empty_dequeue_with_no_shape(method):
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testEmptyDequeueManyWithNoShape /
    testEmptyDequeueUpToWithNoShape"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.float32)
        enqueue_op = q.enqueue((af.constant([10.0, 20.0], shape=(1, 2)),))
        dequeued_t = getattr(q, method)(0)
        async with af.Session() as sess:
            with pytest.raises(af.errors.OpError,
                               match="require the components to have specified shapes"):
                await sess.run(dequeued_t)
            await sess.run(enqueue_op)
            with pytest.raises(af.errors.OpError,
                               match="require the components to have specified shapes"):
                await sess.run(dequeued_t)


async def test_multi_enqueue_many():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testMultiEnqueueMany"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, (af.float32, af.int32))
        float_elems = [10.0, 20.0, 30.0, 40.0]
        int_elems = [[1, 2], [3, 4], [5, 6], [7, 8]]
        enqueue_op = q.enqueue_many((float_elems, int_elems))
        dequeued_t = q.dequeue()
        results = []
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            await sess.run(enqueue_op)
            for _ in range(8):
                float_val, int_val = await sess.run(dequeued_t)
                results.append((float(float_val), int_val.tolist()))
    assert sorted(results) == sorted(list(zip(float_elems, int_elems)) * 2)


@pytest.mark.parametrize("method", ["dequeue_many", "dequeue_up_to"])
async def test_dequeue_many_no_blocking(method):
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testDequeueMany /
    testDequeueUpToNoBlocking"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.float32, ((),))
        elems = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = getattr(q, method)(5)
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            results = (await sess.run(dequeued_t)).tolist()
            results.extend((await sess.run(dequeued_t)).tolist())
    assert sorted(results) == elems


async def test_multi_dequeue_up_to_no_blocking():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testMultiDequeueUpToNoBlocking"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, (af.float32, af.int32), shapes=((), (2,)))
        float_elems = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
        int_elems = [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12], [13, 14],
                     [15, 16], [17, 18], [19, 20]]
        enqueue_op = q.enqueue_many((float_elems, int_elems))
        dequeued_t = q.dequeue_up_to(4)
        dequeued_single_t = q.dequeue()
        # dequeue_up_to has an undefined batch size.
        assert dequeued_t[0].shape.as_list() == [None]
        assert dequeued_t[1].shape.as_list() == [None, 2]
        results = []
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            for _ in range(2):
                float_val, int_val = await sess.run(dequeued_t)
                results.extend(zip(float_val.tolist(), int_val.tolist()))
            for _ in range(2):
                float_val, int_val = await sess.run(dequeued_single_t)
                assert list(float_val.shape) == dequeued_single_t[0].shape.as_list()
                assert list(int_val.shape) == dequeued_single_t[1].shape.as_list()
                results.append((float(float_val), int_val.tolist()))
    assert sorted(results) == sorted(zip(float_elems, int_elems))


async def test_high_dimension():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testHighDimension"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.int32, ((4, 4, 4, 4)))
        elems = np.array([[[[[x] * 4] * 4] * 4] * 4 for x in range(10)], np.int32)
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = q.dequeue_many(10)
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            got = (await sess.run(dequeued_t)).tolist()
    assert sorted(got) == sorted(elems.tolist())


async def test_parallel_dequeue_up_to_partition():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testParallelDequeueUpToRandomPartition
    (fixed sizes instead of ``random``)"""
    dequeue_sizes = [50, 150, 73, 99, 120, 61, 88, 140, 55, 107]
    total = sum(dequeue_sizes)
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(total, 0, af.float32, shapes=())
        elems = [10.0 * x for x in range(total)]
        enqueue_op = q.enqueue_many((elems,))
        dequeue_ops = [q.dequeue_up_to(size) for size in dequeue_sizes]
        dequeued = []
        async with af.Session() as sess:
            await sess.run(enqueue_op)

            async def dequeue(op):
                dequeued.extend((await sess.run(op)).tolist())
            async with trio.open_nursery() as nursery:
                for op in dequeue_ops:
                    nursery.start_soon(dequeue, op)
    assert sorted(dequeued) == elems


@pytest.mark.parametrize("method", ["dequeue_many", "dequeue_up_to"])
async def test_blocking_dequeue_many(method):
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testBlockingDequeueMany /
    testBlockingDequeueUpTo"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.float32, ((),))
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        dequeued_t = getattr(q, method)(4)
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, dequeued_t)
                assert box == {}
                await sess.run(enqueue_op)
    assert sorted(box["value"].tolist()) == elems


async def test_dequeue_from_closed_queue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testDequeueFromClosedQueue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 2, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        close_op = q.close()
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            await sess.run(close_op)
            results = [await sess.run(dequeued_t) for _ in elems]
            assert sorted(results) == elems
            with pytest.raises(af.errors.OutOfRangeError, match="is closed and has insufficient"):
                await sess.run(dequeued_t)


async def test_blocking_dequeue_from_closed_queue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testBlockingDequeueFromClosedQueue:
    the dequeuer stops at min_after_dequeue until the close lifts it."""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 2, af.float32)
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        close_op = q.close()
        dequeued_t = q.dequeue()
        results = []
        async with af.Session() as sess:
            await sess.run(enqueue_op)

            async def dequeue():
                for _ in elems:
                    results.append(await sess.run(dequeued_t))
                with pytest.raises(af.errors.OutOfRangeError,
                                   match="is closed and has insufficient"):
                    await sess.run(dequeued_t)
                return "done"
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, dequeue)
                assert len(results) == 2  # blocked at the min_after_dequeue floor
                await sess.run(close_op)
    assert box == {"value": "done"} and sorted(results) == elems


async def test_blocking_dequeue_many_from_closed_queue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testBlockingDequeueManyFromClosedQueue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.float32, ((),))
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        close_op = q.close()
        dequeued_t = q.dequeue_many(4)
        progress = []
        async with af.Session() as sess:
            await sess.run(enqueue_op)

            async def dequeue():
                assert sorted((await sess.run(dequeued_t)).tolist()) == elems
                progress.append(1)
                with pytest.raises(af.errors.OutOfRangeError,
                                   match="is closed and has insufficient"):
                    await sess.run(dequeued_t)
                progress.append(2)
            async with trio.open_nursery() as nursery:
                await start_blocked(nursery, dequeue)
                assert progress == [1]
                await sess.run(close_op)
    assert progress == [1, 2]


@pytest.mark.parametrize("min_after_dequeue", [0, 2])
async def test_blocking_dequeue_up_to_from_closed_queue_returns_remainder(min_after_dequeue):
    """random_shuffle_queue_test.py
    RandomShuffleQueueTest.testBlockingDequeueUpToFromClosedQueueReturnsRemainder /
    testBlockingDequeueUpToSmallerThanMinAfterDequeue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(capacity=10, min_after_dequeue=min_after_dequeue,
                                  dtypes=af.float32, shapes=((),))
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        close_op = q.close()
        dequeued_t = q.dequeue_up_to(3)
        results = []
        async with af.Session() as sess:
            await sess.run(enqueue_op)

            async def dequeue():
                results.extend((await sess.run(dequeued_t)).tolist())
                assert len(results) == 3
                results.extend((await sess.run(dequeued_t)).tolist())
                assert len(results) == 4
            async with trio.open_nursery() as nursery:
                await start_blocked(nursery, dequeue)
                await sess.run(close_op)
    assert sorted(results) == elems


async def test_blocking_dequeue_many_from_closed_queue_with_elements_remaining():
    """random_shuffle_queue_test.py
    RandomShuffleQueueTest.testBlockingDequeueManyFromClosedQueueWithElementsRemaining:
    the failed dequeue returns the element it reserved, once (no duplicate)."""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 0, af.float32, ((),))
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        close_op = q.close()
        dequeued_t = q.dequeue_many(3)
        cleanup_dequeue_t = q.dequeue_many(q.size())
        results = []
        async with af.Session() as sess:
            await sess.run(enqueue_op)

            async def dequeue():
                results.extend((await sess.run(dequeued_t)).tolist())
                assert len(results) == 3
                with pytest.raises(af.errors.OutOfRangeError,
                                   match="is closed and has insufficient"):
                    await sess.run(dequeued_t)
                results.extend((await sess.run(cleanup_dequeue_t)).tolist())
            async with trio.open_nursery() as nursery:
                await start_blocked(nursery, dequeue)
                await sess.run(close_op)
            assert await sess.run(q.size()) == 0
    assert sorted(results) == elems


@pytest.mark.parametrize("method", ["dequeue_many", "dequeue_up_to"])
async def test_blocking_dequeue_from_closed_empty_queue(method):
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testBlockingDequeueManyFromClosedEmptyQueue
    / testBlockingDequeueUpToFromClosedEmptyQueue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 5, af.float32, ((),))
        close_op = q.close()
        dequeued_t = getattr(q, method)(4)
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, dequeued_t)
                await sess.run(close_op)
    assert isinstance(box["error"], af.errors.OutOfRangeError)
    assert "is closed and has insufficient" in str(box["error"])


@pytest.mark.parametrize("many", [False, True])
async def test_enqueue_to_closed_queue(many):
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testEnqueueToClosedQueue /
    testEnqueueManyToClosedQueue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 4, af.float32, ((),))
        enqueue_op = q.enqueue_many(([10.0, 20.0, 30.0, 40.0],)) if many else q.enqueue((10.0,))
        close_op = q.close()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            await sess.run(close_op)
            with pytest.raises(af.errors.CancelledError, match="is closed"):
                await sess.run(enqueue_op)


async def test_blocking_enqueue_to_full_queue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testBlockingEnqueueToFullQueue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(4, 0, af.float32, ((),))
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        blocking_enqueue_op = q.enqueue((50.0,))
        dequeued_t = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            async with trio.open_nursery() as nursery:
                await start_blocked(nursery, sess.run, blocking_enqueue_op)
                results = [await sess.run(dequeued_t) for _ in range(5)]
    assert sorted(results) == elems + [50.0]
    assert results[0] != 50.0  # there was no room for it when the first was dequeued


async def test_blocking_enqueue_to_closed_queue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testBlockingEnqueueToClosedQueue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(4, 0, af.float32, ((),))
        elems = [10.0, 20.0, 30.0, 40.0]
        enqueue_op = q.enqueue_many((elems,))
        blocking_enqueue_op = q.enqueue((50.0,))
        dequeued_t = q.dequeue()
        close_op = q.close()
        async with af.Session() as sess:
            await sess.run(enqueue_op)

            async def blocking_enqueue():
                await sess.run(blocking_enqueue_op)  # completes: it was waiting before close
                with pytest.raises(af.errors.CancelledError, match="closed"):
                    await sess.run(blocking_enqueue_op)
                return "done"
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, blocking_enqueue)
                await sess.run(close_op)
                assert await sess.run(dequeued_t) in elems
    assert box == {"value": "done"}


async def test_blocking_enqueue_many_to_closed_queue():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testBlockingEnqueueManyToClosedQueue"""
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(4, 0, af.float32, ((),))
        enqueue_op = q.enqueue_many(([10.0, 20.0, 30.0],))
        blocking_enqueue_op = q.enqueue_many(([50.0, 60.0],))
        close_op = q.close()
        size_t = q.size()
        dequeue = q.dequeue()
        async with af.Session() as sess:
            await sess.run(enqueue_op)
            assert await sess.run(size_t) == 3

            async def blocking_enqueue():
                await sess.run(blocking_enqueue_op)
                with pytest.raises(af.errors.CancelledError, match="closed"):
                    await sess.run(blocking_enqueue_op)
                return "done"
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, blocking_enqueue)
                assert await sess.run(size_t) == 4  # 1 of 2 enqueued, waiting for room
                await sess.run(close_op)
                await sess.run(dequeue)
    assert box == {"value": "done"}


async def test_shared_queue_same_session():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testSharedQueueSameSession (both
    ops unseeded: asyncflow's graphs carry no default test seed)"""
    with af.Graph().as_default():
        q1 = af.RandomShuffleQueue(1, 0, af.float32, ((),), shared_name="shared_queue")
        q2 = af.RandomShuffleQueue(1, 0, af.float32, ((),), shared_name="shared_queue")
        sizes = [q1.size(), q2.size()]
        async with af.Session() as sess:
            await sess.run(q1.enqueue((10.0,)))
            assert await sess.run(sizes) == [1, 1]
            assert await sess.run(q2.dequeue()) == 10.0
            assert await sess.run(sizes) == [0, 0]
            await sess.run(q2.enqueue((20.0,)))
            assert await sess.run(sizes) == [1, 1]
            assert await sess.run(q1.dequeue()) == 20.0
            assert await sess.run(sizes) == [0, 0]


async def test_shared_queue_same_session_graph_seed_none():
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testSharedQueueSameSessionGraphSeedNone:
    an op without seeds accepts the shared queue's seeds."""
    with af.Graph().as_default():
        q1 = af.RandomShuffleQueue(1, 0, af.float32, ((),), shared_name="shared_queue",
                                   seed=98765432)
        q2 = af.RandomShuffleQueue(1, 0, af.float32, ((),), shared_name="shared_queue")
        async with af.Session() as sess:
            await sess.run(q1.enqueue((10.0,)))
            assert await sess.run([q1.size(), q2.size()]) == [1, 1]


@pytest.mark.parametrize("first, second, message", [
    (dict(capacity=10), dict(capacity=15), "capacity"),
    (dict(min_after_dequeue=0), dict(min_after_dequeue=5), "min_after_dequeue"),
    (dict(), dict(dtypes=af.int32), "component types"),
    (dict(), dict(shapes=[(1, 1, 2, 3)]), "component shapes"),
    (dict(shapes=[(1, 1, 2, 3)]), dict(), "component shapes"),
    (dict(shapes=[(1, 1, 2, 3)]), dict(shapes=[(1, 1, 2, 4)]), "component shapes"),
    (dict(), dict(dtypes=(af.float32, af.int32)), "component types"),
    (dict(seed=12), dict(seed=21), "random seeds"),
])
async def test_incompatible_shared_queue_errors(first, second, message):
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testIncompatibleSharedQueueErrors"""
    def queue(kwargs):
        args = dict(capacity=10, min_after_dequeue=5, dtypes=af.float32, shapes=None, seed=None)
        args.update(kwargs)
        return af.RandomShuffleQueue(args["capacity"], args["min_after_dequeue"],
                                     args["dtypes"], shapes=args["shapes"], seed=args["seed"],
                                     shared_name="q_shared")
    with af.Graph().as_default():
        q_1, q_2 = queue(first), queue(second)
        async with af.Session() as sess:
            await sess.run(q_1.queue_ref.op)
            with pytest.raises(af.errors.InvalidArgumentError, match=message):
                await sess.run(q_2.queue_ref.op)


@pytest.mark.parametrize("method", ["dequeue_many", "dequeue_up_to", "dequeue"])
async def test_dequeue_in_different_orders(method):
    """random_shuffle_queue_test.py RandomShuffleQueueTest.testDequeueManyInDifferentOrders /
    testDequeueUpToInDifferentOrders / testDequeueInDifferentOrders"""
    with af.Graph().as_default():
        q1 = af.RandomShuffleQueue(10, 5, af.int32, ((),), seed=1729)
        q2 = af.RandomShuffleQueue(10, 5, af.int32, ((),), seed=87539319)
        enq1 = q1.enqueue_many(([1, 2, 3, 4, 5],))
        enq2 = q2.enqueue_many(([1, 2, 3, 4, 5],))
        if method == "dequeue":
            deq1, deq2 = q1.dequeue(), q2.dequeue()
        else:
            deq1, deq2 = getattr(q1, method)(5), getattr(q2, method)(5)
        results = [[], [], [], []]
        async with af.Session() as sess:
            for op in (enq1, enq1, enq2, enq2):
                await sess.run(op)

            async def take(op, into):
                if method == "dequeue":
                    for _ in range(5):
                        into.append(int(await sess.run(op)))
                else:
                    into.extend((await sess.run(op)).tolist())
            await take(deq1, results[0])
            await take(deq2, results[1])
            await sess.run([q1.close(), q2.close()])
            await take(deq1, results[2])
            await take(deq2, results[3])
    for i in range(1, 4):
        for j in range(i):
            assert results[i] != results[j]
