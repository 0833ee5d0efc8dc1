"""A Saver on a cluster keeps all of one checkpoint's files where its data is (issue 36).

A ps and a worker run as ``asyncflow worker`` processes, each with its own data directory, and
the clients run in a third directory. A client saves to the relative prefix ``ckpt/model``:
the data, the ``.meta`` and the ``checkpoint`` state file all land in that folder of the data
directory of the ps (the task that owns the variables), the folder created by the save; the
client's own directory gets nothing. A second client process, a fresh TF1-style program
(``tf.Session(target)``, ``tf.train.latest_checkpoint``, ``saver.restore``), finds and
restores it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import trio

import asyncflow as af
from killable_workers import WorkerProcess, free_ports

TIMEOUT = af.RunOptions(timeout_in_ms=30000)
CLIENT_TIMEOUT_S = 120

SECOND_CLIENT = '''
import json, sys
import asyncflow.compat.v1 as tf

spec, target, sharded = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "sharded"
with tf.device(tf.train.replica_device_setter(cluster=tf.train.ClusterSpec(spec))):
    w = tf.Variable(tf.zeros([3]), name="w")
    b = tf.Variable(0.0, name="b")
saver = tf.train.Saver(sharded=sharded)
with tf.Session(target) as sess:
    path = tf.train.latest_checkpoint(sys.argv[4])
    saver.restore(sess, path)
    print(json.dumps({"path": path, "w": sess.run(w).tolist(), "b": float(sess.run(b))}))
'''


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A ps and a worker, each with a data directory of its own."""
    root = tmp_path_factory.mktemp("cluster_checkpoints")
    ports = free_ports(2)
    spec = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    dirs = {job: root / f"{job}_data" for job in spec}
    procs = []
    try:
        for job in spec:
            dirs[job].mkdir()
            procs.append(WorkerProcess(spec, job, 0, data_dir=dirs[job], cwd=root))
            procs[-1].start()
        yield spec, dirs, root
    finally:
        for proc in procs:
            proc.kill()


def _model(spec, sharded):
    graph = af.Graph()
    with graph.as_default():
        with af.device(af.train.replica_device_setter(cluster=af.ClusterSpec(spec))):
            w = af.Variable([1.0, 2.0, 3.0], name="w")
            b = af.Variable(4.0, name="b")
        saver = af.train.Saver(sharded=sharded, max_to_keep=1)
    return graph, (w, b), saver


def _second_client(spec, target, sharded, folder, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(af.__file__)), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", SECOND_CLIENT, json.dumps(spec), target,
         "sharded" if sharded else "one_file", folder],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("sharded", [False, True], ids=["one_file", "sharded"])
async def test_all_files_of_a_checkpoint_land_on_the_owning_worker(cluster, sharded,
                                                                    monkeypatch):
    spec, dirs, root = cluster
    kind = "sharded" if sharded else "one_file"
    client, ckpt = root / f"client_{kind}", f"ckpt_{kind}"
    client.mkdir()
    monkeypatch.chdir(client)
    await af.Session.reset(spec)
    graph, (w, b), saver = _model(spec, sharded)
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([w.initializer, b.initializer], options=TIMEOUT)
        with trio.fail_after(60):
            first = await saver.save(sess, f"{ckpt}/model", global_step=1)
            with graph.as_default():
                bump = b.assign(5.0)
            await sess.run(bump, options=TIMEOUT)
            path = await saver.save(sess, f"{ckpt}/model", global_step=2)
            assert await saver.latest_checkpoint(sess, ckpt) == path == f"{ckpt}/model-2"
            assert await saver.latest_checkpoint(sess, "nowhere") is None
    assert first == f"{ckpt}/model-1"
    assert os.listdir(client) == []  # nothing of the checkpoint on the client's side
    folder = dirs["ps"] / ckpt   # the data directory of the variables' task
    files = sorted(os.listdir(folder))
    data = (["model-2-00000-of-00001.safetensors", "model-2.safetensors.index.json"]
            if sharded else ["model-2.safetensors"])
    assert files == sorted(["checkpoint", "model-2.meta"] + data)  # max_to_keep=1: 1 is gone
    assert (folder / "checkpoint").read_text().splitlines() == [
        'model_checkpoint_path: "model-2"', 'all_model_checkpoint_paths: "model-2"']
    assert af.train.latest_checkpoint(str(folder)) == str(folder / "model-2")
    assert not (dirs["worker"] / ckpt).exists()

    await af.Session.reset(spec)  # nothing left over: the second client restores from files
    restored = _second_client(spec, spec["worker"][0], sharded, ckpt, client)
    assert restored["path"] == f"{ckpt}/model-2"
    np.testing.assert_array_equal(restored["w"], [1.0, 2.0, 3.0])
    assert restored["b"] == 5.0
    with trio.fail_after(60):  # and the meta graph rebuilds the model in a fresh graph
        with af.Graph().as_default() as fresh:
            imported = af.train.import_meta_graph(str(folder / "model-2.meta"))
        async with af.Session(graph=fresh, cluster=spec) as sess:
            await imported.restore(sess, await imported.latest_checkpoint(sess, ckpt))
            assert await sess.run(fresh.get_tensor_by_name("b:0"), options=TIMEOUT) == 5.0


async def test_a_prefix_outside_the_data_directory_is_refused(cluster):
    spec, dirs, root = cluster
    graph, (w, b), saver = _model(spec, sharded=False)
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([w.initializer, b.initializer], options=TIMEOUT)
        with pytest.raises(af.errors.PermissionDeniedError, match="data directory"):
            with trio.fail_after(60):
                await saver.save(sess, "../elsewhere/model")
    assert not (root / "elsewhere").exists()
    assert saver.last_checkpoints == []  # a failed save keeps nothing


async def test_monitored_training_sessions_save_and_recover_on_the_workers(cluster, monkeypatch):
    """The chief's checkpoints land in the ps's data directory; a new MonitoredTrainingSession
    (a restarted chief in another folder) restores the latest one from there."""
    spec, dirs, root = cluster
    client = root / "client_monitored"
    client.mkdir()
    monkeypatch.chdir(client)
    await af.Session.reset(spec)

    def build():
        graph = af.Graph()
        with graph.as_default():
            with af.device(af.train.replica_device_setter(cluster=af.ClusterSpec(spec))):
                step = af.train.get_or_create_global_step()
                weight = af.Variable(0.0, name="weight")
            train = af.group(step.assign_add(1), weight.assign_add(0.5))
        return graph, step, weight, train

    graph, step, weight, train = build()
    hooks = [af.train.StopAtStepHook(last_step=4)]
    with trio.fail_after(120):
        async with af.train.MonitoredTrainingSession(
                cluster=spec, checkpoint_dir="monitored", hooks=hooks, graph=graph,
                save_checkpoint_steps=2) as sess:
            while not sess.should_stop():
                await sess.run(train)
    assert os.listdir(client) == []
    state = (dirs["ps"] / "monitored" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "model.ckpt-4"' in state
    assert (dirs["ps"] / "monitored" / "model.ckpt-4.meta").is_file()

    await af.Session.reset(spec)
    graph, step, weight, train = build()
    with trio.fail_after(120):
        async with af.train.MonitoredTrainingSession(
                cluster=spec, checkpoint_dir="monitored", graph=graph,
                save_checkpoint_secs=None) as sess:
            assert sess.statistics().restored_checkpoint == "monitored/model.ckpt-4"
            assert await sess.run([step, weight]) == [4, 2.0]
