"""Loops across devices: per-(frame, device) control loops for Recvs inside while loops.

A Recv whose consumers run inside a loop frame has no input of its own in that frame: left
alone it would run once, in the root frame. For each (loop, device) with such a Recv, the
partitioner adds a *control loop* on that device (paper §4.4, TF's ``AddControlFlow``)::

    src -> Enter(frame) -> Merge <- NextIteration <- Switch:1
                             |                          ^
                             +------> Switch(merge, pred)+
                             +--(control)--> every Recv of that frame on that device

``pred`` is the loop's LoopCond, received through an ordinary Send/Recv pair when it lives on
another device. The control loop runs as many iterations as the loop itself, so each Recv
runs once per iteration, with the iteration in its rendezvous key; in the last iteration
the Recv receives the Send's dead bit. For a loop nested in another, ``src`` is the parent's
control loop (its Switch's true port), so control loops stack like the frames they mirror.

That scheme needs every Recv in a frame to get one Send per iteration, so two edges must never
cross devices (``colocate_loop_edges``, run before any Send/Recv is added):

- ``NextIteration -> Merge`` (the back edge): NextIteration's output belongs to iteration
  i+1, so its Send would carry keys 1..n while the Merge's control-looped Recv waits on keys
  0..n; iteration 0 would never finish and the step would hang. The NextIteration moves to
  its Merge's device, so the crossing is its *input*, an ordinary in-frame edge of
  iteration i (dead in the last iteration, which ends the loop there too).
- a non-constant ``Enter -> Merge``: the Enter's output exists in iteration 0 only, while the
  Recv would wait in every iteration. The Enter moves to its Merge's device, so the crossing
  is its input, in the parent frame.

The loop builders colocate these already; the pass makes any placement safe (a placer or a
hand-built loop that splits them, e.g. a gradient's iteration counter placed away from its
predicate).

Pure graph code: ``Node`` objects in, ``Node`` objects out; no trio, no kernels.
"""
from __future__ import annotations

from asyncflow import dtypes, errors
from asyncflow.graph.registry import get_op_def
from asyncflow.graph.shape import TensorShape

_TOKEN = [(dtypes.float32, TensorShape([0]), False)]
BACK_EDGE_SOURCES = ("NextIteration", "RefNextIteration")


def _iteration_bound(node):
    """Whether ``node``'s outputs live in one iteration only (NextIteration, non-constant Enter)."""
    if node.type in BACK_EDGE_SOURCES:
        return True
    return node.type in ("Enter", "RefEnter") and not node.attrs.get("is_constant")


def colocate_loop_edges(nodes):
    """Move each NextIteration and non-constant Enter onto the device of the ops it feeds.

    Args:
        nodes: the placed nodes (moved in place: ``node.device`` changes).

    Returns:
        The number of nodes moved.

    Raises:
        InvalidArgumentError: such a node feeds ops on more than one device (no placement of
            it avoids a crossing that would hang the loop).
    """
    consumer_devices = {}
    for node in nodes:
        for producer, _ in node.inputs:
            if getattr(producer, "type", None) is not None and _iteration_bound(producer):
                consumer_devices.setdefault(producer, set()).add(node.device)
    moved = 0
    for node, found in consumer_devices.items():
        if found == {node.device}:
            continue
        if len(found) > 1:
            raise errors.InvalidArgumentError(
                None, node.origin,
                f"{node.type} '{node.name}' feeds ops on several devices ({sorted(found)}); "
                f"a loop's {node.type} output lives in one iteration, so it cannot cross "
                f"devices: colocate its consumers")
        node.device = found.pop()
        moved += 1
    return moved


def loop_of(context):
    """The innermost while-loop context around ``context`` (a cond's or a loop's), or None."""
    while context is not None and not hasattr(context, "frame_name"):
        context = context.outer
    return context


def _exec_loop(node, nodes):
    """The loop frame ``node`` runs in; a builder-made control Identity takes its targets'."""
    if node.name.endswith("/_control_identity"):
        targets = [n for n in nodes if node in n.control_inputs]
        return loop_of(targets[0].control_flow_context) if targets else None
    return loop_of(node.control_flow_context)


class _ControlLoops:
    def __init__(self, builder, by_name):
        self.builder = builder
        self.by_name = by_name
        self.loops = {}   # (loop context id, device) -> (merge node, switch node)
        self.added = []

    def node(self, name, op_type, attrs, inputs, device, specs, context, seq):
        node = self._node_class(name, op_type, get_op_def(op_type), attrs, inputs, [], device,
                                specs, ("<control loop>", 0, "partition"), seq)
        node.control_flow_context = context
        self.added.append(node)
        return node

    def get(self, loop, device, seq):
        key = (id(loop), device)
        found = self.loops.get(key)
        if found is not None:
            return found
        parent = loop_of(loop.outer)
        prefix = f"{loop.frame_name}/_control_loop_{device.rsplit('/', 1)[-1].replace(':', '_')}"
        if parent is None:
            import numpy as np
            src = (self.node(f"{prefix}/src", "Const",
                             {"value": np.zeros((0,), np.float32), "dtype": dtypes.float32}, [],
                             device, _TOKEN, None, seq), 0)
        else:
            src = (self.get(parent, device, seq)[1], 1)
        enter = self.node(f"{prefix}/Enter", "Enter",
                          {"frame_name": loop.frame_name, "is_constant": False,
                           "parallel_iterations": loop.parallel_iterations},
                          [src], device, _TOKEN, loop.outer, seq)
        merge = self.node(f"{prefix}/Merge", "Merge", {}, [(enter, 0), (enter, 0)], device,
                          _TOKEN + [(dtypes.int32, TensorShape([]), False)], loop, seq)
        pivot = self.by_name[loop.pivot.op.name]
        switch = self.node(f"{prefix}/Switch", "Switch", {}, [(merge, 0)], device,
                           _TOKEN * 2, loop, seq)
        switch.inputs.append((pivot, 0) if pivot.device == device
                             else self.builder.data_input(pivot, 0, switch))
        following = self.node(f"{prefix}/NextIteration", "NextIteration", {}, [(switch, 1)],
                              device, _TOKEN, loop, seq)
        merge.inputs[1] = (following, 0)
        self.loops[key] = (merge, switch)
        return merge, switch


def add_control_loops(nodes, builder, node_class):
    """Add control loops for every Recv inside a loop frame; returns the new nodes.

    Args:
        nodes: every node after Send/Recv insertion (the builder's additions included).
        builder: the partitioner's Send/Recv builder (its ``data_input`` carries the pivot
            across devices; new pairs land in ``builder.added``).
        node_class: the NodeGraph ``Node`` class.
    """
    by_name = {n.name: n for n in nodes}
    loops = _ControlLoops(builder, by_name)
    loops._node_class = node_class
    done = set()
    pending = [n for n in nodes if n.type == "_Recv"]
    while pending:
        recv = pending.pop()
        if recv in done:
            continue
        done.add(recv)
        consumers = [n for n in nodes + loops.added if any(p is recv for p, _ in n.inputs)]
        frames = {id(loop_of_c): loop_of_c for loop_of_c in
                  (_exec_loop(c, nodes) for c in consumers) if loop_of_c is not None}
        if not frames:
            continue
        loop = next(iter(frames.values()))
        seen = len(builder.added)
        merge, _ = loops.get(loop, recv.device, recv.seq - 0.01)
        recv.control_inputs.append(merge)
        recv.control_flow_context = loop
        for added in builder.added[seen:]:  # a pivot crossing devices: its Recv is in the loop
            if added.type == "_Recv":
                pending.append(added)
            nodes.append(added)
    return loops.added
