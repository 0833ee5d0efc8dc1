"""``asyncflow worker`` resolving its own cluster, ``--bind``, Shutdown, re-resolution.

Real worker processes on loopback: a ps and workers started from TF_CONFIG or Slurm variables
(no ``--cluster``), a session training on them, the chief's Shutdown ending the processes, and
a MonitoredTrainingSession that finds a worker rescheduled to a new address through its
resolver.
"""
import json

import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.distribute.cluster_resolver import SlurmClusterResolver, TFConfigClusterResolver
from cli_workers import CliWorker, consecutive_ports, free_ports

TOKEN = {"ASYNCFLOW_TOKEN": "resolver-test-token"}
TIMEOUT = af.RunOptions(timeout_in_ms=60_000)


def _tf_config(cluster, job, index):
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": job,
                                                                   "index": index}})}


def _regression(cluster):
    """y = 3x + 0.5 with w, b on the ps and the gradient step computed on each worker."""
    x = np.linspace(-1, 1, 16).astype(np.float32)
    y = 3.0 * x + 0.5
    with af.device("/job:ps/task:0"):
        w = af.Variable(np.float32(0.0), name="w")
        b = af.Variable(np.float32(0.0), name="b")
        step = af.train.get_or_create_global_step()
    losses = []
    for i in range(cluster.num_tasks("worker")):
        with af.device(f"/job:worker/task:{i}"):
            losses.append(af.reduce_mean(af.square(w * x + b - y)))
    loss = af.add_n(losses)
    train_op = af.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return loss, train_op, step, w


@pytest.fixture
def started():
    workers = []
    yield workers
    for worker in workers:
        worker.kill()


async def test_tf_config_workers_train_and_exit_on_shutdown(started, monkeypatch):
    ports = free_ports(3)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"],
               "worker": [f"127.0.0.1:{ports[1]}", f"localhost:{ports[2]}"]}
    for job, index in (("ps", 0), ("worker", 0), ("worker", 1)):
        # worker 1 advertises "localhost" and binds 127.0.0.1 explicitly: --bind is the listen
        # address, the cluster spec's address is what peers dial
        bind = ["--bind", "127.0.0.1"] if (job, index) == ("worker", 1) else []
        started.append(CliWorker(["--log-level", "WARNING", *bind],
                                 env={**TOKEN, **_tf_config(cluster, job, index)}).start())
    assert started[0].lines[-1] == (f"asyncflow worker /job:ps/task:0 listening on "
                                    f"127.0.0.1:{ports[0]}")
    assert started[2].address == f"127.0.0.1:{ports[2]}"

    monkeypatch.setenv("ASYNCFLOW_TOKEN", TOKEN["ASYNCFLOW_TOKEN"])
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster}))  # the client: no task
    resolver = TFConfigClusterResolver()
    with af.Graph().as_default():
        loss, train_op, step, w = _regression(af.ClusterSpec(resolver))
        async with af.Session(cluster=resolver) as sess:
            await sess.run(af.global_variables_initializer(), options=TIMEOUT)
            first = await sess.run(loss, options=TIMEOUT)
            for _ in range(5):
                await sess.run(train_op, options=TIMEOUT)
            assert await sess.run(step) == 5
            assert await sess.run(loss, options=TIMEOUT) < first

    result = await af.distribute.shutdown_cluster(resolver)
    assert result == {"/job:ps/replica:0/task:0": "stopped",
                      "/job:worker/replica:0/task:0": "stopped",
                      "/job:worker/replica:0/task:1": "stopped"}
    for worker in started:
        assert await trio.to_thread.run_sync(worker.wait, 60) == 0
        assert "stopped: Shutdown received" in worker.lines[-1]
    # every task is gone: a second signal finds nobody, and says so
    again = await af.distribute.shutdown_cluster(resolver, jobs=["ps"], timeout=5)
    assert again == {"/job:ps/replica:0/task:0": "unreachable"}


async def test_shutdown_is_refused_without_a_token_and_checks_the_task(started):
    port, = free_ports(1)
    cluster = {"ps": [f"127.0.0.1:{port}"]}
    started.append(CliWorker(["--log-level", "WARNING"],
                             env={"ASYNCFLOW_TOKEN": "", **_tf_config(cluster, "ps", 0)}).start())
    with pytest.raises(af.errors.FailedPreconditionError,
                       match="ps/replica:0/task:0 serves without a token.*ASYNCFLOW_TOKEN"):
        await af.distribute.shutdown_cluster(cluster, token="")
    assert started[0].alive()
    # a spec that names the wrong task at this address cannot end it
    with pytest.raises(af.errors.InvalidArgumentError, match="Shutdown for /job:worker"):
        await af.distribute.shutdown_cluster({"worker": [f"127.0.0.1:{port}"]}, token="")
    with pytest.raises(ValueError, match="No such job in cluster: 'chief'"):
        await af.distribute.shutdown_cluster(cluster, jobs=["chief"])


def test_shutdown_cli_stops_the_named_job(started):
    ports = free_ports(2)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    for job in ("ps", "worker"):
        started.append(CliWorker(["--log-level", "WARNING"],
                                 env={**TOKEN, **_tf_config(cluster, job, 0)}).start())
    status, output = CliWorker(["--job", "ps"], env={**TOKEN, **_tf_config(cluster, "ps", 0)},
                               command="shutdown").run_to_exit()
    assert (status, output.strip()) == (0, "/job:ps/replica:0/task:0: stopped")
    assert started[0].wait(60) == 0
    assert started[1].alive()


def test_evaluator_and_missing_cluster_are_named(started):
    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}
    status, output = CliWorker([], env=_tf_config(cluster, "evaluator", 0)).run_to_exit()
    assert status == 2
    assert "task evaluator:0 is not in the cluster" in output
    assert "an evaluator is a client" in output
    status, output = CliWorker([], env={"TF_CONFIG": "", "ASYNCFLOW_CONFIG": ""}).run_to_exit()
    assert status == 2 and "give --cluster, set ASYNCFLOW_CONFIG or TF_CONFIG" in output
    status, output = CliWorker(["--resolver", "slurm"], env={"SLURM_PROCID": ""}).run_to_exit()
    assert status == 2
    status, output = CliWorker(["--resolver", "kubernetes"], env={"ASYNCFLOW_JOBS": ""}
                               ).run_to_exit()
    assert status == 2 and "ASYNCFLOW_JOBS is not set" in output


async def test_slurm_resolved_workers_run_a_step(started, monkeypatch):
    # Three tasks of one srun step on one node, as Slurm describes them to each task.
    base = consecutive_ports(3)  # the three tasks listen on base, base + 1, base + 2
    step = {"SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NODELIST": "127.0.0.1",
            "SLURM_STEP_TASKS_PER_NODE": "3", "SLURMD_NODENAME": "127.0.0.1",
            "CUDA_VISIBLE_DEVICES": ""}
    args = ["--resolver", "slurm", "--jobs", '{"ps": 1, "worker": 2}', "--port-base", str(base),
            "--log-level", "WARNING"]
    for rank in range(3):
        started.append(CliWorker(args, env={**step, "SLURM_PROCID": str(rank),
                                            "SLURM_LOCALID": str(rank)}).start())
    assert [w.address for w in started] == [f"127.0.0.1:{base + k}" for k in range(3)]
    for key, value in {**step, "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    resolver = SlurmClusterResolver(jobs={"ps": 1, "worker": 2}, port_base=base, gpus_per_node=0)
    with af.Graph().as_default():
        loss, train_op, global_step, _ = _regression(af.ClusterSpec(resolver))
        async with af.Session(cluster=resolver) as sess:
            await sess.run(af.global_variables_initializer(), options=TIMEOUT)
            await sess.run(train_op, options=TIMEOUT)
            assert await sess.run(global_step) == 1


async def test_monitored_session_re_resolves_a_worker_that_moved(started, monkeypatch, tmp_path):
    """A worker dies and comes back on another port (a rescheduled pod, a new placement): the
    resolver's environment now says so, and recovery reaches it there."""
    ports = free_ports(3)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    for job in ("ps", "worker"):
        started.append(CliWorker(["--log-level", "WARNING"],
                                 env=_tf_config(cluster, job, 0)).start())
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster}))
    resolver = TFConfigClusterResolver()
    history = []
    with af.Graph().as_default():
        loss, train_op, step, _ = _regression(af.ClusterSpec(resolver))
        async with af.train.MonitoredTrainingSession(
                cluster=resolver, checkpoint_dir=str(tmp_path), save_checkpoint_steps=2,
                log_step_count_steps=None, recovery_wait_secs=120) as sess:
            while len(history) < 8:
                _, value = await sess.run([train_op, step], options=TIMEOUT)
                history.append(int(value))
                if len(history) == 4:
                    started[1].kill()
                    moved = {**cluster, "worker": [f"127.0.0.1:{ports[2]}"]}
                    started.append(CliWorker(["--log-level", "WARNING"],
                                             env=_tf_config(moved, "worker", 0)).start())
                    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": moved}))
            stats = sess.statistics()
    assert stats.recoveries >= 1
    assert history[:4] == [1, 2, 3, 4]
    assert history[-1] > 4  # training went on, on the worker at its new address


async def test_the_chief_may_start_before_its_tasks(started, monkeypatch, tmp_path):
    """Pods start in any order: a MonitoredTrainingSession opened before the ps and worker
    listen waits for them (within recovery_wait_secs) instead of failing."""
    ports = free_ports(2)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster}))
    resolver = TFConfigClusterResolver()

    def start_tasks():
        for job in ("ps", "worker"):
            started.append(CliWorker(["--log-level", "WARNING"],
                                     env=_tf_config(cluster, job, 0)).start())

    with af.Graph().as_default():
        loss, train_op, step, _ = _regression(af.ClusterSpec(resolver))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, start_tasks)
            async with af.train.MonitoredTrainingSession(
                    cluster=resolver, checkpoint_dir=str(tmp_path), log_step_count_steps=None,
                    recovery_wait_secs=120) as sess:
                _, value = await sess.run([train_op, step], options=TIMEOUT)
    assert value == 1
