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
- The activations live in ops/activations.py, bias_add in ops/bias_add.py, dropout in
  ops/dropout.py and crelu/weighted_cross_entropy_with_logits in ops/nn_composite.py (this
  module re-exports the first three).
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
    FLOATING, INTEGER, as_tensor, check_dtype, graph_of, make, make_op,
)
from asyncflow.ops.sources import zeros_like

sigmoid = _math.sigmoid
tanh = _math.tanh


# -- elementwise activations: ops/activations.py (re-exported here for importers) -------------
from asyncflow.ops.activations import (  # noqa: E402,F401
    elu, gelu, leaky_relu, log_sigmoid, relu, relu6, selu, silu, softplus, softsign, swish,
)


# -- softmax, bias_add, l2_loss ------------------------------------------------------------
def _normalize_axis(axis, ndims, what):
    if ndims is None:
        return axis
    if not -ndims <= axis < ndims:
        raise ValueError(f"{what}: axis {axis} is out of range for a tensor of rank {ndims}")
    return axis % ndims


def _infer_softmax(op):
    x = op.inputs[0]
    check_dtype(op.type, x, FLOATING, "logits")
    if x.shape.ndims == 0:
        raise ValueError("logits must have >= 1 dimension, got a scalar")
    return [(x.dtype, x.shape)]


register_op("Softmax", infer=_infer_softmax)
register_op("LogSoftmax", infer=_infer_softmax)


def _softmax_op(op_type, logits, axis, dim, name):
    logits = as_tensor(logits)
    axis = -1 if axis is None and dim is None else (axis if axis is not None else dim)
    axis = _normalize_axis(int(axis), logits.shape.ndims, op_type)
    return make(op_type, (logits,), {"axis": axis}, name, op_type)


def softmax(logits, axis=None, name=None, dim=None):
    """``exp(logits) / reduce_sum(exp(logits), axis)``, computed stably (default: last axis)."""
    return _softmax_op("Softmax", logits, axis, dim, name)


def log_softmax(logits, axis=None, name=None, dim=None):
    """``logits - log(reduce_sum(exp(logits), axis))``, computed stably."""
    return _softmax_op("LogSoftmax", logits, axis, dim, name)


@register_gradient("Softmax")
def _softmax_grad(op, grad):
    y, axis = op.outputs[0], op.get_attr("axis")
    dot = _math.reduce_sum(_math.multiply(grad, y), axis=axis, keepdims=True)
    return [_math.multiply(_math.subtract(grad, dot), y)]


@register_gradient("LogSoftmax")
def _log_softmax_grad(op, grad):
    y, axis = op.outputs[0], op.get_attr("axis")
    total = _math.reduce_sum(grad, axis=axis, keepdims=True)
    return [_math.subtract(grad, _math.multiply(total, _math.exp(y)))]


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


# -- cross entropies ----------------------------------------------------------------------
def _without_axis(shape, axis):
    if shape.ndims is None:
        return TensorShape(None)
    return TensorShape([d for i, d in enumerate(shape.dims) if i != axis])


def _infer_softmax_xent(op):
    logits, labels = op.inputs
    check_dtype(op.type, logits, FLOATING, "logits")
    if labels.dtype is not logits.dtype:
        raise TypeError(f"labels ({labels.dtype.name}) and logits ({logits.dtype.name}) must "
                        "have the same dtype")
    if not logits.shape.is_compatible_with(labels.shape):
        raise ValueError(f"logits and labels must have the same shape, got {logits.shape} "
                         f"and {labels.shape}")
    shape = logits.shape.merge_with(labels.shape)
    if shape.ndims == 0:
        raise ValueError("logits must have >= 1 dimension, got a scalar")
    return [(logits.dtype, _without_axis(shape, op.get_attr("axis"))), (logits.dtype, shape)]


def _infer_sparse_xent(op):
    logits, labels = op.inputs
    check_dtype(op.type, logits, FLOATING, "logits")
    check_dtype(op.type, labels, INTEGER, "labels")
    if logits.shape.ndims == 0:
        raise ValueError("logits must have >= 1 dimension, got a scalar")
    batch = logits.shape[:-1]
    if labels.shape.ndims is not None and logits.shape.ndims is not None:
        if labels.shape.ndims != logits.shape.ndims - 1:
            raise ValueError(f"Rank mismatch: Rank of labels (received {labels.shape.ndims}) "
                             f"should equal rank of logits minus 1 (received "
                             f"{logits.shape.ndims}).")
        if not batch.is_compatible_with(labels.shape):
            raise ValueError(f"labels shape {labels.shape} must equal logits shape "
                             f"{logits.shape} without its last dimension")
        batch = batch.merge_with(labels.shape)
    return [(logits.dtype, batch), (logits.dtype, logits.shape)]


register_op("SoftmaxCrossEntropyWithLogits", infer=_infer_softmax_xent)
register_op("SparseSoftmaxCrossEntropyWithLogits", infer=_infer_sparse_xent)


def softmax_cross_entropy_with_logits_v2(_sentinel=None, labels=None, logits=None, dim=-1,
                                         name=None, axis=None):
    """Per-example ``-sum(labels * log_softmax(logits), axis)``; backprops into labels too.

    Raises:
        ValueError: when called positionally or with mismatched shapes.
    """
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("Only call softmax_cross_entropy_with_logits with named arguments "
                         "(labels=..., logits=...)")
    logits = as_tensor(logits)
    labels = as_tensor(labels, dtype=logits.dtype)
    axis = _normalize_axis(int(dim if axis is None else axis), logits.shape.ndims,
                           "softmax_cross_entropy_with_logits")
    if axis < 0:
        raise ValueError("softmax_cross_entropy_with_logits: a negative axis needs a known rank")
    op = make_op("SoftmaxCrossEntropyWithLogits", (logits, labels), {"axis": axis}, name,
                 "SoftmaxCrossEntropyWithLogits")
    return op.outputs[0]


def softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, dim=-1,
                                      name=None, axis=None):
    """TF1's per-example softmax cross entropy; ``labels`` get no gradient (stop_gradient).

    Args:
        labels: a probability distribution per row, same shape and dtype as ``logits``.
        logits: unscaled log probabilities.
        dim: the class dimension (default: last).

    Returns:
        A tensor of ``logits``' shape without the class dimension.

    Raises:
        ValueError: when called positionally or with mismatched shapes.
    """
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("Only call softmax_cross_entropy_with_logits with named arguments "
                         "(labels=..., logits=...)")
    labels = _array.stop_gradient(labels, name="labels_stop_gradient")
    return softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits, dim=dim,
                                                name=name, axis=axis)


def sparse_softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None,
                                             name=None):
    """Per-example cross entropy against integer class ``labels`` in ``[0, num_classes)``.

    A label outside that range fails the run with InvalidArgumentError naming the op.

    Raises:
        ValueError: when called positionally or when ranks/shapes mismatch.
    """
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("Only call sparse_softmax_cross_entropy_with_logits with named "
                         "arguments (labels=..., logits=...)")
    logits = as_tensor(logits)
    labels = as_tensor(labels)
    op = make_op("SparseSoftmaxCrossEntropyWithLogits", (logits, labels), None, name,
                 "SparseSoftmaxCrossEntropyWithLogits")
    return op.outputs[0]


def _infer_expand_dims_mul(op):
    x, y = op.inputs
    if x.dtype is not y.dtype:
        raise TypeError(f"x ({x.dtype.name}) and y ({y.dtype.name}) must have the same dtype")
    axis = op.get_attr("axis")
    if x.shape.ndims is None or y.shape.ndims is None:
        return [(x.dtype, y.shape)]
    if y.shape.ndims != x.shape.ndims + 1 or not 0 <= axis < y.shape.ndims:
        raise ValueError(f"x of shape {x.shape} must be y of shape {y.shape} without axis {axis}")
    dims = list(x.shape.dims)
    dims.insert(axis, y.shape.dims[axis])
    return [(x.dtype, y.shape.merge_with(TensorShape(dims)))]


# ``ExpandDimsMul(x, y)`` is ``expand_dims(x, axis) * y`` for ``x`` shaped like ``y`` without
# ``axis``, in one kernel: the cross entropies' gradient scales each row of ``backprop`` by
# that row's loss gradient.
register_op("ExpandDimsMul", infer=_infer_expand_dims_mul)


def _expand_dims_mul(x, y, axis):
    return make("ExpandDimsMul", (x, y), {"axis": axis}, None, "ExpandDimsMul")


@register_gradient("ExpandDimsMul")
def _expand_dims_mul_grad(op, grad):
    x, y = op.inputs
    axis = op.get_attr("axis")
    return [_math.reduce_sum(_math.multiply(grad, y), axis=axis),
            _expand_dims_mul(x, grad, axis)]


def _expand_at(tensor, axis, like):
    """``tensor`` (``like``'s shape without ``axis``) with a 1 inserted at ``axis``."""
    expand_dims = getattr(_array, "expand_dims", None)
    if expand_dims is not None:
        return expand_dims(tensor, axis)
    if like.shape.is_fully_defined():
        dims = list(like.shape.dims)
        dims[axis] = 1
        return _array.reshape(tensor, dims)
    keep = _math.reduce_sum(like, axis=axis, keepdims=True)
    return _array.reshape(tensor, _array.shape(keep))


def _through_backprop(grad_logits, grad_backprop, logits, axis):
    """Adds what flows back through the cross entropies' ``backprop`` output (a second
    derivative): d(backprop)/d(logits) is the softmax Jacobian, for the dense and the sparse
    form alike (``backprop`` is softmax minus the labels)."""
    if grad_backprop is None or grad_backprop.op.type == "ZerosLike":
        return grad_logits
    probs = softmax(logits, axis=axis)
    dot = _math.reduce_sum(_math.multiply(grad_backprop, probs), axis=axis, keepdims=True)
    return _math.add(grad_logits, _math.multiply(_math.subtract(grad_backprop, dot), probs))


@register_gradient("SoftmaxCrossEntropyWithLogits")
def _softmax_xent_grad(op, grad_loss, grad_backprop=None):
    logits, axis = op.inputs[0], op.get_attr("axis")
    backprop = op.outputs[1]
    ndims = backprop.shape.ndims
    if ndims:  # one kernel, not Sum + Shape + Reshape + Mul when the batch is unknown
        grad_logits = _expand_dims_mul(grad_loss, backprop, axis % ndims)
    else:
        grad_logits = _math.multiply(_expand_at(grad_loss, axis, backprop), backprop)
    grad_logits = _through_backprop(grad_logits, grad_backprop, logits, axis)
    grad_labels = _math.multiply(_expand_at(grad_loss, axis, backprop),
                                 _math.negative(log_softmax(logits, axis=axis)))
    if grad_backprop is not None and grad_backprop.op.type != "ZerosLike":
        grad_labels = _math.subtract(grad_labels, grad_backprop)
    return [grad_logits, grad_labels]


@register_gradient("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_softmax_xent_grad(op, grad_loss, grad_backprop=None):
    backprop = op.outputs[1]
    axis = backprop.shape.ndims - 1 if backprop.shape.ndims is not None else -1
    if axis < 0:
        raise ValueError("the gradient of sparse_softmax_cross_entropy_with_logits needs "
                         "logits of known rank")
    grad_logits = _expand_dims_mul(grad_loss, backprop, axis)
    return [_through_backprop(grad_logits, grad_backprop, op.inputs[0], axis), None]


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

