"""Tensors of 64 KiB-4 MiB cross every buffer boundary intact, on every path (issue 15).

Real ``asyncflow worker`` processes on loopback; one graph with three paths, each checked for a
small tensor, for 64 KiB, 256 KiB, 1 MiB and 4 MiB, and for a size that is not a power of two:

* **feed**: the client's array rides in the worker's RunGraph (client -> worker);
* **fetch**: the worker returns an array of the same size (worker -> client);
* **pull**: the array is fed to the ps and read by the worker (ps -> worker RecvTensors).

Whether these sizes cost their wire time and no fixed stall (a delayed ACK, ~40 ms) is a
question of speed, so it is measured by ``bench/bench_transfer_sizes.py``, not asserted here.
"""

import numpy as np
import pytest

import asyncflow as af

from cluster_processes import WorkerProcesses, loopback_spec

SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20]
SMALL = 1 << 10
TIMEOUT = af.RunOptions(timeout_in_ms=60000)


def _graph():
    graph = af.Graph()
    with graph.as_default():
        x = af.placeholder(af.float32, [None], name="x")
        with af.device("/job:ps/task:0"):
            on_ps = af.identity(x, name="on_ps")
        with af.device("/job:worker/task:0"):
            fed = af.reduce_sum(x, name="fed")          # feed only
            echoed = af.identity(x * 1.0, name="echo")  # feed and a fetch of the same size
            pulled = af.reduce_sum(on_ps, name="pulled")  # feed to the ps, pull to the worker
    return graph, x, {"feed": fed, "fetch": echoed, "pull": pulled}


@pytest.fixture(scope="module")
def ps_and_worker():
    workers = WorkerProcesses()
    spec = loopback_spec({"ps": 1, "worker": 1})
    workers.start(spec, [("ps", 0), ("worker", 0)])
    yield spec
    workers.stop_all()


async def test_the_values_arrive_whole(ps_and_worker):
    """Every size, on every path, arrives with its values and its sum."""
    graph, x, paths = _graph()
    async with af.Session(graph=graph, cluster=ps_and_worker) as sess:
        for size in [SMALL, *SIZES, (1 << 20) + 4]:
            value = np.arange(size // 4, dtype=np.float32)
            fed, echoed, pulled = await sess.run(
                [paths["feed"], paths["fetch"], paths["pull"]], {x: value}, options=TIMEOUT)
            np.testing.assert_array_equal(echoed, value)
            assert fed == pulled == np.sum(value, dtype=np.float32)
