"""MaxPoolGrad routed by the winners its MaxPool found (a compile pass, issue 37).

Theory of operation:
- TF's CPU MaxPoolGrad recomputes each window's maximum from the pooled input and routes the
  output gradient to the window's first maximal cell (row-major tap order; a NaN never wins,
  but a window whose first real cell is NaN, or whose cells are all -inf, keeps it there). The forward MaxPool has already compared every cell
  of every window, so ``route_max_pool_grads`` has it keep the answer: where a MaxPool's
  output feeds a MaxPoolGrad of the same input with the same attrs, the MaxPool becomes
  ``_MaxPoolWithTaps`` (its output, bit for bit, and a uint8 tensor of the output's shape
  holding each window's winning tap) and the MaxPoolGrad becomes ``_MaxPoolGradByTaps``
  (input, taps, grad), which writes each tap's cells by one equality on bytes and one
  multiply, as MaxPoolGrad does after its recomputation: the same bits, without the KH*KW
  maximum passes and the per-tap masks over the float input.
- Paired only where both sit on one device outside any loop, the MaxPoolGrad reads that
  very MaxPool's output 0 and input, ``ksize``/``strides``/``padding``/``data_format`` are
  equal, and the window has at most 256 taps (uint8). Anything else stays as it was (a
  MaxPoolGrad fed a tensor of the user's, or of another pool, recomputes).
- Where the pooled input is a Relu's output and the routed gradient's only reader is that
  Relu's ReluGrad, the two become ``_MaxPoolReluGradByTaps`` (input, taps, grad, pooled):
  with windows that tile, a cell's ``x > 0`` is its window's ``pooled > 0``, so the mask is
  applied to the pooled-size gradient before routing (the same bits; see its kernel).
- The MaxPool keeps its name, inputs, control inputs and consumers (they read output 0 as
  before); fetches and targets of either node move to its replacement.

Pure data: no trio, no kernels.
"""
from __future__ import annotations

from asyncflow.compile.node_graph import Node, swap_nodes, topological
from asyncflow.graph.registry import get_op_def
from asyncflow import dtypes

_POOL_ATTRS = ("ksize", "strides", "padding", "data_format")
MAX_TAPS = 256


def _pairable(pool, grad):
    if not isinstance(pool, Node) or pool.type != "MaxPool":
        return False
    if pool.device != grad.device or pool.control_flow_context is not None:
        return False
    if grad.control_flow_context is not None or pool.inputs[0] != grad.inputs[0]:
        return False
    if any(pool.attrs.get(key) != grad.attrs.get(key) for key in _POOL_ATTRS):
        return False
    ksize = pool.attrs.get("ksize") or ()
    taps = 1
    for size in ksize:
        taps *= size
    return bool(ksize) and taps <= MAX_TAPS


def route_max_pool_grads(graph):
    """Pair MaxPool/MaxPoolGrad (module docstring). ``graph`` is rewired in place (pass a
    pass's own copy, as ``optimize.fuse_activations`` does); returns it."""
    pairs = [(node.inputs[1][0], node) for node in graph.nodes
             if node.type == "MaxPoolGrad" and node.inputs[1][1] == 0
             and _pairable(node.inputs[1][0], node)]
    if not pairs:
        return graph
    replaced = {}
    for pool, grad in pairs:
        fused = replaced.get(pool)
        if fused is None:
            out_spec = pool.out_specs[0]
            fused = Node(pool.name, "_MaxPoolWithTaps", get_op_def("_MaxPoolWithTaps"),
                         dict(pool.attrs), pool.inputs, pool.control_inputs, pool.device,
                         (out_spec, (dtypes.uint8, out_spec[1], False)), pool.traceback,
                         pool.seq, origin=pool.origin, requested_device=pool.requested_device)
            fused.colocation_groups = pool.colocation_groups
            replaced[pool] = fused
        routed = Node(grad.name, "_MaxPoolGradByTaps", get_op_def("_MaxPoolGradByTaps"),
                      dict(grad.attrs), [grad.inputs[0], (fused, 1), grad.inputs[2]],
                      grad.control_inputs, grad.device, grad.out_specs, grad.traceback,
                      grad.seq, origin=grad.origin, requested_device=grad.requested_device)
        routed.colocation_groups = grad.colocation_groups
        replaced[grad] = routed
    graph.nodes = topological(_fold_relu_grads(swap_nodes(graph, replaced), graph, replaced))
    graph.changed = True
    return graph


def _fold_relu_grads(nodes, graph, replaced):
    """``ReluGrad(_MaxPoolGradByTaps(x, taps, g), x)`` -> ``_MaxPoolReluGradByTaps(x, taps,
    g, pooled)`` (module docstring), where the routed gradient has no other reader and is
    neither fetched, a target, a control input nor has control inputs; the ReluGrad's
    fetches, target and control uses move to the folded node, which keeps its control
    inputs."""
    readers, controlling = {}, set()
    for node in nodes:
        for port in node.inputs:
            readers.setdefault(port, []).append(node)
        controlling.update(node.control_inputs)
    pinned = controlling | set(graph.targets) | {p for p, _ in graph.fetches}
    pools = {fused: pool for pool, fused in replaced.items() if fused.type == "_MaxPoolWithTaps"}
    folded = {}
    for node in nodes:
        if node.type != "ReluGrad":
            continue
        (routed, index), features = node.inputs
        if (getattr(routed, "type", None) != "_MaxPoolGradByTaps" or index != 0
                or routed in pinned or routed.control_inputs or routed in folded
                or routed.inputs[0] != features or routed.device != node.device
                or node.control_flow_context is not None
                or readers.get((routed, 0)) != [node]):
            continue
        fused_pool = routed.inputs[1][0]
        if fused_pool not in pools:
            continue
        both = Node(node.name, "_MaxPoolReluGradByTaps", get_op_def("_MaxPoolReluGradByTaps"),
                    dict(routed.attrs), list(routed.inputs) + [(fused_pool, 0)],
                    node.control_inputs, node.device, node.out_specs, node.traceback, node.seq, origin=node.origin,
                    requested_device=node.requested_device)
        both.colocation_groups = node.colocation_groups
        folded[routed], folded[node] = both, both
    if not folded:
        return nodes
    kept = []
    for node in nodes:
        if node in folded:
            continue
        node.inputs = [(folded.get(p, p), i) for p, i in node.inputs]
        node.control_inputs = [folded.get(c, c) for c in node.control_inputs]
        kept.append(node)
    graph.fetches = [(folded.get(p, p), i) for p, i in graph.fetches]
    graph.targets = list(dict.fromkeys(folded.get(t, t) for t in graph.targets))
    return kept + list(dict.fromkeys(folded.values()))
