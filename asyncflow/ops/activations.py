"""Elementwise activations of the nn family: Relu, Relu6, Elu, LeakyRelu, Softplus, Gelu,
Softsign and Selu with their gradient ops, and the composed ``log_sigmoid`` and ``swish``
(``silu``). Moved out of ops/nn.py (which re-exports them) to keep that module under the size
limit. Kernels: kernels/nn.py.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.ops import math as _math
from asyncflow.ops.construct import FLOATING, as_tensor, check_dtype, graph_of, make


def _real(dtype):
    """TF's realnumbertypes (Relu, Relu6): every integer and float dtype, unsigned ones too."""
    return dtype.is_numeric and not dtype.is_bool and not dtype.is_complex


_ACTIVATIONS = {"Relu": _real, "Relu6": _real, "Elu": FLOATING, "LeakyRelu": FLOATING,
                "Softplus": FLOATING, "Gelu": FLOATING, "Softsign": FLOATING, "Selu": FLOATING}


def _infer_activation(op):
    x = op.inputs[0]
    check_dtype(op.type, x, _ACTIVATIONS[op.type], "features")
    return [(x.dtype, x.shape)]


def _infer_activation_grad(op):
    grad, features = op.inputs
    if grad.dtype is not features.dtype:
        raise TypeError(f"gradients ({grad.dtype.name}) and features ({features.dtype.name}) "
                        "must have the same dtype")
    return [(grad.dtype, grad.shape.merge_with(features.shape))]


for _type in _ACTIVATIONS:
    register_op(_type, infer=_infer_activation)
    register_op(_type + "Grad", infer=_infer_activation_grad)


def relu(features, name=None):
    """Rectified linear unit, ``max(features, 0)``."""
    return make("Relu", (as_tensor(features),), None, name, "Relu")


def relu6(features, name=None):
    """``min(max(features, 0), 6)``."""
    return make("Relu6", (as_tensor(features),), None, name, "Relu6")


def elu(features, name=None):
    """Exponential linear unit: ``features`` where positive, else ``exp(features) - 1``."""
    return make("Elu", (as_tensor(features),), None, name, "Elu")


def leaky_relu(features, alpha=0.2, name=None):
    """``features`` where positive, else ``alpha * features`` (TF1's default alpha is 0.2).
    Integer features are cast to float32 first, as TF1 does (the op is floating only)."""
    features = as_tensor(features)
    if features.dtype.is_integer:
        features = _math.cast(features, dtypes.float32)
    return make("LeakyRelu", (features,), {"alpha": float(alpha)}, name, "LeakyRelu")


def softplus(features, name=None):
    """``log(1 + exp(features))``, computed as ``max(x, 0) + log1p(exp(-|x|))``: no overflow,
    full precision for large negative ``x`` (kernels/nn.py)."""
    return make("Softplus", (as_tensor(features),), None, name, "Softplus")


def log_sigmoid(x, name=None):
    """``log(sigmoid(x))`` as TF computes it: ``-softplus(-x)``, stable for every ``x``."""
    x = as_tensor(x)
    with graph_of((x,)).name_scope(name or "LogSigmoid"):
        return _math.negative(softplus(_math.negative(x)))


def gelu(features, approximate=False, name=None):
    """Gaussian error linear unit: ``x * P(X <= x)`` for a standard normal X, i.e.
    ``0.5 * x * (1 + erf(x / sqrt(2)))``; with ``approximate=True`` the tanh form
    ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))`` (TF2's ``tf.nn.gelu``).
    One op, ``Gelu``, with its gradient ``GeluGrad`` (kernels/nn.py)."""
    return make("Gelu", (as_tensor(features),), {"approximate": bool(approximate)}, name,
                "Gelu")


def softsign(features, name=None):
    """``features / (1 + |features|)`` (op ``Softsign``, gradient ``SoftsignGrad``)."""
    return make("Softsign", (as_tensor(features),), None, name, "Softsign")


def selu(features, name=None):
    """Scaled ELU: ``scale * x`` where positive, else ``scale * alpha * (exp(x) - 1)``, with
    TF's ``scale ~ 1.0507`` and ``alpha ~ 1.6733`` (op ``Selu``, gradient ``SeluGrad``)."""
    return make("Selu", (as_tensor(features),), None, name, "Selu")


def swish(features, beta=1.0, name=None):
    """``features * sigmoid(beta * features)`` (TF's ``swish``/``silu``), composed."""
    features = as_tensor(features)
    with graph_of((features,)).name_scope(name or "swish"):
        scaled = features if beta == 1.0 else _math.multiply(features, float(beta))
        return _math.multiply(features, _math.sigmoid(scaled))


silu = swish


@register_gradient("Softsign")
def _softsign_grad(op, grad):
    return [make("SoftsignGrad", (grad, op.inputs[0]))]


@register_gradient("Selu")
def _selu_grad(op, grad):
    return [make("SeluGrad", (grad, op.outputs[0]))]


@register_gradient("Relu")
def _relu_grad(op, grad):
    return [make("ReluGrad", (grad, op.outputs[0]))]


@register_gradient("Relu6")
def _relu6_grad(op, grad):
    return [make("Relu6Grad", (grad, op.inputs[0]))]


@register_gradient("Elu")
def _elu_grad(op, grad):
    return [make("EluGrad", (grad, op.outputs[0]))]


@register_gradient("LeakyRelu")
def _leaky_relu_grad(op, grad):
    return [make("LeakyReluGrad", (grad, op.inputs[0]), {"alpha": op.get_attr("alpha")})]


@register_gradient("Softplus")
def _softplus_grad(op, grad):
    return [make("SoftplusGrad", (grad, op.inputs[0]))]


@register_gradient("SoftplusGrad")
def _softplus_grad_grad(op, grad):
    # SoftplusGrad(dy, x) = dy * sigmoid(x): linear in dy; d/dx = dy * s * (1 - s).
    dy, features = op.inputs
    s = _math.sigmoid(features)
    slope = _math.multiply(s, _math.subtract(1.0, s))
    return [make("SoftplusGrad", (grad, features)),
            _math.multiply(_math.multiply(grad, dy), slope)]


@register_gradient("Gelu")
def _gelu_grad(op, grad):
    return [make("GeluGrad", (grad, op.inputs[0]), {"approximate": op.get_attr("approximate")})]


@register_gradient("ReluGrad")
def _relu_grad_grad(op, grad):
    # ReluGrad is linear in its first input and piecewise constant in the second.
    return [make("ReluGrad", (grad, op.inputs[1])), None]
