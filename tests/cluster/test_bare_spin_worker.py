"""The same-host spin (``transports/http/bare_io.py``) against a real worker process on
loopback: a trivial step's answers with the spin on (the default) and off on both sides, the
client's waits all accounted for, and the worker, idle once the client stops, parked: it
spins at most one window per wait, never while it waits for a call that does not come; nor does
the idle client.

Real processes and real time; every wait has a deadline. The idle worker's CPU is read from
``/proc`` over a second (a clock-tick count, not a step time), the client's as its process
time: a side that kept spinning would burn most of that second."""
import os
import time

import numpy as np
import pytest
import trio

import asyncflow as af
from transports.http import bare_io

from cluster_processes import loopback_spec

TIMEOUT = af.RunOptions(timeout_in_ms=20000)
_TICK = os.sysconf("SC_CLK_TCK")
IDLE_CPU_S = 0.05  # an idle side's CPU over a second, at most: a few clock ticks


def _cpu_s(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


@pytest.fixture
def window():
    """This process's window for one test (microseconds); the environment's afterwards."""
    yield bare_io.set_spin_window
    bare_io.set_spin_window(None)


@pytest.mark.parametrize("us", [None, "0"])  # the default (on), and off
async def test_a_trivial_step_on_a_worker_process_then_the_idle_worker_parks(
        worker_processes, window, monkeypatch, us):
    monkeypatch.delenv(bare_io.SPIN_ENV, raising=False)  # (the worker inherits the rest)
    spec = loopback_spec({"worker": 1})
    worker = worker_processes.start(spec, [("worker", 0)],
                                    env={} if us is None else {bare_io.SPIN_ENV: us})
    assert worker
    window(None if us is None else float(us))
    assert bare_io.spin_window_s() == (bare_io.DEFAULT_SPIN_US if us is None else 0) / 1e6
    pid = worker_processes.procs[("worker", 0)].pid
    with af.Graph().as_default() as graph:
        with af.device("/job:worker/task:0"):
            p = af.placeholder(af.float32, [], name="p")
            doubled = p * 2.0
    before = dict(bare_io.COUNTS)
    with trio.fail_after(60):
        async with af.Session(graph=graph, cluster=spec) as sess:
            for i in range(200):
                assert await sess.run(doubled, {p: np.float32(i)}, options=TIMEOUT) == 2.0 * i
            waits = {key: bare_io.COUNTS[key] - before[key] for key in before}
            assert waits["spun"] + waits["parks"] >= 200  # every step's answer, waited for
            if us == "0":
                assert waits["spun"] == 0
            idle, own = _cpu_s(pid), time.process_time()
            await trio.sleep(1.0)  # the client idle, its connection open: the worker waits
            # both parked (a window is 200 us): measured ~0 (no tick in 10 s for the worker,
            # 2-3 ms for the client); a side still spinning would burn most of the second
            assert _cpu_s(pid) - idle < IDLE_CPU_S
            assert time.process_time() - own < IDLE_CPU_S
