"""A step that fails across tasks is freed by reference counting on the worker and the master.

The worker's RunGraph and the master's step driver each hold the step's error on its way out
(a frame's local, the driver's failures, the step rendezvous' abort); that error's traceback
holds their frames, which hold the step's state: a reference cycle that kept the step's
state (rendezvous, runs, values, the driver) until the cyclic GC ran. The client still gets
the located error, naming the op and the worker's device.
"""
import numpy as np
import pytest

import asyncflow as af
from cyclic_garbage import failures_garbage

TIMEOUT = af.RunOptions(timeout_in_ms=20000)
STEP_STATE = {"frame", "traceback", "InvalidArgumentError", "RemoteCallError", "Step", "Run",
              "StepRendezvous", "LocalRendezvous", "_StepState", "StepDriver", "RunGraph"}


def _failing_graph():
    """``(graph, x, fetch)``: the ps doubles ``x``, the worker reshapes it to [3]."""
    with af.Graph().as_default() as graph:
        with af.device("/job:ps/task:0"):
            x = af.placeholder(af.float32, [None], name="x")
            doubled = x * 2.0
        with af.device("/job:worker/task:0"):
            fetch = af.reshape(doubled, [3], name="bad") + 1.0
    return graph, x, fetch


@pytest.mark.parametrize("transfers", ["pushed", "pulled"])
async def test_a_failed_remote_step_leaves_no_cyclic_garbage(cluster, transfers, cpu_only,
                                                             request):
    if transfers == "pulled":
        request.getfixturevalue("pulls_only")
    spec, _ = cluster
    graph, x, fetch = _failing_graph()
    value = np.zeros(2, np.float32)
    async with af.Session(graph=graph, cluster=spec) as sess:
        with pytest.raises(af.errors.InvalidArgumentError):  # (registers the graphs)
            await sess.run(fetch, {x: value}, options=TIMEOUT)
        garbage, error = await failures_garbage(
            lambda: sess.run(fetch, {x: value}, options=TIMEOUT), af.errors.InvalidArgumentError)
        good = await sess.run(fetch, {x: np.zeros(3, np.float32)}, options=TIMEOUT)
        assert good.tolist() == [1.0, 1.0, 1.0]  # (the session goes on)
    assert not STEP_STATE & set(garbage), sorted(set(garbage))
    assert "Reshape 'bad' on /job:worker/replica:0/task:0/device:CPU:0" in error.message
    assert error.op is graph.get_operation_by_name("bad")
