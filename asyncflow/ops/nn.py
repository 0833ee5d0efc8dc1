"""Neural-network ops (``af.nn``): activations, softmax and losses, convolution, pooling.

Theory of operation:
- Ops that dominate training time are primitives with fused kernels (kernels/nn.py): Relu,
  Relu6, Elu, LeakyRelu, Softplus, Gelu (log_sigmoid is TF's ``-softplus(-x)``), Softmax,
  LogSoftmax, BiasAdd, L2Loss, the two softmax cross entropies (each outputs the loss and
  its ``backprop``, the gradient w.r.t. the logits, so the gradient is one multiply),
  Conv2D, MaxPool and AvgPool. Each one's gradient sits beside it and is built
  from dedicated gradient ops (ReluGrad, Conv2DBackpropInput/Filter, MaxPoolGrad, ...), as in TF.
- Everything else (sigmoid cross entropy, dropout, moments, batch normalization) is a composite
  of existing ops, so it is differentiable through their gradients.
- The activations live in ops/activations.py, softmax and the softmax cross entropies in
  ops/softmax.py, bias_add in ops/bias_add.py, dropout in
  ops/dropout.py and crelu/weighted_cross_entropy_with_logits in ops/nn_composite.py (this
  module re-exports the first four).
- Layout is NHWC (convolution and pooling also take ``data_format="NCHW"``).
  Strides/ksize/dilations are stored as 4-tuples; SAME/VALID geometry is the same function
  at build time (static shapes) and run time (kernels/nn.py ``_geometry``).
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import array as _array
from asyncflow.ops import math as _math
from asyncflow.ops.construct import (
    FLOATING, as_tensor, check_dtype, graph_of, make,
)
from asyncflow.ops.sources import zeros_like

sigmoid = _math.sigmoid
tanh = _math.tanh


# -- elementwise activations: ops/activations.py (re-exported here for importers) -------------
from asyncflow.ops.activations import (  # noqa: E402,F401
    elu, gelu, leaky_relu, log_sigmoid, relu, relu6, selu, silu, softplus, softsign, swish,
)


# -- softmax, log_softmax and the softmax cross entropies: ops/softmax.py (re-exported) ------
from asyncflow.ops.softmax import (  # noqa: E402,F401
    _expand_dims_mul, log_softmax, softmax, softmax_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits_v2, sparse_softmax_cross_entropy_with_logits,
)


# -- bias_add, l2_loss ---------------------------------------------------------------------
# bias_add and BiasAdd/BiasAddGrad live in ops/bias_add.py (re-exported for importers).
from asyncflow.ops.bias_add import bias_add  # noqa: E402,F401


def _infer_l2_loss(op):
    x = op.inputs[0]
    check_dtype(op.type, x, FLOATING, "t")
    return [(x.dtype, TensorShape([]))]


register_op("L2Loss", infer=_infer_l2_loss)


def l2_loss(t, name=None):
    """``sum(t ** 2) / 2`` as a scalar."""
    return make("L2Loss", (as_tensor(t),), None, name, "L2Loss")


@register_gradient("L2Loss")
def _l2_loss_grad(op, grad):
    return [_math.multiply(op.inputs[0], grad)]


def sigmoid_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, name=None):
    """Elementwise logistic loss ``max(x, 0) - x * z + log(1 + exp(-|x|))`` (stable form).

    Raises:
        ValueError: when called positionally or with different shapes.
    """
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("Only call sigmoid_cross_entropy_with_logits with named arguments "
                         "(labels=..., logits=...)")
    graph = graph_of((logits, labels))
    with graph.name_scope(name or "logistic_loss") as scope:
        logits = as_tensor(logits)
        labels = as_tensor(labels, dtype=logits.dtype)
        if not logits.shape.is_compatible_with(labels.shape):
            raise ValueError(f"logits and labels must have the same shape ({logits.shape} vs "
                             f"{labels.shape})")
        zeros = zeros_like(logits)
        positive = _math.greater_equal(logits, zeros)
        relu_logits = _math.where(positive, logits, zeros)
        neg_abs_logits = _math.where(positive, _math.negative(logits), logits)
        return _math.add(_math.subtract(relu_logits, _math.multiply(logits, labels)),
                         _math.log1p(_math.exp(neg_abs_logits)), name=scope)


# -- regularization and normalization ---------------------------------------------------------
# dropout and _FusedDropout(Grad): ops/dropout.py (re-exported here for importers)
from asyncflow.ops.dropout import dropout  # noqa: E402,F401


def l2_normalize(x, axis=None, epsilon=1e-12, name=None, dim=None):
    """``x / sqrt(max(sum(x**2, axis), epsilon))`` (TF1's ``tf.nn.l2_normalize``; ``dim`` is
    its older name for ``axis``)."""
    axis = dim if axis is None else axis
    graph = graph_of((x,))
    with graph.name_scope(name or "l2_normalize") as scope:
        x = as_tensor(x)
        square_sum = _math.reduce_sum(_math.square(x), axis=axis, keepdims=True)
        inverse = _math.rsqrt(_math.maximum(square_sum, as_tensor(epsilon, dtype=x.dtype)))
        return _math.multiply(x, inverse, name=scope)


def moments(x, axes, shift=None, name=None, keep_dims=None, keepdims=False):
    """Mean and variance of ``x`` over ``axes`` (half precision is computed in float32).

    Returns:
        ``(mean, variance)``, with the reduced axes kept as size 1 when ``keepdims``.
    """
    del shift  # TF1 ignores it as well.
    keepdims = bool(keep_dims if keep_dims is not None else keepdims)
    graph = graph_of((x,))
    with graph.name_scope(name or "moments"):
        x = as_tensor(x)
        wide = _math.cast(x, dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
        mean_kept = _math.reduce_mean(wide, axis=axes, keepdims=True, name="mean")
        deviation = _math.squared_difference(wide, _array.stop_gradient(mean_kept))
        variance = _math.reduce_mean(deviation, axis=axes, keepdims=keepdims, name="variance")
        mean = mean_kept if keepdims else _math.reduce_mean(wide, axis=axes)
        if wide is not x:
            return _math.cast(mean, x.dtype), _math.cast(variance, x.dtype)
        return mean, variance


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """``scale * (x - mean) / sqrt(variance + variance_epsilon) + offset``.

    ``offset`` and ``scale`` may be None (0 and 1).
    """
    graph = graph_of((x, mean, variance))
    with graph.name_scope(name or "batchnorm"):
        x = as_tensor(x)
        inv = _math.rsqrt(_math.add(as_tensor(variance, dtype=x.dtype), variance_epsilon))
        if scale is not None:
            inv = _math.multiply(inv, as_tensor(scale, dtype=x.dtype))
        shift = _math.multiply(as_tensor(mean, dtype=x.dtype), inv)
        shift = _math.subtract(offset, shift) if offset is not None else _math.negative(shift)
        return _math.add(_math.multiply(x, inv), shift)

