"""The mean softmax cross entropy fusion: the loss, its logits' gradient and the bias
gradient in one node.

Theory of operation (issue 37):
- TF1's classifier loss ``reduce_mean(softmax_cross_entropy_with_logits(labels, logits))`` is
  ``SoftmaxCrossEntropyWithLogits(logits, labels) -> (per_example, backprop)`` and a ``Mean``;
  its gradient (built before this pass: ``ops/math_grad.py``, ``ops/softmax.py``) is
  ``ExpandDimsMul(BroadcastToLike(grad, per_example), backprop)``, and the last layer's bias
  gradient a ``Sum`` of that over the batch. The MLP runs them as five small kernels one after
  the other on one thread (~55 us a step, bench/bench_model_timeline.py). The pass makes them
  one ``_FusedSoftmaxCrossEntropyMean(logits, labels, grad) -> (loss, dlogits[, dbias])``
  (``_FusedSparseSoftmaxCrossEntropyMean`` for the sparse op; kernels/softmax_xent_mean.py),
  as TF's kernel returns the backprop with the loss. The node takes the ``Mean``'s name
  (fetches and traces read the loss under it); the ``ExpandDimsMul``'s readers read output 1,
  the ``Sum``'s output 2.
- It fires only where the per-example loss has no reader but the ``Mean`` and that mean's
  ``BroadcastToLike`` (which reads only its shape), the backprop none but that
  ``ExpandDimsMul``, and neither the cross entropy nor the ``BroadcastToLike`` is fetched, a
  target or a control input (a fetched per-example loss keeps today's form; the loss, the
  logits' and the bias's gradients may be fetched: the fetches read the node's outputs); the
  ``Mean`` reduces every axis without ``keepdims``; all sit on one device outside loops without
  control inputs, in a floating dtype; the gradient's ``grad`` does not depend on the loss,
  nor does it through a node fused before (a product of two losses fuses the first). With
  the gradient the logits are ``[batch, classes]`` (the class axis last). Without any gradient
  (an evaluation graph) the ``Mean`` and the cross entropy make a node of the loss alone.
  Otherwise the ops run as built. TF1's builder computes float16 logits in float32 with a
  ``Cast`` between the cross entropy and the ``Mean``: no fusion there.
- ``BIAS_GRAD``: a ``Sum`` over the batch (axis 0, no ``keepdims``) that reads the gradient
  (the last layer's ``Add``'s or ``BiasAdd``'s bias gradient) folds into the node's output 2.

Pure data, as every compile pass: no trio, no kernels.
"""
from __future__ import annotations

import numpy as np

from asyncflow.compile.node_graph import Node, depends_on, plain_on, producer, fusion_view, \
    rewire
from asyncflow.graph.registry import get_op_def

DENSE = "_FusedSoftmaxCrossEntropyMean"
SPARSE = "_FusedSparseSoftmaxCrossEntropyMean"
_XENT = {"SoftmaxCrossEntropyWithLogits": DENSE, "SparseSoftmaxCrossEntropyWithLogits": SPARSE}
# Whether the pass runs, and whether it folds the bias gradient in (both read when a plan is
# compiled: bench/bench_ab_setting.py's forms each have their own session).
ENABLED = True
BIAS_GRAD = True



def _axes_are(axis, rank, want):
    if axis is None:
        return list(range(rank)) == want
    return sorted(int(a) % rank for a in np.atleast_1d(axis)) == want


def _free(node, pinned, controlling):
    return node not in pinned and node not in controlling



def _forward(mean, readers, controlling, pinned):
    """The cross entropy that ``mean`` reduces, where the forward may fuse, else None."""
    if mean.type != "Mean" or mean.attrs.get("keepdims") or not plain_on(mean, mean.device):
        return None
    xent = producer(mean.inputs[0])
    if xent is None or xent.type not in _XENT or mean.inputs[0][1] != 0:
        return None
    dtype, shape, _ = xent.out_specs[0]
    if (not plain_on(xent, mean.device) or not dtype.is_floating or shape.ndims in (None, 0)
            or not _axes_are(mean.attrs.get("axis"), shape.ndims, list(range(shape.ndims)))
            or not _free(xent, pinned, controlling) or mean.out_specs[0][0] != dtype
            or readers.get((xent, 0), []).count(mean) != 1):
        return None
    return xent


def _backward(mean, xent, readers, controlling, pinned, replaced):
    """``(btl, edm)`` where the gradient fuses; ``()`` where the graph has none; None where
    it has one that may not fuse (then nothing fuses)."""
    others = [r for r in readers.get((xent, 0), []) if r is not mean]
    backprop_readers = readers.get((xent, 1), [])
    if not others and not backprop_readers:
        return ()
    if len(others) != 1 or len(backprop_readers) != 1:
        return None
    (btl,), (edm,) = others, backprop_readers
    device, dtype = mean.device, xent.out_specs[0][0]
    logits_shape = xent.out_specs[1][1]
    if (btl.type != "BroadcastToLike" or btl.inputs[1] != (xent, 0)
            or btl.inputs[0] == (xent, 0) or btl.attrs.get("mean") is not True
            or btl.attrs.get("keepdims") or logits_shape.ndims != 2
            or not _axes_are(btl.attrs.get("axis"), 1, [0])
            or edm.type != "ExpandDimsMul" or edm.inputs != [(btl, 0), (xent, 1)]
            or edm.attrs.get("axis") != 1 or readers.get((btl, 0), []) != [edm]
            or (xent.type == "SoftmaxCrossEntropyWithLogits"
                and xent.attrs.get("axis") not in (1, -1))
            or not all(plain_on(n, device) for n in (btl, edm))
            or not _free(btl, pinned, controlling)
            or any(spec[0] != dtype for n in (btl, edm) for spec in n.out_specs)
            or depends_on(btl.inputs[0], {mean, xent}, replaced)):
        return None
    return btl, edm


def _bias_sum(edm, readers, controlling, pinned):
    """The ``Sum`` over the batch of the logits' gradient, or None."""
    for reader in readers.get((edm, 0), []):
        if (reader.type == "Sum" and reader.inputs == [(edm, 0)]
                and not reader.attrs.get("keepdims")
                and reader.attrs.get("axis") is not None
                and _axes_are(reader.attrs.get("axis"), 2, [0])
                and plain_on(reader, edm.device)
                and reader.out_specs[0][0] == edm.out_specs[0][0]):
            return reader
    return None


def fuse_softmax_xent(node_graph):
    """The mean softmax cross entropy fusion (see the module docstring); returns a new
    NodeGraph, or the one given when it has no cross entropy read by a ``Mean`` (no copy)."""
    if not ENABLED or not any(n.type in _XENT for n in node_graph.nodes):
        return node_graph
    graph = node_graph.copy()
    readers, controlling, pinned = fusion_view(graph)
    ports, replaced, dropped, added = {}, {}, set(), []
    for mean in list(graph.nodes):
        xent = _forward(mean, readers, controlling, pinned)
        if xent is None or xent in dropped:
            continue
        grad = _backward(mean, xent, readers, controlling, pinned, replaced)
        if grad is None:
            continue
        inputs, specs, attrs = list(xent.inputs), [mean.out_specs[0]], {"bias_grad": False}
        if "axis" in xent.attrs:
            attrs["axis"] = xent.attrs["axis"]
        gone = [mean, xent]
        if grad:
            btl, edm = grad
            inputs.append(btl.inputs[0])
            specs.append(edm.out_specs[0])
            gone += [btl, edm]
            total = _bias_sum(edm, readers, controlling, pinned) if BIAS_GRAD else None
            if total is not None:
                attrs["bias_grad"] = True
                specs.append(total.out_specs[0])
                gone.append(total)
        op_type = _XENT[xent.type]
        fused = Node(mean.name, op_type, get_op_def(op_type), attrs, inputs, [], mean.device,
                     specs, mean.traceback, mean.seq, origin=mean.origin,
                     requested_device=mean.requested_device)
        ports[(mean, 0)] = (fused, 0)
        if grad:
            ports[(edm, 0)] = (fused, 1)
            if attrs["bias_grad"]:
                ports[(total, 0)] = (fused, 2)
        for node in gone:
            replaced[node] = fused
        dropped.update(gone)
        added.append(fused)
    return rewire(graph, added, dropped, ports, replaced)
