"""Softmax, LogSoftmax and the two softmax cross entropies (SoftmaxCrossEntropyWithLogits,
SparseSoftmaxCrossEntropyWithLogits, with ExpandDimsMul for their gradients) of the nn
family. Moved out of ops/nn.py (which re-exports the builders) to keep that module under the
size limit. Kernels: kernels/nn.py.
"""
from __future__ import annotations

from asyncflow import dtypes, errors
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import array as _array
from asyncflow.ops import math as _math
from asyncflow.ops.construct import (FLOATING, INTEGER, as_tensor, check_dtype, graph_of, make,
                                     make_op)
from asyncflow.ops.shapes import normalize_axis


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
    ndims = logits.shape.ndims
    if ndims is not None and not -ndims <= int(axis) < ndims:
        # TF1 raises InvalidArgumentError here, while building (not a ValueError)
        raise errors.InvalidArgumentError(
            None, None, f"{op_type}: `dim` must be in the range [{-ndims}, {ndims}) where "
            f"{ndims} is the number of dimensions in the input. Received: dim={axis}")
    axis = normalize_axis(axis, ndims, op_type)
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



# -- cross entropies ----------------------------------------------------------------------
def _without_axis(shape, axis):
    if shape.ndims is None:
        return TensorShape(None)
    axis %= shape.ndims
    return TensorShape([d for i, d in enumerate(shape.dims) if i != axis])


def _as_matrix(shape, axis):
    """``(rows, classes)`` of ``shape`` with its class ``axis`` moved last and the others
    flattened, as TF1's cross entropy reshapes its inputs (None where a dim is unknown)."""
    dims = shape.as_list()
    classes = dims.pop(axis)
    rows = 1
    for dim in dims:
        rows = None if rows is None or dim is None else rows * dim
    return rows, classes


def _check_labels_broadcast(op, logits, labels, axis):
    """TF1's rule for labels of another shape than the logits: both as ``[rows, classes]``
    matrices, the labels' rows and classes each the logits' or 1 (the logits' own never
    broadcast here: TF1's gradient fails on those)."""
    if labels.shape.ndims == 0:
        raise ValueError("labels must have >= 1 dimension, got a scalar")
    if logits.shape.ndims is None or labels.shape.ndims is None:
        return
    label_axis = axis
    if labels.shape.ndims != logits.shape.ndims:
        if axis != logits.shape.ndims - 1:
            raise ValueError(f"labels of rank {labels.shape.ndims} for "
                             f"logits of rank {logits.shape.ndims} need the class axis last")
        label_axis = labels.shape.ndims - 1
    for want, got in zip(_as_matrix(logits.shape, axis), _as_matrix(labels.shape, label_axis)):
        if not (want is None or got is None or got in (1, want)):
            raise ValueError(
                f"labels {labels.shape} do not broadcast to logits "
                f"{logits.shape}: as [rows, classes] matrices (TF1's rule) the labels' rows "
                "and classes must each be the logits' or 1")


def _infer_softmax_xent(op):
    logits, labels = op.inputs
    check_dtype(op.type, logits, FLOATING, "logits")
    if labels.dtype is not logits.dtype:
        raise TypeError(f"labels ({labels.dtype.name}) and logits ({logits.dtype.name}) must "
                        "have the same dtype")
    if logits.shape.ndims == 0:
        raise ValueError("logits must have >= 1 dimension, got a scalar")
    axis = op.get_attr("axis")
    # Of logits of unknown rank, labels of any shape may broadcast: they tell nothing.
    same = logits.shape.ndims is not None and logits.shape.is_compatible_with(labels.shape)
    if not same or labels.shape.ndims == 0:
        _check_labels_broadcast(op, logits, labels, axis % logits.shape.ndims
                                if logits.shape.ndims else axis)
    # TF1 runs its 2-D kernel (whose shape function merges both inputs) on matrices and
    # reshapes other ranks' losses by the logits' shape: the loss knows only the logits'
    # dims. Labels that broadcast tell nothing of the logits' shape.
    shape = logits.shape.merge_with(labels.shape) if same else logits.shape
    known = shape if shape.ndims == 2 else logits.shape
    return [(logits.dtype, _without_axis(known, axis)), (logits.dtype, shape)]


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

    ``labels`` may broadcast to ``logits`` by TF1's rule (both as ``[rows, classes]``
    matrices, the labels' rows and classes each the logits' or 1: ``[1, classes]``,
    ``[classes]``, ``[rows, 1]``); ``axis`` may be negative on logits of unknown rank,
    resolved when the op runs. As TF1's, the labels' gradient is reshaped to their shape, so
    labels that broadcast fail to differentiate (while building when their shapes are known).

    Raises:
        ValueError: when called positionally or with shapes that do not broadcast.
    """
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("Only call softmax_cross_entropy_with_logits with named arguments "
                         "(labels=..., logits=...)")
    # TF1's names: a scope ``name`` (default ``softmax_cross_entropy_with_logits``) holding
    # the casts, the kernel op named as the scope itself, and the float16 / bfloat16 loss's
    # cast back inside it (``xent/Cast_2``). TF1's loss is a Reshape after its 2-D kernel
    # (``xent/Reshape_2``); ours takes any rank, so the kernel's output (``xent``) is the loss.
    graph = graph_of([logits, labels])
    with graph.name_scope(name or "softmax_cross_entropy_with_logits") as scope:
        logits = as_tensor(logits)
        labels = as_tensor(labels)  # in its own dtype, then cast to the logits' computing one
        axis = normalize_axis(dim if axis is None else axis, logits.shape.ndims,
                                "softmax_cross_entropy_with_logits")
        half = logits.dtype if logits.dtype in (dtypes.float16, dtypes.bfloat16) else None
        if half:  # TF1 computes it in float32 and casts the loss back (so its gradient too)
            logits = _math.cast(logits, dtypes.float32)
        if labels.dtype is not logits.dtype:
            labels = _math.cast(labels, logits.dtype)
        op = make_op("SoftmaxCrossEntropyWithLogits", (logits, labels), {"axis": axis}, scope)
        return _math.cast(op.outputs[0], half) if half else op.outputs[0]


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
    # TF1's names: a scope ``name`` (default ``SparseSoftmaxCrossEntropyWithLogits``) holding
    # the kernel op named ``name`` again (``sxent/sxent``; the op type without a name) and the
    # float16 path's casts (``sxent/Cast_1`` the loss).
    graph = graph_of([logits, labels])
    with graph.name_scope(name or "SparseSoftmaxCrossEntropyWithLogits"):
        logits = as_tensor(logits)
        labels = as_tensor(labels)
        half = logits.dtype is dtypes.float16  # TF1 computes float16 (not bfloat16) in float32
        op = make_op("SparseSoftmaxCrossEntropyWithLogits",
                     (_math.cast(logits, dtypes.float32) if half else logits, labels), None,
                     name, "SparseSoftmaxCrossEntropyWithLogits")
        return _math.cast(op.outputs[0], dtypes.float16) if half else op.outputs[0]


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
    labels = op.inputs[1]
    if not (labels.shape.is_fully_defined() and labels.shape == logits.shape):
        # TF1 reshapes it to the labels' shape: labels that broadcast fail there, as here.
        grad_labels = _array.reshape(grad_labels, _array.shape(labels))
    return [grad_logits, grad_labels]


@register_gradient("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_softmax_xent_grad(op, grad_loss, grad_backprop=None):
    backprop = op.outputs[1]
    if backprop.shape.ndims is None:  # the class axis is the last one when the op runs
        axis = -1
        grad_logits = _math.multiply(_expand_at(grad_loss, axis, backprop), backprop)
    else:
        axis = backprop.shape.ndims - 1
        grad_logits = _expand_dims_mul(grad_loss, backprop, axis)
    return [_through_backprop(grad_logits, grad_backprop, op.inputs[0], axis), None]


# -- the mean cross entropy and its gradient in one node ------------------------------------
# Made only by the fusion pass (compile/fuse_softmax_xent.py), never by users:
# ``Mean(SoftmaxCrossEntropyWithLogits(logits, labels))`` (or the sparse op's) over the batch,
# with, where the graph differentiates it, the logits' gradient (``ExpandDimsMul`` of the
# mean's ``BroadcastToLike``) and, where ``bias_grad``, its ``Sum`` over the batch (the last
# layer's bias gradient). Kernels: kernels/softmax_xent_mean.py.
def _infer_xent_mean(op):
    """``(logits, labels[, grad]) -> (loss[, dlogits[, dbias]])``: the scalar mean loss;
    with ``grad`` (the loss's gradient) ``grad * (softmax(logits) - labels) / batch``, and
    with ``bias_grad`` that gradient summed over the batch."""
    logits = op.inputs[0]
    specs = [(logits.dtype, TensorShape([]))]
    if len(op.inputs) > 2:
        specs.append((logits.dtype, logits.shape))
        if op.get_attr("bias_grad"):
            specs.append((logits.dtype, logits.shape[1:]))
    return specs


register_op("_FusedSoftmaxCrossEntropyMean", infer=_infer_xent_mean, differentiable=False)
register_op("_FusedSparseSoftmaxCrossEntropyMean", infer=_infer_xent_mean,
            differentiable=False)
