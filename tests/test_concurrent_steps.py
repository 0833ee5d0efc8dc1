"""Concurrent steps: many ``run`` calls in flight on one session, sharing queues and variables."""
import collections

import pytest
import trio

import asyncflow as af

PRODUCERS, CONSUMERS, PER_PRODUCER = 10, 10, 40


async def _exchange(queue_factory, producers=PRODUCERS, consumers=CONSUMERS,
                    per_producer=PER_PRODUCER):
    """Producers enqueue distinct items, consumers dequeue; returns ``(seen, by_consumer)``.

    ``seen`` lists items in the order the consumers' runs returned, which interleaves
    consumers arbitrarily; ``by_consumer`` keeps each consumer's own (sequential) order.
    """
    with af.Graph().as_default():
        queue = queue_factory()
        item = af.placeholder(af.int64, [])
        enqueue, dequeue = queue.enqueue(item), queue.dequeue()
        seen = []
        by_consumer = [[] for _ in range(consumers)]
        total = producers * per_producer
        per_consumer = total // consumers
        async with af.Session() as sess:
            async def produce(p):
                for i in range(per_producer):
                    await sess.run(enqueue, {item: p * 1_000_000 + i})

            async def consume(mine):
                for _ in range(per_consumer):
                    value = int(await sess.run(dequeue))
                    seen.append(value)
                    mine.append(value)

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    for p in range(producers):
                        nursery.start_soon(produce, p)
                    for mine in by_consumer:
                        nursery.start_soon(consume, mine)
            assert await sess.run(queue.size()) == 0
            assert sess.statistics().runs_in_flight == 0
        return seen, by_consumer


def _check_exchange(seen, producers=PRODUCERS, per_producer=PER_PRODUCER):
    expected = {p * 1_000_000 + i for p in range(producers) for i in range(per_producer)}
    counts = collections.Counter(seen)
    assert set(counts) == expected, "lost items"
    assert max(counts.values()) == 1, "duplicated items"


@pytest.mark.parametrize("capacity", [1, 7, 1000])
async def test_ten_producers_ten_consumers_fifo(capacity, autojump_clock):
    seen, by_consumer = await _exchange(lambda: af.FIFOQueue(capacity, af.int64, shapes=[[]]))
    _check_exchange(seen)
    # FIFO: each consumer gets any one producer's items in the order they were put in
    for got in by_consumer:
        for p in range(PRODUCERS):
            mine = [s for s in got if s // 1_000_000 == p]
            assert mine == sorted(mine)


async def test_ten_producers_ten_consumers_shuffle_queue(autojump_clock):
    # a shuffle queue keeps 3 items back until closed: consumers take all but those 3
    producers, per_producer = 10, 40
    total = producers * per_producer
    with af.Graph().as_default():
        queue = af.RandomShuffleQueue(16, 3, af.int64, shapes=[[]], seed=4)
        item = af.placeholder(af.int64, [])
        enqueue, dequeue, rest = queue.enqueue(item), queue.dequeue(), queue.dequeue_up_to(100)
        seen = []
        async with af.Session() as sess:
            async def produce(p):
                for i in range(per_producer):
                    await sess.run(enqueue, {item: p * 1_000_000 + i})

            async def consume(n):
                for _ in range(n):
                    seen.append(int(await sess.run(dequeue)))

            async with trio.open_nursery() as nursery:
                for p in range(producers):
                    nursery.start_soon(produce, p)
                for c in range(10):
                    nursery.start_soon(consume, (total - 3) // 10 + (1 if c < (total - 3) % 10 else 0))
            await sess.run(queue.close())
            seen += (await sess.run(rest)).tolist()
    _check_exchange(seen, producers, per_producer)


async def test_concurrent_batched_steps_and_shared_variable(autojump_clock):
    """enqueue_many / dequeue_many steps interleave with variable updates in other steps."""
    with af.Graph().as_default():
        queue = af.FIFOQueue(25, af.int64, shapes=[[]])
        batch = af.placeholder(af.int64, [None])
        counter = af.Variable(0, dtype=af.int64)
        enqueue = queue.enqueue_many(batch)
        take = queue.dequeue_many(10)
        with af.control_dependencies([take]):
            bump = counter.assign_add(1)
        seen = []
        async with af.Session() as sess:
            await sess.run(counter.initializer)

            async def produce(p):
                for i in range(5):
                    await sess.run(enqueue, {batch: [p * 1000 + i * 10 + k for k in range(10)]})

            async def consume():
                for _ in range(5):
                    values, _ = await sess.run([take, bump])
                    seen.extend(values.tolist())

            async with trio.open_nursery() as nursery:
                for p in range(10):
                    nursery.start_soon(produce, p)
                    nursery.start_soon(consume)
            assert await sess.run(counter) == 50
    assert sorted(seen) == sorted(p * 1000 + i * 10 + k for p in range(10) for i in range(5)
                                  for k in range(10))


async def test_real_clock_exchange_completes():
    """The same exchange on the real clock (no autojump): no deadlock under real scheduling."""
    seen, _ = await _exchange(lambda: af.FIFOQueue(3, af.int64, shapes=[[]]), per_producer=20)
    _check_exchange(seen, per_producer=20)
