"""The input gradient and the sigmoid's gradient under it: ``SigmoidGrad(y, MatMul(a, b))`` as
one node (TF's remapper fuses a contraction with its elementwise tail the same way).

Theory of operation (issue 37):
- In a sigmoid network's backward pass, each hidden layer's input gradient ``dy @ W^T`` is
  read only by the ``SigmoidGrad`` of the layer below (its ``dy``): two nodes, and three numpy
  passes with a temporary over the product once the GEMM has written it. The pass makes the
  two one ``_FusedMatMulSigmoidGrad(a, b, y)`` (the product's operands and ``transpose_*``
  attrs, the sigmoid's output), whose kernel (kernels/matmul_sigmoid_grad.py) applies the
  slope to each chunk of the product the GEMM wrote, in cache, in one compiled pass: the same
  bits as the two kernels. The node takes the ``SigmoidGrad``'s name, output and readers.
- It fires only where the ``MatMul``'s output is read by nothing but that ``SigmoidGrad``, as
  its ``dy`` (not its ``y``), and is not fetched, a target or a control input; both sit on one
  CPU device outside any loop with no control inputs, in one floating dtype. A GPU placement is
  left alone (CuPy's elementwise kernels already fuse nothing the GEMM could take).
- ``ENABLED = False`` (read when a plan is compiled) keeps the two kernels: the benchmarks'
  A/B (bench/bench_ab_setting.py, a session a form).

Pure data, as every compile pass: no trio, no kernels.
"""
from __future__ import annotations

from asyncflow.compile.node_graph import Node, fusion_view, plain_on, producer, rewire
from asyncflow.device_names import device_type_of
from asyncflow.graph.registry import get_op_def

FUSED_TYPE = "_FusedMatMulSigmoidGrad"
ENABLED = True


def _on_cpu(device):
    return isinstance(device, str) and device_type_of(device) == "CPU"


def _product(node, readers, controlling, pinned):
    """The ``MatMul`` whose product is ``node``'s ``dy``, where the two may fuse; else None."""
    if (node.type != "SigmoidGrad" or len(node.inputs) != 2 or not plain_on(node, node.device)
            or not _on_cpu(node.device)):
        return None
    port = node.inputs[1]
    matmul = producer(port)
    dtype = node.out_specs[0][0]
    if (matmul is None or matmul.type != "MatMul" or port[1] != 0
            or not plain_on(matmul, node.device) or matmul in pinned or matmul in controlling
            or readers.get(port, []) != [node] or node.inputs[0] == port
            or not dtype.is_floating or matmul.out_specs[0][0] != dtype
            or node.inputs[0][0].out_spec(node.inputs[0][1])[0] != dtype):
        return None
    return matmul


def fuse_matmul_sigmoid_grad(node_graph):
    """The fusion (see the module docstring); returns a new NodeGraph, or the one given when
    it has no ``SigmoidGrad`` (no copy)."""
    if not ENABLED or not any(n.type == "SigmoidGrad" for n in node_graph.nodes):
        return node_graph
    graph = node_graph.copy()
    readers, controlling, pinned = fusion_view(graph)
    ports, replaced, dropped, added = {}, {}, set(), []
    for node in list(graph.nodes):
        matmul = _product(node, readers, controlling, pinned)
        if matmul is None:
            continue
        fused = Node(node.name, FUSED_TYPE, get_op_def(FUSED_TYPE),
                     {"transpose_a": bool(matmul.attrs.get("transpose_a")),
                      "transpose_b": bool(matmul.attrs.get("transpose_b"))},
                     list(matmul.inputs) + [node.inputs[0]], [], node.device,
                     node.out_specs, node.traceback, node.seq, origin=node.origin,
                     requested_device=node.requested_device)
        fused.colocation_groups = node.colocation_groups
        ports[(node, 0)] = (fused, 0)
        replaced[node] = fused
        dropped.update((node, matmul))
        added.append(fused)
    return rewire(graph, added, dropped, ports, replaced)
