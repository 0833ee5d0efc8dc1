"""Reader resources: the parsed-file cache and reads served without waiting."""
import os

import numpy as np

from asyncflow.exec import queues as rq
from asyncflow.exec import readers as rr


def _reader():
    return rr.ReaderResource(rr.NUMPY_RECORD, "r", names=("x",), dtypes=(np.dtype(np.int64),),
                             shapes=((),))


def _names(*paths):
    queue = rq.QueueResource(rq.FIFO, "names", 10, ("string",))
    queue.enqueue_many_nowait([(np.asarray(p.encode(), dtype=object),) for p in paths])
    return queue


async def test_nowait_read_needs_loaded_or_cached_file(tmp_path):
    path = str(tmp_path / "a.npz")
    np.savez(path, x=np.arange(5))
    reader, queue = _reader(), _names(path, path)
    assert reader.read_up_to_nowait(queue, 2) is None  # first load: a worker thread
    keys, (x,) = await reader.read_up_to(queue, 2)
    assert keys == [f"{path}:0".encode(), f"{path}:1".encode()] and x.tolist() == [0, 1]
    keys, (x,) = reader.read_up_to_nowait(queue, 3)
    assert x.tolist() == [2, 3, 4] and keys[-1] == f"{path}:4".encode()
    # The file is used up: the next (same, unchanged) file comes from the cache, inline.
    keys, (x,) = reader.read_up_to_nowait(queue, 2)
    assert x.tolist() == [0, 1] and reader.work_units_completed == 1
    assert reader.records_produced == 7 and queue.size() == 0


async def test_changed_file_is_read_again(tmp_path):
    path = str(tmp_path / "a.npz")
    np.savez(path, x=np.arange(3))
    reader, queue = _reader(), _names(path, path)
    _, (x,) = await reader.read_up_to(queue, 3)
    assert x.tolist() == [0, 1, 2]
    np.savez(path, x=np.arange(10, 14))
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert reader.read_up_to_nowait(queue, 1) is None  # changed: not served from the cache
    _, (x,) = await reader.read_up_to(queue, 4)
    assert x.tolist() == [10, 11, 12, 13]


async def test_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(rr, "CACHE_BYTES", 1)
    path = str(tmp_path / "a.npz")
    np.savez(path, x=np.arange(3))
    reader, queue = _reader(), _names(path, path)
    await reader.read_up_to(queue, 3)
    assert reader.read_up_to_nowait(queue, 1) is None  # too large to keep


async def test_nowait_read_continues_into_the_next_cached_file(tmp_path):
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    np.savez(a, x=np.arange(3))
    np.savez(b, x=np.arange(10, 14))
    reader, queue = _reader(), _names(a, b)
    await reader.read_up_to(queue, 3)
    await reader.read_up_to(queue, 4)       # both files cached now
    queue.enqueue_many_nowait([(np.asarray(n.encode(), dtype=object),) for n in (a, b)])
    assert queue.peek_nowait()[0] == a.encode()
    keys, (x,) = reader.read_up_to_nowait(queue, 5)  # 3 of a, then 2 of b, inline
    assert x.tolist() == [0, 1, 2, 10, 11]
    assert keys[2:4] == [f"{a}:2".encode(), f"{b}:0".encode()]
    assert reader.read_up_to_nowait(queue, 3) is None  # b holds 2 more and no file follows
    queue.close()
    keys, (x,) = await reader.read_up_to(queue, 3)  # the rest, then the end of input
    assert x.tolist() == [12, 13]


def test_peek_nowait_is_for_fifo_queues_only():
    shuffle = rq.QueueResource(rq.RANDOM_SHUFFLE, "s", 4, ("int64",), seed=1)
    shuffle.enqueue_many_nowait([(np.int64(1),)])
    assert shuffle.peek_nowait() is None
    fifo = rq.QueueResource(rq.FIFO, "f", 4, ("int64",))
    assert fifo.peek_nowait() is None
    fifo.enqueue_many_nowait([(np.int64(1),), (np.int64(2),)])
    assert fifo.peek_nowait() == (1,) and fifo.size() == 2
