"""Special functions, elementwise: TF1's ``tf.erf`` (``tf.math.erf``), ``tf.erfc``,
``tf.lgamma``, ``tf.digamma`` and the regularized incomplete gamma functions ``tf.igamma``
(``P(a, x)``) and ``tf.igammac`` (``Q(a, x) = 1 - P(a, x)``) for floating tensors.

Gradients are TF1's: ``erf'(x) = 2/sqrt(pi) exp(-x^2) = -erfc'(x)`` and ``lgamma'(x) = digamma(x)``;
``digamma``'s own gradient (the trigamma function) is not provided. ``Igamma``/``Igammac``
broadcast ``a`` and ``x``; their gradient with respect to ``x`` is TF1's,
``±exp(-x + (a - 1) log(x) - lgamma(a))``, summed back over broadcast axes; the one with respect
to ``a`` (TF1's ``IgammaGradA``) is not provided: ``gradients`` raises LookupError naming the
op where ``a`` lies on a path to what is differentiated, and a constant ``a`` needs none. The kernels run
on the host in float64 (see kernels/special.py for their accuracy).

Kernels live in ``asyncflow/kernels/special.py``.
"""
from __future__ import annotations

import math

from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.registry import GradientNotProvided
from asyncflow.graph.shape import broadcast_shapes
from asyncflow.ops import math as m
from asyncflow.ops.construct import FLOATING, as_tensor, check_dtype, make, operands
from asyncflow.ops.math_grad import binary_grads


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


def _infer_igamma(op):
    a, x = op.inputs
    if x.dtype is not a.dtype:
        raise TypeError(f"Input 'x' has type {x.dtype.name} that does not match type "
                        f"{a.dtype.name} of argument 'a'")
    check_dtype(op.type, a, FLOATING, "a")
    return [(a.dtype, broadcast_shapes(a.shape, x.shape))]


register_op("Igamma", infer=_infer_igamma)
register_op("Igammac", infer=_infer_igamma)


def igamma(a, x, name=None):
    """TF1's ``tf.igamma`` (``tf.math.igamma``): the lower regularized incomplete gamma
    function ``P(a, x)``, elementwise with broadcasting; NaN where ``a <= 0`` or ``x < 0``,
    as TF1's.

    Raises:
        TypeError: for a and x of two dtypes, or not floating.
        ValueError: for shapes that do not broadcast.
    """
    a, x = operands((a, x), "Igamma")
    return make("Igamma", (a, x), None, name, "Igamma")


def igammac(a, x, name=None):
    """TF1's ``tf.igammac`` (``tf.math.igammac``): the upper regularized incomplete gamma
    function ``Q(a, x) = 1 - P(a, x)``, elementwise with broadcasting; NaN where ``a <= 0``
    or ``x < 0``, as TF1's.

    Raises:
        TypeError: for a and x of two dtypes, or not floating.
        ValueError: for shapes that do not broadcast.
    """
    a, x = operands((a, x), "Igammac")
    return make("Igammac", (a, x), None, name, "Igammac")


def _igamma_grads(op, grad, sign):
    a, x = op.inputs
    partial_x = m.exp(m.subtract(m.add(m.negative(x), m.multiply(m.subtract(a, 1.0), m.log(x))),
                                 lgamma(a)))
    unprovided = GradientNotProvided("the gradient with respect to a (TF1's IgammaGradA) is "
                                     "not provided; pass stop_gradient(a) if none is wanted")
    return [unprovided, binary_grads(op, None, m.multiply(grad, partial_x if sign > 0 else
                                                          m.negative(partial_x)))[1]]


@register_gradient("Igamma")
def _igamma_grad(op, grad):
    return _igamma_grads(op, grad, 1)


@register_gradient("Igammac")
def _igammac_grad(op, grad):
    return _igamma_grads(op, grad, -1)
