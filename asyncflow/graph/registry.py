"""The op registry: op type string -> ``OpDef`` (shape inference, statefulness, gradient).

Family modules in ``asyncflow/ops`` register their op types here at import time. Registering a
type twice is an error naming both places. The registry knows nothing of kernels: those are
registered by ``asyncflow/kernels`` under the same type strings.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Callable

_NOT_DIFFERENTIABLE = object()


@dataclasses.dataclass(slots=True)
class OpDef:
    """What the graph layer knows about one op type.

    Attributes:
        type: the CamelCase op type, e.g. ``"MatMul"``.
        infer: ``infer(op) -> list[(DType, TensorShape)]``, one pair per output. It may raise
            ValueError/TypeError; the graph prefixes the op's type and name.
        stateful: never CSE'd, folded or pruned as pure; e.g. variables, random ops.
        grad: ``grad(op, *output_grads) -> list[Tensor | None]`` (one per input), or None.
        differentiable: False for ops declared not differentiable (no error, no gradient).
        control_flow: Switch/Merge/Enter/Exit/NextIteration/LoopCond; the executor needs frames.
        ref_inputs: indices of inputs that take a variable reference (not dereferenced), or
            ``"all"``.
        ref_outputs: indices of outputs that are variable references.
        cost: ``cost(input_shapes) -> float`` estimated work, for placement and offloading;
            None means "the total input elements".
        where: ``file:line`` of the registration, for duplicate errors.
    """

    type: str
    infer: Callable
    stateful: bool = False
    grad: Callable | None = None
    differentiable: bool = True
    control_flow: bool = False
    ref_inputs: tuple = ()
    ref_outputs: tuple = ()
    where: str = ""
    cost: Callable | None = None

    def is_ref_input(self, index):
        return self.ref_inputs == "all" or index in self.ref_inputs


_OPS: dict[str, OpDef] = {}


def _caller(depth=2):
    frame = sys._getframe(depth)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def register_op(op_type, *, infer, stateful=False, differentiable=True, control_flow=False,
                ref_inputs=(), ref_outputs=(), cost=None):
    """Register an op type.

    Raises:
        KeyError: if ``op_type`` is already registered (naming both places).
    """
    where = _caller()
    if op_type in _OPS:
        raise KeyError(f"Op type {op_type!r} registered twice: at {_OPS[op_type].where} and at {where}")
    op_def = OpDef(op_type, infer, stateful=stateful, differentiable=differentiable,
                   control_flow=control_flow,
                   ref_inputs=ref_inputs if ref_inputs == "all" else tuple(ref_inputs),
                   ref_outputs=tuple(ref_outputs), where=where, cost=cost)
    _OPS[op_type] = op_def
    return op_def


def register_gradient(op_type):
    """Decorator: ``@register_gradient("MatMul") def _matmul_grad(op, grad): ...``."""
    def decorate(fn):
        op_def = get_op_def(op_type)
        if op_def.grad is not None:
            raise KeyError(f"Gradient for {op_type!r} registered twice")
        op_def.grad = fn
        return fn
    return decorate


_OVERRIDE_GRADIENTS = {}  # name -> gradient function, for Graph.gradient_override_map


class RegisterGradient:
    """TF1's ``@tf.RegisterGradient("Name")``: a gradient function under a new name, used by
    ops created inside ``graph.gradient_override_map({"OpType": "Name"})``.

    Raises:
        KeyError: if the name is registered twice.
    """

    def __init__(self, op_type):
        if not isinstance(op_type, str):
            raise TypeError("RegisterGradient takes the gradient's name, a string")
        self._name = op_type

    def __call__(self, fn):
        if self._name in _OVERRIDE_GRADIENTS:
            raise KeyError(f"Registering two gradient with name {self._name!r}")
        _OVERRIDE_GRADIENTS[self._name] = fn
        return fn


def override_gradient(name):
    """The gradient function registered as ``name`` by ``RegisterGradient``.

    Raises:
        LookupError: if none is.
    """
    try:
        return _OVERRIDE_GRADIENTS[name]
    except KeyError:
        raise LookupError(f"No gradient registered as {name!r} (gradient_override_map names "
                          "it; register it with @RegisterGradient)") from None


class GradientNotProvided:
    """What a gradient function returns for an input whose gradient asyncflow does not
    provide (``reason`` says which and what to do): ``gradients`` raises LookupError naming
    the op when that input lies on a path to ``xs``, and treats it as None otherwise (a
    constant input needs no gradient)."""

    __slots__ = ("reason",)

    def __init__(self, reason):
        self.reason = reason


def not_differentiable(*op_types):
    """Declare op types that have no gradient (integer/bool outputs, shape queries, ...)."""
    for op_type in op_types:
        get_op_def(op_type).differentiable = False


def no_gradient(op_type):
    """TF1's ``tf.no_gradient`` (``tf.NotDifferentiable``, ``tf.NoGradient``): ops of
    ``op_type`` have no gradient; ``gradients`` treats them as giving none (zeros), as TF1.

    Raises:
        TypeError: if ``op_type`` is not a string (TF1's).
        KeyError: if ``op_type`` already has a gradient or was declared not differentiable
            (TF1's "Registering two gradient"), or is not an op type asyncflow has.
    """
    if not isinstance(op_type, str):
        raise TypeError("op_type must be a string")
    op_def = get_op_def(op_type)
    if op_def.grad is not None or not op_def.differentiable:
        raise KeyError(f"Registering two gradient with name '{op_type}'! (Previous "
                       f"registration was in {op_def.where})")
    op_def.differentiable = False


def get_op_def(op_type):
    """The OpDef of ``op_type``.

    Raises:
        KeyError: naming the unknown type.
    """
    try:
        return _OPS[op_type]
    except KeyError:
        raise KeyError(f"Op type {op_type!r} is not registered; known types: "
                       f"{', '.join(sorted(_OPS)[:20])}...") from None
