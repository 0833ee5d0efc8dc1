"""Graph optimizations run at compile time, each a pass from a NodeGraph to a new one.

Theory of operation (paper §5; docs/architecture.md):
- **CSE** (``eliminate_common_subexpressions``). Walk nodes in topological order and key each
  by (type, device, input ports, sorted control inputs, attrs); a later node with the key of
  an earlier one is dropped and its consumers, fetches and targets read the earlier one.
  Inputs of commutative ops are sorted first. Never merged: stateful ops (variables, random,
  Send/Recv), Placeholders, ops reading a variable reference (two reads may see different
  values), control-flow ops, and nodes on different devices.
- **Constant folding** (``fold_constants``). Stateless nodes whose inputs are all constant
  (transitively) are evaluated once at compile time, by a host ``evaluate`` callback the
  caller provides (this layer runs no kernels), and replaced by ``Const`` nodes on the same
  device. A folded node whose inputs live on another device is left alone (never fold
  across a device boundary), as are huge results, Send/Recv, control flow and targets.
  A fetched folded tensor is fetched from its Const, so results do not change.
- **Fusion** (``fuse_activations``, TF's remapper). ``Conv2D -> BiasAdd [-> Relu]`` becomes
  one ``_FusedConv2D`` and ``MatMul -> BiasAdd (or Add of a 1-D bias over the last dim)
  [-> Relu | Sigmoid | Tanh]`` one ``_FusedMatMul``, named after the chain's last node (its
  consumers and fetches read the fused node), with ``fused_ops`` naming the fused steps. The
  fused kernel adds the bias and applies the activation to each chunk of the product while
  it is in cache, with no intermediate arrays. A chain fuses only where each intermediate has
  no other consumer (a ``Shape`` of it may read the fused output instead: every tensor of the
  chain has the same shape), is neither fetched nor a target nor a control input, has no
  control inputs of its own, and the chain sits on one device outside any loop, as TF's
  remapper requires. A conv's ``Conv2DBackpropInput`` and ``Conv2DBackpropFilter`` reading
  one gradient port (same attrs, NHWC, one device, neither a target nor reaching the other)
  become one ``_FusedConv2DBackprop`` with both outputs: by FFT its kernel transforms the
  gradient once for both (kernels/nn_conv_fft.py). A MaxPool whose output feeds its own
  MaxPoolGrad keeps each window's winning tap for it (compile/pool_taps.py). A
  ``_FusedConv2D`` and the ``_FusedConv2DBackprop`` of the same input and filter share the
  input's spectra where the FFT algorithm runs (compile/conv_spectra.py). Consecutive narrow
  ``_FusedMatMul`` layers, each reading the one before, become one ``_FusedMatMulChain``
  that splits by rows once for all of them (compile/fuse_matmul_chain.py).
- **Recv scheduling** (``schedule_recvs``, ALAP). A Recv otherwise starts at step start and
  holds its buffer for the whole step. Each Recv gets a control edge from the latest local
  input of its first consumer, so it starts just before that consumer needs it. An edge is
  added only when it cannot close a cycle through any device (checked over the whole
  partitioned graph, Send->Recv links included).

Passes never modify their input; they set ``changed`` when they rewrote something.
"""
from __future__ import annotations

import collections.abc

import numpy as np

from asyncflow import dtypes
from asyncflow.graph.registry import get_op_def
from asyncflow.compile import conv_spectra, fuse_matmul_chain, pool_taps
from asyncflow.compile.node_graph import FeedNode, Node, topological
from asyncflow.graph.shape import TensorShape

COMMUTATIVE = frozenset({"Add", "AddV2", "Mul", "Maximum", "Minimum", "LogicalAnd",
                         "LogicalOr", "LogicalXor", "Equal", "NotEqual", "AddN",
                         "SquaredDifference", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})
_NEVER_CSE = frozenset({"Placeholder", "PlaceholderWithDefault", "_Send", "_Recv"})
_NEVER_FOLD = frozenset({"Const", "Placeholder", "PlaceholderWithDefault", "_Send", "_Recv"})
MAX_FOLDED_BYTES = 10 << 20


class _Unhashable(Exception):
    pass


def _canonical(value):
    """A hashable, type-tagged form of an attr value (numpy arrays by dtype, shape, bytes)."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return ("object-array", value.shape, tuple(_canonical(v) for v in value.reshape(-1)))
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_canonical(v) for v in value))
    if isinstance(value, collections.abc.Mapping):  # a dict, or an op's attrs view
        return ("dict", tuple(sorted((k, _canonical(v)) for k, v in value.items())))
    if isinstance(value, (bool, int, float, str, bytes, type(None), np.generic)):
        return (type(value).__name__, value)
    if isinstance(value, (dtypes.DType, TensorShape)):
        return (type(value).__name__, str(value))
    raise _Unhashable(value)


def _port_key(port, ids):
    producer, index = port
    if isinstance(producer, FeedNode):
        return ("feed", producer.tensor.name, index)
    return (ids[producer], index)


def _cse_key(node, ids):
    if (node.type in _NEVER_CSE or node.op_def.stateful or node.op_def.control_flow
            or node.control_flow_context is not None
            or any(p.out_spec(i)[2] for p, i in node.inputs)):
        return None
    try:
        attrs = _canonical(node.attrs)
    except _Unhashable:
        return None
    inputs = [_port_key(p, ids) for p in node.inputs]
    if node.type in COMMUTATIVE:
        inputs.sort(key=repr)
    controls = tuple(sorted(ids[c] for c in node.control_inputs))
    specs = tuple((str(d), str(s)) for d, s, _ in node.out_specs)
    return (node.type, node.device, specs, tuple(inputs), controls, attrs)


def _replace(graph, replacement):
    """Point every port, control edge, fetch and target at ``replacement[node]``; drop those."""
    def port(p):
        return (replacement.get(p[0], p[0]), p[1])
    kept = []
    for node in graph.nodes:
        if node in replacement:
            continue
        node.inputs = [port(p) for p in node.inputs]
        controls = []
        for control in node.control_inputs:
            control = replacement.get(control, control)
            if control not in controls:
                controls.append(control)
        node.control_inputs = controls
        kept.append(node)
    graph.nodes = kept
    graph.fetches = [port(p) for p in graph.fetches]
    graph.targets = [replacement.get(t, t) for t in graph.targets]
    graph.changed = True


def eliminate_common_subexpressions(node_graph):
    """CSE; returns a new NodeGraph."""
    graph = node_graph.copy()
    ids, seen, replacement = {}, {}, {}
    for node in graph.nodes:
        node.inputs = [(replacement.get(p, p), i) for p, i in node.inputs]
        node.control_inputs = [replacement.get(c, c) for c in node.control_inputs]
        key = _cse_key(node, ids)
        if key is not None and key in seen:
            replacement[node] = seen[key]
            continue
        ids[node] = len(ids)
        if key is not None:
            seen[key] = node
    if replacement:
        _replace(graph, replacement)
    return graph


def _foldable(node, constant, targets):
    return (node.type not in _NEVER_FOLD and not node.op_def.stateful
            and not node.op_def.control_flow and node.control_flow_context is None
            and node not in targets and not node.control_inputs and node.inputs
            and all(not isinstance(p, FeedNode) and p in constant and p.device == node.device
                    and not p.out_spec(i)[2] for p, i in node.inputs))


def _needed(graph):
    """Nodes the fetches and targets still need (after folding cut some edges)."""
    needed, stack = set(), [p for p, _ in graph.fetches if not isinstance(p, FeedNode)]
    stack += graph.targets
    while stack:
        node = stack.pop()
        if node in needed:
            continue
        needed.add(node)
        stack += [p for p, _ in node.inputs if not isinstance(p, FeedNode)]
        stack += node.control_inputs
    return needed


def fold_constants(node_graph, evaluate, max_bytes=MAX_FOLDED_BYTES):
    """Constant folding; returns a new NodeGraph.

    Args:
        node_graph: a placed NodeGraph.
        evaluate: ``evaluate(nodes, ports) -> list of arrays`` running ``nodes`` (topological,
            all constant-only) on the host and returning the values of ``ports``; it returns
            None when it cannot (an error is then left for the run to report).
        max_bytes: results larger than this stay computed at run time.
    """
    graph = node_graph.copy()
    targets = set(graph.targets)
    constant = {n for n in graph.nodes if n.type == "Const" and not n.control_inputs}
    folded = []
    for node in graph.nodes:
        if _foldable(node, constant, targets):
            constant.add(node)
            folded.append(node)
    if not folded:
        return graph
    folded_set = set(folded)
    boundary = []   # folded ports read by a node that stays, or fetched
    for node in graph.nodes:
        if node not in folded_set:
            boundary += [(p, i) for p, i in node.inputs if p in folded_set]
    boundary += [(p, i) for p, i in graph.fetches if p in folded_set]
    boundary = list(dict.fromkeys(boundary))
    if not boundary:
        return graph
    sources = [n for n in graph.nodes if n in constant and n not in folded_set]
    values = evaluate(sources + folded, boundary)
    if values is None:
        return graph
    const_def = get_op_def("Const")
    port_map = {}
    for (producer, index), value in zip(boundary, values):
        value = np.asarray(value) if not hasattr(value, "shape") else value
        if getattr(value, "nbytes", 0) > max_bytes:
            continue
        dtype = producer.out_specs[index][0]
        name = producer.name if len(producer.out_specs) == 1 else f"{producer.name}/_folded_{index}"
        const = Node(name, "Const", const_def, {"value": value, "dtype": dtype}, [], [],
                     producer.device, [(dtype, TensorShape(value.shape), False)],
                     producer.traceback, producer.seq, origin=producer.origin,
                     requested_device=producer.requested_device)
        port_map[(producer, index)] = const
    if not port_map:
        return graph
    nodes = []
    for node in graph.nodes:
        node.inputs = [(port_map[p], 0) if p in port_map else p for p in node.inputs]
        nodes.append(node)
        nodes += [c for (producer, _), c in port_map.items() if producer is node]
    graph.nodes = nodes
    graph.fetches = [(port_map[p], 0) if p in port_map else p for p in graph.fetches]
    needed = _needed(graph)
    graph.nodes = [n for n in graph.nodes if n in needed]
    graph.changed = True
    return graph


_FUSED_ACTIVATIONS = {"Conv2D": ("Relu",), "MatMul": ("Relu", "Sigmoid", "Tanh")}
_FUSED_TYPE = {"Conv2D": "_FusedConv2D", "MatMul": "_FusedMatMul"}


def _uses(graph):
    """``port -> [(consumer, position)]`` and the nodes used as control inputs."""
    uses, controlling = {}, set()
    for node in graph.nodes:
        for position, port in enumerate(node.inputs):
            uses.setdefault(port, []).append((node, position))
        controlling.update(node.control_inputs)
    return uses, controlling


def _sole_consumer(node, uses, controlling, pinned):
    """The one non-Shape consumer of ``node``'s only output, or None when ``node`` must stay
    (fetched, a target, a control input, or read by anything else)."""
    if node in pinned or node in controlling or len(node.out_specs) != 1:
        return None
    readers = [(c, i) for c, i in uses.get((node, 0), []) if c.type != "Shape"]
    if len(readers) != 1:
        return None
    return readers[0][0]


def _bias_port(node, adder):
    """The bias port when ``adder`` adds a 1-D bias over ``node``'s last dim, else None."""
    if adder.type == "BiasAdd":
        data_format = adder.attrs.get("data_format", "NHWC")
        if (adder.inputs[0][0] is node and data_format in (None, "NHWC")
                and node.attrs.get("data_format") in (None, "NHWC")  # an NCHW Conv2D stays
                and (node.type != "MatMul" or node.out_specs[0][1].ndims == 2)):
            return adder.inputs[1]
        return None
    if adder.type not in ("Add", "AddV2") or node.type != "MatMul":
        return None
    (first, second) = adder.inputs
    bias = second if first[0] is node else first
    if bias[0] is node:
        return None
    product_shape = node.out_specs[0][1]
    bias_dtype, bias_shape, bias_ref = bias[0].out_spec(bias[1])
    if (bias_ref or bias_shape.ndims != 1 or product_shape.ndims != 2
            or bias_shape.dims[0] is None or bias_shape.dims[0] != product_shape.dims[1]
            or adder.out_specs[0][1] != product_shape):
        return None
    return bias


def _fusible(node):
    dtype = node.out_specs[0][0]
    return (node.control_flow_context is None and not node.control_inputs
            and dtype.is_floating and not node.out_specs[0][2])


def fuse_activations(node_graph):
    """TF's remapper fusions (see the module docstring); returns a new NodeGraph."""
    graph = _fuse_conv_backprops(_fuse_chains(node_graph))  # a copy of its own
    graph = fuse_matmul_chain.fuse_matmul_chain(graph)
    return conv_spectra.share_conv_spectra(pool_taps.route_max_pool_grads(graph))


def _fuse_chains(node_graph):
    graph = node_graph.copy()
    uses, controlling = _uses(graph)
    pinned = set(graph.targets) | {p for p, _ in graph.fetches}
    replacement, fused_away = {}, set()
    for node in graph.nodes:
        if node.type not in _FUSED_TYPE or node in fused_away or not _fusible(node):
            continue
        adder = _sole_consumer(node, uses, controlling, pinned)
        if (adder is None or adder.device != node.device or not _fusible(adder)
                or adder in fused_away):
            continue
        bias = _bias_port(node, adder)
        if bias is None or bias[0].out_spec(bias[1])[0] != node.out_specs[0][0]:
            continue
        chain = [node, adder]
        activation = _sole_consumer(adder, uses, controlling, pinned)
        if (activation is not None and activation.type in _FUSED_ACTIVATIONS[node.type]
                and activation.device == node.device and _fusible(activation)):
            chain.append(activation)
        last = chain[-1]
        fused_type = _FUSED_TYPE[node.type]
        fused = Node(last.name, fused_type, get_op_def(fused_type),
                     {**node.attrs, "fused_ops": ("BiasAdd",) + tuple(n.type for n in chain[2:])},
                     list(node.inputs) + [bias], [], node.device, last.out_specs,
                     last.traceback, last.seq, origin=last.origin,
                     requested_device=last.requested_device)
        for member in chain:
            replacement[member] = fused
            fused_away.add(member)
    if not replacement:
        return graph
    fused_nodes = list(dict.fromkeys(replacement.values()))
    nodes = []
    for node in graph.nodes:
        if node in replacement:
            continue
        node.inputs = [(replacement[p], 0) if p in replacement else (p, i)
                       for p, i in node.inputs]
        node.control_inputs = list(dict.fromkeys(replacement.get(c, c)
                                                 for c in node.control_inputs))
        nodes.append(node)
    for fused in fused_nodes:
        fused.inputs = [(replacement[p], 0) if p in replacement else (p, i)
                        for p, i in fused.inputs]
    graph.nodes = topological(nodes + fused_nodes)
    graph.fetches = [(replacement[p], 0) if p in replacement else (p, i)
                     for p, i in graph.fetches]
    graph.targets = [replacement.get(t, t) for t in graph.targets]
    graph.changed = True
    return graph


_CONV_ATTRS = ("strides", "padding", "dilations", "data_format", "explicit_paddings")


def _fuse_conv_backprops(graph):
    """Conv2DBackpropInput and Conv2DBackpropFilter reading the same gradient port (a conv's
    two gradients) become one ``_FusedConv2DBackprop`` with both outputs, so the gradient's
    transform (the FFT algorithm, kernels/nn_conv_fft.py) is computed once. Only where both
    are NHWC with the same attrs on one device, neither is a target or a control input nor
    has control inputs, and neither reaches the other (no cycle); fetches of either output
    read the fused node's."""
    _, controlling = _uses(graph)
    pinned = set(graph.targets) | controlling
    filters_by_grad = {}
    for node in graph.nodes:
        if node.type == "Conv2DBackpropFilter" and node not in pinned and _fusible(node):
            filters_by_grad.setdefault(node.inputs[2], []).append(node)
    pairs, succ = [], None
    for node in graph.nodes:
        if node.type != "Conv2DBackpropInput" or node in pinned or not _fusible(node):
            continue
        attrs = tuple(node.attrs.get(key) for key in _CONV_ATTRS)
        if node.attrs.get("data_format") not in (None, "NHWC"):
            continue
        for partner in filters_by_grad.get(node.inputs[2], ()):
            if (partner.device != node.device or partner in (p for _, p in pairs)
                    or tuple(partner.attrs.get(key) for key in _CONV_ATTRS) != attrs):
                continue
            succ = succ if succ is not None else _successors(graph.nodes)
            if partner in _descendants(node, succ) or node in _descendants(partner, succ):
                continue
            pairs.append((node, partner))
            break
    if not pairs:
        return graph
    ports, fused_nodes = {}, []  # ``graph`` is _fuse_chains' own copy: rewired in place
    for data, weights in pairs:
        sizes, filters, grad = data.inputs
        fused = Node(data.name, "_FusedConv2DBackprop", get_op_def("_FusedConv2DBackprop"),
                     dict(data.attrs), [sizes, filters, grad, weights.inputs[0],
                                        weights.inputs[1]], [], data.device,
                     (data.out_specs[0], weights.out_specs[0]), data.traceback, data.seq,
                     origin=data.origin, requested_device=data.requested_device)
        fused.colocation_groups = data.colocation_groups
        ports[data], ports[weights] = (fused, 0), (fused, 1)
        fused_nodes.append(fused)
    nodes = []
    for node in graph.nodes:
        if node in ports:
            continue
        node.inputs = [ports[p] if p in ports else (p, i) for p, i in node.inputs]
        nodes.append(node)
    for fused in fused_nodes:  # one fused pair may read another's gradient (separable_conv2d)
        fused.inputs = [ports[p] if p in ports else (p, i) for p, i in fused.inputs]
    graph.nodes = topological(nodes + fused_nodes)
    graph.fetches = [ports[p] if p in ports else (p, i) for p, i in graph.fetches]
    graph.changed = True
    return graph


def _successors(nodes):
    """Data, control and Send->Recv successors of every node (over all partitions)."""
    succ = {n: [] for n in nodes}
    recv_by_edge = {n.attrs["tensor_name"]: n for n in nodes if n.type == "_Recv"}
    for node in nodes:
        for producer, _ in node.inputs:
            if producer in succ:
                succ[producer].append(node)
        for control in node.control_inputs:
            succ[control].append(node)
        if node.type == "_Send":
            recv = recv_by_edge.get(node.attrs["tensor_name"])
            if recv is not None:
                succ[node].append(recv)
    return succ


def _descendants(start, succ):
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        for nxt in succ[node]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def schedule_recvs(partitioned):
    """ALAP Recv scheduling on a ``Partitioned`` (modified in place; returns it)."""
    all_nodes = partitioned.graph.nodes
    succ = _successors(all_nodes)
    for part in partitioned.partitions:
        position = {n: i for i, n in enumerate(part.nodes)}
        changed = False
        for recv in [n for n in part.nodes if n.type == "_Recv"]:
            consumers = [n for n in succ[recv] if n in position]
            if not consumers:
                continue
            first = min(consumers, key=position.get)
            local = [p for p, _ in first.inputs if p in position and p is not recv]
            local += [c for c in first.control_inputs if c in position and c is not recv]
            local = [n for n in local if n.type != "_Recv"]
            if not local:
                continue
            latest = max(local, key=position.get)
            if latest in recv.control_inputs or latest in _descendants(recv, succ):
                continue
            recv.control_inputs.append(latest)
            succ[latest].append(recv)
            changed = True
        if changed:
            part.nodes = topological(part.nodes)
            partitioned.graph.changed = True
    return partitioned
