"""A placement error in a cluster names the job, task and device, and lists the tasks that
exist (it is not worded for one process)."""
import re

import pytest
import trio

import asyncflow as af
from device_kinds import task_devices


@pytest.mark.parametrize("spec, expected", [
    ("/job:worker/task:3", r"the cluster has no task /job:worker/task:3: add it to the "
                           r"ClusterSpec, or place the op on one of the tasks that exist: "
                           r"/job:ps/task:0, /job:worker/task:0"),
    ("/job:chief/task:0", r"no task /job:chief/task:0.*/job:ps/task:0, /job:worker/task:0"),
    # (GPU:1: no task has it, with or without a GPU visible; make test-gpu shows one)
    ("/job:worker/task:0/device:GPU:1", "task /job:worker/task:0 of the cluster has no such "
                                        "device " + re.escape(
                                            "(its devices: " + ", ".join(
                                                task_devices("/job:worker/replica:0/task:0"))
                                            + ")")),
])
async def test_a_missing_task_or_device_is_named_with_the_tasks_that_exist(spec, expected):
    cluster = af.ClusterSpec({"ps": ["inprocess:231"], "worker": ["inprocess:232"]})
    async with trio.open_nursery() as nursery:
        await nursery.start(af.Server(cluster, "ps", 0).serve)
        await nursery.start(af.Server(cluster, "worker", 0).serve)
        with af.Graph().as_default():
            with af.device(spec):
                y = af.constant(1.0) + 1.0
            async with af.Session(cluster=cluster) as sess:
                with pytest.raises(af.errors.InvalidArgumentError, match=expected) as caught:
                    await sess.run(y)
                assert "in this process" not in str(caught.value)
        nursery.cancel_scope.cancel()
