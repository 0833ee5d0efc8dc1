"""TF1's ``tf.losses`` (``losses_impl``): weighted losses composed of existing ops.

Theory of operation (TF1's ``compute_weighted_loss``): each loss computes an elementwise loss
in float32, multiplies it by ``weights`` (a scalar or a tensor broadcastable to the loss) and
reduces it by ``reduction``: ``NONE`` keeps the weighted elements, ``SUM`` sums them, ``MEAN``
divides the sum by the sum of the (broadcast) weights, ``SUM_OVER_BATCH_SIZE`` by the number of
elements and the default ``SUM_BY_NONZERO_WEIGHTS`` by the number of elements whose weight is
not zero; a zero denominator gives 0 (TF's ``div_no_nan``). The result is cast back to the
inputs' dtype and added to the ``loss_collection`` (default ``GraphKeys.LOSSES``), where
``get_losses``/``get_total_loss`` find it. No new op types: the gradients are those of the
ops used.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph.graph import GraphKeys, get_default_graph
from asyncflow.ops import math as math_ops
from asyncflow.ops import nn as nn_ops
from asyncflow.ops import sources
from asyncflow.ops.array import shape as shape_of
from asyncflow.ops.array import stop_gradient
from asyncflow.ops.construct import as_tensor, graph_of
from asyncflow.ops.layout import squeeze


class Reduction:
    """How a weighted loss is reduced (TF1's ``tf.losses.Reduction``)."""

    NONE = "none"
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    MEAN = "weighted_mean"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls):
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_OVER_BATCH_SIZE,
                cls.SUM_OVER_NONZERO_WEIGHTS, cls.SUM_BY_NONZERO_WEIGHTS)

    @classmethod
    def validate(cls, key):
        if key not in cls.all():
            raise ValueError(f"Invalid Reduction Key {key!r}: expected one of {cls.all()}")


def _float(op_name, value, what):
    if value is None:
        raise ValueError(f"{op_name}: {what} must not be None.")
    tensor = as_tensor(value)
    if not (tensor.dtype.is_floating or tensor.dtype.is_integer or tensor.dtype == dtypes.bool):
        raise TypeError(f"{op_name}: {what} must be numeric, got {tensor.dtype.name}")
    return tensor


def _check_shapes(op_name, labels, predictions, what="predictions"):
    if not labels.shape.is_compatible_with(predictions.shape):
        raise ValueError(f"{op_name}: {what} shape {predictions.shape} is incompatible with "
                         f"labels shape {labels.shape}")


def _safe_mean(total, count):
    """``total / count``, 0 where ``count`` is 0 (TF's ``div_no_nan``)."""
    positive = math_ops.greater(count, 0.0)
    safe = math_ops.where(positive, count, sources.ones_like(count))
    return math_ops.where(positive, math_ops.divide(total, safe), sources.zeros_like(total))


def _num_present(losses, weights):
    present = math_ops.where(math_ops.equal(weights, 0.0), sources.zeros_like(weights),
                             sources.ones_like(weights))
    return math_ops.reduce_sum(math_ops.multiply(present, sources.ones_like(losses)))


def compute_weighted_loss(losses, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """TF1's ``tf.losses.compute_weighted_loss``: weight ``losses`` and reduce them."""
    Reduction.validate(reduction)
    losses = as_tensor(losses)
    graph = graph_of([losses])
    with graph.name_scope(scope or "weighted_loss"):
        input_dtype = losses.dtype
        losses = math_ops.cast(losses, dtypes.float32)
        weights = math_ops.cast(as_tensor(weights), dtypes.float32)
        _check_broadcastable(weights, losses)
        weighted = math_ops.multiply(losses, weights)
        if reduction == Reduction.NONE:
            loss = weighted
        else:
            loss = math_ops.reduce_sum(weighted)
            if reduction == Reduction.MEAN:
                loss = _safe_mean(loss, math_ops.reduce_sum(
                    math_ops.multiply(sources.ones_like(losses), weights)))
            elif reduction == Reduction.SUM_BY_NONZERO_WEIGHTS:
                loss = _safe_mean(loss, _num_present(losses, weights))
            elif reduction == Reduction.SUM_OVER_BATCH_SIZE:
                loss = _safe_mean(loss, _num_elements(losses))
        loss = math_ops.cast(loss, input_dtype)
        add_loss(loss, loss_collection)
        return loss


def _check_broadcastable(weights, losses):
    """TF1's static ``assert_broadcastable``: weights are a scalar, or of the losses' rank
    with each dim 1 or the losses' (checked where the shapes are known when building)."""
    rank, target = weights.shape.ndims, losses.shape.ndims
    if rank is None or target is None or rank == 0:
        return
    if rank != target:
        raise ValueError(f"compute_weighted_loss: weights can not be broadcast to values: "
                         f"values.rank={target}, weights.rank={rank} (values.shape="
                         f"{losses.shape}, weights.shape={weights.shape})")
    if weights.shape.is_fully_defined() and losses.shape.is_fully_defined():
        for i, (w, v) in enumerate(zip(weights.shape.as_list(), losses.shape.as_list())):
            if w not in (1, v):
                raise ValueError(f"compute_weighted_loss: weights can not be broadcast to "
                                 f"values: mismatch at dim {i} (values.shape={losses.shape}, "
                                 f"weights.shape={weights.shape})")


def _num_elements(losses):
    return math_ops.reduce_sum(sources.ones_like(losses))


def absolute_difference(labels, predictions, weights=1.0, scope=None,
                        loss_collection=GraphKeys.LOSSES,
                        reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """TF1's ``tf.losses.absolute_difference``: weighted ``|predictions - labels|``."""
    labels = _float("absolute_difference", labels, "labels")
    predictions = _float("absolute_difference", predictions, "predictions")
    _check_shapes("absolute_difference", labels, predictions)
    with graph_of([labels, predictions]).name_scope(scope or "absolute_difference"):
        labels, predictions = (math_ops.cast(t, dtypes.float32) for t in (labels, predictions))
        losses = math_ops.abs(math_ops.subtract(predictions, labels))
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def mean_squared_error(labels, predictions, weights=1.0, scope=None,
                       loss_collection=GraphKeys.LOSSES,
                       reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """TF1's ``tf.losses.mean_squared_error``: weighted ``(predictions - labels)**2``."""
    labels = _float("mean_squared_error", labels, "labels")
    predictions = _float("mean_squared_error", predictions, "predictions")
    _check_shapes("mean_squared_error", labels, predictions)
    with graph_of([labels, predictions]).name_scope(scope or "mean_squared_error"):
        labels, predictions = (math_ops.cast(t, dtypes.float32) for t in (labels, predictions))
        losses = math_ops.squared_difference(predictions, labels)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def huber_loss(labels, predictions, weights=1.0, delta=1.0, scope=None,
               loss_collection=GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """TF1's ``tf.losses.huber_loss``: quadratic within ``delta`` of the label, linear beyond."""
    labels = _float("huber_loss", labels, "labels")
    predictions = _float("huber_loss", predictions, "predictions")
    _check_shapes("huber_loss", labels, predictions)
    with graph_of([labels, predictions]).name_scope(scope or "huber_loss"):
        labels, predictions = (math_ops.cast(t, dtypes.float32) for t in (labels, predictions))
        abs_error = math_ops.abs(math_ops.subtract(predictions, labels))
        quadratic = math_ops.minimum(abs_error, float(delta))
        linear = math_ops.subtract(abs_error, quadratic)
        losses = math_ops.add(math_ops.multiply(0.5, math_ops.multiply(quadratic, quadratic)),
                              math_ops.multiply(float(delta), linear))
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def log_loss(labels, predictions, weights=1.0, epsilon=1e-7, scope=None,
             loss_collection=GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """TF1's ``tf.losses.log_loss``: ``-y log(p + eps) - (1 - y) log(1 - p + eps)``."""
    labels = _float("log_loss", labels, "labels")
    predictions = _float("log_loss", predictions, "predictions")
    _check_shapes("log_loss", labels, predictions)
    with graph_of([labels, predictions]).name_scope(scope or "log_loss"):
        labels, predictions = (math_ops.cast(t, dtypes.float32) for t in (labels, predictions))
        eps = float(epsilon)
        losses = math_ops.subtract(
            math_ops.negative(math_ops.multiply(labels, math_ops.log(predictions + eps))),
            math_ops.multiply(1.0 - labels, math_ops.log(1.0 - predictions + eps)))
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def hinge_loss(labels, logits, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """TF1's ``tf.losses.hinge_loss``: labels in {0, 1} become ±1; ``relu(1 - y * logits)``."""
    labels = _float("hinge_loss", labels, "labels")
    logits = _float("hinge_loss", logits, "logits")
    _check_shapes("hinge_loss", labels, logits, "logits")
    with graph_of([labels, logits]).name_scope(scope or "hinge_loss"):
        logits = math_ops.cast(logits, dtypes.float32)
        labels = math_ops.cast(labels, dtypes.float32)
        signed = math_ops.subtract(math_ops.multiply(2.0, labels), 1.0)
        losses = nn_ops.relu(math_ops.subtract(1.0, math_ops.multiply(signed, logits)))
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """TF1's ``tf.losses.sigmoid_cross_entropy``; ``label_smoothing`` moves labels to 0.5."""
    labels = _float("sigmoid_cross_entropy", multi_class_labels, "multi_class_labels")
    logits = _float("sigmoid_cross_entropy", logits, "logits")
    _check_shapes("sigmoid_cross_entropy", labels, logits, "logits")
    with graph_of([labels, logits]).name_scope(scope or "sigmoid_cross_entropy_loss"):
        labels = math_ops.cast(labels, logits.dtype)
        if label_smoothing > 0:
            labels = math_ops.add(math_ops.multiply(labels, 1.0 - label_smoothing),
                                  0.5 * label_smoothing)
        losses = nn_ops.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """TF1's ``tf.losses.softmax_cross_entropy``: per-row loss, then weighted.

    ``label_smoothing`` replaces the one-hot labels by ``labels * (1 - ls) + ls / classes``.
    """
    labels = _float("softmax_cross_entropy", onehot_labels, "onehot_labels")
    logits = _float("softmax_cross_entropy", logits, "logits")
    _check_shapes("softmax_cross_entropy", labels, logits, "logits")
    with graph_of([labels, logits]).name_scope(scope or "softmax_cross_entropy_loss"):
        labels = math_ops.cast(labels, logits.dtype)
        if label_smoothing > 0:
            classes = math_ops.cast(shape_of(labels)[-1], logits.dtype)
            labels = math_ops.add(math_ops.multiply(labels, 1.0 - label_smoothing),
                                  math_ops.divide(float(label_smoothing), classes))
        losses = nn_ops.softmax_cross_entropy_with_logits_v2(labels=stop_gradient(labels),
                                                             logits=logits)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, scope=None,
                                 loss_collection=GraphKeys.LOSSES,
                                 reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """TF1's ``tf.losses.sparse_softmax_cross_entropy``: integer class labels.

    Labels (and weights) of shape ``[batch, 1]`` are squeezed to ``[batch]`` as in TF1.
    """
    labels = _float("sparse_softmax_cross_entropy", labels, "labels")
    logits = _float("sparse_softmax_cross_entropy", logits, "logits")
    if not labels.dtype.is_integer:
        raise TypeError(f"sparse_softmax_cross_entropy: labels must be integers, got "
                        f"{labels.dtype.name}")
    with graph_of([labels, logits]).name_scope(scope or "sparse_softmax_cross_entropy_loss"):
        rank, logits_rank = labels.shape.ndims, logits.shape.ndims
        if rank is not None and logits_rank is not None and rank == logits_rank:
            labels = squeeze(labels, [-1])
        weights = as_tensor(weights)
        if (weights.shape.ndims is not None and logits_rank is not None
                and weights.shape.ndims == logits_rank and weights.shape.ndims > 1):
            weights = squeeze(weights, [-1])
        losses = nn_ops.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def cosine_distance(labels, predictions, axis=None, weights=1.0, scope=None,
                    loss_collection=GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS,
                    dim=None):
    """TF1's ``tf.losses.cosine_distance``: ``1 - sum(labels * predictions, axis)`` (the axis
    kept) for unit-normalized inputs, weighted. ``dim`` is ``axis``'s old name."""
    if axis is not None and dim is not None:
        raise ValueError("cosine_distance: give axis or dim, not both")
    axis = dim if axis is None else axis
    if axis is None:
        raise ValueError("cosine_distance: you must specify argument `axis`.")
    labels = _float("cosine_distance", labels, "labels")
    predictions = _float("cosine_distance", predictions, "predictions")
    _check_shapes("cosine_distance", labels, predictions)
    with graph_of([labels, predictions]).name_scope(scope or "cosine_distance_loss"):
        labels, predictions = (math_ops.cast(t, dtypes.float32) for t in (labels, predictions))
        losses = math_ops.subtract(1.0, math_ops.reduce_sum(
            math_ops.multiply(predictions, labels), axis=[int(axis)], keepdims=True))
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def mean_pairwise_squared_error(labels, predictions, weights=1.0, scope=None,
                                loss_collection=GraphKeys.LOSSES):
    """TF1's ``tf.losses.mean_pairwise_squared_error``: per batch row, the mean over pairs of
    its elements of ``((p_i - p_j) - (l_i - l_j))**2`` (``2 * sum(d**2) / (n - 1) - 2 *
    sum(d)**2 / (n (n - 1))`` over the ``n`` elements of nonzero weight, 0 where n < 2),
    weighted and summed; float32, as TF1 (no ``reduction``).

    Raises:
        ValueError: for a rank unknown when building, or weights of another rank.
    """
    labels = _float("mean_pairwise_squared_error", labels, "labels")
    predictions = _float("mean_pairwise_squared_error", predictions, "predictions")
    _check_shapes("mean_pairwise_squared_error", labels, predictions)
    rank = predictions.shape.ndims if predictions.shape.ndims is not None else labels.shape.ndims
    if rank is None:
        raise ValueError("mean_pairwise_squared_error: the rank of predictions must be known")
    with graph_of([labels, predictions]).name_scope(scope or "mean_pairwise_squared_error"):
        weights = math_ops.cast(as_tensor(weights), dtypes.float32)
        if weights.shape.ndims not in (None, 0, rank):
            raise ValueError(f"mean_pairwise_squared_error: weights of shape {weights.shape} do "
                             f"not broadcast to labels of rank {rank}")
        diffs = math_ops.subtract(math_ops.cast(predictions, dtypes.float32),
                                  math_ops.cast(labels, dtypes.float32))
        axes = list(range(1, rank))
        squares = math_ops.reduce_sum(math_ops.square(diffs), axis=axes, keepdims=True)
        present = math_ops.where(math_ops.equal(weights, 0.0), sources.zeros_like(weights),
                                 sources.ones_like(weights))
        count = math_ops.reduce_sum(math_ops.multiply(present, sources.ones_like(diffs)),
                                    axis=axes, keepdims=True)
        term1 = math_ops.multiply(2.0, _safe_mean(squares, math_ops.maximum(count - 1.0, 0.0)))
        total = math_ops.reduce_sum(diffs, axis=axes, keepdims=True)
        term2 = math_ops.multiply(2.0, _safe_mean(math_ops.square(total), math_ops.maximum(
            math_ops.multiply(count, count - 1.0), 0.0)))
        loss = math_ops.reduce_sum(math_ops.multiply(math_ops.subtract(term1, term2), weights))
        loss = math_ops.where(math_ops.greater(math_ops.reduce_sum(count), 0.0), loss,
                              sources.zeros_like(loss))
        add_loss(loss, loss_collection)
        return loss


def add_loss(loss, loss_collection=GraphKeys.LOSSES):
    """Add ``loss`` to ``loss_collection`` (nothing when it is None or empty)."""
    if loss_collection:
        graph = graph_of([loss]) if hasattr(loss, "graph") else get_default_graph()
        graph.add_to_collection(loss_collection, loss)


def get_losses(scope=None, loss_collection=GraphKeys.LOSSES):
    """The losses in ``loss_collection`` whose names start with ``scope``."""
    return get_default_graph().get_collection(loss_collection, scope)


def get_regularization_losses(scope=None):
    """The ``GraphKeys.REGULARIZATION_LOSSES`` collection (variables' ``regularizer`` results)."""
    return get_default_graph().get_collection(GraphKeys.REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope=None, name="total_regularization_loss"):
    """The sum of the regularization losses, or a float32 0 when there are none."""
    losses = get_regularization_losses(scope)
    if losses:
        return math_ops.add_n(losses, name=name)
    return sources.constant(0.0, dtypes.float32)


def get_total_loss(add_regularization_losses=True, name="total_loss", scope=None):
    """The sum of ``get_losses(scope)`` (and the regularization losses).

    Raises:
        ValueError: when there are no losses to add.
    """
    losses = get_losses(scope)
    if add_regularization_losses:
        losses = losses + get_regularization_losses(scope)
    if not losses:
        raise ValueError("get_total_loss: no losses in the LOSSES (or regularization) "
                         "collections")
    return math_ops.add_n(losses, name=name)
