"""An optimizer's small RMSProp applies as one node (``_FusedApplyRMSPropGroup``; issue 37).

Theory of operation:
- A training step's applies come last (the optimizer makes them after every gradient), one
  node a variable. The large ones pair across the two cores (exec/pairs.py) or fuse with
  their weight gradient (compile/fuse_matmul_apply.py); the small ones (biases, a narrow
  layer's weights) are some ten microseconds each of per-node and per-call Python around a
  compiled loop of a few hundred elements, one after the other, holding the GIL. The pass
  makes the ``ApplyRMSProp`` nodes that share their hyperparameter inputs (lr, rho,
  momentum, epsilon: the same ports), their dtype, device and control inputs, whose output
  is read by no data input, fetch or target, and which the same nodes control (the
  optimizer's group, ``minimize``'s NoOp), one ``_FusedApplyRMSPropGroup(lr, rho, momentum,
  epsilon, var_0, ms_0, mom_0, grad_0, ...)``: one output a member (its apply's output, in
  the members' order), the union of the members' control inputs (the same set) and their
  readers' control edges to the group. Its kernel (kernels/apply_group.py) runs each
  member's compiled loop in one call: the same bits as the separate applies.
- Only the tail's applies group: those below ``pairs.APPLY_PAIR_MIN`` elements (a few tens
  of microseconds at most: grouping them cannot hold back a large kernel's partner), and a
  large apply only where it is the one large ``ApplyRMSProp`` of its optimizer's group (no
  partner for exec/pairs.py to pair it with; the MLP's second layer's) and under
  ``LARGE_MAX`` (a larger one, the autoencoder's 200k, runs beside the backward GEMMs as soon
  as its gradient is ready: grouped it waited for the last member, 0-4% slower). A group
  needs two members; at most ``ops.training.APPLY_GROUP_MAX`` a node.
- Not in a graph with a ``Switch``: a member fed by an untaken output would be dead and
  make the whole group dead (the live members' updates skipped); nor inside a control-flow
  context.
- ``ENABLED = False`` (read when a plan is compiled) keeps the separate applies: the
  benchmarks' A/B (bench/bench_ab_setting.py, a session a form).

Pure data, as every compile pass: no trio, no kernels.
"""
from __future__ import annotations

from asyncflow.compile.node_graph import Node, fusion_view, rewire
from asyncflow.graph.registry import get_op_def
from asyncflow.ops.training import APPLY_GROUP_MAX

GROUP_TYPE = "_FusedApplyRMSPropGroup"
ENABLED = True
# An apply of this many elements or more groups only as its optimizer's one such apply:
# exec/pairs.py's ``APPLY_PAIR_MIN`` (not imported: compile passes do not import exec/).
LARGE = 1 << 16
# ... and only up to this many elements: a larger one's own time (~0.1 ms and more) overlaps the
# backward GEMMs when it runs as soon as its gradient is ready, where a group waits for its
# last member's gradient (the autoencoder's 200k apply: 0-4% slower grouped, bench/RESULTS.md).
LARGE_MAX = 1 << 17
_DEADENING = frozenset({"Switch", "RefSwitch"})


def _elements(node):
    """The apply's variable's elements (None: a dim unknown)."""
    return node.out_specs[0][1].num_elements()


def _candidate(node, readers, pinned):
    """Whether ``node`` is an ``ApplyRMSProp`` the pass may take into a group."""
    if (node.type != "ApplyRMSProp" or len(node.inputs) != 8 or node in pinned
            or node.control_flow_context is not None or readers.get((node, 0))
            or not node.out_specs[0][0].is_floating or _elements(node) is None):
        return False
    # The hyperparameters and the gradient are values (no ref output read as one).
    return not any(p[0].out_spec(p[1])[2] for p in node.inputs[3:])


def _groups(graph):
    readers, _, pinned = fusion_view(graph)
    controls = {}  # node -> the nodes it controls
    for node in graph.nodes:
        for control in node.control_inputs:
            controls.setdefault(control, []).append(node)
    by_key = {}
    for node in graph.nodes:
        if not _candidate(node, readers, pinned):
            continue
        key = (tuple(node.inputs[3:7]), node.device, node.out_specs[0][0],
               frozenset(node.control_inputs), frozenset(controls.get(node, ())))
        by_key.setdefault(key, []).append(node)
    groups = []
    for members in by_key.values():
        members = [n for n in members if _elements(n) < LARGE_MAX]
        large = [n for n in members if _elements(n) >= LARGE]
        if len(large) > 1:
            members = [n for n in members if _elements(n) < LARGE]
        for start in range(0, len(members), APPLY_GROUP_MAX):
            chunk = members[start:start + APPLY_GROUP_MAX]
            if len(chunk) > 1:
                groups.append(chunk)
    return groups


def group_applies(node_graph):
    """The grouping (see the module docstring); returns a new NodeGraph, or the one given
    when it has fewer than two ``ApplyRMSProp`` nodes (no copy)."""
    if not ENABLED or sum(n.type == "ApplyRMSProp" for n in node_graph.nodes) < 2:
        return node_graph
    # A Switch's untaken output makes what it feeds dead, a context or not: a dead member
    # would make the group dead and skip its live members' updates.
    if any(n.type in _DEADENING for n in node_graph.nodes):
        return node_graph
    graph = node_graph.copy()
    ports, replaced, dropped, added = {}, {}, set(), []
    for members in _groups(graph):
        first = members[0]
        inputs = list(first.inputs[3:7])
        for apply in members:
            inputs += apply.inputs[:3] + apply.inputs[7:8]
        node = Node(first.name + "/group", GROUP_TYPE, get_op_def(GROUP_TYPE),
                    {"members": [apply.name for apply in members]}, inputs,
                    first.control_inputs, first.device,
                    [apply.out_specs[0] for apply in members], first.traceback, first.seq,
                    origin=first.origin, requested_device=first.requested_device)
        node.colocation_groups = first.colocation_groups
        for index, apply in enumerate(members):
            ports[(apply, 0)] = (node, index)
            replaced[apply] = node
            dropped.add(apply)
        added.append(node)
    return rewire(graph, added, dropped, ports, replaced)
