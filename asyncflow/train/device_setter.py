"""``replica_device_setter``: put variables on parameter servers, everything else on a worker.

Between-graph replication (TF1): every worker process builds the same graph inside
``af.device(af.train.replica_device_setter(cluster=cluster))``. Variables (and the ops that
must sit with them, which placement colocates through their reference edges) go round-robin
to ``/job:ps/task:0..n-1`` in creation order, so every replica computes the same variable ->
task map and they all share each variable by name on its ps. Other ops get ``worker_device``.
A device the op asked for itself (an inner ``af.device``) wins over both, field by field.
"""
from __future__ import annotations

from asyncflow import device_names as _devices

VARIABLE_OP_TYPES = ("VariableV2", "Variable", "VarHandleOp")


class _RoundRobin:
    def __init__(self, tasks):
        self._tasks = tasks
        self._next = 0

    def __call__(self):
        task = self._next
        self._next = (self._next + 1) % self._tasks
        return task


def replica_device_setter(ps_tasks=0, ps_device="/job:ps", worker_device="/job:worker",
                          merge_devices=True, cluster=None, ps_ops=None):
    """A device function for ``af.device`` that spreads variables over ps tasks.

    Args:
        ps_tasks: number of ps tasks (taken from ``cluster`` when given).
        ps_device: the job (spec) variables go to.
        worker_device: the spec every other op gets (e.g. ``"/job:worker/task:1"``).
        merge_devices: keep the fields of a device the op already requested.
        cluster: a ClusterSpec (or dict); its ``ps`` job sets ``ps_tasks``.
        ps_ops: op types placed on the ps (default: variable ops).

    Returns:
        A callable ``op -> device spec string``, or None when there are no ps tasks (TF1).

    Raises:
        ValueError: for a malformed device spec.
    """
    if cluster is not None:
        from asyncflow.cluster.spec import ClusterSpec
        spec = ClusterSpec(cluster)
        if "ps" not in spec.jobs:
            return None
        ps_tasks = spec.num_tasks("ps")
    if not ps_tasks:
        return None
    ps_ops = tuple(ps_ops or VARIABLE_OP_TYPES)
    chooser = _RoundRobin(int(ps_tasks))
    ps_spec = _devices.DeviceSpec.from_string(ps_device)
    worker_spec = _devices.canonical_name(worker_device or "")

    def device_function(op):
        requested = op.device if merge_devices else ""
        if op.type in ps_ops:
            target = ps_spec.merge_from("")
            if target.task is None:
                target = _devices.DeviceSpec.from_string(f"/task:{chooser()}").merge_from(target)
            return _devices.merge(requested or "", target.to_string())
        return _devices.merge(requested or "", worker_spec)

    return device_function
