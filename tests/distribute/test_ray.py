"""``asyncflow.ray.start_cluster`` on a real multi-node Ray cluster on this machine.

``ray.cluster_utils.Cluster``: a head and two more nodes (separate raylets), all on loopback:
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` must be set before Ray is imported, or Ray swaps
127.0.0.1 for the machine's external address; usage stats are off. Skipped without Ray.

Measured and printed (never asserted against the clock): start to first step, and from a
SIGKILL of a task's process to training resumed.
"""
import os
import signal
import socket
import time

import numpy as np
import pytest
import trio

import asyncflow as af

CHECKPOINT_EVERY = 3
TIMEOUT = af.RunOptions(timeout_in_ms=60_000)


pytestmark = pytest.mark.ray
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every Ray address on loopback
           "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="module")
def ray_cluster():
    saved = {key: os.environ.get(key) for key in RAY_ENV}
    os.environ.update(RAY_ENV)
    try:
        yield from _ray_cluster()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster
    if ray_constants.ENABLE_RAY_CLUSTER:
        pytest.skip("Ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set: "
                    "it would use the machine's external address")
    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False,
            "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    try:
        for _ in range(2):
            cluster.add_node(**{k: v for k, v in node.items() if k != "include_dashboard"})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
        yield ray
    finally:
        ray.shutdown()
        cluster.shutdown()


def _regression():
    x = np.linspace(-1, 1, 16).astype(np.float32)
    with af.device("/job:ps/task:0"):
        w = af.Variable(np.float32(0.0), name="w")
        step = af.train.get_or_create_global_step()
    losses = []
    for i in range(2):
        with af.device(f"/job:worker/task:{i}"):
            losses.append(af.reduce_mean(af.square(w * x - 2.0 * x)))
    loss = af.add_n(losses)
    train_op = af.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return loss, train_op, step


def _listening(address):
    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) == 0


async def test_tasks_spread_over_nodes_train_and_are_torn_down(ray_cluster):
    from asyncflow.ray import start_cluster
    token_before = os.environ.get("ASYNCFLOW_TOKEN")
    started = time.perf_counter()
    with start_cluster({"ps": 1, "worker": 2}, resources_per_task={"CPU": 1}) as cluster:
        spec = cluster.cluster_spec()
        addresses = [address for _, _, address in spec.tasks()]
        assert spec.jobs == ["ps", "worker"] and len(set(addresses)) == 3
        assert all(a.startswith("127.0.0.1:") for a in addresses)
        nodes = {cluster.task_info(job, i)["node_id"] for job, i, _ in spec.tasks()}
        assert len(nodes) == 3  # SPREAD: one task per Ray node
        assert os.environ["ASYNCFLOW_TOKEN"] == cluster.token
        with af.Graph().as_default():
            loss, train_op, step = _regression()
            async with af.Session(cluster=cluster) as sess:
                await sess.run(af.global_variables_initializer(), options=TIMEOUT)
                await sess.run(train_op, options=TIMEOUT)
                print(f"\nray: start_cluster to first step {time.perf_counter() - started:.1f} s")
                for _ in range(4):
                    await sess.run(train_op, options=TIMEOUT)
                assert await sess.run(step) == 5
    assert not any(_listening(a) for a in addresses)  # every task is gone
    assert os.environ.get("ASYNCFLOW_TOKEN") == token_before  # restored


async def test_kill_9_of_a_task_restarts_it_on_the_same_address_and_training_resumes(
        ray_cluster, tmp_path):
    from asyncflow.ray import start_cluster
    history, kills = [], []
    with start_cluster({"ps": 1, "worker": 2}, max_restarts=3, data_dir=tmp_path) as cluster:
        spec_before = cluster.cluster_spec()
        with af.Graph().as_default():
            loss, train_op, step = _regression()
            async with af.train.MonitoredTrainingSession(
                    cluster=cluster, checkpoint_dir=str(tmp_path),
                    save_checkpoint_steps=CHECKPOINT_EVERY, log_step_count_steps=None,
                    recovery_wait_secs=120) as sess:
                while len(history) < 16:
                    _, value = await sess.run([train_op, step], options=TIMEOUT)
                    history.append(int(value))
                    if kills and kills[-1][2] is None:
                        kills[-1][2] = time.perf_counter()
                    if len(history) in (5, 10):  # a worker, then the ps holding the variables
                        job, index = ("worker", 1) if len(history) == 5 else ("ps", 0)
                        pid = cluster.task_info(job, index)["pid"]
                        os.kill(pid, signal.SIGKILL)
                        kills.append([(job, index), time.perf_counter(), None])
                stats = sess.statistics()
        infos = {key: cluster.task_info(*key) for key in (("worker", 1), ("ps", 0))}
        assert cluster.cluster_spec() == spec_before  # back on the same addresses
    for (job, index), killed_at, resumed_at in kills:
        print(f"\nray: kill -9 of {job}:{index} -> training resumed in "
              f"{resumed_at - killed_at:.1f} s")
    assert all(info["pid"] != 0 for info in infos.values())
    assert stats.recoveries >= 2
    # each step either advances the global step by one, or replays from a checkpoint no older
    # than the checkpoint interval
    for before, after in zip(history, history[1:]):
        assert after == before + 1 or before - after < CHECKPOINT_EVERY, history
    assert history[-1] > 10
