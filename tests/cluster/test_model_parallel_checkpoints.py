"""Checkpoints of a model whose variables live on several worker processes (issue 13, item 2).

Three ``asyncflow worker`` processes (a ps and two workers) run in one temporary directory, their
working directory, so every checkpoint path lies inside it. A model with variables on two tasks
is saved by a plain Saver (one Save op reading every variable, values crossing tasks) and by a
sharded one (each task writes its own shard, then the index), and restored, after the workers'
containers were reset, onto the same layout, onto one task and onto three.
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
import trio

import asyncflow as af
from killable_workers import WorkerProcess, free_ports

TIMEOUT = af.RunOptions(timeout_in_ms=30000)
VALUES = {"a": np.arange(4, dtype=np.float32), "b": np.full((2, 3), 7.0, np.float32),
          "c": np.array([5, 6], np.int64)}
TWO_TASKS = {"a": "/job:ps/task:0", "b": "/job:worker/task:0", "c": "/job:worker/task:0"}
ONE_TASK = {name: "/job:worker/task:1" for name in VALUES}
THREE_TASKS = {"a": "/job:ps/task:0", "b": "/job:worker/task:0", "c": "/job:worker/task:1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A ps and two workers whose working directory is a fresh temporary directory."""
    directory = tmp_path_factory.mktemp("model_parallel")
    ports = free_ports(3)
    spec = {"ps": [f"127.0.0.1:{ports[0]}"],
            "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"]}
    procs = [WorkerProcess(spec, "ps", 0, cwd=directory),
             WorkerProcess(spec, "worker", 0, cwd=directory),
             WorkerProcess(spec, "worker", 1, cwd=directory)]
    try:
        for proc in procs:
            proc.start()
        yield spec, directory
    finally:
        for proc in procs:
            proc.kill()


def _model(layout, sharded, initial=None):
    """Variables ``a``, ``b``, ``c`` placed by ``layout``, and a Saver over them."""
    graph = af.Graph()
    with graph.as_default():
        variables = {}
        for name, value in VALUES.items():
            with af.device(layout[name]):
                start = np.zeros_like(value) if initial is None else initial[name]
                variables[name] = af.Variable(start, name=name)
        saver = af.train.Saver(sharded=sharded)
    return graph, variables, saver


def _tensors_in(path):
    """Names stored in a safetensors file (read from its header, as any reader would)."""
    with open(path, "rb") as fileobj:
        length, = struct.unpack("<Q", fileobj.read(8))
        header = json.loads(fileobj.read(length))
    return sorted(name for name in header if name != "__metadata__")


async def _restore_and_read(spec, layout, sharded, path):
    await af.Session.reset(spec)  # nothing left over on any worker
    graph, variables, saver = _model(layout, sharded)
    async with af.Session(graph=graph, cluster=spec) as sess:
        with pytest.raises(af.errors.FailedPreconditionError):
            await sess.run(variables["a"], options=TIMEOUT)
        await saver.restore(sess, path)
        return await sess.run(variables, options=TIMEOUT)


@pytest.mark.parametrize("sharded", [False, True], ids=["one_file", "sharded"])
async def test_variables_on_two_tasks_save_and_restore_onto_one_two_and_three(cluster, sharded):
    spec, directory = cluster
    prefix = str(directory / ("sharded" if sharded else "plain") / "model")
    await af.Session.reset(spec)
    graph, variables, saver = _model(TWO_TASKS, sharded, initial=VALUES)
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([v.initializer for v in variables.values()], options=TIMEOUT)
        with trio.fail_after(60):
            path = await saver.save(sess, prefix, global_step=7)
    assert af.train.latest_checkpoint(os.path.dirname(prefix)) == path
    if sharded:
        shards = [f"{path}-00000-of-00002.safetensors", f"{path}-00001-of-00002.safetensors"]
        assert [_tensors_in(s) for s in shards] == [["a"], ["b", "c"]]  # each task its own
        with open(f"{path}.safetensors.index.json") as fileobj:
            index = json.load(fileobj)
        assert index["weight_map"] == {"a": os.path.basename(shards[0]),
                                       "b": os.path.basename(shards[1]),
                                       "c": os.path.basename(shards[1])}
        assert index["metadata"]["global_step"] == "7"
        assert not os.path.exists(f"{path}.safetensors")
    else:
        assert _tensors_in(f"{path}.safetensors") == ["a", "b", "c"]
    for layout in (TWO_TASKS, ONE_TASK, THREE_TASKS):
        for restore_sharded in (False, True):
            with trio.fail_after(60):
                values = await _restore_and_read(spec, layout, restore_sharded, path)
            for name, value in VALUES.items():
                np.testing.assert_array_equal(values[name], value, err_msg=f"{name} {layout}")


async def test_sharded_save_of_an_uninitialized_task_names_the_variable(cluster):
    spec, directory = cluster
    await af.Session.reset(spec)
    graph, variables, saver = _model(TWO_TASKS, sharded=True, initial=VALUES)
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(variables["a"].initializer, options=TIMEOUT)
        with pytest.raises(af.errors.FailedPreconditionError, match="uninitialized value [bc]"):
            with trio.fail_after(60):
                await saver.save(sess, str(directory / "partial" / "model"))
    assert af.train.latest_checkpoint(str(directory / "partial")) is None
    assert not os.path.exists(directory / "partial" / "model.safetensors.index.json")
