"""Placement: choose a device for every op of a run, as data (``op -> full device name``).

Theory of operation (paper §3.2.1, TF's constraint placer; docs/devices.md):
1. **Groups.** Union-find joins each colocation group (``op.colocation_groups``, from
   ``colocate_with``) and both ends of every reference edge (a Variable and the Assign or
   ScatterAdd that takes its reference), so a variable and its updates never split.
2. **Constraints per group.** The members' requested specs (``/job:../device:GPU:1``) merge;
   two that contradict each other are an error unless ``allow_soft_placement``. Each member's
   kernel availability (``supported_kinds(op_type, input dtypes, output dtypes)``, ``"ANY"``
   meaning every kind;
   no GPU kernel takes strings, and Save, summaries, queues, readers and PyFunc have CPU
   kernels only) narrows the device kinds, so with a GPU present such ops go to the CPU
   unless the user asked otherwise. A stateful op placed by an earlier compile of the same session keeps its
   device (``pinned``), or its state would be lost.
3. **Infeasible requests.** Without soft placement a request no device satisfies is an
   ``InvalidArgumentError`` ("Could not satisfy explicit device specification ..."); with it,
   the request's device part is dropped and any supported device may be chosen.
4. **Kind.** Without a requested device type, a group goes to the highest-priority kind that
   has its kernels (GPU before CPU), as TF1's placer does on a machine with a GPU; int32
   shape arithmetic placed on a GPU runs in its host memory there (``exec/gpu.py``).
5. **Greedy choice** among the devices left (the paper's cost model). Simulate the run in
   topological order: for each group still undecided, when its first member comes up, estimate on every candidate device
   the finish time = max(device free, inputs ready + transfer time of inputs living on other
   devices) + compute time (from static shapes: ``OpDef.cost`` or the input elements), and
   take the earliest; ties go to the lower device.
   Unconstrained, stateless ops computed only from constants (Const, Fill of Consts) follow
   their first consumer instead, so constants are not shipped across devices.

Deterministic: candidates are ordered, ops are visited in topological order, and nothing
depends on hashing. Pure: the caller passes device names and the kernel availability, so
this module imports no kernels and no runtime.
"""
from __future__ import annotations

import dataclasses

from asyncflow import device_names as _names
from asyncflow import errors

ANY_KIND = "ANY"
# Cost model: microseconds per op (fixed launch overhead + elements / rate), per device kind.
_OVERHEAD_US = {"CPU": 1.0, "GPU": 5.0}
_RATE = {"CPU": 1000.0, "GPU": 50000.0}       # element-operations per microsecond
_KIND_PRIORITY = {"GPU": 0, "CPU": 1}
_TRANSFER_FIXED_US = 20.0
_TRANSFER_BYTES_PER_US = 5000.0
_UNKNOWN_ELEMENTS = 1024
_FOLLOWER_MAX_COST = 4096   # generators cheaper than this follow their consumer


@dataclasses.dataclass
class Placement:
    """The result: ``assignment`` maps each Operation to a full device name."""

    assignment: dict
    log: list

    def by_name(self):
        """``{op name: device name}`` (for tests and logging)."""
        return {op.name: device for op, device in self.assignment.items()}

    def __getitem__(self, op):
        return self.assignment[op]


def device_kind(name):
    return _names.DeviceSpec.from_string(name).device_type


class _UnionFind:
    def __init__(self):
        self.parent = {}

    def find(self, item):
        parent = self.parent.setdefault(item, item)
        if parent is item or parent == item:
            return item
        root = self.find(parent)
        self.parent[item] = root
        return root

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _groups(ops):
    """Colocation groups: lists of ops (creation order), ordered by their first member."""
    members = set(ops)
    by_name = {op.name: op for op in ops}
    uf = _UnionFind()
    for op in ops:
        uf.find(op)
        for name in op.colocation_groups:
            uf.union(by_name.get(name, "loc:@" + name), op)
        for position, tensor in enumerate(op.inputs):
            if tensor.is_ref and op.op_def.is_ref_input(position) and tensor.op in members:
                uf.union(tensor.op, op)
    grouped = {}
    for op in sorted(ops, key=lambda o: o.seq):
        grouped.setdefault(uf.find(op), []).append(op)
    return list(grouped.values())


def _merged_request(group, soft):
    """The group's merged DeviceSpec (and the op that asked), or raise on a conflict."""
    merged, asker = _names.DeviceSpec(), None
    for op in group:
        if not op.device:
            continue
        spec = _names.DeviceSpec.from_string(op.device)
        if not spec.is_compatible_with(merged):
            if soft:
                continue
            raise errors.InvalidArgumentError(
                None, op, f"Cannot colocate nodes '{asker.name}' and '{op.name}' ({op.type}): "
                f"their requested devices '{asker.device}' and '{op.device}' conflict. Remove "
                "one device request or allow soft placement")
        merged = spec.merge_from(merged)
        asker = asker or op
    return merged, asker




def _ref_readers(op):
    """Ops anywhere in the graph that take a reference output of ``op`` (a variable's Assign,
    CountUpTo): a run that does not include them still must not put the variable where they
    have no kernel, or a later run would find its state on a device they cannot use."""
    out = []
    for tensor in op.outputs:
        if tensor.is_ref:
            for consumer in tensor.consumers():
                if any(source is tensor and consumer.op_def.is_ref_input(position)
                       for position, source in enumerate(consumer.inputs)):
                    out.append(consumer)
    return out


def _supported(group, devices, supported_kinds):
    kinds = None
    for op in group + [r for member in group for r in _ref_readers(member)]:
        op_kinds = set(supported_kinds(op.type, tuple(t.dtype for t in op.inputs),
                                       tuple(t.dtype for t in op.outputs)))
        if ANY_KIND not in op_kinds:
            kinds = op_kinds if kinds is None else kinds & op_kinds
    return [d for d in devices if kinds is None or device_kind(d) in kinds], kinds


def _candidates(group, devices, supported_kinds, soft, pinned):
    """``(devices the group may go to, whether to prefer a kind among them)``: the second is
    False where the user named a device type or an earlier compile pinned the group; raises
    when none fits."""
    supported, kinds = _supported(group, devices, supported_kinds)
    if not supported:
        op = group[0]
        raise errors.InvalidArgumentError(
            None, op, f"No device of this session can run {op.type} '{op.name}' (kernels exist "
            f"for {sorted(kinds or ())}; devices: {', '.join(devices)})")
    for op in group:
        if op.op_def.stateful and pinned.get(op.name) in supported:
            return [pinned[op.name]], False
    request, asker = _merged_request(group, soft)
    if request.is_empty:
        return supported, True
    matching = [d for d in supported if request.is_compatible_with(d)]
    if matching:
        return matching, not request.device_type
    if not soft:
        if any(request.is_compatible_with(d) for d in devices):
            host = dataclasses.replace(request, device_type=None, device_index=None)
            having = [d for d in supported if host.is_compatible_with(d)] or supported
            reason = (f"no supported kernel for {request.device_type} devices is available "
                      f"(kernels exist for {sorted(kinds)}: devices that have it: "
                      f"{', '.join(having)})")
        else:
            reason = _no_match_reason(request, devices)
        raise errors.InvalidArgumentError(
            None, asker, f"Could not satisfy explicit device specification '{asker.device}' "
            f"for op '{asker.name}' ({asker.type}) because {reason}. Set "
            "allow_soft_placement=True to let the placer choose another device")
    # Soft placement: keep the job/replica/task part of the request, drop the device part.
    host = dataclasses.replace(request, device_type=None, device_index=None)
    return [d for d in supported if host.is_compatible_with(d)] or supported, True


def _preferred_kind(candidates):
    """The candidates of the highest-priority kind among them (GPU before CPU), as TF1's
    placer prefers a GPU for every op that has a GPU kernel; the cost model then chooses
    among devices of that kind."""
    best = min(_KIND_PRIORITY.get(device_kind(d), 2) for d in candidates)
    return [d for d in candidates if _KIND_PRIORITY.get(device_kind(d), 2) == best]


def _task_of(name):
    """``/job:J/task:N`` of a full device name (replica dropped), or None for a bare one."""
    spec = _names.DeviceSpec.from_string(name)
    return None if spec.job is None else f"/job:{spec.job}/task:{spec.task or 0}"


def _no_match_reason(request, devices):
    """Why no device matches ``request``: worded for a cluster when the devices span tasks."""
    tasks = sorted({t for t in map(_task_of, devices) if t is not None})
    if all(t.startswith("/job:localhost/") for t in tasks):  # one process, no cluster
        return ("no devices matching that specification are registered in this process; "
                f"available devices: {', '.join(devices)}")
    if request.job is None:
        return f"no device of the cluster's tasks matches it (devices: {', '.join(devices)})"
    wanted = f"/job:{request.job}" + ("" if request.task is None else f"/task:{request.task}")
    same_task = [d for d in devices
                 if _names.DeviceSpec.from_string(d).job == request.job and
                 (request.task is None or (_names.DeviceSpec.from_string(d).task or 0) == request.task)]
    if same_task:
        return (f"task {wanted} of the cluster has no such device (its devices: "
                f"{', '.join(same_task)})")
    return (f"the cluster has no task {wanted}: add it to the ClusterSpec, or place the op on "
            f"one of the tasks that exist: {', '.join(tasks)}")


def _elements(shape):
    count = shape.num_elements() if shape.is_fully_defined() else None
    return _UNKNOWN_ELEMENTS if count is None else count


def compute_cost(op):
    """Estimated element-operations of ``op`` from static shapes (placement's cost model)."""
    shapes = [t.shape for t in op.inputs]
    if op.op_def.cost is not None and all(s.is_fully_defined() for s in shapes):
        try:
            return float(op.op_def.cost([s.as_list() for s in shapes], op))
        except (TypeError, ValueError, IndexError):
            pass
    return float(sum(_elements(s) for s in shapes) or 1)


def transfer_us(tensor):
    """Estimated microseconds to move ``tensor`` between two devices."""
    itemsize = 8 if tensor.dtype.is_string else tensor.dtype.np.itemsize
    return _TRANSFER_FIXED_US + _elements(tensor.shape) * itemsize / _TRANSFER_BYTES_PER_US


def _compute_us(cost, device):
    kind = device_kind(device)
    return _OVERHEAD_US.get(kind, 1.0) + cost / _RATE.get(kind, 1000.0)


def _is_follower(op, members, followers):
    """An unconstrained, stateless op computed only from such ops (a Const, a Fill of
    Consts): it sits with its first consumer rather than being shipped to it."""
    return (not op.control_inputs and not op.device and not op.op_def.stateful
            and compute_cost(op) <= _FOLLOWER_MAX_COST and all(t.op in followers for t in op.inputs)
            and any(c in members for c in _consumers_of(op)))


def _consumers_of(op):
    out = [c for t in op.outputs for c in t.consumers()]
    return out + list(op.control_outputs)


def place(ops, devices, supported_kinds, allow_soft_placement=True, pinned=None):
    """Place ``ops`` (topologically ordered) on ``devices``.

    Args:
        ops: the pruned Operations of a run, in topological order.
        devices: full names of the available devices (the first is the default).
        supported_kinds: ``fn(op_type, input_dtypes, output_dtypes) -> iterable of device
            kinds`` with a kernel for that type and those DTypes (``"ANY"``: all kinds).
        allow_soft_placement: drop requests no device can satisfy instead of failing.
        pinned: ``{op name: device}`` of stateful ops placed by earlier compiles; the ops
            keep those devices.

    Returns:
        A Placement.

    Raises:
        InvalidArgumentError: an unsatisfiable or conflicting request (without soft
            placement), or an op no device has a kernel for.
    """
    devices = list(devices)
    pinned = dict(pinned or {})
    members = set(ops)
    order = {op: i for i, op in enumerate(ops)}
    group_of, choices, allowed, size = {}, {}, {}, {}
    for group in _groups(ops):
        key = group[0]
        size[key] = len(group)
        for op in group:
            group_of[op] = key
        allowed[key], prefer = _candidates(group, devices, supported_kinds,
                                           allow_soft_placement, pinned)
        # Ops with a choice go to the preferred kind (GPU); a follower may join its consumer
        # on any device it has a kernel for (a Const feeding a CPU-only queue op).
        choices[key] = _preferred_kind(allowed[key]) if prefer else allowed[key]
    rank = {d: (_KIND_PRIORITY.get(device_kind(d), 2), i) for i, d in enumerate(devices)}
    chosen, finish, free = {}, {}, {d: 0.0 for d in devices}
    assignment, followers, follower_set, log = {}, [], set(), []
    for op in ops:
        key = group_of[op]
        if size[key] == 1 and _is_follower(op, members, follower_set):
            followers.append(op)
            follower_set.add(op)
            continue
        cost = compute_cost(op)
        best = None
        for device in ([chosen[key]] if key in chosen else choices[key]):
            ready = 0.0
            for tensor in op.inputs:
                producer = tensor.op
                if producer in finish:
                    moved = assignment[producer] != device
                    ready = max(ready, finish[producer] + (transfer_us(tensor) if moved else 0.0))
            for control in op.control_inputs:
                if control in finish:
                    moved = assignment[control] != device
                    ready = max(ready, finish[control] + (_TRANSFER_FIXED_US if moved else 0.0))
            end = max(ready, free[device]) + _compute_us(cost, device)
            score = (end, rank[device])
            if best is None or score < best[0]:
                best = (score, device)
        device = best[1]
        chosen.setdefault(key, device)
        assignment[op] = device
        finish[op] = best[0][0]
        free[device] = finish[op]
    for op in reversed(followers):
        consumer = min((c for c in _consumers_of(op) if c in assignment),
                       key=lambda c: order[c], default=None)
        key = group_of[op]
        assignment[op] = consumer and assignment[consumer] or choices[key][0]
        if assignment[op] not in allowed[key]:
            assignment[op] = choices[key][0]
    placed = {op: assignment[op] for op in ops}
    for op in ops:
        log.append(f"{op.name}: ({op.type}): {placed[op]}")
    return Placement(placed, log)
