"""Consecutive narrow dense layers as one node: ``_FusedMatMul`` after ``_FusedMatMul``, each
reading the one before as its ``a``, become one ``_FusedMatMulChain`` whose kernel splits
them once by rows (kernels/matmul_chain.py; issue 37).

Theory of operation:
- A product below the intra-op GEMM threshold runs whole on one thread (a hand-off costs
  about what its half saves), so a run of such layers leaves the second core idle for all
  of them; by rows, each layer's rows depend only on the same rows of the layer below, so
  the run splits once, one hand-off for all its layers.
- A link ``P -> Q`` is taken where ``Q``'s ``a`` is ``P``'s output (not transposed), both
  are plain ``_FusedMatMul`` nodes on one CPU device (outside loops, no control inputs, not
  a target or a control input), of one floating dtype, and each layer's ``b`` is 2-D with a
  static ``k * n`` of at most ``ROW_MACS`` (a layer that wide splits alone at the batches
  that train: the runs stay made of the products that do not; at batch 256 a chain of up
  to three such layers stays under the offload threshold, 67 M multiply-adds, and a longer
  one runs on a thread, as a large GEMM does). ``b`` and the bias must not depend on the chain's
  earlier layers (they are the chain's inputs, ready before it runs).
- Every layer keeps its output: the chain's output ``i`` is layer ``i``'s, read by whatever
  read it (a backward pass reads each hidden layer's activation); the node takes the last
  layer's name. The rows (the batch) are known only when the kernel runs: it splits as a
  chain only where that keeps the layers' bits and pays, else runs the layers one by one as
  their own kernels would.
- ``ENABLED = False`` (read when a plan is compiled) keeps the layers apart: the benchmarks'
  A/B (bench/bench_ab_setting.py, a session a form).

Pure data, as every compile pass: no trio, no kernels.
"""
from __future__ import annotations

from asyncflow.compile.node_graph import Node, depends_on, fusion_view, plain_on, rewire
from asyncflow.device_names import device_type_of
from asyncflow.graph.registry import get_op_def

FUSED_TYPE = "_FusedMatMulChain"
ENABLED = True
# A layer's multiply-adds a row (``k * n`` of its ``b``) at most this: 65536, the GEMM split
# threshold (~16.8 M) over 256 rows.
ROW_MACS = 1 << 16


def _layer(node, controlling, pinned):
    """Whether ``node`` may be a layer of a chain (its own conditions, not its link's)."""
    if (node.type != "_FusedMatMul" or not plain_on(node, node.device) or node in pinned
            or node in controlling or len(node.inputs) != 3 or len(node.out_specs) != 1
            or not isinstance(node.device, str) or device_type_of(node.device) != "CPU"
            or not node.out_specs[0][0].is_floating):
        return False
    b = node.inputs[1][0].out_spec(node.inputs[1][1])[1]
    if b.ndims != 2 or b.dims[0] is None or b.dims[1] is None:
        return False
    return b.dims[0] * b.dims[1] <= ROW_MACS


def _next(node, readers, controlling, pinned, chain, replaced):
    """The layer that continues ``chain`` (ending in ``node``), or None (``replaced``: the
    pass's fused nodes so far, so that two chains cannot read each other)."""
    for reader in readers.get((node, 0), []):
        if (reader.inputs[0] == (node, 0) and reader.device == node.device
                and not reader.attrs.get("transpose_a")
                and reader.out_specs[0][0] == node.out_specs[0][0]
                and _layer(reader, controlling, pinned)
                and not any(depends_on(port, set(chain), replaced) for port in reader.inputs[1:])):
            return reader
    return None


def fuse_matmul_chain(node_graph):
    """The fusion (see the module docstring); returns a new NodeGraph, or the one given when
    it has fewer than two ``_FusedMatMul`` nodes (no copy)."""
    if not ENABLED or sum(n.type == "_FusedMatMul" for n in node_graph.nodes) < 2:
        return node_graph
    graph = node_graph.copy()
    readers, controlling, pinned = fusion_view(graph)
    ports, replaced, dropped, added = {}, {}, set(), []
    for node in list(graph.nodes):
        if node in dropped or not _layer(node, controlling, pinned):
            continue
        chain = [node]
        while (following := _next(chain[-1], readers, controlling, pinned, chain,
                                  replaced)) is not None:
            chain.append(following)
        if len(chain) < 2:
            continue
        last = chain[-1]
        fused = Node(last.name, FUSED_TYPE, get_op_def(FUSED_TYPE),
                     {"transpose_a": bool(node.attrs.get("transpose_a")),
                      "transpose_b": tuple(bool(n.attrs.get("transpose_b")) for n in chain),
                      "fused_ops": tuple(tuple(n.attrs["fused_ops"]) for n in chain)},
                     [node.inputs[0]] + [p for n in chain for p in n.inputs[1:]], [],
                     node.device, [n.out_specs[0] for n in chain], last.traceback, last.seq,
                     origin=last.origin, requested_device=last.requested_device)
        fused.colocation_groups = last.colocation_groups
        for i, member in enumerate(chain):
            ports[(member, 0)] = (fused, i)
            replaced[member] = fused
            dropped.add(member)
        added.append(fused)
    return rewire(graph, added, dropped, ports, replaced)
