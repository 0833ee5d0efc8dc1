"""The weight gradient and RMSProp apply fusion: ``ApplyRMSProp(..., MatMul(a, b))`` as one node.

Theory of operation (issue 37):
- A dense layer's weight gradient is a ``MatMul`` (``x^T @ dy``: ``transpose_a``) whose one
  reader, in a training step, is its variable's apply. Run as two kernels, the product is
  split over the intra-op threads and the apply runs after it on one thread (beside other
  applies where exec/pairs.py finds them). The pass makes the two one
  ``_FusedMatMulApplyRMSProp(var, ms, mom, lr, rho, momentum, epsilon, a, b)`` (the apply's
  inputs, the product's operands for its gradient, the product's ``transpose_*`` attrs),
  whose kernel (kernels/matmul_apply.py) applies each row chunk of the product on the thread
  that computed it: the same bits as the two kernels. The node takes the apply's name, its
  output, control inputs and the readers of its output (the optimizer's group).
- It fires only where the ``MatMul`` has no reader but the apply (as its gradient), is not
  fetched, a target or a control input, has no control inputs, and both sit on one device
  outside any loop, in a floating dtype; and where no other ``MatMul`` reads one of its
  operands (one the product depends on aside: an unfused forward layer reading ``x``): a
  hidden layer's weight gradient shares ``dy`` with the layer's input gradient,
  and exec/pairs.py runs those two GEMMs at once, one a core, which the fusion would undo
  (measured: the MLP's second layer fused ran its 8.4 M product and apply alone, 0.23 ms,
  where the pair took 0.2 for both GEMMs). So in a dense network the first layer's weight
  gradient fuses (its input, the data, has no gradient). Otherwise the two run as built.
- ``ENABLED = False`` (read when a plan is compiled) keeps the two kernels: the benchmarks'
  A/B (bench/bench_ab_setting.py, a session a form).

Pure data, as every compile pass: no trio, no kernels.
"""
from __future__ import annotations

from asyncflow.compile.node_graph import Node, depends_on, plain_on, producer, fusion_view, \
    rewire
from asyncflow.graph.registry import get_op_def

FUSED_TYPE = "_FusedMatMulApplyRMSProp"
ENABLED = True
_GRAD = 7  # the apply's gradient input (ops/training.py: var, ms, mom, lr, rho, momentum,
#            epsilon, grad)


def _product(apply, readers, controlling, pinned):
    """The ``MatMul`` that is ``apply``'s gradient, where the two may fuse; else None."""
    if (apply.type != "ApplyRMSProp" or len(apply.inputs) != _GRAD + 1
            or apply.control_flow_context is not None):
        return None
    port = apply.inputs[_GRAD]
    matmul = producer(port)
    if (matmul is None or matmul.type != "MatMul" or port[1] != 0
            or not plain_on(matmul, apply.device) or matmul in pinned
            or matmul in controlling or readers.get(port, []) != [apply]
            or not matmul.out_specs[0][0].is_floating
            or matmul.out_specs[0][0] != apply.out_specs[0][0]
            or any(reader is not matmul and reader.type == "MatMul"
                   and not depends_on((matmul, 0), {reader})
                   for operand in matmul.inputs for reader in readers.get(operand, []))):
        return None
    return matmul


def fuse_matmul_apply(node_graph):
    """The fusion (see the module docstring); returns a new NodeGraph, or the one given when
    it has no ``ApplyRMSProp`` (no copy)."""
    if not ENABLED or not any(n.type == "ApplyRMSProp" for n in node_graph.nodes):
        return node_graph
    graph = node_graph.copy()
    readers, controlling, pinned = fusion_view(graph)
    ports, replaced, dropped, added = {}, {}, set(), []
    for apply in list(graph.nodes):
        matmul = _product(apply, readers, controlling, pinned)
        if matmul is None:
            continue
        fused = Node(apply.name, FUSED_TYPE, get_op_def(FUSED_TYPE),
                     {"transpose_a": bool(matmul.attrs.get("transpose_a")),
                      "transpose_b": bool(matmul.attrs.get("transpose_b"))},
                     apply.inputs[:_GRAD] + matmul.inputs, apply.control_inputs,
                     apply.device, apply.out_specs, apply.traceback, apply.seq,
                     origin=apply.origin, requested_device=apply.requested_device)
        fused.colocation_groups = apply.colocation_groups
        ports[(apply, 0)] = (fused, 0)
        replaced[apply] = fused
        dropped.update((apply, matmul))
        added.append(fused)
    return rewire(graph, added, dropped, ports, replaced)
