"""``asyncflow.ray.start_cluster``: an asyncflow cluster whose tasks are Ray actors.

``pip install asyncflow-dataflow[ray]``; Ray is imported only when a cluster starts. On a running
Ray cluster (``ray.init(address=...)`` done by the caller)::

    with asyncflow.ray.start_cluster({"ps": 1, "worker": 2}) as cluster:
        async with af.train.MonitoredTrainingSession(cluster=cluster, ...) as sess: ...

Theory of operation:

- **Placement.** One placement group with one bundle per task (``resources_per_task``, default
  one CPU; strategy ``SPREAD`` by default, so tasks land on different nodes when they can).
- **Addresses.** For each task, a zero-resource Ray task in its bundle picks a free port on that
  node; the task's actor is created with that port, so Ray's actor restart (``max_restarts``)
  re-runs the constructor on the same node and binds the **same address**. The spec never
  changes, and asyncflow's own recovery does the rest: the restarted worker has a new
  incarnation, and MonitoredTrainingSession opens a new session (restoring the latest
  checkpoint when the ps was lost).
- **The actor** runs ``af.Server`` in a thread of its own (``trio.run``) and returns from its
  constructor once the server listens, so Ray reports it alive only when it serves.
- **Token.** Every task requires the token (``token``, else ``ASYNCFLOW_TOKEN``, else a random
  one); while the block runs, ``ASYNCFLOW_TOKEN`` of this process is set to it, so sessions
  opened here authenticate.
- **Teardown.** Leaving the block kills the actors (no restart) and removes the placement group.

Unlike Ray Train (which tears down and rebuilds the whole worker group on any failure), one
task restarts alone: the parameter-server design tolerates it.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import threading

from asyncflow.cluster.spec import ClusterSpec
from asyncflow.cluster.channels import TOKEN_ENV

DEFAULT_RESOURCES = {"CPU": 1}


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ImportError("asyncflow.ray needs Ray: "
                          "pip install 'asyncflow-dataflow[ray]'") from None
    return ray


class _TaskActor:
    """One asyncflow task: an ``af.Server`` serving on a thread of the actor's process."""

    def __init__(self, job, index, port, token, cpus, start_timeout_s, data_dir):
        import trio

        from asyncflow.cluster.server import Server
        from asyncflow.exec.options import SessionConfig
        ray = _import_ray()
        self.host = ray.util.get_node_ip_address()
        self.node_id = ray.get_runtime_context().get_node_id()
        address = f"{self.host}:{port}"
        self.server = Server({job: {index: address}}, job, index, host=self.host, port=port,
                             token=token, config=SessionConfig(device_count={"CPU": cpus}),
                             data_dir=data_dir)
        listening, failure = threading.Event(), []
        self._trio_token = None

        async def serve():
            self._trio_token = trio.lowlevel.current_trio_token()
            await self.server.serve(task_status=_Started(listening))

        def run():
            try:
                trio.run(serve)
            except BaseException as exc:  # noqa: BLE001 - reported to the constructor
                failure.append(exc)
                listening.set()

        threading.Thread(target=run, name=f"asyncflow {job}:{index}", daemon=True).start()
        if not listening.wait(start_timeout_s) or failure:
            raise RuntimeError(f"/job:{job}/task:{index} did not start serving on {address}: "
                               f"{failure[0] if failure else 'timed out'}")
        self.address = address

    def info(self):
        return {"address": self.address, "pid": os.getpid(), "node_id": self.node_id}

    def stop(self):
        """Stop serving and return once the address no longer listens."""
        import trio
        if self._trio_token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run(self.server.stop, trio_token=self._trio_token)

    def die(self):
        os.kill(os.getpid(), signal.SIGKILL)


class _Started:
    """``task_status`` that sets a threading.Event once the server listens."""

    def __init__(self, event):
        self._event = event

    def started(self, value=None):
        self._event.set()


def _pick_port():
    """A free TCP port on this node's Ray address (run as a Ray task in the task's bundle)."""
    ray = _import_ray()
    host = ray.util.get_node_ip_address()
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class RayCluster:
    """The running cluster: a resolver (``cluster_spec()``) plus chaos and inspection hooks."""

    def __init__(self, ray, spec, actors, infos, token, placement_group):
        self._ray, self._spec, self._actors = ray, spec, actors
        self.token = token
        self.placement_group = placement_group
        self._infos = infos
        self.task_type = None  # the driver is a client of the cluster
        self.task_id = None

    def cluster_spec(self):
        """The tasks' addresses (fixed for the cluster's lifetime: restarts re-bind them)."""
        return ClusterSpec(self._spec)

    def task_info(self, job, index, timeout=60.0):
        """``{"address", "pid", "node_id"}`` of a task, asked now (waits out a restart)."""
        info = self._ray.get(self._actors[job, index].info.remote(), timeout=timeout)
        self._infos[job, index] = info
        return info

    def kill(self, job, index):
        """SIGKILL the task's process (a chaos hook): Ray restarts it on the same address."""
        self._actors[job, index].die.remote()

    def shutdown(self, timeout=30.0):
        """Stop every task's server, kill the actors (no restart), remove the placement group."""
        stopping = [actor.stop.remote() for actor in self._actors.values()]
        with contextlib.suppress(Exception):  # a task mid-restart: killed below all the same
            self._ray.get(stopping, timeout=timeout)
        for actor in self._actors.values():
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        if self.placement_group is not None:
            with contextlib.suppress(Exception):
                self._ray.util.remove_placement_group(self.placement_group)
            self.placement_group = None


def _resources_for(resources_per_task, job):
    if resources_per_task is None:
        return dict(DEFAULT_RESOURCES)
    if all(isinstance(v, dict) for v in resources_per_task.values()):
        return dict(resources_per_task.get(job, DEFAULT_RESOURCES))
    return dict(resources_per_task)


@contextlib.contextmanager
def start_cluster(jobs, *, resources_per_task=None, max_restarts=3, token=None,
                  placement_strategy="SPREAD", start_timeout_s=120.0, data_dir=None):
    """Start one asyncflow task per Ray actor; yields a :class:`RayCluster`.

    Args:
        jobs: ``{job: number of tasks}``, e.g. ``{"ps": 1, "worker": 2}``.
        resources_per_task: Ray resources of each task (``{"CPU": 2, "GPU": 1}``), or per job
            (``{"ps": {"CPU": 1}, "worker": {"CPU": 2, "GPU": 1}}``); default one CPU.
        max_restarts: how often Ray restarts a task whose process died (same address).
        token: the cluster's shared secret (default ``ASYNCFLOW_TOKEN``, else random).
        placement_strategy: the placement group's strategy (``SPREAD``, ``PACK``, ...).
        start_timeout_s: how long to wait for every task to serve.
        data_dir: the directory each task's Save, Restore and readers are confined to (the
            checkpoint directory must be inside it, on a file system every node shares);
            default this process's working directory.

    Raises:
        RuntimeError: Ray is not initialized, or a task did not start (naming it).
        ImportError: Ray is not installed.
    """
    ray = _import_ray()
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    if not ray.is_initialized():
        raise RuntimeError("asyncflow.ray.start_cluster needs a running Ray: call "
                           "ray.init(address=...) first")
    tasks = [(job, index) for job, count in jobs.items() for index in range(int(count))]
    if not tasks:
        raise ValueError(f"start_cluster: no tasks in {jobs!r}")
    token = token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    bundles = [_resources_for(resources_per_task, job) for job, _ in tasks]
    group = ray.util.placement_group(bundles, strategy=placement_strategy)
    cluster = RayCluster(ray, {}, {}, {}, token, group)
    previous_token = os.environ.get(TOKEN_ENV)
    try:
        if not group.wait(start_timeout_s):
            raise RuntimeError(f"Ray could not place {len(bundles)} tasks ({bundles}, "
                               f"{placement_strategy}) within {start_timeout_s} s: not enough "
                               "resources in the Ray cluster?")

        def in_bundle(i):
            return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)

        pick = ray.remote(num_cpus=0)(_pick_port)
        ports = ray.get([pick.options(scheduling_strategy=in_bundle(i)).remote()
                         for i in range(len(tasks))], timeout=start_timeout_s)
        actor_class = ray.remote(_TaskActor)
        for i, ((job, index), port) in enumerate(zip(tasks, ports)):
            resources = dict(bundles[i])
            cpus = resources.pop("CPU", 0)
            gpus = resources.pop("GPU", 0)
            cluster._actors[job, index] = actor_class.options(
                num_cpus=cpus, num_gpus=gpus, resources=resources or None,
                max_restarts=max_restarts, max_task_retries=0,
                scheduling_strategy=in_bundle(i),
            ).remote(job, index, port, token, max(1, int(cpus)), start_timeout_s,
                     os.path.abspath(data_dir if data_dir is not None else os.getcwd()))
        refs = {key: actor.info.remote() for key, actor in cluster._actors.items()}
        for key, ref in refs.items():
            try:
                cluster._infos[key] = ray.get(ref, timeout=start_timeout_s)
            except Exception as exc:
                raise RuntimeError(f"/job:{key[0]}/task:{key[1]} did not start on Ray: "
                                   f"{exc}") from exc
        spec = {}
        for (job, index), info in cluster._infos.items():
            spec.setdefault(job, []).append(info["address"])
        cluster._spec = spec
        os.environ[TOKEN_ENV] = token
        yield cluster
    finally:
        cluster.shutdown()
        if previous_token is None:
            os.environ.pop(TOKEN_ENV, None)
        else:
            os.environ[TOKEN_ENV] = previous_token
