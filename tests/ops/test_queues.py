"""Queues: TF1 semantics of FIFO, random-shuffle and padding queues, end to end and at the
resource level. Anything that waits runs under ``autojump_clock``."""
import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
from asyncflow.exec import queues as rq
from blocked_tasks import start_blocked


def _fifo(capacity=3, shapes=((),), dtypes=(af.int32,), **kwargs):
    q = af.FIFOQueue(capacity, list(dtypes), shapes=None if shapes is None else list(shapes),
                     **kwargs)
    x = af.placeholder(dtypes[0], name="x")
    xs = af.placeholder(dtypes[0], shape=[None], name="xs")
    return q, x, xs


# -- building -----------------------------------------------------------------------------------
def test_build_errors_name_the_problem():
    with af.Graph().as_default():
        q = af.FIFOQueue(2, [af.float32, af.int32], shapes=[[2], []])
        with pytest.raises(TypeError, match="component 1"):
            q.enqueue([af.constant([1.0, 2.0]), af.constant(1.0)])
        with pytest.raises(ValueError, match="component 0 has shape"):
            q.enqueue([af.constant([1.0, 2.0, 3.0]), 1])
        with pytest.raises(ValueError, match="got 1 components, expected 2"):
            q.enqueue([af.constant([1.0, 2.0])])
        with pytest.raises(ValueError, match="disagree on the batch size"):
            q.enqueue_many([af.constant([[1.0, 2.0]]), af.constant([1, 2])])
        named = af.FIFOQueue(2, [af.int32, af.float32], names=["a", "b"])
        with pytest.raises(ValueError, match="keys"):
            named.enqueue({"a": 1, "c": 2.0})
        with pytest.raises(ValueError, match="capacity"):
            af.FIFOQueue(0, af.int32)  # negative is unbounded (TF1); zero is refused
        with pytest.raises(ValueError, match="min_after_dequeue"):
            af.RandomShuffleQueue(4, 4, af.int32)
        with pytest.raises(ValueError, match="shapes must be given"):
            af.PaddingFIFOQueue(4, [af.int32, af.int32], shapes=[None, None])


def test_dequeue_outputs_have_static_shapes_and_names():
    with af.Graph().as_default():
        q = af.FIFOQueue(4, [af.float32, af.int32], shapes=[[2], []], name="q")
        a, b = q.dequeue()
        assert a.shape.as_list() == [2] and b.shape.as_list() == [] and b.dtype is af.int32
        batch, _ = q.dequeue_many(5)
        assert batch.shape.as_list() == [5, 2]
        assert q.dequeue_up_to(5)[0].shape.as_list() == [None, 2]
        named = af.FIFOQueue(4, [af.int32], shapes=[[]], names=["label"])
        assert set(named.dequeue()) == {"label"}
        single = af.FIFOQueue(4, af.int32)
        assert isinstance(single.dequeue(), af.Tensor)
        assert q.size().dtype is af.int32 and q.is_closed().dtype is af.bool


# -- FIFO order, waiting ----------------------------------------------------------------------------
async def test_fifo_order_multiple_components_and_names():
    with af.Graph().as_default():
        q = af.FIFOQueue(5, [af.int32, af.string], shapes=[[], []], names=["n", "s"])
        enq = q.enqueue_many({"n": [1, 2, 3], "s": [b"a", b"b", b"c"]})
        one = q.dequeue()
        two = q.dequeue_many(2)
        async with af.Session() as sess:
            await sess.run(enq)
            assert await sess.run(one) == {"n": 1, "s": b"a"}
            got = await sess.run(two)
            assert got["n"].tolist() == [2, 3] and got["s"].tolist() == [b"b", b"c"]


async def test_enqueue_waits_while_full_and_dequeue_while_empty(autojump_clock):
    with af.Graph().as_default():
        q, x, _ = _fifo(capacity=2)
        enq, deq, size = q.enqueue(x), q.dequeue(), q.size()
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                waiting = await start_blocked(nursery, sess.run, deq)
                assert waiting == {}
                await sess.run(enq, {x: 7})
                await trio.testing.wait_all_tasks_blocked()
                assert waiting["value"] == 7
            await sess.run(enq, {x: 1})
            await sess.run(enq, {x: 2})
            async with trio.open_nursery() as nursery:
                blocked = await start_blocked(nursery, sess.run, enq, {x: 3})
                assert blocked == {} and await sess.run(size) == 2
                assert await sess.run(deq) == 1
            assert [await sess.run(deq) for _ in range(2)] == [2, 3]


async def test_enqueue_many_goes_in_as_room_frees(autojump_clock):
    with af.Graph().as_default():
        q, _, xs = _fifo(capacity=2)
        enq_many, deq, size = q.enqueue_many(xs), q.dequeue(), q.size()
        async with af.Session() as sess:
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, enq_many, {xs: [1, 2, 3, 4, 5]})
                assert box == {} and await sess.run(size) == 2
                got = [await sess.run(deq) for _ in range(3)]
                await trio.testing.wait_all_tasks_blocked()
                assert "value" in box
            got += [await sess.run(deq) for _ in range(2)]
            assert got == [1, 2, 3, 4, 5]


async def test_dequeue_many_is_all_or_nothing_and_returns_partial_batch_on_close(autojump_clock):
    with af.Graph().as_default():
        q, _, xs = _fifo(capacity=10)
        enq_many, close = q.enqueue_many(xs), q.close()
        many, deq, size = q.dequeue_many(4), q.dequeue(), q.size()
        async with af.Session() as sess:
            await sess.run(enq_many, {xs: [1, 2]})
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, many)
                assert box == {} and await sess.run(size) == 0  # the attempt holds 1 and 2
                await sess.run(enq_many, {xs: [3]})
                await sess.run(close)
            assert isinstance(box["error"], af.errors.OutOfRangeError)
            assert "is closed and has insufficient elements (requested 4" in str(box["error"])
            assert await sess.run(size) == 3
            assert [await sess.run(deq) for _ in range(3)] == [1, 2, 3]


async def test_dequeue_up_to_returns_the_rest_after_close():
    with af.Graph().as_default():
        q, _, xs = _fifo(capacity=10)
        up_to = q.dequeue_up_to(4)
        async with af.Session() as sess:
            await sess.run(q.enqueue_many(xs), {xs: [1, 2, 3, 4, 5]})
            await sess.run(q.close())
            assert (await sess.run(up_to)).tolist() == [1, 2, 3, 4]
            assert (await sess.run(up_to)).tolist() == [5]
            with pytest.raises(af.errors.OutOfRangeError, match="requested 4, current size 0"):
                await sess.run(up_to)


async def test_dequeue_many_zero_and_negative():
    with af.Graph().as_default():
        q = af.FIFOQueue(3, [af.float32], shapes=[[2]])
        n = af.placeholder(af.int32, [])
        many = q.dequeue_many(n)
        async with af.Session() as sess:
            assert (await sess.run(many, {n: 0})).shape == (0, 2)
            with pytest.raises(af.errors.InvalidArgumentError, match=">= 0"):
                await sess.run(many, {n: -1})


# -- close ------------------------------------------------------------------------------------------
async def test_close_semantics(autojump_clock):
    with af.Graph().as_default():
        q, x, _ = _fifo(capacity=1)
        enq, deq, close, closed = q.enqueue(x), q.dequeue(), q.close(), q.is_closed()
        async with af.Session() as sess:
            await sess.run(enq, {x: 1})
            async with trio.open_nursery() as nursery:
                blocked = await start_blocked(nursery, sess.run, enq, {x: 2})
                await sess.run(close)
                assert await sess.run(closed)
                with pytest.raises(af.errors.CancelledError, match="'fifo_queue' is closed"):
                    await sess.run(enq, {x: 3})
                assert await sess.run(deq) == 1   # frees room: the waiting enqueue completes
            assert blocked == {"value": None}
            await sess.run(close)                 # closing twice is harmless
            assert await sess.run(deq) == 2
            with pytest.raises(af.errors.OutOfRangeError, match="is closed and has insufficient"):
                await sess.run(deq)


async def test_close_cancel_pending_enqueues(autojump_clock):
    with af.Graph().as_default():
        q, x, xs = _fifo(capacity=2)
        enq, enq_many = q.enqueue(x), q.enqueue_many(xs)
        cancel, size = q.close(cancel_pending_enqueues=True), q.size()
        async with af.Session() as sess:
            await sess.run(enq, {x: 1})
            async with trio.open_nursery() as nursery:
                many = await start_blocked(nursery, sess.run, enq_many, {xs: [2, 3, 4]})
                single = await start_blocked(nursery, sess.run, enq, {x: 5})
                await sess.run(cancel)
            for box in (many, single):
                assert isinstance(box["error"], af.errors.CancelledError)
                assert "Enqueue operation was cancelled" in str(box["error"])
            assert await sess.run(size) == 2       # 2 went in before the queue filled up
            assert (await sess.run(q.dequeue_up_to(5))).tolist() == [1, 2]


# -- cancellation -----------------------------------------------------------------------------------
async def test_session_close_cancels_waiting_ops(autojump_clock):
    with af.Graph().as_default():
        q, x, _ = _fifo(capacity=1)
        deq = q.dequeue()
        shared = af.FIFOQueue(1, af.int32, shapes=[[]], shared_name="close_cancels")
        shared_deq = shared.dequeue()
        sess = af.Session()
        async with trio.open_nursery() as nursery:
            local = await start_blocked(nursery, sess.run, deq)
            other = await start_blocked(nursery, sess.run, shared_deq)
            await sess.close()
        for box in (local, other):
            assert isinstance(box["error"], af.errors.CancelledError), box
            assert "session was closed" in str(box["error"])
    await af.Session.reset()


async def test_cancelled_run_puts_partial_batch_back_and_session_stays_usable(autojump_clock):
    with af.Graph().as_default():
        q, _, xs = _fifo(capacity=10)
        enq_many, many, deq = q.enqueue_many(xs), q.dequeue_many(3), q.dequeue()
        async with af.Session() as sess:
            await sess.run(enq_many, {xs: [1, 2]})
            with trio.move_on_after(5) as scope:
                await sess.run(many)
            assert scope.cancelled_caught
            assert [await sess.run(deq) for _ in range(2)] == [1, 2]
            with pytest.raises(af.errors.DeadlineExceededError):
                await sess.run(deq, options=af.RunOptions(timeout_in_ms=100))
            await sess.run(enq_many, {xs: [3]})
            assert await sess.run(deq) == 3


async def test_event_loop_stays_responsive_while_queue_ops_wait(autojump_clock):
    """A watchdog ticks every 10 ms while dequeues wait; it must never fall behind."""
    with af.Graph().as_default():
        q, x, _ = _fifo(capacity=4)
        enq, deq = q.enqueue(x), q.dequeue()
        async with af.Session() as sess:
            ticks, lags = [], []

            async def watchdog():
                while True:
                    before = trio.current_time()
                    await trio.sleep(0.01)
                    lags.append(trio.current_time() - before - 0.01)
                    ticks.append(before)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watchdog)
                waiting = [await start_blocked(nursery, sess.run, deq) for _ in range(3)]
                await trio.sleep(1.0)
                assert len(ticks) >= 90 and max(lags) < 1e-6
                for i in range(3):
                    await sess.run(enq, {x: i})
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
            assert sorted(box["value"] for box in waiting) == [0, 1, 2]


# -- validation at run time -------------------------------------------------------------------------
async def test_run_time_shape_checks_and_unshaped_dequeue_many():
    with af.Graph().as_default():
        q = af.FIFOQueue(4, [af.float32], shapes=[[2]])
        x = af.placeholder(af.float32)
        unshaped = af.FIFOQueue(4, af.float32)
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError, match=r"Expected \[2\], got \[3\]"):
                await sess.run(q.enqueue(x), {x: [1.0, 2.0, 3.0]})
            with pytest.raises(af.errors.InvalidArgumentError, match=r"Expected \[1,2\], got \[1,3\]"):
                await sess.run(q.enqueue_many(x), {x: [[1.0, 2.0, 3.0]]})
            with pytest.raises(af.errors.InvalidArgumentError, match="require the components"):
                await sess.run(unshaped.dequeue_many(1))


async def test_enqueued_values_are_copies_of_feeds():
    with af.Graph().as_default():
        q = af.FIFOQueue(4, [af.float32], shapes=[[2]])
        x = af.placeholder(af.float32, [2])
        deq = q.dequeue()
        async with af.Session() as sess:
            fed = np.array([1.0, 2.0], np.float32)
            await sess.run(q.enqueue(x), {x: fed})
            fed[:] = 0
            out = await sess.run(deq)
            assert out.tolist() == [1.0, 2.0]
            out[0] = 5  # the caller owns what it fetched


# -- shared queues and containers ---------------------------------------------------------------
async def test_shared_queue_across_sessions_and_mismatch_errors():
    await af.Session.reset()
    with af.Graph().as_default():
        q = af.FIFOQueue(3, [af.int32], shapes=[[]], shared_name="shared_q")
        enq = q.enqueue(5)
        async with af.Session() as sess:
            await sess.run(enq)
    with af.Graph().as_default():
        same = af.FIFOQueue(3, [af.int32], shapes=[[]], shared_name="shared_q")
        other_capacity = af.FIFOQueue(4, [af.int32], shapes=[[]], shared_name="shared_q")
        other_dtype = af.FIFOQueue(3, [af.float32], shapes=[[]], shared_name="shared_q")
        other_shape = af.FIFOQueue(3, [af.int32], shapes=[[2]], shared_name="shared_q")
        shuffle = af.RandomShuffleQueue(3, 0, [af.int32], shapes=[[]], shared_name="shared_q")
        async with af.Session() as sess:
            assert await sess.run(same.dequeue()) == 5
            with pytest.raises(af.errors.InvalidArgumentError,
                               match="has capacity 3 but requested capacity 4"):
                await sess.run(other_capacity.size())
            with pytest.raises(af.errors.InvalidArgumentError, match="component types"):
                await sess.run(other_dtype.size())
            with pytest.raises(af.errors.InvalidArgumentError, match="component shapes"):
                await sess.run(other_shape.size())
            with pytest.raises(af.errors.InvalidArgumentError, match="is a FIFOQueue"):
                await sess.run(shuffle.size())
            await sess.run(same.enqueue(6))
            await af.Session.reset()
            assert await sess.run(same.size()) == 0   # reset gave us a fresh queue


async def test_local_sessions_get_fresh_queues():
    with af.Graph().as_default():
        q = af.FIFOQueue(3, [af.int32], shapes=[[]])
        enq, size = q.enqueue(1), q.size()
        async with af.Session() as first:
            await first.run(enq)
            async with af.Session() as second:
                assert await second.run(size) == 0
            assert await first.run(size) == 1


# -- random shuffle and padding -------------------------------------------------------------------
async def _drain_shuffle(seed, items=20, min_after=5, graph_seed=None):
    with af.Graph().as_default():
        if graph_seed is not None:
            af.set_random_seed(graph_seed)
        q = af.RandomShuffleQueue(30, min_after, [af.int32], shapes=[[]], seed=seed)
        size, deq = q.size(), q.dequeue()
        async with af.Session() as sess:
            await sess.run(q.enqueue_many([list(range(items))]))
            out = []
            while await sess.run(size) > min_after:
                out.append(int(await sess.run(deq)))
            assert await sess.run(size) == min_after
            await sess.run(q.close())
            out += (await sess.run(q.dequeue_up_to(100))).tolist()
            return out


async def test_random_shuffle_queue_is_seeded_and_loses_nothing():
    first = await _drain_shuffle(seed=7, graph_seed=1)
    assert sorted(first) == list(range(20)) and first != list(range(20))
    assert await _drain_shuffle(seed=7, graph_seed=1) == first
    assert await _drain_shuffle(seed=8, graph_seed=1) != first


async def test_random_shuffle_queue_waits_above_min_after_dequeue(autojump_clock):
    with af.Graph().as_default():
        q = af.RandomShuffleQueue(10, 2, [af.int32], shapes=[[]], seed=3)
        x = af.placeholder(af.int32, [])
        enq, deq = q.enqueue(x), q.dequeue()
        async with af.Session() as sess:
            await sess.run(enq, {x: 1})
            await sess.run(enq, {x: 2})
            async with trio.open_nursery() as nursery:
                box = await start_blocked(nursery, sess.run, deq)
                assert box == {}                   # size 2 is not above the floor
                await sess.run(enq, {x: 3})
            assert box["value"] in (1, 2, 3)
            await sess.run(q.close())              # the floor no longer applies
            assert len((await sess.run(q.dequeue_many(2))).tolist()) == 2


async def test_padding_fifo_queue_pads_to_the_largest():
    with af.Graph().as_default():
        q = af.PaddingFIFOQueue(5, [af.int32, af.string], shapes=[[None], []])
        x = af.placeholder(af.int32, [None])
        s = af.placeholder(af.string, [])
        enq = q.enqueue([x, s])
        many = q.dequeue_many(3)
        assert many[0].shape.as_list() == [3, None]
        async with af.Session() as sess:
            for row, label in (([1], b"a"), ([1, 2, 3], b"b"), (np.array([], np.int32), b"c")):
                await sess.run(enq, {x: row, s: label})
            values, labels = await sess.run(many)
            assert values.tolist() == [[1, 0, 0], [1, 2, 3], [0, 0, 0]]
            assert labels.tolist() == [b"a", b"b", b"c"]
            await sess.run(q.close())
            with pytest.raises(af.errors.OutOfRangeError):
                await sess.run(q.dequeue_up_to(2))


# -- the resource alone ---------------------------------------------------------------------------
async def test_resource_nowait_cores_and_statistics():
    queue = rq.QueueResource(rq.FIFO, "q", 2, ("int32",))
    queue.enqueue_many_nowait(((1,),))
    queue.enqueue_many_nowait([(2,)])
    with pytest.raises(trio.WouldBlock):
        queue.enqueue_many_nowait(((3,),))
    stats = queue.statistics()
    assert stats == rq.QueueStatistics("q", 2, 2, False, 0, 0, 2, 0)
    with pytest.raises(AttributeError):
        stats.size = 5  # frozen
    assert queue.dequeue_many_nowait(1)[0] == (1,)
    with pytest.raises(trio.WouldBlock):
        queue.dequeue_many_nowait(2)
    queue.close()
    with pytest.raises(af.errors.CancelledError):
        queue.enqueue_many_nowait(((4,),))
    with pytest.raises(af.errors.OutOfRangeError):
        queue.dequeue_many_nowait(2)
    assert queue.dequeue_many_nowait(2, allow_small=True) == [(2,)]


async def test_resource_waiters_are_served_in_arrival_order(autojump_clock):
    queue = rq.QueueResource(rq.FIFO, "q", 5, ("int32",))
    got = []

    async def take(n, tag):
        got.append((tag, await queue.dequeue_many(n)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, 3, "first")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(take, 1, "second")
        await trio.testing.wait_all_tasks_blocked()
        assert queue.statistics().waiting_dequeues == 2
        await queue.enqueue_many([(i,) for i in range(4)])
    assert dict(got) == {"first": [(0,), (1,), (2,)], "second": [(3,)]}


async def test_resource_reset_fails_every_waiter(autojump_clock):
    full = rq.QueueResource(rq.FIFO, "full", 1, ("int32",))
    full.enqueue_many_nowait(((1,),))
    empty = rq.QueueResource(rq.RANDOM_SHUFFLE, "empty", 5, ("int32",), seed=1)
    errors_seen = []

    async def attempt(fn, *args):
        try:
            await fn(*args)
        except af.errors.CancelledError as exc:
            errors_seen.append(str(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(attempt, full.enqueue, (2,))
        nursery.start_soon(attempt, empty.dequeue_many, 3)
        await trio.testing.wait_all_tasks_blocked()
        full.close_for_reset()
        empty.close_for_reset()
    assert sorted(errors_seen) == [
        "Dequeue operation was cancelled (RandomShuffleQueue 'empty' was closed)",
        "Enqueue operation was cancelled (FIFOQueue 'full' was closed)"]
