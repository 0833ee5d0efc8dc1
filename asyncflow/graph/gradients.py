"""Symbolic differentiation: ``gradients(ys, xs)`` adds the backward graph (TF1's algorithm).

Theory of operation:
1. *Mark.* Walk forward from the ``xs`` tensors along floating-point edges only (integer and
   bool tensors are never differentiated). An op is *reached* when one of its float inputs is
   reached, unless it is declared not differentiable (``StopGradient``, ``Shape``...) or it
   produces one of ``stop_gradients``: the walk does not pass such ops. Then walk backward from
   the ``ys`` ops through reached ops only. The intersection, ``between``, is the set of ops
   whose gradient functions run.
2. *Count.* ``pending[op]`` is the number of (consumer, input) edges from ``op``'s outputs into
   ``between`` consumers: the number of gradient contributions ``op`` still waits for.
3. *Seed.* Each ``y`` starts with ``grad_ys[i]``, or ones shaped like ``y``: a ``Const`` when
   ``y``'s shape is static (a scalar loss: nothing to run per step), else ``OnesLike(y)``.
4. *Walk.* Pop an op whose count is zero. Sum each output's contributions (one ``AddN``),
   zero-fill float outputs that got none while a sibling did (``ZerosLike``), call the
   registered ``grad(op, *out_grads)`` under the name scope ``<name>/<op>_grad`` and hand the
   results to the producers of its inputs, decrementing their counts. A result may be a
   ``registry.GradientNotProvided``: a LookupError naming the op where that input is on the
   path (reached from ``xs``), None otherwise.
5. *Collect.* The gradient of ``xs[i]`` is the sum of its contributions, or None when none
   reached it. An ``x`` lying on another ``x``'s path does not stop the walk. A gather's
   gradient is an ``IndexedSlices`` (graph/indexed_slices.py): it stays sparse through the
   ops that accept one (a variable's read) up to ``xs``, several sparse contributions are
   concatenated, and any other op receives it densified.
6. *Units.* A while loop is differentiated as one unit (``_unit``): its Enter and Exit ops map
   to a composite whose gradient function (ops/control_flow_grad.py) builds the gradient
   loop, so the walk never enters the loop's cycle; it differentiates only the inputs that
   ``input_on_path`` says lie on the walk's path (an input read from a unit's output counts
   as on the path when the unit is).

Gradient functions build ordinary ops, so gradients of gradients work whenever the ops used by
the gradient functions have gradients themselves.

This module belongs to the graph layer: it never imports ``asyncflow.ops``. The few ops it
builds itself (``AddN``, ``Const``, ``OnesLike``, ``ZerosLike``) are created by type string.
"""
from __future__ import annotations

import collections
import contextvars
import enum

import numpy as np

from asyncflow.graph import registry
from asyncflow.graph.conversion import convert_to_tensor
from asyncflow.graph.graph import Operation, Tensor
from asyncflow.graph.indexed_slices import IndexedSlices, aggregate, takes_indexed_slices


class UnconnectedGradients(str, enum.Enum):
    """What ``gradients`` gives an ``x`` no ``y`` depends on (TF1's ``tf.UnconnectedGradients``)."""

    NONE = "none"
    ZERO = "zero"


class AggregationMethod:
    """TF1's ``tf.AggregationMethod``: how several contributions to one gradient are summed.
    Every method gives the same sum here (one ``AddN``); the names are accepted so that TF1
    programs that pick one run unchanged."""

    ADD_N = 0
    DEFAULT = ADD_N
    EXPERIMENTAL_TREE = 1
    EXPERIMENTAL_ACCUMULATE_N = 2


def gradients(ys, xs, grad_ys=None, name="gradients", colocate_gradients_with_ops=False,
              gate_gradients=False, aggregation_method=None, stop_gradients=None,
              unconnected_gradients="none"):
    """Symbolic partial derivatives of ``sum(ys)`` with respect to each of ``xs``.

    Args:
        ys: a Tensor or list of Tensors to differentiate.
        xs: a Tensor, Variable or list of them. A Variable is differentiated through its
            reference, so every read of it counts (its snapshot ``v.value()`` among them); a
            variable's reference tensor is accepted too.
        grad_ys: None, or a list aligned with ``ys`` of initial gradients (None entries default
            to ``ones_like(y)``).
        name: the name scope under which the gradient ops are grouped.
        colocate_gradients_with_ops, gate_gradients: TF1's placement and gating hints,
            accepted in TF1's positions; they change no value (the placer places gradient
            ops as any other, and each gradient is complete when its op has run).
        aggregation_method: None or an ``AggregationMethod`` value; all give the same sum.
        stop_gradients: a Tensor or list of Tensors held constant: gradients do not flow
            through the ops that produce them.
        unconnected_gradients: ``"none"`` (TF1's default) or ``"zero"``: what an ``xs[i]``
            that reaches no ``y`` gets, None or ``zeros_like(xs[i])`` (TF 1.13's argument;
            ``af.UnconnectedGradients.ZERO`` and ``.NONE`` are the same strings).

    Returns:
        A list aligned with ``xs``: the gradient Tensor of each (an ``IndexedSlices`` where
        only gathers reach ``xs[i]``, as in TF1), or None where ``xs[i]`` does not reach any
        ``y`` through differentiable floating-point paths.

    Raises:
        LookupError: if an op on a path has no registered gradient, naming the op, its type
            and the input index.
        ValueError: if ``grad_ys`` does not align with ``ys``, tensors come from different
            graphs, ``unconnected_gradients`` is neither "none" nor "zero" or
            ``aggregation_method`` is not one of ``AggregationMethod``'s.
        TypeError: if an element cannot be converted to a Tensor.
    """
    if aggregation_method not in (None, AggregationMethod.ADD_N,
                                  AggregationMethod.EXPERIMENTAL_TREE,
                                  AggregationMethod.EXPERIMENTAL_ACCUMULATE_N):
        raise ValueError(f"gradients: invalid aggregation_method {aggregation_method!r} "
                         "(an af.AggregationMethod value or None)")
    unconnected = getattr(unconnected_gradients, "value", unconnected_gradients)
    if unconnected not in ("none", "zero"):
        raise ValueError(f"gradients: unconnected_gradients must be 'none' or 'zero', got "
                         f"{unconnected_gradients!r}")
    ys = [_as_tensor(y, "ys") for y in _as_list(ys)]
    xs = [_as_tensor(x, "xs", prefer_ref=True) for x in _as_list(xs)]
    stops = [_as_tensor(t, "stop_gradients") for t in _as_list(stop_gradients or [])]
    if not ys:
        raise ValueError("gradients: ys must contain at least one tensor")
    graph = ys[0].graph
    for tensor in ys + xs + stops:
        if tensor.graph is not graph:
            raise ValueError(f"gradients: {tensor.name} is not in the same graph as {ys[0].name}")
    grad_ys = _as_list(grad_ys) if grad_ys is not None else [None] * len(ys)
    if len(grad_ys) != len(ys):
        raise ValueError(f"gradients: grad_ys has {len(grad_ys)} entries but ys has {len(ys)}")

    with graph.name_scope(name):
        between = _between_ops(ys, xs, {t.op for t in stops})
        pending = _pending_counts(between)
        grads = collections.defaultdict(list)
        for index, (y, grad_y) in enumerate(zip(ys, grad_ys)):
            grads[y].append(_seed(graph, y, grad_y, index))
        _backprop(graph, between, pending, grads, ys, set(xs))
        found = [_aggregate(graph, grads.get(x), f"{_short(x)}_sum") if _differentiable_tensor(x)
                 else None for x in xs]
        if unconnected == "zero":
            found = [graph.create_op("ZerosLike", (x,), {"dtype": None},
                                     name="zeros_like").outputs[0] if g is None else g
                     for x, g in zip(xs, found)]
        return found


# -- argument conversion -------------------------------------------------------------------
def _as_list(value):
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _as_tensor(value, what, prefer_ref=False):
    if prefer_ref and hasattr(value, "_ref"):
        return value._ref()
    if isinstance(value, Tensor):
        return value
    if hasattr(value, "_as_tensor"):
        return value._as_tensor()
    if isinstance(value, Operation):
        raise TypeError(f"gradients: {what} must be Tensors, got Operation '{value.name}'")
    raise TypeError(f"gradients: {what} must be Tensors or Variables, got {value!r}")


def _short(tensor):
    return tensor.op.name.replace("/", "_")


def _differentiable_tensor(tensor):
    return tensor.dtype.is_floating


# -- marking -------------------------------------------------------------------------------
def _unit(op):
    """The op itself, or the composite unit it is a boundary of.

    A subgraph differentiated as a whole (a while loop: its Enter and Exit ops) registers
    ``graph.extensions["gradient_unit"]``, a function ``op -> op or unit``. A unit looks like
    an op to this walk (``_inputs``, ``_outputs``, ``op_def.grad``, ``name``, ``_id``): its
    inputs are the tensors entering the subgraph, its outputs those leaving it, and its
    gradient function builds the whole backward subgraph (the gradient loop).
    """
    hook = op.graph.extensions.get("gradient_unit")
    return op if hook is None else hook(op)


def _passes_gradient(op, stop_ops):
    return op.op_def.differentiable and op not in stop_ops


def _between_ops(ys, xs, stop_ops):
    """Ops forward-reachable from ``xs`` along float edges that also reach an op of ``ys``."""
    reached = set()
    stack = [x for x in xs if _differentiable_tensor(x)]
    seen_tensors = set()
    while stack:
        tensor = stack.pop()
        if tensor in seen_tensors:
            continue
        seen_tensors.add(tensor)
        for consumer in tensor.consumers():
            consumer = _unit(consumer)
            if consumer in reached or not _passes_gradient(consumer, stop_ops):
                continue
            reached.add(consumer)
            stack.extend(out for out in consumer.outputs if _differentiable_tensor(out))
    between = set()
    stack = [_unit(y.op) for y in ys if _unit(y.op) in reached]
    while stack:
        op = stack.pop()
        if op in between:
            continue
        between.add(op)
        stack.extend(_unit(t.op) for t in op.inputs
                     if _unit(t.op) in reached and _unit(t.op) not in between
                     and _differentiable_tensor(t))
    return between


def _pending_counts(between):
    pending = dict.fromkeys(between, 0)
    for op in between:
        for tensor in op.inputs:
            if _unit(tensor.op) in pending and _differentiable_tensor(tensor):
                pending[_unit(tensor.op)] += 1
    return pending


def _seed(graph, y, grad_y, index):
    if grad_y is None:
        # A constant seed is always live; OnesLike of a y computed in a cond or loop (or a
        # Switch output) is dead exactly when y is, as in TF1.
        if y.shape.is_fully_defined() and y.dtype.is_floating and \
                y.op.control_flow_context is None and y.op.type not in ("Switch", "RefSwitch"):
            ones = np.ones(y.shape.as_list(), dtype=y.dtype.np)
            ones.flags.writeable = False
            return graph.create_op("Const", (), {"value": ones, "dtype": y.dtype},
                                   name=f"grad_ys_{index}").outputs[0]
        return graph.create_op("OnesLike", (y,), {"dtype": None},
                               name=f"grad_ys_{index}").outputs[0]
    grad_y = convert_to_tensor(grad_y, dtype=y.dtype)
    if not grad_y.shape.is_compatible_with(y.shape):
        raise ValueError(f"gradients: grad_ys[{index}] has shape {grad_y.shape}, which is not "
                         f"compatible with ys[{index}] {y.name} of shape {y.shape}")
    return grad_y


# -- the backward walk ---------------------------------------------------------------------
def _backprop(graph, between, pending, grads, ys, x_set):
    # Creation order among the initially ready ops keeps the backward graph deterministic.
    ready = collections.deque(sorted({_unit(y.op) for y in ys
                                      if _unit(y.op) in between and not pending[_unit(y.op)]},
                                     key=lambda op: op.seq))
    while ready:
        op = ready.popleft()
        out_grads = _output_grads(graph, op, grads)
        if any(g is not None for g in out_grads):
            with graph.name_scope(f"{op.name}_grad"):
                in_grads = _call_grad(op, out_grads,
                                      lambda t: _unit(t.op) in between or t in x_set)
            for tensor, grad in zip(op.inputs, in_grads):
                if grad is not None and _differentiable_tensor(tensor):
                    grads[tensor].append(grad)
        for tensor in op.inputs:
            producer = _unit(tensor.op)
            if producer in pending and _differentiable_tensor(tensor):
                pending[producer] -= 1
                if pending[producer] == 0:
                    ready.append(producer)


def _output_grads(graph, op, grads):
    """One gradient per output: contributions summed, missing float siblings zero-filled."""
    summed = [_aggregate(graph, grads.get(out), f"{op.name}_{i}_sum".replace("/", "_"))
              for i, out in enumerate(op.outputs)]
    for out, grad in zip(op.outputs, summed):
        if grad is not None:
            grads[out] = [grad]  # an x among these outputs reuses the sum
    if not takes_indexed_slices(op.type):
        # Only ops that declare it see a sparse gradient; the others get the dense tensor.
        summed = [g._as_tensor() if isinstance(g, IndexedSlices) else g for g in summed]
    if all(g is None for g in summed) or op.type in ("Switch", "RefSwitch"):
        # A Switch fills its missing branch itself: zeros of its other output would read a
        # value that is dead whenever the branch it belongs to is taken.
        return summed
    return [g if g is not None or not _differentiable_tensor(out)
            else graph.create_op("ZerosLike", (out,), {"dtype": None},
                                 name="zeros_like").outputs[0]
            for out, g in zip(op.outputs, summed)]


def _aggregate(graph, contributions, name):
    if not contributions:
        return None
    if len(contributions) == 1:
        return contributions[0]
    if any(isinstance(c, IndexedSlices) for c in contributions):
        return aggregate(graph, contributions, name)
    return graph.create_op("AddN", tuple(contributions), None, name=name).outputs[0]


# The ``on_path`` of the gradient function running now (see ``input_on_path``).
_ON_PATH = contextvars.ContextVar("asyncflow_gradients_on_path", default=None)


def input_on_path(tensor):
    """For a gradient function while ``gradients`` calls it: whether ``tensor`` (one of its
    op's inputs) lies on a path from ``xs`` to ``ys``, so that its gradient is used (a loop
    unit differentiates only those of its invariants). True outside such a call."""
    on_path = _ON_PATH.get()
    return True if on_path is None else bool(on_path(tensor))


def _call_grad(op, out_grads, on_path):
    # A loop's composite (LoopUnit) has no attrs; an Operation may carry TF1's override.
    override = getattr(op, "_attrs", {}).get("_gradient_op_type")
    grad_fn = registry.override_gradient(override) if override else op.op_def.grad
    if grad_fn is None:
        index = next((i for i, t in enumerate(op.inputs)
                      if on_path(t) and _differentiable_tensor(t)), 0)
        raise LookupError(f"No gradient defined for operation '{op.name}' (op type: {op.type}) "
                          f"input {index}. Register one with @register_gradient({op.type!r}) or "
                          f"declare the type with not_differentiable({op.type!r}).")
    token = _ON_PATH.set(on_path)
    try:
        in_grads = grad_fn(op, *out_grads)
    finally:
        _ON_PATH.reset(token)
    in_grads = list(in_grads) if isinstance(in_grads, (list, tuple)) else [in_grads]
    if len(in_grads) != len(op.inputs):
        raise ValueError(f"Gradient function for {op.type} '{op.name}' returned {len(in_grads)} "
                         f"gradients, but the op has {len(op.inputs)} inputs")
    for index, (tensor, grad) in enumerate(zip(op.inputs, in_grads)):
        if isinstance(grad, registry.GradientNotProvided):
            if on_path(tensor) and _differentiable_tensor(tensor):
                raise LookupError(f"{op.type} '{op.name}' input {index}: {grad.reason}")
            in_grads[index] = grad = None
        if grad is not None and _differentiable_tensor(tensor) and grad.dtype is not tensor.dtype:
            raise TypeError(f"Gradient function for {op.type} '{op.name}' returned a "
                            f"{grad.dtype.name} gradient for input {index} of dtype "
                            f"{tensor.dtype.name}")
    return in_grads
