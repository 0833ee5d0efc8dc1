"""The elementwise functions TF1 has beside ``sin``/``cos``/``tanh``: ``tan``, the inverse and
hyperbolic functions, ``expm1``, ``atan2``, ``rint`` and ``is_inf`` (TF1's ``tf.tan``,
``tf.math.asin``, ...).

Theory of operation: each is one op of TF1's type (``Tan``, ``Asin``, ..., ``Atan2``) on
floating tensors, registered from a table as ops/math.py registers its own, with TF1's
gradient next to it, written in math ops (so gradients of gradients work): ``Tan``:
``grad / cos(x)**2``; ``Asin``/``Acos``: ``±grad * rsqrt(1 - x**2)``; ``Atan``:
``grad / (1 + x**2)``; ``Sinh``/``Cosh``: ``grad * cosh(x)``/``sinh(x)``; ``Asinh``/``Acosh``:
``grad / cosh(y)``/``sinh(y)`` of the output ``y``; ``Atanh``: ``grad / (1 - x**2)``;
``Expm1``: ``grad * exp(x)``; ``Atan2(y, x)``: ``grad * x / (x**2 + y**2)`` and
``-grad * y / (x**2 + y**2)``, each summed back over the axes it was broadcast along.
``Rint`` (round half to even) and ``IsInf`` have no gradient, as in TF1.

Kernels live in ``asyncflow/kernels/trigonometric.py``.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.shape import broadcast_shapes
from asyncflow.ops import math as m
from asyncflow.ops.construct import FLOATING, check_dtype, make, operands
from asyncflow.ops.math_grad import binary_grads

# op type -> builder name
UNARY = {"Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh",
         "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
         "Expm1": "expm1", "Rint": "rint", "IsInf": "is_inf"}


def _infer_unary(op):
    x = op.inputs[0]
    check_dtype(op.type, x, FLOATING)
    return [(dtypes.bool if op.type == "IsInf" else x.dtype, x.shape)]


for _type, _name in UNARY.items():
    register_op(_type, infer=_infer_unary)
    globals()[_name] = m.unary_builder(_type, _name)  # (ops/math's, as its unary ops)
    globals()[_name].__doc__ = f"Elementwise {_name} of a floating tensor, as TF1's ``{_type}``."
not_differentiable("Rint", "IsInf")


def _infer_atan2(op):
    y, x = op.inputs
    if x.dtype is not y.dtype:
        raise TypeError(f"Atan2 '{op.name}': y ({y.dtype.name}) and x ({x.dtype.name}) must "
                        f"have the same dtype")
    check_dtype(op.type, y, FLOATING, "y")
    return [(y.dtype, broadcast_shapes(y.shape, x.shape))]


register_op("Atan2", infer=_infer_atan2)


def atan2(y, x, name=None):
    """TF1's ``tf.atan2``: the angle of the point ``(x, y)``, elementwise with broadcasting."""
    y, x = operands((y, x), "Atan2")
    return make("Atan2", (y, x), None, name, "Atan2")


def _one_minus_square(x):
    return m.subtract(m.cast(1, x.dtype), m.square(x))


@register_gradient("Tan")
def _tan_grad(op, grad):
    return [m.multiply(grad, m.square(m.reciprocal(m.cos(op.inputs[0]))))]


@register_gradient("Asin")
def _asin_grad(op, grad):
    return [m.multiply(grad, m.rsqrt(_one_minus_square(op.inputs[0])))]


@register_gradient("Acos")
def _acos_grad(op, grad):
    return [m.negative(m.multiply(grad, m.rsqrt(_one_minus_square(op.inputs[0]))))]


@register_gradient("Atan")
def _atan_grad(op, grad):
    x = op.inputs[0]
    return [m.multiply(grad, m.reciprocal(m.add(m.cast(1, x.dtype), m.square(x))))]


@register_gradient("Sinh")
def _sinh_grad(op, grad):
    return [m.multiply(grad, cosh(op.inputs[0]))]  # noqa: F821 (made from the table)


@register_gradient("Cosh")
def _cosh_grad(op, grad):
    return [m.multiply(grad, sinh(op.inputs[0]))]  # noqa: F821


@register_gradient("Asinh")
def _asinh_grad(op, grad):
    return [m.divide(grad, cosh(op.outputs[0]))]  # noqa: F821


@register_gradient("Acosh")
def _acosh_grad(op, grad):
    return [m.divide(grad, sinh(op.outputs[0]))]  # noqa: F821


@register_gradient("Atanh")
def _atanh_grad(op, grad):
    return [m.multiply(grad, m.reciprocal(_one_minus_square(op.inputs[0])))]


@register_gradient("Expm1")
def _expm1_grad(op, grad):
    return [m.multiply(grad, m.exp(op.inputs[0]))]


@register_gradient("Atan2")
def _atan2_grad(op, grad):
    y, x = op.inputs
    scale = m.divide(grad, m.add(m.square(x), m.square(y)))
    return binary_grads(op, m.multiply(x, scale), m.negative(m.multiply(y, scale)))
