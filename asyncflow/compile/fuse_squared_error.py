"""The mean squared error fusion: ``Mean(Square(Sub(a, b)))`` and its gradient in two nodes.

Theory of operation (issue 37):
- ``af.reduce_mean(af.square(h - x))`` is Sub, Square and Mean; its gradient (built before
  this pass, ``ops/math_grad.py``) is ``Mul(BroadcastToLike(grad, square), Mul(sub, 2))``.
  Run as they are, that is six kernels and five arrays of the batch's size (the difference,
  the squares, the broadcast gradient, twice the difference and the product). The pass makes
  the forward one ``_FusedMeanSquaredError(a, b) -> (loss, diff)`` node and the gradient one
  ``_FusedMeanSquaredErrorGrad(grad, diff, loss)``; their kernels (kernels/math.py) apply the
  same operations in the same order: the same bits, with two arrays of the batch's size (the
  gradient reads the loss only to know that ``diff * 2`` cannot overflow, which lets it
  multiply by ``2 * scale`` in one pass: the same bits).
- The forward node takes the ``Mean``'s name (fetches and traces read the loss under it);
  output 1 is the ``Sub``'s value, so every reader of the ``Sub`` (the gradient's ``Mul``,
  ``Shape`` nodes, a fetch) reads it there. The gradient node takes the outer ``Mul``'s name.
- It fires only where the ``Square`` has no reader but the ``Mean``, ``Shape`` nodes and the
  ``like`` input of ``BroadcastToLike`` nodes (which read only its shape: the difference's),
  is neither fetched, a target nor a control input; the ``Mean`` reduces every axis of an
  input of known rank (at least 1) without ``keepdims``; the three nodes sit on one device
  outside loops without control inputs, in a floating dtype. The gradient fuses where a
  ``BroadcastToLike`` of that ``Square`` (a mean over the same axes) and a ``Mul`` of the
  difference by a scalar constant 2 are each read only by one ``Mul`` (and are not fetched,
  targets or control inputs). Otherwise the ops run as built.

- Where ``a`` is a sigmoid's output and the gradient runs on to it (the autoencoder's
  loss), ``SigmoidGrad(a, g)`` of the gradient node's value ``g`` (or of a ``SumToShape`` of
  it to ``Shape(a)``), all four nodes make one ``_FusedMeanSquaredErrorSigmoidGrad(a, b,
  grad) -> (loss, dy)`` (kernels/squared_error_sigmoid.py: one compiled pass, the same bits)
  when ``SIGMOID_GRAD`` is set, nothing else reads the difference, the gradient node's
  value or the sum, none is fetched, a target or a control input, and ``grad`` does not
  depend on the loss. The node takes the ``Mean``'s name and the ``SigmoidGrad``'s readers
  read its output 1.

Pure data, as every compile pass: no trio, no kernels.
"""
from __future__ import annotations

import numpy as np

from asyncflow.compile.node_graph import Node, depends_on, plain_on, producer, fusion_view, \
    rewire
from asyncflow.graph.registry import get_op_def

FORWARD = "_FusedMeanSquaredError"
BACKWARD = "_FusedMeanSquaredErrorGrad"
SIGMOID = "_FusedMeanSquaredErrorSigmoidGrad"
# Whether the loss and its gradient's sigmoid tail fuse into one node (read when a plan is
# compiled, so an A/B needs a session per form: bench/bench_loss_tail.py's --steps-ab, or
# bench/bench_ab_setting.py, whose forms each have their own session).
SIGMOID_GRAD = True



def _every_axis(axis, rank):
    return axis is None or sorted(int(a) % rank for a in np.atleast_1d(axis)) == list(range(rank))


def _forward(mean, readers, controlling, pinned):
    """``(square, sub)`` when ``mean`` ends a chain whose forward may fuse, else None."""
    if mean.type != "Mean" or mean.attrs.get("keepdims") or not plain_on(mean, mean.device):
        return None
    square = producer(mean.inputs[0])
    if square is None or square.type != "Square" or mean.inputs[0][1] != 0:
        return None
    sub = producer(square.inputs[0])
    if sub is None or sub.type != "Sub" or square.inputs[0][1] != 0:
        return None
    dtype, shape, _ = sub.out_specs[0]
    if (not all(plain_on(n, mean.device) for n in (square, sub)) or not dtype.is_floating
            or shape.ndims in (None, 0) or not _every_axis(mean.attrs.get("axis"), shape.ndims)
            or square in pinned or square in controlling or len(sub.out_specs) != 1
            or any(spec[0] != dtype for n in (square, mean) for spec in n.out_specs)):
        return None
    for reader in readers.get((square, 0), []):
        if reader is mean or reader.type == "Shape":
            continue
        if reader.type == "BroadcastToLike" and reader.inputs[1] == (square, 0) \
                and reader.inputs[0] != (square, 0):
            continue
        return None
    if readers.get((square, 0), []).count(mean) != 1:
        return None
    return square, sub


def _only_reader(node, reader, readers, controlling, pinned):
    return (node not in pinned and node not in controlling and len(node.out_specs) == 1
            and readers.get((node, 0), []) == [reader])


def _is_two(port, dtype):
    const = producer(port)
    if const is None or const.type != "Const":
        return False
    value = np.asarray(const.attrs["value"])
    return value.shape == () and value.dtype == dtype.np and value == 2


def _backward(btl, mean, square, sub, readers, controlling, pinned):
    """``(outer, grad_port)`` when ``btl`` starts the chain's gradient that may fuse."""
    if (btl.attrs.get("mean") is not True or btl.attrs.get("keepdims")
            or not _every_axis(btl.attrs.get("axis"), sub.out_specs[0][1].ndims)
            or not plain_on(btl, mean.device)):
        return None
    outer = [r for r in readers.get((btl, 0), [])]
    if len(outer) != 1 or outer[0].type != "Mul" or not plain_on(outer[0], mean.device):
        return None
    outer = outer[0]
    (other,) = [p for p in outer.inputs if p != (btl, 0)] or [None]
    twice = producer(other) if other is not None else None
    if (twice is None or twice.type != "Mul" or other[1] != 0 or len(outer.out_specs) != 1
            or not plain_on(twice, mean.device)
            or not _only_reader(btl, outer, readers, controlling, pinned)
            or not _only_reader(twice, outer, readers, controlling, pinned)):
        return None
    dtype = sub.out_specs[0][0]
    a, b = twice.inputs
    if not ((a == (sub, 0) and _is_two(b, dtype)) or (b == (sub, 0) and _is_two(a, dtype))):
        return None
    if any(spec[0] != dtype for n in (btl, twice, outer) for spec in n.out_specs):
        return None
    return outer, twice, btl.inputs[0]



def _sole_reader(port, readers):
    found = readers.get(port, [])
    return found[0] if len(found) == 1 else None


def _sigmoid_tail(chain, readers, controlling, pinned):
    """``(sigmoid_grad, [more dropped nodes], sum_to)`` when the fused gradient's value ends
    in the SigmoidGrad of the loss's first operand (see the module docstring), else None."""
    mean, square, sub, btl, twice, outer, grad_port = chain
    device, dtype = mean.device, sub.out_specs[0][0]
    a = sub.inputs[0]
    if (set(readers.get((sub, 0), [])) - {square, twice}
            or set(readers.get((square, 0), [])) - {mean, btl}
            or producer(a) is None or sub in pinned or outer in pinned or outer in controlling
            or depends_on(grad_port, {mean, square, sub})):
        return None
    dropped, port, sum_to = [], (outer, 0), False
    reader = _sole_reader(port, readers)
    if reader is not None and reader.type == "SumToShape" and reader.inputs[0] == port:
        shape = producer(reader.inputs[1])
        if (shape is None or shape.type != "Shape" or shape.inputs[0] != a
                or reader in pinned or reader in controlling or not plain_on(reader, device)):
            return None
        dropped.append(reader)
        if (_only_reader(shape, reader, readers, controlling, pinned)
                and plain_on(shape, device)):
            dropped.append(shape)
        port, sum_to = (reader, 0), True
        reader = _sole_reader(port, readers)
    if (reader is None or reader.type != "SigmoidGrad" or reader.inputs != [a, port]
            or not plain_on(reader, device) or reader.out_specs[0][0] != dtype
            or reader in pinned or reader in controlling):
        return None
    return reader, dropped, sum_to


def fuse_squared_error(node_graph):
    """The mean squared error fusion (see the module docstring); returns a new NodeGraph,
    or the one given when it has no ``Square`` read by a ``Mean`` (no copy)."""
    if not any(n.type == "Mean" for n in node_graph.nodes) or not any(
            n.type == "Square" for n in node_graph.nodes):
        return node_graph
    graph = node_graph.copy()
    readers, controlling, pinned = fusion_view(graph)
    ports, replaced, dropped, added = {}, {}, set(), []
    for mean in list(graph.nodes):
        found = _forward(mean, readers, controlling, pinned) if mean not in dropped else None
        if found is None:
            continue
        square, sub = found
        if {square, sub} & dropped:
            continue
        fused = Node(mean.name, FORWARD, get_op_def(FORWARD), {}, list(sub.inputs), [],
                     mean.device, [mean.out_specs[0], sub.out_specs[0]], mean.traceback,
                     mean.seq, origin=mean.origin, requested_device=mean.requested_device)
        ports[(mean, 0)], ports[(sub, 0)], ports[(square, 0)] = (fused, 0), (fused, 1), (fused, 1)
        replaced[mean], replaced[sub] = fused, fused
        dropped.update((mean, square, sub))
        added.append(fused)
        for btl in readers.get((square, 0), []):
            if btl.type != "BroadcastToLike" or btl in dropped:
                continue
            grad = _backward(btl, mean, square, sub, readers, controlling, pinned)
            if grad is None:
                continue
            outer, twice, grad_port = grad
            if {outer, twice} & dropped:
                continue
            fused_grad = Node(outer.name, BACKWARD, get_op_def(BACKWARD), {},
                              [grad_port, (fused, 1), (fused, 0)], [], outer.device,
                              outer.out_specs,
                              outer.traceback, outer.seq, origin=outer.origin,
                              requested_device=outer.requested_device)
            tail = None
            if SIGMOID_GRAD:
                tail = _sigmoid_tail((mean, square, sub, btl, twice, outer, grad_port),
                                     readers, controlling, pinned)
            if tail is not None and not ({tail[0], *tail[1]} & dropped):
                sigmoid_grad, more, sum_to = tail
                added.remove(fused)
                whole = Node(mean.name, SIGMOID, get_op_def(SIGMOID), {"sum_to_y": sum_to},
                             [sub.inputs[0], sub.inputs[1], grad_port], [], mean.device,
                             [mean.out_specs[0], sigmoid_grad.out_specs[0]], mean.traceback,
                             mean.seq, origin=mean.origin,
                             requested_device=mean.requested_device)
                del ports[(sub, 0)], ports[(square, 0)]
                ports[(mean, 0)], ports[(sigmoid_grad, 0)] = (whole, 0), (whole, 1)
                replaced[mean], replaced[sub] = whole, whole
                dropped.update((btl, twice, outer, sigmoid_grad, *more))
                added.append(whole)
                break
            ports[(outer, 0)] = (fused_grad, 0)
            replaced[outer] = fused_grad
            dropped.update((btl, twice, outer))
            added.append(fused_grad)
    return rewire(graph, added, dropped, ports, replaced)
