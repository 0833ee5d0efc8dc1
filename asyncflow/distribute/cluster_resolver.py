"""Cluster resolvers: a cluster spec and this process's task, computed from the environment.

As in TF1 (``tf.distribute.cluster_resolver``), a resolver is a pure function of the process
environment: no network, no engine client. Every call of ``cluster_spec()``, ``task_type`` or
``task_id`` re-reads the environment, so a process whose environment is rewritten (a launcher
that re-resolves after a restart) sees the new cluster. Each resolver gives:

- ``cluster_spec()``: an ``af.ClusterSpec`` (the same jobs, indices and addresses that TF's
  resolver of the same name gives for the same environment);
- ``task_type`` / ``task_id``: this process's task, or None for a client-only process (an
  ``evaluator`` in TF_CONFIG is a client, not a cluster member);
- ``bind_host()``: the interface a worker of this task should listen on. The advertised address
  (a DNS name, a node's hostname) is what peers dial; a server binds ``0.0.0.0`` for it, except
  for loopback addresses, which it binds as they are.

``af.Session(cluster=resolver)`` and ``MonitoredTrainingSession(cluster=resolver)`` accept a
resolver: ``ClusterSpec(resolver)`` calls ``resolver.cluster_spec()``, and every session a
MonitoredTrainingSession creates on recovery resolves again.

Three resolvers:

- :class:`TFConfigClusterResolver` reads ``TF_CONFIG`` (Kubeflow TFJob, Ray Train, Vertex AI).
- :class:`SlurmClusterResolver` applies TF's rule to ``SLURM_*`` variables, and refuses a task
  layout that rule gets wrong (a non-block ``--distribution``) instead of giving wrong addresses.
- :class:`KubernetesClusterResolver` builds stable DNS names (StatefulSet pods behind a headless
  Service, Indexed Job / JobSet pods) from the pod's own environment. Unlike TF's resolver of
  that name, it needs no Kubernetes client, no API server access and no RBAC to list pods, and
  it advertises names that survive a pod's rescheduling rather than node IPs (``host_ip``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

from asyncflow.cluster.spec import ClusterSpec

TF_CONFIG_ENV = "TF_CONFIG"
_LOOPBACK_HOSTS = ("localhost", "::1", "[::1]")


def _environ(environ):
    return os.environ if environ is None else environ


def format_master_url(master, rpc_layer=None):
    """``rpc_layer://master`` (or ``master`` when there is no rpc layer), as TF writes it."""
    return f"{rpc_layer}://{master}" if rpc_layer else master


def bind_host_for(address):
    """The interface a server advertised as ``address`` listens on.

    Loopback addresses are bound as they are (a one-machine cluster stays on loopback); any
    other name or address binds every interface, since a pod's DNS name or a node's hostname
    is not necessarily an address of a local interface.
    """
    host = address.rpartition(":")[0]
    if host in _LOOPBACK_HOSTS or host.startswith("127."):
        return host.strip("[]")
    return "0.0.0.0"


class ClusterResolver:
    """What every resolver offers (TF's ``ClusterResolver`` interface)."""

    rpc_layer = None

    def cluster_spec(self):
        raise NotImplementedError

    @property
    def task_type(self):
        raise NotImplementedError

    @property
    def task_id(self):
        raise NotImplementedError

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        """``rpc_layer://address`` of a task (default: this one), or ``''`` when there is none."""
        task_type = task_type if task_type is not None else self.task_type
        task_id = task_id if task_id is not None else self.task_id
        if task_type is not None and task_id is not None:
            return format_master_url(self.cluster_spec().task_address(task_type, task_id),
                                     rpc_layer or self.rpc_layer)
        return ""

    def is_member(self):
        """Whether this process's task is one of the cluster's (an evaluator is not)."""
        task_type, task_id = self.task_type, self.task_id
        if task_type is None or task_id is None:
            return False
        spec = self.cluster_spec()
        return task_type in spec.jobs and int(task_id) in spec.task_indices(task_type)

    def bind_host(self):
        """The interface this task's server should listen on (see :func:`bind_host_for`)."""
        return bind_host_for(self.cluster_spec().task_address(self.task_type, self.task_id))


# -- TF_CONFIG ------------------------------------------------------------------------------

class TFConfigClusterResolver(ClusterResolver):
    """The cluster and task of ``TF_CONFIG`` (as TF's resolver reads it).

    ``TF_CONFIG`` is ``{"cluster": {job: [address, ...]}, "task": {"type": job, "index": i}}``,
    plus optional ``rpc_layer`` and ``session_master``. A missing ``cluster`` gives an empty
    spec; a missing ``task`` gives None for ``task_type`` and ``task_id``.

    Args:
        task_type, task_id, rpc_layer, environment: override what the variable says (TF's
            arguments; also settable as attributes).
        variable: the environment variable to read (``ASYNCFLOW_CONFIG`` has the same shape).
        environ: a mapping to read instead of ``os.environ`` (tests).

    Raises (on reading):
        ValueError: the variable is not valid JSON, or not a JSON object.
    """

    def __init__(self, task_type=None, task_id=None, rpc_layer=None, environment=None, *,
                 variable=TF_CONFIG_ENV, environ=None):
        self._task_type = task_type
        self._task_id = task_id
        self._rpc_layer = rpc_layer
        self._environment = environment
        self._variable = variable
        self._environ = environ

    def _config(self):
        text = _environ(self._environ).get(self._variable, "{}")
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{self._variable} is not valid JSON: {exc}") from None
        if not isinstance(config, dict):
            raise ValueError(f'{self._variable} must be a JSON object like {{"cluster": {{...}}, '
                             f'"task": {{"type": "worker", "index": 0}}}}, got {text[:80]!r}')
        return config

    def _task(self):
        task = self._config().get("task", {})
        if not isinstance(task, dict):
            raise ValueError(f'{self._variable}: "task" must be {{"type": JOB, "index": N}}, '
                             f"got {task!r}")
        return task

    @property
    def task_type(self):
        if self._task_type is not None:
            return str(self._task_type)
        task = self._task()
        return str(task["type"]) if "type" in task else None

    @task_type.setter
    def task_type(self, value):
        self._task_type = value

    @property
    def task_id(self):
        if self._task_id is not None:
            return int(self._task_id)
        task = self._task()
        return int(task["index"]) if "index" in task else None

    @task_id.setter
    def task_id(self, value):
        self._task_id = value

    @property
    def environment(self):
        return self._environment

    @property
    def rpc_layer(self):
        if self._rpc_layer is not None:
            return self._rpc_layer
        return self._config().get("rpc_layer")

    @rpc_layer.setter
    def rpc_layer(self, value):
        self._rpc_layer = value

    def cluster_spec(self):
        """The ``cluster`` of the variable, read now (an empty spec when there is none)."""
        config = self._config()
        if "cluster" not in config:
            return ClusterSpec({})
        try:
            return ClusterSpec(config["cluster"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f'{self._variable}: "cluster" is malformed: {exc}') from None

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        """TF's rule: ``session_master`` if set; ``''`` for a one-task cluster; else the
        address of the task (default: this one) with the rpc layer."""
        config = self._config()
        if config.get("session_master") is not None:
            return config["session_master"]
        spec = self.cluster_spec()
        if not spec.jobs or (len(spec.jobs) == 1 and spec.num_tasks(spec.jobs[0]) == 1):
            return ""
        task_type = task_type if task_type is not None else self.task_type
        task_id = task_id if task_id is not None else self.task_id
        rpc_layer = rpc_layer if rpc_layer is not None else self.rpc_layer
        return format_master_url(spec.task_address(task_type, task_id), rpc_layer)


# -- Slurm ----------------------------------------------------------------------------------

def expand_hostlist(hostlist):
    """Slurm's compressed host list, expanded in order without deduplication.

    ``'n[1-2],m5,o[3-4,6,7-9]'`` -> ``['n1', 'n2', 'm5', 'o3', 'o4', 'o6', 'o7', 'o8', 'o9']``;
    zero padding is kept (``'n[01-02]'`` -> ``['n01', 'n02']``).

    Raises:
        ValueError: naming the malformed list.
    """
    def parts():
        depth, current = 0, ""
        for char in hostlist:
            if char == "[":
                if depth:
                    raise ValueError("nested '['")
                depth = 1
            elif char == "]":
                depth = 0
            elif char == "," and not depth:
                if not current:
                    raise ValueError("empty host name")
                yield current
                current = ""
                continue
            current += char
        if current:
            yield current

    def expand_range(expression):
        for piece in expression.split(","):
            bounds = piece.split("-")
            if len(bounds) == 1:
                bounds = bounds * 2
            if len(bounds) != 2 or not all(b.isdigit() for b in bounds):
                raise ValueError(f"bad range {piece!r}")
            width = len(bounds[0])
            for number in range(int(bounds[0]), int(bounds[1]) + 1):
                yield str(number).zfill(width)

    hosts = []
    try:
        for part in parts():
            match = re.match(r"([^,[\]]*)(\[([^\]]+)\])?$", part)
            if match is None:
                raise ValueError(f"invalid part {part!r}")
            prefix = match.group(1) or ""
            if match.group(3) is None:
                hosts.append(prefix)
            else:
                hosts.extend(prefix + n for n in expand_range(match.group(3)))
    except ValueError as exc:
        raise ValueError(f"Invalid Slurm hostlist {hostlist!r}: {exc}") from None
    return hosts


def expand_tasks_per_node(tasks_per_node):
    """Slurm's tasks-per-node list: ``'3(x2),2,1'`` -> ``[3, 3, 2, 1]``.

    Raises:
        ValueError: naming the malformed list.
    """
    result = []
    for part in tasks_per_node.split(","):
        match = re.match(r"(\d+)(\(x(\d+)\))?$", part)
        if match is None:
            raise ValueError(f"Invalid Slurm tasks-per-node list {tasks_per_node!r}: "
                             f"bad part {part!r}")
        result.extend([int(match.group(1))] * int(match.group(3) or 1))
    return result


def _count_gpus(environ):
    """GPUs of this node: ``CUDA_VISIBLE_DEVICES`` if set, else ``nvidia-smi``, else 0."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len(visible.split(","))
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        output = subprocess.check_output(["nvidia-smi", "--list-gpus"], encoding="utf-8",
                                         timeout=30)
    except (subprocess.SubprocessError, OSError) as exc:
        raise RuntimeError(f"Could not count GPUs with nvidia-smi: {exc}; pass "
                           "gpus_per_node= to SlurmClusterResolver") from None
    return sum(line.startswith("GPU ") for line in output.splitlines())


class SlurmClusterResolver(ClusterResolver):
    """TF's Slurm rule: tasks of the current job step, ranks packed onto hosts sorted by name.

    Reads ``SLURM_PROCID`` (this task's rank), ``SLURM_STEP_NUM_TASKS``, ``SLURM_STEP_NODELIST``
    and ``SLURM_STEP_TASKS_PER_NODE`` on every call. Hosts sorted by name give one slot per
    task, ``host:port_base + k``; jobs sorted by name take the slots in rank order (with
    ``{"ps": 1, "worker": 2}``, rank 0 is ps:0 and ranks 1-2 are worker:0-1).

    That arithmetic holds only for Slurm's block distribution. Where the environment shows
    otherwise (``SLURM_DISTRIBUTION`` not block, or ``SLURMD_NODENAME``/``SLURM_LOCALID`` not
    the computed slot), the resolver raises instead of returning addresses no task listens on.

    Args:
        jobs: ``{job: number of tasks}``; default ``{"worker": SLURM_STEP_NUM_TASKS}``.
        port_base: the first port on each host.
        gpus_per_node: GPUs of a node (default: counted; 0 without GPUs).
        gpus_per_task: GPUs per task (default: evenly divided). 0 runs CPU-only tasks,
            which TF's resolver cannot express.
        tasks_per_node: an int for every host, or ``{host: n}`` (default: from Slurm).
        auto_set_gpu: set ``CUDA_VISIBLE_DEVICES`` of this process to its task's GPUs when
            the spec is resolved (only when tasks get GPUs).
        rpc_layer: the protocol named by ``master()``.
        environ: a mapping to read instead of ``os.environ`` (tests).

    Raises:
        RuntimeError: a ``SLURM_*`` variable is missing, the jobs do not add up to the step's
            tasks, more GPUs are asked than a node has, or the task layout is not block.
    """

    def __init__(self, jobs=None, port_base=8888, gpus_per_node=None, gpus_per_task=None,
                 tasks_per_node=None, auto_set_gpu=True, rpc_layer="grpc", *, environ=None):
        self._jobs_arg = None if jobs is None else dict(jobs)
        self._port_base = int(port_base)
        self._gpus_per_node_arg = gpus_per_node
        self._gpus_per_task_arg = gpus_per_task
        self._tasks_per_node_arg = tasks_per_node
        self._auto_set_gpu = auto_set_gpu
        self._environ = environ
        self.rpc_layer = rpc_layer
        self._task_type = self._task_id = None  # overrides, settable as in TF
        self._resolve()  # fail at construction, as TF does, when not inside a Slurm step

    def _var(self, name):
        name = "SLURM_" + name
        try:
            return _environ(self._environ)[name]
        except KeyError:
            raise RuntimeError(f"{name} not found in the environment: not running inside a "
                               "Slurm job step (start the tasks with srun)?") from None

    def _task_configuration(self):
        if isinstance(self._tasks_per_node_arg, dict):
            return dict(self._tasks_per_node_arg)
        hosts = expand_hostlist(self._var("STEP_NODELIST"))
        if self._tasks_per_node_arg is not None:
            return {host: int(self._tasks_per_node_arg) for host in hosts}
        counts = expand_tasks_per_node(self._var("STEP_TASKS_PER_NODE"))
        return dict(zip(hosts, counts))

    def _resolve(self):
        """``(ClusterSpec, task_type, task_id, gpu ids of this rank)`` from the environment."""
        rank = int(self._var("PROCID"))
        jobs = (self._jobs_arg if self._jobs_arg is not None
                else {"worker": int(self._var("STEP_NUM_TASKS"))})
        configuration = self._task_configuration()
        most_per_node = max(configuration.values())
        gpus_per_node = self._gpus_per_node_arg
        if gpus_per_node is None:
            gpus_per_node = _count_gpus(_environ(self._environ))
        gpus_per_task = self._gpus_per_task_arg
        if gpus_per_task is None:
            gpus_per_task = gpus_per_node // most_per_node
        if most_per_node * gpus_per_task > gpus_per_node:
            raise RuntimeError(f"Requested more GPUs per node than available: {most_per_node} "
                               f"tasks x {gpus_per_task} GPUs > {gpus_per_node} GPUs")
        if sum(jobs.values()) != sum(configuration.values()):
            raise RuntimeError(f"Requested {sum(jobs.values())} tasks ({jobs}) but the Slurm "
                               f"step has {sum(configuration.values())}")
        slots, gpu_ids = [], []
        for host, count in sorted(configuration.items()):
            # TF zips the tasks with the GPU offsets, so a node gets no more tasks than GPU
            # groups; without GPUs (gpus_per_task 0) every task gets a slot.
            per_host = (count if gpus_per_task == 0
                        else min(count, len(range(0, gpus_per_node, gpus_per_task))))
            for k in range(per_host):
                slots.append((host, k))
                first = k * gpus_per_task
                gpu_ids.append(",".join(str(g) for g in range(first, first + gpus_per_task)))
        allocation, task_type, task_id, start = {}, None, None, 0
        for job, count in sorted(jobs.items()):
            allocation[job] = [f"{host}:{self._port_base + k}"
                               for host, k in slots[start:start + count]]
            if start <= rank < start + count:
                task_type, task_id = job, rank - start
            start += count
        self._check_layout(rank, slots)
        return ClusterSpec(allocation), task_type, task_id, (
            gpu_ids[rank] if gpus_per_task and rank < len(gpu_ids) else None)

    def _check_layout(self, rank, slots):
        environ = _environ(self._environ)
        distribution = environ.get("SLURM_DISTRIBUTION", "block")
        if distribution.split(":")[0] not in ("block", ""):
            raise RuntimeError(f"SLURM_DISTRIBUTION={distribution}: the Slurm rule assumes "
                               "block distribution (ranks packed host by host); start the "
                               "step with srun --distribution=block")
        if rank >= len(slots):
            return
        host, local = slots[rank]
        node, local_id = environ.get("SLURMD_NODENAME"), environ.get("SLURM_LOCALID")
        if (node is not None and node != host) or (
                local_id is not None and int(local_id) != local):
            raise RuntimeError(f"Slurm rank {rank} runs as local task {local_id} on {node}, "
                               f"but the Slurm rule puts it at local task {local} on {host}: "
                               "the tasks are not in block distribution (sorted hosts, "
                               "contiguous ranks); start the step with srun "
                               "--distribution=block")

    def cluster_spec(self):
        """The step's cluster, computed from the environment now (sets CUDA_VISIBLE_DEVICES
        of this process when ``auto_set_gpu`` and tasks get GPUs)."""
        spec, _, _, gpus = self._resolve()
        if self._auto_set_gpu and gpus is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpus
        return spec

    def get_task_info(self):
        """``(task_type, task_id)`` of this process."""
        return self.task_type, self.task_id

    @property
    def task_type(self):
        return self._task_type if self._task_type is not None else self._resolve()[1]

    @task_type.setter
    def task_type(self, value):
        self._task_type = value

    @property
    def task_id(self):
        return int(self._task_id) if self._task_id is not None else self._resolve()[2]

    @task_id.setter
    def task_id(self, value):
        self._task_id = value


# -- Kubernetes -----------------------------------------------------------------------------

JOBS_ENV = "ASYNCFLOW_JOBS"
JOB_ENV = "ASYNCFLOW_JOB"
INDEX_ENV = "ASYNCFLOW_TASK_INDEX"
ADDRESS_TEMPLATE_ENV = "ASYNCFLOW_ADDRESS_TEMPLATE"
PORT_ENV = "ASYNCFLOW_PORT"
STATEFULSET_TEMPLATE = "{job}-{index}.{job}.{namespace}.svc:{port}"


class KubernetesClusterResolver(ClusterResolver):
    """Stable DNS names of pods, from the pod's own environment (no API server).

    The cluster's shape is ``ASYNCFLOW_JOBS`` (``{"ps": 1, "worker": 2}``), each task's address
    ``ASYNCFLOW_ADDRESS_TEMPLATE`` (default ``{job}-{index}.{job}.{namespace}.svc:{port}``: the
    pods of a StatefulSet named after the job behind a headless Service of the same name;
    for a JobSet, ``myjobset-{job}-0-{index}.myjobset:{port}``). This pod's task is
    ``ASYNCFLOW_JOB`` and its index ``ASYNCFLOW_TASK_INDEX`` (wire it from the label
    ``apps.kubernetes.io/pod-index``), else ``JOB_COMPLETION_INDEX`` (Indexed Job), else the
    ordinal suffix of ``HOSTNAME`` (``ps-0``). The namespace is ``POD_NAMESPACE`` (default
    ``default``), the port ``ASYNCFLOW_PORT`` (default 2222).

    TF's KubernetesClusterResolver lists pods through the API server (it needs the
    ``kubernetes`` client and RBAC to list pods, fails while any pod is not Running, and
    advertises the node's IP); this one computes names that stay valid when a pod is
    rescheduled, and works before the other pods exist.

    Args:
        jobs: ``{job: number of tasks}`` (default ``ASYNCFLOW_JOBS``).
        task_type, task_id: this pod's task (default from the environment, see above).
        port, namespace, address_template: as above.
        rpc_layer: the protocol named by ``master()``.
        environ: a mapping to read instead of ``os.environ`` (tests).

    Raises (on reading):
        ValueError: naming the missing or malformed variable.
    """

    def __init__(self, jobs=None, *, task_type=None, task_id=None, port=None, namespace=None,
                 address_template=None, rpc_layer="grpc", environ=None):
        if jobs is not None and any(not isinstance(n, int) or isinstance(n, bool)
                                    for n in dict(jobs).values()):
            raise TypeError("KubernetesClusterResolver takes {job: number of tasks} (TF's "
                            "{job: [label selectors]} needs API access, which this resolver "
                            f"does without); got {jobs!r}")
        self._jobs, self._task_type, self._task_id = jobs, task_type, task_id
        self._port, self._namespace, self._template = port, namespace, address_template
        self._environ = environ
        self.rpc_layer = rpc_layer

    def _get(self, name, default=None):
        return _environ(self._environ).get(name, default)

    def _jobs_now(self):
        if self._jobs is not None:
            return dict(self._jobs)
        text = self._get(JOBS_ENV)
        if not text:
            raise ValueError(f'{JOBS_ENV} is not set: give the cluster\'s shape, such as '
                             f'{JOBS_ENV}=\'{{"ps": 1, "worker": 2}}\'')
        try:
            jobs = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{JOBS_ENV} is not valid JSON: {exc}") from None
        if not isinstance(jobs, dict) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in jobs.values()):
            raise ValueError(f'{JOBS_ENV} must map job names to task counts, such as '
                             f'{{"ps": 1, "worker": 2}}; got {text!r}')
        return jobs

    def address(self, job, index):
        """The advertised ``host:port`` of one task."""
        template = self._template or self._get(ADDRESS_TEMPLATE_ENV) or STATEFULSET_TEMPLATE
        port = self._port if self._port is not None else int(self._get(PORT_ENV, 2222))
        namespace = self._namespace or self._get("POD_NAMESPACE") or "default"
        try:
            return template.format(job=job, index=index, namespace=namespace, port=port)
        except (KeyError, IndexError) as exc:
            raise ValueError(f"{ADDRESS_TEMPLATE_ENV} {template!r} uses an unknown field {exc}; "
                             "the fields are {job}, {index}, {namespace} and {port}") from None

    def cluster_spec(self):
        """Every task's DNS name, computed from the environment now."""
        return ClusterSpec({job: [self.address(job, i) for i in range(count)]
                            for job, count in self._jobs_now().items()})

    @property
    def task_type(self):
        if self._task_type is not None:
            return str(self._task_type)
        return self._get(JOB_ENV)

    @task_type.setter
    def task_type(self, value):
        self._task_type = value

    @property
    def task_id(self):
        if self._task_id is not None:
            return int(self._task_id)
        for name in (INDEX_ENV, "JOB_COMPLETION_INDEX"):
            value = self._get(name)
            if value not in (None, ""):
                if not value.isdigit():
                    raise ValueError(f"{name} must be a task index, got {value!r}")
                return int(value)
        match = re.search(r"-(\d+)$", self._get("HOSTNAME", ""))
        return int(match.group(1)) if match else None

    @task_id.setter
    def task_id(self, value):
        self._task_id = value


RESOLVERS = {
    "tf_config": TFConfigClusterResolver,
    "slurm": SlurmClusterResolver,
    "kubernetes": KubernetesClusterResolver,
}
