"""Columnar queue storage (fixed shapes) against the element-tuple storage it replaces."""
import numpy as np
import pytest
import trio
import trio.testing

from asyncflow import errors
from asyncflow.exec import queues


def _ints(values):
    return queues.Rows([np.asarray(values, dtype=np.int64),
                        np.asarray(values, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)])


def _fifo(capacity=1000):
    return queues.QueueResource(queues.FIFO, "q", capacity, ("int64", "float32"),
                                shapes=((), (3,)))


def test_fifo_keeps_order_across_blocks_single_elements_and_growth():
    queue = _fifo()
    assert queue.columnar
    queue.enqueue_many_nowait(_ints(range(10)))
    queue.enqueue_many_nowait(((np.asarray(10), np.full(3, 10, np.float32)),))
    queue.enqueue_many_nowait(_ints(range(11, 200)))  # beyond the first allocation
    got = []
    while queue.size():
        taken = queue.dequeue_many_nowait(min(7, queue.size()))
        x, y = taken.columns
        np.testing.assert_array_equal(y, x[:, None].astype(np.float32) * np.ones(3))
        got += x.tolist()
    assert got == list(range(200))
    assert queue.statistics().enqueued == queue.statistics().dequeued == 200


async def test_failed_dequeue_many_puts_its_partial_batch_back_in_order():
    queue = _fifo()
    queue.enqueue_many_nowait(_ints([0, 1, 2]))
    async with trio.open_nursery() as nursery:
        async def consume():
            with pytest.raises(errors.OutOfRangeError):
                await queue.dequeue_many(5)
        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        assert queue.size() == 0  # the waiting dequeue holds the three
        queue.close()
    assert queue.size() == 3
    assert queue.dequeue_many_nowait(3).columns[0].tolist() == [0, 1, 2]


def test_shuffle_draws_the_same_elements_as_the_element_storage():
    def make(shapes):
        return queues.QueueResource(queues.RANDOM_SHUFFLE, "s", 1000, ("int64",), shapes=shapes,
                                    min_after_dequeue=20, seed=7)
    columnar, elements = make(((),)), make(None)
    assert columnar.columnar and not elements.columnar
    rows = np.arange(300, dtype=np.int64)
    drawn_c, drawn_e = [], []
    for start in range(0, 300, 60):
        columnar.enqueue_many_nowait(queues.Rows([rows[start:start + 60]]))
        elements.enqueue_many_nowait([(r,) for r in rows[start:start + 60]])
        for _ in range(3):
            drawn_c += columnar.dequeue_many_nowait(13).columns[0].tolist()
            drawn_e += [int(e[0]) for e in elements.dequeue_many_nowait(13)]
    assert drawn_c == drawn_e and len(set(drawn_c)) == len(drawn_c)
    columnar.close()
    rest = columnar.dequeue_many_nowait(columnar.size()).columns[0].tolist()
    assert sorted(drawn_c + rest) == list(range(300))


def test_strings_keep_their_length():
    queue = queues.QueueResource(queues.FIFO, "f", 4, ("string",), shapes=((),))
    queue.enqueue_many_nowait(((np.asarray(b"a"),),))
    queue.enqueue_many_nowait(queues.Rows([np.array([b"longer name", b"b"], dtype=object)]))
    taken = [queue.dequeue_many_nowait(1)[0][0].item() for _ in range(3)]
    assert taken == [b"a", b"longer name", b"b"]
