"""Reader resources: the parsed-file cache and reads served without waiting."""
import os

import numpy as np

from asyncflow.runtime import queues as rq
from asyncflow.runtime import readers as rr


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
