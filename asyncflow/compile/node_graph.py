"""A rewritable copy of a pruned graph, for the compile passes (optimize, partition).

Theory of operation:
- The user's ``Graph`` is append-only and its ops are shared by every session, so compile
  passes never edit it. ``NodeGraph.from_ops`` copies the pruned ops into ``Node``s: plain
  records (type, attrs, device, data inputs as ``(node, output)`` ports, control inputs)
  that passes may rewire, merge, replace or add to (CSE, constant folding, Send/Recv).
- A fed tensor is a ``FeedNode``: a port whose value the caller supplies; it is never
  scheduled. Fetches are ports too, so a pass that replaces a node also keeps what the
  caller fetches (fetching a folded tensor returns the folded constant).
- Nodes are also what the runtime compiles (``exec/plan.py``) and what the master ships
  to a worker (``compile/task_graph.py``): there is no second graph of Operations. A
  Node therefore answers what kernels, cost functions and errors read of an op: ``name``,
  ``type``, ``op_def``, ``attrs``/``get_attr``, ``device``, ``outputs`` (``NodeOutput``s:
  dtype, shape, is_ref) and ``creation_site()``. ``origin`` is the user's Operation the
  node stands for (the op it was copied from; a node a pass made carries the origin of the
  node it replaces; Send/Recv and other plumbing have None): errors name it
  (``errors.OpError``), so they point at the user's op and line.

Pure data: no trio, no kernels, no runtime.
"""
from __future__ import annotations

import heapq



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


class NodeOutput:
    """One output of a Node, as kernels and cost functions read an output Tensor."""

    __slots__ = ("node", "value_index", "dtype", "shape", "is_ref")

    def __init__(self, node, value_index, dtype, shape, is_ref):
        self.node = node
        self.value_index = value_index
        self.dtype = dtype
        self.shape = shape
        self.is_ref = is_ref

    @property
    def name(self):
        return f"{self.node.name}:{self.value_index}"


class Node:
    """One op of a NodeGraph (see the module docstring for what it answers).

    Attributes:
        origin: the user's Operation this node stands for, or None for plumbing a pass
            added (Send/Recv, control-edge constants): the op errors name.
        inputs: data inputs as ports ``(Node or FeedNode, output index)``.
        outputs: ``NodeOutput``s, one per ``out_specs`` entry.
    """

    __slots__ = ("name", "type", "op_def", "attrs", "inputs", "control_inputs", "device",
                 "requested_device", "origin", "out_specs", "_output_views", "traceback", "seq",
                 "control_flow_context", "colocation_groups")

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
        self._output_views = None                 # made on first read (passes copy nodes)
        self.traceback = traceback
        self.seq = seq                            # creation order, for deterministic ties
        self.origin = origin                      # the user's Operation, or None
        self.control_flow_context = None
        self.colocation_groups = ()

    def out_spec(self, index):
        return self.out_specs[index]

    @property
    def outputs(self):
        outputs = self._output_views
        if outputs is None:
            outputs = self._output_views = tuple(NodeOutput(self, i, *spec)
                                            for i, spec in enumerate(self.out_specs))
        return outputs

    @property
    def stateful(self):
        return self.op_def.stateful

    def get_attr(self, name):
        """The value of attr ``name``.

        Raises:
            ValueError: naming the node and the missing attr.
        """
        try:
            return self.attrs[name]
        except KeyError:
            raise ValueError(f"Operation '{self.name}' ({self.type}) has no attr named "
                             f"{name!r}; it has {sorted(self.attrs)}") from None

    def creation_site(self):
        """Where the user created the op this node stands for: ``file:line in function``."""
        filename, lineno, function = self.traceback or ("<unknown>", 0, "<unknown>")
        return f"{filename}:{lineno} in {function}"

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
        """Copy ``ops`` (topologically ordered) into Nodes placed by ``placement`` (op -> name).

        Each node gets its own plain dict of the op's attrs: kernels read ``ctx.attrs`` on
        every run, and a dict lookup is cheaper than one through the op's read-only view."""
        feed_nodes = {t: FeedNode(t) for t in feeds}
        node_of = {}
        nodes = []
        for op in ops:
            node = Node(op.name, op.type, op.op_def, dict(op.attrs), [], [],
                        placement[op], [(t.dtype, t.shape, t.is_ref) for t in op.outputs],
                        op.traceback, op.seq, origin=op, requested_device=op.device)
            node.control_flow_context = op.control_flow_context
            node.colocation_groups = op.colocation_groups
            node_of[op] = node
            nodes.append(node)
        # Inputs in a second pass: a loop's Merge reads a NextIteration that comes after it.
        for op, node in zip(ops, nodes):
            node.inputs = [(feed_nodes[t], 0) if t in feed_nodes
                           else (node_of[t.op], t.value_index) for t in op.inputs]
            node.control_inputs = [node_of[c] for c in op.control_inputs if c in node_of]
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
            twin.colocation_groups = node.colocation_groups
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


def fusion_view(graph):
    """``(readers, controlling, pinned)``: ``readers_of(graph)`` and the ports and nodes a
    fusion may not take away because the caller asks for them (fetches and targets)."""
    readers, controlling = readers_of(graph)
    return readers, controlling, set(graph.targets) | {p for p, _ in graph.fetches}


def readers_of(graph):
    """``port -> [consumer]`` (one entry per input position) and the controlling nodes: what a
    graph rewrite (a fusion) asks before it takes an intermediate away."""
    readers, controlling = {}, set()
    for node in graph.nodes:
        for port in node.inputs:
            readers.setdefault(port, []).append(node)
        controlling.update(node.control_inputs)
    return readers, controlling


def plain_on(node, device):
    """Whether ``node`` is an op (not a feed) on ``device``, outside loops, with no control
    inputs and no ref outputs: one a fusion may take into a fused node."""
    return (not isinstance(node, FeedNode) and node.device == device
            and node.control_flow_context is None and not node.control_inputs
            and not any(ref for _, _, ref in node.out_specs))


def rewire(graph, added, dropped, ports, replaced):
    """Finish a rewrite of ``graph`` in place: ``added`` nodes join it, ``dropped`` ones
    leave, every input and fetch reads ``ports``' new port for an old one, control inputs
    and targets name ``replaced``'s new node for an old one; returns ``graph`` (as it was
    where nothing was added or dropped: no fusion fired)."""
    if not added and not dropped:
        return graph
    nodes = []
    for node in graph.nodes + list(added):
        if node in dropped:
            continue
        node.inputs = [ports.get(p, p) for p in node.inputs]
        node.control_inputs = list(dict.fromkeys(replaced.get(c, c)
                                                 for c in node.control_inputs))
        nodes.append(node)
    graph.nodes = topological(nodes)
    graph.fetches = [ports.get(p, p) for p in graph.fetches]
    graph.targets = [replaced.get(t, t) for t in graph.targets]
    graph.changed = True
    return graph


def swap_nodes(graph, replaced):
    """The nodes of ``graph`` with each key of ``replaced`` swapped for its value (a node
    giving the same outputs in the same positions), every input, control input, fetch and
    target following the swap; the caller sorts them into ``graph.nodes``."""
    nodes = []
    for node in graph.nodes:
        node = replaced.get(node, node)
        node.inputs = [(replaced.get(p, p), i) for p, i in node.inputs]
        node.control_inputs = [replaced.get(c, c) for c in node.control_inputs]
        nodes.append(node)
    graph.fetches = [(replaced.get(p, p), i) for p, i in graph.fetches]
    graph.targets = [replaced.get(t, t) for t in graph.targets]
    return nodes


def producer(port):
    """The node that makes ``port`` (a ``(node, index)`` pair), or None for a feed."""
    node = port[0]
    return None if isinstance(node, FeedNode) else node


def depends_on(port, nodes, replaced=None):
    """Whether the producer of ``port`` is one of ``nodes`` or reads one, transitively (inputs
    and control inputs). ``replaced`` (a pass's ``{node: fused node}`` so far): a node already
    taken into a fused node reads that node's inputs too, so that a second fusion cannot close
    a cycle through the first."""
    seen, stack = set(), [producer(port)]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        if node in nodes:
            return True
        seen.add(node)
        stack.extend(producer(p) for p in node.inputs)
        stack.extend(node.control_inputs)
        if replaced and node in replaced:
            stack.extend(producer(p) for p in replaced[node].inputs)
    return False
