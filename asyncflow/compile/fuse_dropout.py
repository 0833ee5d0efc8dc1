"""The dropout fusion: ``dropout``'s five ops become one ``_FusedDropout`` (TF's remapper style).

Theory of operation (issue 37):
- ``af.nn.dropout`` (and TF1's ``tf.nn.dropout`` of ``compat.v1``) builds
  ``Mul(RealDiv(x, keep), Floor(Add(RandomUniform(shape), keep)))``. Run as five kernels,
  that is five arrays and five executor dispatches for one mask. The pass replaces the chain
  with one ``_FusedDropout(x, shape, keep)`` node whose kernel (kernels/dropout.py) draws the
  same uniforms from the same seeded generator and applies the same operations in the same
  order in two arrays: the same bits as the unfused ops.
- The fused node has two outputs: 0 is the ``Mul``'s (it takes the ``Mul``'s name, so
  consumers, fetches and traces read it under the same name), 1 is the ``Floor``'s mask.
  The gradient built before this pass multiplies by the mask (``Mul``'s gradient reads
  ``Floor``): every reader of ``Floor`` (the gradient included, fetches and control edges
  too) reads output 1, so the backward graph still finds the mask.
- It fires only where nothing else needs an intermediate: ``RandomUniform``, ``Add`` and
  ``RealDiv`` have no other reader (a ``Shape`` of ``RealDiv``, which the gradient builds,
  reads output 0 instead: with a scalar ``keep`` and the mask shaped as ``x``, every tensor
  of the chain has ``x``'s shape), are neither fetched, targets nor control inputs; no node
  of the chain has control inputs; all five sit on one device outside any loop; ``keep``
  is one scalar port read by both ``Add`` and ``RealDiv`` (or two constants of the same
  bits); the random shape is ``Shape(x)`` or a constant equal to ``x``'s static shape; the
  dtype is floating. Otherwise the ops run as built.
- Its gradient, as ``gradients()`` builds it, is ``RealDiv(SumToShape(Mul(grad, mask),
  Shape(out)), keep)``: three kernels, two arrays and a Shape for ``(grad * mask) / keep``.
  Where each of the three is read only by the next (the ``RealDiv`` by anything), none is
  fetched, a target or a control input, all sit on the mask's device outside loops, the
  ``Shape`` is of a tensor of ``x``'s shape and the ``RealDiv`` divides by ``keep``, they
  become one ``_FusedDropoutGrad(grad, mask, keep)`` named after the ``RealDiv``: the same
  operations in the same order in one array (the same bits), one dispatch instead of four
  (the ``Shape`` goes too when nothing else reads it).
- Where that ``RealDiv``'s one reader is a ``ReluGrad`` taking it as its gradient (a Relu's
  output went into the dropout: the MLP's hidden layers), the two become one
  ``_FusedDropoutReluGrad(grad, mask, keep, features)`` named after the ``ReluGrad``:
  ``((grad * mask) / keep) * (features > 0)``, the same operations in the same order (the
  same bits), one pass and one dispatch instead of two (kernels/dropout.py).

Pure data, as every compile pass: no trio, no kernels.
"""
from __future__ import annotations

import numpy as np

from asyncflow.compile.node_graph import FeedNode, Node, plain_on, fusion_view, rewire
from asyncflow.graph.registry import get_op_def

FUSED_TYPE = "_FusedDropout"
GRAD_TYPE = "_FusedDropoutGrad"
RELU_GRAD_TYPE = "_FusedDropoutReluGrad"
# Whether a ReluGrad joins the dropout's gradient (read when a plan is compiled; False keeps
# the two kernels: bench/bench_ab_setting.py's A/B, a session a form).
RELU_GRAD = True


def _only_reader(node, reader, readers, controlling, pinned, allow_shape=False):
    """Whether ``reader`` is the one reader of ``node``'s output (``Shape`` nodes aside when
    ``allow_shape``) and ``node`` is not fetched, a target or a control input."""
    if node in pinned or node in controlling or len(node.out_specs) != 1:
        return False
    others = [c for c in readers.get((node, 0), [])
              if c is not reader and not (allow_shape and c.type == "Shape")]
    return not others and readers.get((node, 0), []).count(reader) == 1


def _shape_is_x(shape_port, x_port):
    """Whether the random shape is ``x``'s: ``Shape(x)`` or a constant equal to its shape."""
    producer, index = shape_port
    if isinstance(producer, FeedNode):
        return False
    if producer.type == "Shape" and producer.inputs == [x_port]:
        return True
    static = x_port[0].out_spec(x_port[1])[1]
    if producer.type != "Const" or not static.is_fully_defined():
        return False
    value = np.asarray(producer.attrs["value"]).reshape(-1)
    return value.tolist() == static.as_list()


def _same_scalar(port, keep_port):
    """Whether ``port`` holds ``keep``: the same port, or a Const of the same dtype and bits
    (``dropout`` with a float rate converts it twice; CSE merges the two in a session)."""
    if port == keep_port:
        return True
    a, b = port[0], keep_port[0]
    if isinstance(a, FeedNode) or isinstance(b, FeedNode) or a.type != "Const" or b.type != "Const":
        return False
    a, b = np.asarray(a.attrs["value"]), np.asarray(b.attrs["value"])
    return a.dtype == b.dtype and a.shape == b.shape == () and a.tobytes() == b.tobytes()


def _match(mul, readers, controlling, pinned):
    """``(random, add, floor, div, x_port, keep_port)`` when ``mul`` ends a dropout chain
    that may fuse, else None."""
    if mul.type != "Mul" or len(mul.inputs) != 2 or not plain_on(mul, mul.device):
        return None
    device = mul.device
    for div_port, floor_port in (mul.inputs, mul.inputs[::-1]):
        div, floor = div_port[0], floor_port[0]
        if (isinstance(div, FeedNode) or isinstance(floor, FeedNode) or div.type != "RealDiv"
                or floor.type != "Floor" or div is floor):
            continue
        add = floor.inputs[0][0]
        if isinstance(add, FeedNode) or add.type not in ("Add", "AddV2"):
            continue
        x_port, keep_port = div.inputs
        if _same_scalar(add.inputs[1], keep_port):
            random = add.inputs[0][0]
        elif _same_scalar(add.inputs[0], keep_port):
            random = add.inputs[1][0]
        else:
            continue
        if isinstance(random, FeedNode) or random.type != "RandomUniform":
            continue
        dtype, x_shape, _ = x_port[0].out_spec(x_port[1])
        keep_dtype, keep_shape, keep_ref = keep_port[0].out_spec(keep_port[1])
        if (not all(plain_on(n, device) for n in (div, floor, add, random))
                or not dtype.is_floating or keep_dtype != dtype or keep_ref
                or keep_shape.ndims != 0 or x_shape.ndims in (None, 0)
                or random.attrs.get("dtype") != dtype
                or any(spec[0] != dtype for n in (mul, div, floor, add) for spec in n.out_specs)
                or not _shape_is_x(random.inputs[0], x_port)):
            continue
        if (_only_reader(random, add, readers, controlling, pinned)
                and _only_reader(add, floor, readers, controlling, pinned)
                and _only_reader(div, mul, readers, controlling, pinned, allow_shape=True)
                and len(floor.out_specs) == 1 and len(mul.out_specs) == 1):
            return random, add, floor, div, x_port, keep_port
    return None


def _backward(grad_mul, floor, keep_port, shaped, readers, controlling, pinned):
    """``(grad_mul, to_shape, grad_div, grad_port, shape_node)`` when ``grad_mul`` starts the
    dropout's gradient as ``gradients()`` builds it and it may fuse:
    ``RealDiv(SumToShape(Mul(grad, mask), Shape(out)), keep)``, each read only by the next,
    none fetched, a target or a control input, all on the mask's device outside loops;
    ``Shape`` of one of ``shaped``: the dropout's output, its ``RealDiv`` or ``x`` (each of
    ``x``'s shape, the mask's)."""
    device = floor.device
    if (grad_mul.type != "Mul" or len(grad_mul.inputs) != 2
            or grad_mul.inputs.count((floor, 0)) != 1 or not plain_on(grad_mul, device)):
        return None
    (grad_port,) = [p for p in grad_mul.inputs if p != (floor, 0)]
    to_shape = readers.get((grad_mul, 0), [])
    if len(to_shape) != 1 or to_shape[0].type != "SumToShape":
        return None
    to_shape = to_shape[0]
    grad_div = readers.get((to_shape, 0), [])
    if len(grad_div) != 1 or grad_div[0].type != "RealDiv":
        return None
    grad_div = grad_div[0]
    shape_node = to_shape.inputs[1][0]
    dtype = floor.out_specs[0][0]
    if (to_shape.inputs[0] != (grad_mul, 0) or grad_div.inputs[0] != (to_shape, 0)
            or not _same_scalar(grad_div.inputs[1], keep_port)
            or isinstance(shape_node, FeedNode) or shape_node.type != "Shape"
            or shape_node.inputs[0] not in shaped
            or not all(plain_on(n, device) for n in (to_shape, grad_div))
            or not all(_only_reader(n, r, readers, controlling, pinned) for n, r in
                       ((grad_mul, to_shape), (to_shape, grad_div)))
            or grad_div in pinned or grad_div in controlling
            or any(n.out_specs[0][0] != dtype or len(n.out_specs) != 1
                   for n in (grad_mul, to_shape, grad_div))):
        return None
    return grad_mul, to_shape, grad_div, grad_port, shape_node


def _relu_grad_of(grad_div, readers, controlling, pinned):
    """The ``ReluGrad`` that is the one reader of the dropout gradient's ``RealDiv`` (as its
    gradient input, on its device, outside loops, no control inputs, of its dtype and shape),
    where the two may be one ``_FusedDropoutReluGrad``; else None. A Relu's gradient through
    the dropout after it: the MLP's hidden layers'."""
    relu_grad = readers.get((grad_div, 0), [])
    if len(relu_grad) != 1 or relu_grad[0].type != "ReluGrad":
        return None
    relu_grad = relu_grad[0]
    features = relu_grad.inputs[1]
    dtype, shape, _ = grad_div.out_specs[0]
    if (relu_grad.inputs[0] != (grad_div, 0) or features == (grad_div, 0)
            or not plain_on(relu_grad, grad_div.device) or len(relu_grad.out_specs) != 1
            or relu_grad.out_specs[0][0] != dtype
            or features[0].out_spec(features[1])[0] != dtype
            or not features[0].out_spec(features[1])[1].is_compatible_with(shape)):
        return None
    return relu_grad


def fuse_dropout(node_graph):
    """The dropout fusion (see the module docstring); returns a new NodeGraph, or the one
    given when it has no RandomUniform (no copy: most graphs have none)."""
    if not any(n.type == "RandomUniform" for n in node_graph.nodes):
        return node_graph
    graph = node_graph.copy()
    readers, controlling, pinned = fusion_view(graph)
    ports, dropped = {}, set()   # (old node, old index) -> new port; nodes fused away
    fused_nodes = []
    for mul in graph.nodes:
        found = _match(mul, readers, controlling, pinned) if mul not in dropped else None
        if found is None:
            continue
        random, add, floor, div, x_port, keep_port = found
        if {random, add, floor, div} & dropped:
            continue
        fused = Node(mul.name, FUSED_TYPE, get_op_def(FUSED_TYPE),
                     {"dtype": random.attrs["dtype"], "seed": random.attrs.get("seed"),
                      "seed2": random.attrs.get("seed2")},
                     [x_port, random.inputs[0], keep_port], [], mul.device,
                     [mul.out_specs[0], floor.out_specs[0]], mul.traceback, mul.seq,
                     origin=mul.origin, requested_device=mul.requested_device)
        ports[(mul, 0)] = (fused, 0)
        ports[(floor, 0)] = (fused, 1)
        ports[(div, 0)] = (fused, 0)   # read only by Shape nodes (checked): the same shape
        dropped.update((random, add, floor, div, mul))
        fused_nodes.append((fused, {mul: fused, floor: fused}))
        for grad_mul in readers.get((floor, 0), []):
            found = _backward(grad_mul, floor, keep_port, (x_port, (mul, 0), (div, 0)), readers,
                              controlling, pinned)
            if found is None or set(found[:3]) & dropped:
                continue
            grad_mul, to_shape, grad_div, grad_port, shape_node = found
            relu_grad = _relu_grad_of(grad_div, readers, controlling, pinned) \
                if RELU_GRAD else None
            if relu_grad is not None:  # ReluGrad(this, features): one node of the two
                grad = Node(relu_grad.name, RELU_GRAD_TYPE, get_op_def(RELU_GRAD_TYPE), {},
                            [grad_port, (floor, 0), keep_port, relu_grad.inputs[1]], [],
                            relu_grad.device, relu_grad.out_specs, relu_grad.traceback,
                            relu_grad.seq, origin=relu_grad.origin,
                            requested_device=relu_grad.requested_device)
                ports[(relu_grad, 0)] = (grad, 0)
                dropped.add(relu_grad)
                fused_nodes.append((grad, {relu_grad: grad}))
            else:
                grad = Node(grad_div.name, GRAD_TYPE, get_op_def(GRAD_TYPE), {},
                            [grad_port, (floor, 0), keep_port], [], grad_div.device,
                            grad_div.out_specs, grad_div.traceback, grad_div.seq,
                            origin=grad_div.origin, requested_device=grad_div.requested_device)
                ports[(grad_div, 0)] = (grad, 0)
                fused_nodes.append((grad, {grad_div: grad}))
            dropped.update((grad_mul, to_shape, grad_div))
            if readers.get((shape_node, 0), []) == [to_shape] and shape_node not in pinned \
                    and shape_node not in controlling:
                dropped.add(shape_node)
    if not fused_nodes:
        return graph
    control_map = {}
    for _, mapping in fused_nodes:
        control_map.update(mapping)
    return rewire(graph, [f for f, _ in fused_nodes], dropped, ports, control_map)
