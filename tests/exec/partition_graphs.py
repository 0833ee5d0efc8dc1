"""Graphs and probes shared by the tests of multi-partition steps (imported by test modules
here): device configurations, a mixed graph, an async ``py_func`` body, a task counter, and
the fixture giving a test one long time slice (``tests/instruments.py``'s)."""
import trio

import asyncflow as af
from instruments import installed, long_time_slice  # noqa: F401 (the test modules' fixture)

TWO_CPUS = af.SessionConfig(device_count={"CPU": 2})
THREE_CPUS = af.SessionConfig(device_count={"CPU": 3})


async def later(v):
    """An async ``py_func`` body: its kernel waits (a task) one second of trio time."""
    await trio.sleep(1)
    return v + 10.0


class TaskCounts(trio.abc.Instrument):
    """Tasks spawned and exited, and task steps run, while installed."""

    def __init__(self):
        self.spawned = self.exited = self.steps = 0

    def task_spawned(self, task):
        self.spawned += 1

    def task_exited(self, task):
        self.exited += 1

    def before_task_step(self, task):
        self.steps += 1


def counting_tasks():
    """``with counting_tasks() as counts:``: a ``TaskCounts`` installed for the block."""
    return installed(TaskCounts())


def mixed_graph(devices):
    """Fan-out, fan-in and chains across ``devices`` CPUs (all on one device when None).

    Returns:
        ``(x, fetches)``: a ``[3]`` float32 placeholder and three tensors to fetch.
    """
    def on(i):
        return af.device(None if devices is None else f"/device:CPU:{i % devices}")

    x = af.placeholder(af.float32, [3], name="x")
    with on(0):
        a = x * 2.0
        b = af.reduce_sum(x)
    with on(1):
        c = a + b
        d = af.identity(c) * x
    with on(2):
        e = af.add_n([a, c, d])
    with on(0):
        f = e - af.reduce_max(d)
    with on(1):
        g = af.matmul(af.reshape(f, [1, 3]), af.reshape(x, [3, 1]))
    return x, [f, g, af.identity(e)]
