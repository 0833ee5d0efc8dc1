"""ClusterSpec: which jobs exist, how many tasks each has, and where each task listens.

A cluster is ``{job name: [address, ...]}`` (task index = list position) or, as in TF1,
``{job name: {task index: address}}`` for sparse jobs. Addresses are ``host:port``. The spec
is plain data: it never connects to anything. Device names follow from it: task ``i`` of job
``j`` owns ``/job:j/replica:0/task:i/device:CPU:0`` and whatever devices its Health reports.

``ASYNCFLOW_CONFIG`` (the shape of TF_CONFIG) names a cluster and this process's task; the CLI
reads it with ``distribute/cluster_resolver.py``'s ``TFConfigClusterResolver``::

    {"cluster": {"ps": ["127.0.0.1:2222"], "worker": [...]}, "task": {"type": "worker", "index": 0}}
"""
from __future__ import annotations

import json

CONFIG_ENV = "ASYNCFLOW_CONFIG"
_JSON_TYPES = {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}


def _check_address(job, index, address):
    if not isinstance(address, str):
        raise TypeError(f"ClusterSpec: address of /job:{job}/task:{index} must be a "
                        f"'host:port' string, got {address!r}")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"ClusterSpec: address of /job:{job}/task:{index} must be 'host:port', "
                         f"got {address!r}")
    return address


class ClusterSpec:
    """The jobs of a cluster and their tasks' addresses.

    Args:
        cluster: ``{job: [address, ...]}``, ``{job: {index: address}}``, a ClusterSpec, or a
            cluster resolver (anything with ``cluster_spec()``), resolved now.

    Raises:
        TypeError, ValueError: for a malformed spec (naming the job and task).
    """

    def __init__(self, cluster):
        if not isinstance(cluster, (ClusterSpec, dict)) and callable(
                getattr(cluster, "cluster_spec", None)):
            cluster = cluster.cluster_spec()  # a resolver: re-read its environment now
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if not isinstance(cluster, dict):
            raise TypeError(f"ClusterSpec takes a dict of job name -> addresses, got "
                            f"{type(cluster).__name__}")
        self._jobs = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str) or not job or "/" in job or ":" in job:
                raise ValueError(f"ClusterSpec: invalid job name {job!r}")
            if isinstance(tasks, (list, tuple)):
                table = {i: _check_address(job, i, a) for i, a in enumerate(tasks)}
            elif isinstance(tasks, dict):
                table = {}
                for index, address in tasks.items():
                    try:
                        index = int(index)
                    except (TypeError, ValueError):
                        raise ValueError(f"ClusterSpec: task index {index!r} of job {job!r} "
                                         "is not an integer") from None
                    table[index] = _check_address(job, index, address)
            else:
                raise TypeError(f"ClusterSpec: tasks of job {job!r} must be a list or a dict, "
                                f"got {type(tasks).__name__}")
            self._jobs[job] = dict(sorted(table.items()))

    @classmethod
    def from_json(cls, text_or_path):
        """A ClusterSpec from a JSON string or the path of a JSON file.

        The JSON is either the cluster itself or a TF_CONFIG-shaped ``{"cluster": {...}}``.

        Raises:
            ValueError: if it is neither valid JSON nor a readable file, or if the JSON is not
                an object of job name -> addresses.
        """
        text, source = text_or_path, "cluster spec"
        if not text.lstrip().startswith(("{", "[", '"')):
            try:
                with open(text_or_path, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError as exc:
                raise ValueError(f"cluster {text_or_path!r} is neither JSON nor a readable "
                                 f"file: {exc}") from None
            source = f"cluster file {text_or_path!r}"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source} is not valid JSON: {exc}") from None
        if isinstance(data, dict) and isinstance(data.get("cluster"), dict):
            data = data["cluster"]
        if not isinstance(data, dict):
            raise ValueError(f"{source} is a JSON {_JSON_TYPES.get(type(data), 'value')}, but a "
                             'cluster is an object of job name -> addresses, like {"ps": '
                             '["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}')
        return cls(data)

    @property
    def jobs(self):
        """The job names, in definition order."""
        return list(self._jobs)

    def as_dict(self):
        """``{job: [address, ...]}`` (or ``{job: {index: address}}`` for sparse jobs)."""
        out = {}
        for job, table in self._jobs.items():
            dense = list(table) == list(range(len(table)))
            out[job] = list(table.values()) if dense else dict(table)
        return out

    def num_tasks(self, job_name):
        """How many tasks ``job_name`` has."""
        return len(self._job(job_name))

    def task_indices(self, job_name):
        """The task indices of ``job_name``, sorted."""
        return list(self._job(job_name))

    def job_tasks(self, job_name):
        """The addresses of ``job_name``'s tasks, in index order."""
        return list(self._job(job_name).values())

    def task_address(self, job_name, task_index):
        """The ``host:port`` of one task.

        Raises:
            ValueError: if the job or the task does not exist.
        """
        table = self._job(job_name)
        try:
            return table[int(task_index)]
        except KeyError:
            raise ValueError(f"No task with index {task_index} in job {job_name!r} "
                             f"(tasks: {list(table)})") from None

    def tasks(self):
        """Every ``(job, index, address)``, jobs in definition order."""
        return [(job, index, address) for job, table in self._jobs.items()
                for index, address in table.items()]

    def _job(self, job_name):
        try:
            return self._jobs[job_name]
        except KeyError:
            raise ValueError(f"No such job in cluster: {job_name!r} (jobs: {self.jobs})") from None

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __bool__(self):
        return bool(self._jobs)

    def __repr__(self):
        return f"ClusterSpec({self.as_dict()!r})"


def task_name(job_name, task_index):
    """``/job:NAME/replica:0/task:N``: the prefix of every device name of that task."""
    return f"/job:{job_name}/replica:0/task:{int(task_index)}"


def health_cluster(cluster, this_task, address):
    """The jobs a worker sends in its Health: ``{job: {"index": address}}``, this task
    (``/job:J/replica:0/task:N``) at the address it bound (its spec may say port 0)."""
    jobs = {}
    for job, index, spec_address in cluster.tasks():
        jobs.setdefault(job, {})[str(index)] = (
            address if task_name(job, index) == this_task else spec_address)
    return jobs


def tasks_of_health(jobs):
    """``[(task name, address)]`` of the jobs in a Health reply (None: none)."""
    return [(task_name(job, index), address) for job, table in (jobs or {}).items()
            for index, address in table.items()]
