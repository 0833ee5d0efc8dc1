"""A rewritable copy of a pruned graph, for the compile passes (optimize, partition).

Theory of operation:
- The user's ``Graph`` is append-only and its ops are shared by every session, so compile
  passes never edit it. ``NodeGraph.from_ops`` copies the pruned ops into ``Node``s: plain
  records (type, attrs, device, data inputs as ``(node, output)`` ports, control inputs)
  that passes may rewire, merge, replace or add to (CSE, constant folding, Send/Recv).
- A fed tensor is a ``FeedNode``: a port whose value the caller supplies; it is never
  scheduled. Fetches are ports too, so a pass that replaces a node also keeps what the
  caller fetches (fetching a folded tensor returns the folded constant).
- ``materialize`` turns a list of nodes (one partition) back into ``Operation`` objects the
  runtime compiles: fresh ops outside any graph's op list (so the user's graph is never
  touched), with the original op's name, attrs and creation site, so errors still point at
  the user's code. ``NodeGraph.changed`` stays False while no pass rewrote anything, so a
  single-device run can keep using the original ops.

Pure data: no trio, no kernels, no runtime.
"""
from __future__ import annotations

import heapq

from asyncflow.graph.graph import Operation, Tensor


class FeedNode:
    """A fed tensor: its value comes from the caller, not from a kernel."""

    __slots__ = ("tensor",)
    device = None

    def __init__(self, tensor):
        self.tensor = tensor

    @property
    def name(self):
        return self.tensor.op.name

    def out_spec(self, index):
        t = self.tensor
        return (t.dtype, t.shape, False)

    def __repr__(self):
        return f"<FeedNode {self.tensor.name}>"


class Node:
    """One op of a NodeGraph."""

    __slots__ = ("name", "type", "op_def", "attrs", "inputs", "control_inputs", "device",
                 "requested_device", "origin", "out_specs", "traceback", "seq",
                 "control_flow_context", "colocation")

    def __init__(self, name, type, op_def, attrs, inputs, control_inputs, device,  # noqa: A002
                 out_specs, traceback, seq, origin=None, requested_device=""):
        self.name = name
        self.type = type
        self.op_def = op_def
        self.attrs = attrs
        self.inputs = list(inputs)                # [(Node | FeedNode, output index)]
        self.control_inputs = list(control_inputs)  # [Node]
        self.device = device                      # full device name
        self.requested_device = requested_device  # what the user asked for ("" if nothing)
        self.out_specs = tuple(out_specs)         # [(DType, TensorShape, is_ref)]
        self.traceback = traceback
        self.seq = seq                            # creation order, for deterministic ties
        self.origin = origin                      # the user's Operation, or None
        self.control_flow_context = None
        self.colocation = ()

    def out_spec(self, index):
        return self.out_specs[index]

    @property
    def stateful(self):
        return self.op_def.stateful

    def __repr__(self):
        return f"<Node {self.type} '{self.name}' on {self.device}>"


class NodeGraph:
    """The pruned, placed graph of one run signature, as rewritable nodes.

    Attributes:
        nodes: Nodes in a topological order.
        feeds: the fed Tensors, in the caller's order.
        fetches: one port per fetched Tensor, in the caller's order.
        targets: Nodes the caller runs for their effects.
        changed: True once a pass rewrote anything.
    """

    def __init__(self, nodes, feeds, fetches, targets, changed=False):
        self.nodes = list(nodes)
        self.feeds = list(feeds)
        self.fetches = list(fetches)
        self.targets = list(targets)
        self.changed = changed

    @classmethod
    def from_ops(cls, ops, feeds, fetches, targets, placement):
        """Copy ``ops`` (topologically ordered) into Nodes placed by ``placement`` (op -> name)."""
        feed_nodes = {t: FeedNode(t) for t in feeds}
        node_of = {}
        nodes = []
        for op in ops:
            node = Node(op.name, op.type, op.op_def, op._attrs, [], [],
                        placement[op], [(t.dtype, t.shape, t._is_ref) for t in op.outputs],
                        op._traceback, op._id, origin=op, requested_device=op.device)
            node.control_flow_context = op._control_flow_context
            node.colocation = op._colocation
            node_of[op] = node
            nodes.append(node)
        # Inputs in a second pass: a loop's Merge reads a NextIteration that comes after it.
        for op, node in zip(ops, nodes):
            node.inputs = [(feed_nodes[t], 0) if t in feed_nodes
                           else (node_of[t.op], t.value_index) for t in op.inputs]
            node.control_inputs = [node_of[c] for c in op._control_inputs if c in node_of]
        fetch_ports = [(feed_nodes[t], 0) if t in feed_nodes else (node_of[t.op], t.value_index)
                       for t in fetches]
        return cls(nodes, feeds, fetch_ports, [node_of[op] for op in targets])

    def copy(self):
        """A deep copy of the nodes (attrs shared), so a pass can rewire without side effects."""
        clone = {}
        for node in self.nodes:
            twin = Node(node.name, node.type, node.op_def, node.attrs, [], [], node.device,
                        node.out_specs, node.traceback, node.seq, node.origin,
                        node.requested_device)
            twin.control_flow_context = node.control_flow_context
            twin.colocation = node.colocation
            clone[node] = twin
        for node in self.nodes:  # second pass: a loop's Merge reads a later NextIteration
            twin = clone[node]
            twin.inputs = [(clone.get(p, p), i) for p, i in node.inputs]
            twin.control_inputs = [clone[c] for c in node.control_inputs]
        return NodeGraph([clone[n] for n in self.nodes], self.feeds,
                         [(clone.get(p, p), i) for p, i in self.fetches],
                         [clone[t] for t in self.targets], self.changed)

    def consumers(self):
        """``{node: [(consumer, input position)]}`` over data edges."""
        out = {node: [] for node in self.nodes}
        for node in self.nodes:
            for position, (producer, _) in enumerate(node.inputs):
                if producer in out:
                    out[producer].append((node, position))
        return out


def port_name(port):
    node, index = port
    return f"{node.name}:{index}"


def topological(nodes):
    """``nodes`` in dependency order (data and control edges among them), ties by ``seq``."""
    members = set(nodes)
    indegree = {n: 0 for n in nodes}
    waiting = {n: [] for n in nodes}
    for node in nodes:
        for producer in [p for p, _ in node.inputs] + node.control_inputs:
            if producer in members and not (node.type == "Merge" and producer.type in (
                    "NextIteration", "RefNextIteration")):  # a loop's back edge
                indegree[node] += 1
                waiting[producer].append(node)
    heap = [(n.seq, i, n) for i, n in enumerate(nodes) if indegree[n] == 0]
    heapq.heapify(heap)
    order = []
    position = {n: i for i, n in enumerate(nodes)}
    while heap:
        _, _, node = heapq.heappop(heap)
        order.append(node)
        for consumer in waiting[node]:
            indegree[consumer] -= 1
            if indegree[consumer] == 0:
                heapq.heappush(heap, (consumer.seq, position[consumer], consumer))
    if len(order) != len(nodes):
        stuck = next(n for n in nodes if indegree[n] > 0)
        raise ValueError(f"compile produced a cycle through {stuck.type} '{stuck.name}'")
    return order


def materialize(nodes, graph):
    """Fresh Operations for ``nodes`` (topologically ordered, e.g. one partition).

    Args:
        nodes: Nodes whose producers are in ``nodes`` or are FeedNodes.
        graph: the user's Graph (ops point at it for names and errors, but are not added).

    Returns:
        ``(ops, tensor_of)``: the Operations in order, and a function mapping a port
        ``(node, index)`` to the Tensor to feed or fetch in this partition.
    """
    op_of = {}
    ops = []
    back_edges = []  # a loop's Merge is created before the NextIteration it reads
    for node in nodes:
        inputs = []
        for position, (producer, index) in enumerate(node.inputs):
            if isinstance(producer, FeedNode):
                inputs.append(producer.tensor)
            elif producer not in op_of:
                back_edges.append((node, position))
                inputs.append(None)
            else:
                inputs.append(op_of[producer]._outputs[index])
        controls = [op_of[c] for c in node.control_inputs]
        op = Operation(graph, node.seq, node.name, node.type, inputs, controls,
                       node.attrs, node.device, node.op_def, node.traceback)
        op._outputs = tuple(Tensor(op, i, dtype, shape, is_ref=is_ref)
                            for i, (dtype, shape, is_ref) in enumerate(node.out_specs))
        op._control_flow_context = node.control_flow_context
        op._colocation = node.colocation
        for producer, index in node.inputs:
            if not isinstance(producer, FeedNode) and producer in op_of:
                op_of[producer]._outputs[index]._consumers.append(op)
        for control in controls:
            control._control_outputs.append(op)
        op_of[node] = op
        ops.append(op)
    for node, position in back_edges:
        producer, index = node.inputs[position]
        op = op_of[node]
        inputs = list(op._inputs)
        inputs[position] = op_of[producer]._outputs[index]
        op._inputs = tuple(inputs)
        inputs[position]._consumers.append(op)

    def tensor_of(port):
        producer, index = port
        if isinstance(producer, FeedNode):
            return producer.tensor
        return op_of[producer]._outputs[index]
    return ops, tensor_of
