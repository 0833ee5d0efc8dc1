"""Special functions, elementwise: TF1's ``tf.erf`` (``tf.math.erf``), ``tf.erfc``,
``tf.lgamma`` and ``tf.digamma`` for floating tensors.

Gradients are TF1's: ``erf'(x) = 2/sqrt(pi) exp(-x^2) = -erfc'(x)`` and ``lgamma'(x) = digamma(x)``;
``digamma``'s own gradient (the trigamma function) is not provided. The kernels run on the
host in float64 (see kernels/special.py for their accuracy).

Kernels live in ``asyncflow/kernels/special.py``.
"""
from __future__ import annotations

import math

from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.ops.construct import FLOATING, as_tensor, check_dtype, make


def _infer_special(op):
    x = op.inputs[0]
    check_dtype(op.type, x, FLOATING)
    return [(x.dtype, x.shape)]


for _type in ("Erf", "Erfc", "Lgamma", "Digamma"):
    register_op(_type, infer=_infer_special)
not_differentiable("Digamma")


def erf(x, name=None):
    """The error function, elementwise."""
    return make("Erf", (as_tensor(x),), None, name, "Erf")


def erfc(x, name=None):
    """The complementary error function ``1 - erf(x)``, elementwise (exact far out in the
    tail, where ``1 - erf`` rounds to 0)."""
    return make("Erfc", (as_tensor(x),), None, name, "Erfc")


def lgamma(x, name=None):
    """``log(|Gamma(x)|)``, elementwise (``inf`` at the poles 0, -1, -2, ...)."""
    return make("Lgamma", (as_tensor(x),), None, name, "Lgamma")


def digamma(x, name=None):
    """``Gamma'(x) / Gamma(x)``, elementwise."""
    return make("Digamma", (as_tensor(x),), None, name, "Digamma")


@register_gradient("Erf")
def _erf_grad(op, grad):
    from asyncflow.ops.math import exp, multiply, negative, square
    x = op.inputs[0]
    scale = as_tensor(2 / math.sqrt(math.pi), x.dtype)
    return [multiply(grad, multiply(scale, exp(negative(square(x)))))]


@register_gradient("Erfc")
def _erfc_grad(op, grad):
    from asyncflow.ops.math import exp, multiply, negative, square
    x = op.inputs[0]
    scale = as_tensor(-2 / math.sqrt(math.pi), x.dtype)
    return [multiply(grad, multiply(scale, exp(negative(square(x)))))]


@register_gradient("Lgamma")
def _lgamma_grad(op, grad):
    from asyncflow.ops.math import multiply
    return [multiply(grad, digamma(op.inputs[0]))]
