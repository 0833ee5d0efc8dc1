"""Pruning: the ops a run needs, in a deterministic topological order.

Walk back from the fetched tensors and target ops along data and control edges; a fed tensor
cuts the walk (its producer is not needed for it). A control edge from an op with a fed
output is satisfied by the feed (TF1 moves such edges to the feed), so a control dependency
on a fed placeholder never runs the placeholder. The result is sorted topologically with
ties broken by creation order, so the same request always compiles to the same schedule.
"""
from __future__ import annotations

import heapq


def needed_ops(fetch_tensors, target_ops, fed_tensors):
    """The set of ops required to compute ``fetch_tensors`` and run ``target_ops``."""
    fed = set(fed_tensors)
    needed = set()
    stack = [t.op for t in fetch_tensors if t not in fed] + list(target_ops)
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        for tensor in op.inputs:
            if tensor not in fed and tensor.op not in needed:
                stack.append(tensor.op)
        for control in op.control_inputs:
            if control not in needed and not any(t in fed for t in control.outputs):
                stack.append(control)
    return needed


def topological_order(ops, skip_edge=None):
    """``ops`` in dependency order (Kahn's algorithm, ties by creation order).

    Args:
        ops: a set of Operations closed under the edges that matter.
        skip_edge: ``skip_edge(op, input_index)`` True for data edges to ignore (loop back
            edges into Merge nodes).

    Raises:
        ValueError: if the ops contain a cycle, naming one op on it.
    """
    indegree = {op: 0 for op in ops}
    consumers = {op: [] for op in ops}
    for op in ops:
        for index, tensor in enumerate(op.inputs):
            if tensor.op in indegree and not (skip_edge and skip_edge(op, index)):
                indegree[op] += 1
                consumers[tensor.op].append(op)
        for control in op.control_inputs:
            if control in indegree:
                indegree[op] += 1
                consumers[control].append(op)
    heap = [(op.seq, op) for op, degree in indegree.items() if degree == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, op = heapq.heappop(heap)
        order.append(op)
        for consumer in consumers[op]:
            indegree[consumer] -= 1
            if indegree[consumer] == 0:
                heapq.heappush(heap, (consumer.seq, consumer))
    if len(order) != len(ops):
        stuck = min((op for op, d in indegree.items() if d > 0), key=lambda op: op.seq)
        raise ValueError(f"Graph has a cycle through {stuck.type} '{stuck.name}' "
                         "(only while_loop back edges may form cycles)")
    return order


def prune(fetch_tensors, target_ops, fed_tensors, skip_edge=None):
    """Needed ops in topological order."""
    return topological_order(needed_ops(fetch_tensors, target_ops, fed_tensors), skip_edge)
