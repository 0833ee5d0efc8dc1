"""Compile a partition (ops placed on one device) into an ``ExecutionPlan`` of integers.

Theory of operation:
- Every value the step produces or receives lives in a *slot* (an index into a list made
  fresh per step). Feeds get the first slots; each op output that someone reads or fetches
  gets the next; outputs nobody reads map to ``DROP`` and are discarded.
- Each node records its kernel, its per-node context, the slots it reads, which of those
  it must dereference (variable references read by value consumers), the slots it writes,
  the nodes waiting on it (one entry per edge) and its initial pending count.
- ``schedule`` is the nodes in topological order. When the partition has no waiting kernels,
  no control flow and at most one kernel that may be large enough to offload, the executor
  runs this schedule straight through (the static fast path); ``free_after`` then says which
  slots die after each node. Otherwise it runs the ready-queue loop, with ``slot_readers``
  counting the reads of each slot so buffers die after their last consumer.

The plan holds no trio objects and can be compared as data in tests (``describe()``).
"""
from __future__ import annotations

import dataclasses

from asyncflow import errors
from asyncflow.kernels.registry import get_kernel
from asyncflow.runtime.context import NodeContext

DROP = -1
# Estimated element-operations above which an offloadable kernel runs on a worker thread.
OFFLOAD_COST = 1 << 22


@dataclasses.dataclass(slots=True)
class NodePlan:
    index: int
    op: object
    fn: object
    ctx: NodeContext
    inputs: tuple
    deref: tuple
    outputs: tuple
    consumers: tuple = ()
    pending: int = 0
    free_after: tuple = ()
    is_async: bool = False
    offload: bool = False
    cost: object = None


@dataclasses.dataclass(slots=True)
class ExecutionPlan:
    device: object
    nodes: list
    num_slots: int
    feed_slots: tuple
    fetch_slots: tuple
    fetch_deref: tuple
    roots: tuple
    slot_readers: list
    fetched: frozenset
    static: bool
    schedule: tuple
    static_fn: object = None

    def describe(self):
        """The plan as plain data: ``[(op name, inputs, outputs, consumers, pending)]``."""
        return [(n.op.name, n.inputs, n.outputs, n.consumers, n.pending) for n in self.nodes]


def _estimate_static_cost(op):
    """Estimated work from static shapes, or None when a shape is unknown."""
    shapes = [t.shape for t in op._inputs]
    if any(not s.is_fully_defined() for s in shapes):
        return None
    if op.op_def.cost is not None:
        return op.op_def.cost([s.as_list() for s in shapes], op)
    return sum(s.num_elements() for s in shapes)


def compile_plan(ops, feeds, fetches, device, resources):
    """Compile ``ops`` (topologically ordered, all on ``device``).

    Args:
        ops: the pruned Operations of the partition, in topological order.
        feeds: Tensors whose values the caller supplies, in order.
        fetches: Tensors whose values the step returns, in order (unique).
        device: the runtime Device the partition runs on.
        resources: the ResourceManager stateful kernels use.

    Returns:
        An ExecutionPlan.

    Raises:
        NotFoundError: naming an op whose type has no kernel for the device.
    """
    slot_of = {}
    for i, tensor in enumerate(feeds):
        slot_of[tensor] = i
    num_slots = len(feeds)
    fed = set(feeds)
    in_plan = set(ops)
    fetch_set = set(fetches)
    node_of = {}
    nodes = []
    for index, op in enumerate(ops):
        kernel = get_kernel(op.type, device.kind)
        if kernel is None:
            raise errors.NotFoundError(
                None, op, f"No kernel registered for {op.type} '{op.name}' on device "
                f"{device.name} (created at {op.creation_site()})")
        outputs = []
        for tensor in op._outputs:
            if tensor in fed:
                outputs.append(DROP)
            elif tensor in fetch_set or any(c in in_plan for c in tensor._consumers):
                slot_of[tensor] = num_slots
                outputs.append(num_slots)
                num_slots += 1
            else:
                outputs.append(DROP)
        inputs, deref = [], []
        for position, tensor in enumerate(op._inputs):
            slot = slot_of.get(tensor)
            if slot is None:
                raise errors.InternalError(None, op, f"{op.name}: input {tensor.name} has no slot")
            inputs.append(slot)
            if tensor._is_ref and not op.op_def.is_ref_input(position):
                deref.append(position)
        node = NodePlan(index, op, kernel.fn, NodeContext(op, device, resources), tuple(inputs),
                        tuple(deref), tuple(outputs), is_async=kernel.is_async,
                        offload=kernel.offload)
        nodes.append(node)
        node_of[op] = node
    consumers = [[] for _ in nodes]
    for node in nodes:
        op = node.op
        for tensor in op._inputs:
            if tensor not in fed and tensor.op in node_of:
                consumers[node_of[tensor.op].index].append(node.index)
                node.pending += 1
        for control in op._control_inputs:
            if control in node_of:
                consumers[node_of[control].index].append(node.index)
                node.pending += 1
    for node, waiting in zip(nodes, consumers):
        node.consumers = tuple(waiting)
    slot_readers = [0] * num_slots
    last_reader = {}
    for node in nodes:
        for slot in node.inputs:
            slot_readers[slot] += 1
            last_reader[slot] = node.index
    fetch_slots = tuple(slot_of[t] for t in fetches)
    keep = set(fetch_slots)
    free_after = [[] for _ in nodes]
    for slot, index in last_reader.items():
        if slot not in keep:
            free_after[index].append(slot)
    for node, free in zip(nodes, free_after):
        node.free_after = tuple(free)
    possibly_large = 0
    for node in nodes:
        if node.offload:
            cost = _estimate_static_cost(node.op)
            if cost is None or cost >= OFFLOAD_COST:
                possibly_large += 1
    static = (not any(n.is_async for n in nodes)
              and not any(n.op.op_def.control_flow for n in nodes)
              and possibly_large <= 1)
    return ExecutionPlan(
        device=device, nodes=nodes, num_slots=num_slots,
        feed_slots=tuple(range(len(feeds))), fetch_slots=fetch_slots,
        fetch_deref=tuple(t._is_ref for t in fetches),
        roots=tuple(n.index for n in reversed(nodes) if n.pending == 0),
        slot_readers=slot_readers, fetched=frozenset(fetch_slots), static=static,
        schedule=tuple(nodes))


def runtime_cost(node, args):
    """Estimated work of running ``node`` on ``args`` (actual arrays)."""
    cost_fn = node.op.op_def.cost
    if cost_fn is not None:
        return cost_fn([a.shape for a in args], node.op)
    return sum(getattr(a, "size", 1) for a in args)
