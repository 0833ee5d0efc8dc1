"""The dropout taken into the product before it: a ``_FusedMatMul`` whose output goes into a
``_FusedDropout`` becomes one ``_FusedMatMulDropout`` (issue 37; run by
``compile/fuse_dropout.py`` after its own rewrite).

Theory of operation:
- ``dense -> relu -> dropout`` (the MLP's hidden layers) compiles to ``_FusedMatMul(a, b,
  bias)`` then ``_FusedDropout(x, shape, keep)``. The fused node
  ``_FusedMatMulDropout(a, b, bias, keep)`` draws the mask inside the product's row chunks,
  on the threads that run them (kernels/dropout_matmul.py), with ``_FusedDropout``'s bits and
  the same generator state after. It takes the dropout's name (so its random generator,
  keyed by the op's name and seeds, is the dropout's: ``NodeContext.random_generator``) and
  attrs (``seed``, ``seed2``, ``dtype``) with the product's (``transpose_a``,
  ``transpose_b``, ``fused_ops``). Outputs: 0 and 1 the dropout's (result, mask: the
  gradient reads the mask), 2 the product's activations, which its readers now read.
- It fires only where the product's output feeds nothing but the dropout (as ``x``, once),
  ``Shape`` nodes (every output has its shape; the dropout's own random shape is ``x``'s,
  so the ``Shape`` or ``Const`` of it goes where nothing else reads it) and the Relu's gradient (a ``ReluGrad`` or
  ``_FusedDropoutReluGrad`` reading it as its features: the backward needs the
  activations); the product is neither fetched, a target nor a control input; both nodes
  sit on one CPU device outside loops without control inputs; the dtype is float32 or
  float64 (the dropout's compiled loops; elsewhere the two nodes run as built, a GPU
  included).

``ENABLED`` (read when a plan is compiled) False leaves the two nodes: bench/bench_ab_setting.py's
A/B, a session a form. Pure data, as every compile pass: no trio, no kernels.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.compile.node_graph import FeedNode, Node, plain_on, readers_of, rewire
from asyncflow.device_names import device_type_of
from asyncflow.graph.registry import get_op_def

FUSED_TYPE = "_FusedMatMulDropout"
ENABLED = True
_DTYPES = (dtypes.float32, dtypes.float64)
_RELU_GRADS = {"ReluGrad": 1, "_FusedDropoutReluGrad": 3}  # type -> the features' position


def _fits(product, drop, readers, controlling, pinned):
    """Whether ``product`` (the ``_FusedMatMul`` of ``drop``'s ``x``) may join ``drop``."""
    device = drop.device
    if (isinstance(product, FeedNode) or product.type != "_FusedMatMul"
            or drop.inputs[0] != (product, 0) or len(product.out_specs) != 1
            or device_type_of(device) != "CPU" or not plain_on(product, device)
            or not plain_on(drop, device) or product in pinned or product in controlling
            or product.out_specs[0][0] not in _DTYPES
            or any(spec[0] != product.out_specs[0][0] for spec in drop.out_specs)):
        return False
    seen_drop = 0
    for reader in readers.get((product, 0), []):
        if reader is drop:
            seen_drop += 1
        elif reader.type == "Shape":
            continue
        elif _RELU_GRADS.get(reader.type) is None or [
                i for i, p in enumerate(reader.inputs) if p == (product, 0)] != [
                _RELU_GRADS[reader.type]]:
            return False
    return seen_drop == 1 and drop.inputs.count((product, 0)) == 1


def fuse_matmul_dropout(graph):
    """The rewrite (module docstring) in place on ``graph`` (a copy the caller made);
    returns it."""
    if not ENABLED or not any(n.type == "_FusedDropout" for n in graph.nodes):
        return graph
    readers, controlling = readers_of(graph)
    pinned = set(graph.targets) | {p for p, _ in graph.fetches}
    ports, dropped, added, replaced = {}, set(), [], {}
    for drop in graph.nodes:
        if drop.type != "_FusedDropout" or drop in dropped:
            continue
        product = drop.inputs[0][0]
        if product in dropped or not _fits(product, drop, readers, controlling, pinned):
            continue
        attrs = {name: product.attrs[name] for name in ("transpose_a", "transpose_b",
                                                         "fused_ops")}
        attrs.update({name: drop.attrs.get(name) for name in ("dtype", "seed", "seed2")})
        fused = Node(drop.name, FUSED_TYPE, get_op_def(FUSED_TYPE), attrs,
                     list(product.inputs) + [drop.inputs[2]], [], drop.device,
                     [drop.out_specs[0], drop.out_specs[1], product.out_specs[0]],
                     drop.traceback, drop.seq, origin=drop.origin,
                     requested_device=drop.requested_device)
        ports.update({(drop, 0): (fused, 0), (drop, 1): (fused, 1), (product, 0): (fused, 2)})
        replaced.update({drop: fused, product: fused})
        dropped.update((drop, product))
        added.append(fused)
        shape = drop.inputs[1][0]
        if (not isinstance(shape, FeedNode) and shape.type in ("Shape", "Const")
                and readers.get((shape, 0), []) == [drop] and shape not in pinned
                and shape not in controlling):
            dropped.add(shape)
    if not added:
        return graph
    return rewire(graph, added, dropped, ports, replaced)
