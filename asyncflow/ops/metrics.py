"""TF1's ``tf.metrics`` (``metrics_impl``): streaming metrics over local variables.

Theory of operation: each metric keeps running sums in float32 variables created with
``trainable=False`` in the ``LOCAL_VARIABLES`` and ``METRIC_VARIABLES`` collections (so
``local_variables_initializer()`` resets them) and returns ``(value, update_op)``: running
``update_op`` adds one batch to the sums and gives the metric including that batch; ``value``
reads the sums without changing them. ``mean`` keeps a weighted total and a count;
``accuracy`` and ``mean_squared_error`` are means of per-element results; ``precision`` and
``recall`` count true/false positives/negatives of boolean-cast labels and predictions. A
ratio whose denominator is 0 is 0, as in TF1. No new op types: variables, assigns and math.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph.graph import GraphKeys
from asyncflow.ops import math as math_ops
from asyncflow.ops import sources
from asyncflow.ops.array import identity, size
from asyncflow.ops.construct import as_tensor, graph_of
from asyncflow.ops.control import control_dependencies
from asyncflow.ops.layout import squeeze
from asyncflow.ops.state import Variable, assign_add


def _metric_variable(name):
    return Variable(sources.zeros([], dtypes.float32), trainable=False, name=name,
                     collections=[GraphKeys.LOCAL_VARIABLES, GraphKeys.METRIC_VARIABLES])


def _div_no_nan(num, den):
    positive = math_ops.greater(den, 0.0)
    safe = math_ops.where(positive, den, sources.ones_like(den))
    return math_ops.where(positive, math_ops.divide(num, safe), sources.zeros_like(num))


def _collect(graph, collections, value):
    for key in collections or ():
        graph.add_to_collection(key, value)


def _checked(op_name, labels, predictions):
    if labels is None or predictions is None:
        raise ValueError(f"{op_name}: labels and predictions must not be None")
    labels, predictions = as_tensor(labels), as_tensor(predictions)
    # TF1 drops a trailing 1 where one operand has rank one more than the other.
    lr, pr = labels.shape.ndims, predictions.shape.ndims
    if lr is not None and pr is not None:
        if pr == lr + 1 and predictions.shape.as_list()[-1] == 1:
            predictions = squeeze(predictions, [-1])
        elif lr == pr + 1 and labels.shape.as_list()[-1] == 1:
            labels = squeeze(labels, [-1])
    if not labels.shape.is_compatible_with(predictions.shape):
        raise ValueError(f"{op_name}: predictions shape {predictions.shape} is incompatible "
                         f"with labels shape {labels.shape}")
    return labels, predictions


def _weights_for(op_name, weights, values):
    weights = math_ops.cast(as_tensor(weights), dtypes.float32)
    if weights.shape.ndims is not None and values.shape.ndims is not None:
        if weights.shape.ndims == values.shape.ndims + 1 and weights.shape.as_list()[-1] == 1:
            weights = squeeze(weights, [-1])
        if weights.shape.ndims > values.shape.ndims:
            raise ValueError(f"{op_name}: weights of shape {weights.shape} do not broadcast "
                             f"to values of shape {values.shape}")
    return math_ops.multiply(weights, sources.ones_like(values))


def mean(values, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """TF1's ``tf.metrics.mean``: the (weighted) mean of all values seen.

    Returns:
        ``(mean, update_op)``.
    """
    if values is None:
        raise ValueError("mean: values must not be None")
    values = as_tensor(values)
    if not (values.dtype.is_floating or values.dtype.is_integer or values.dtype == dtypes.bool):
        raise TypeError(f"mean: values must be numeric, got {values.dtype.name}")
    graph = graph_of([values])
    with graph.name_scope(name or "mean"):
        values = math_ops.cast(values, dtypes.float32)
        total = _metric_variable("total")
        count = _metric_variable("count")
        if weights is None:
            num_values = math_ops.cast(size(values), dtypes.float32)
        else:
            weights = _weights_for("mean", weights, values)
            values = math_ops.multiply(values, weights)
            num_values = math_ops.reduce_sum(weights)
        update_total = assign_add(total, math_ops.reduce_sum(values))
        with control_dependencies([values]):
            update_count = assign_add(count, num_values)
        value = _div_no_nan(identity(total), math_ops.maximum(identity(count), 0.0))
        update_op = _div_no_nan(update_total, math_ops.maximum(update_count, 0.0))
        _collect(graph, metrics_collections, value)
        _collect(graph, updates_collections, update_op)
        return value, update_op


def accuracy(labels, predictions, weights=None, metrics_collections=None,
             updates_collections=None, name=None):
    """TF1's ``tf.metrics.accuracy``: how often ``predictions`` equals ``labels``."""
    labels, predictions = _checked("accuracy", labels, predictions)
    if labels.dtype != predictions.dtype:
        predictions = math_ops.cast(predictions, labels.dtype)
    correct = math_ops.cast(math_ops.equal(predictions, labels), dtypes.float32)
    return mean(correct, weights, metrics_collections, updates_collections, name or "accuracy")


def mean_squared_error(labels, predictions, weights=None, metrics_collections=None,
                       updates_collections=None, name=None):
    """TF1's ``tf.metrics.mean_squared_error``: the streaming mean of ``(labels - pred)**2``."""
    labels, predictions = _checked("mean_squared_error", labels, predictions)
    if not predictions.dtype.is_floating and not predictions.dtype.is_integer:
        raise TypeError(f"mean_squared_error: predictions must be numeric, got "
                        f"{predictions.dtype.name}")
    labels = math_ops.cast(labels, dtypes.float32)
    predictions = math_ops.cast(predictions, dtypes.float32)
    return mean(math_ops.squared_difference(labels, predictions), weights, metrics_collections,
                updates_collections, name or "mean_squared_error")


def _count(graph, name, condition, weights):
    with graph.name_scope(name):
        count = _metric_variable("count")
        values = math_ops.cast(condition, dtypes.float32)
        if weights is not None:
            values = math_ops.multiply(values, _weights_for(name, weights, values))
        return identity(count), assign_add(count, math_ops.reduce_sum(values))


def _bools(op_name, labels, predictions):
    labels, predictions = _checked(op_name, labels, predictions)
    for what, tensor in (("labels", labels), ("predictions", predictions)):
        if not (tensor.dtype.is_floating or tensor.dtype.is_integer or tensor.dtype == dtypes.bool):
            raise TypeError(f"{op_name}: {what} must be bool or numeric, got {tensor.dtype.name}")
    as_bool = [t if t.dtype == dtypes.bool else math_ops.not_equal(t, math_ops.cast(0, t.dtype))
               for t in (labels, predictions)]
    return as_bool[0], as_bool[1]


def _ratio_metric(op_name, labels, predictions, weights, metrics_collections,
                  updates_collections, name, other):
    labels, predictions = _bools(op_name, labels, predictions)
    graph = graph_of([labels, predictions])
    with graph.name_scope(name or op_name):
        tp, tp_update = _count(graph, "true_positives",
                               math_ops.logical_and(labels, predictions), weights)
        if other == "fp":
            cond = math_ops.logical_and(math_ops.logical_not(labels), predictions)
            other_name = "false_positives"
        else:
            cond = math_ops.logical_and(labels, math_ops.logical_not(predictions))
            other_name = "false_negatives"
        wrong, wrong_update = _count(graph, other_name, cond, weights)
        value = _div_no_nan(tp, math_ops.add(tp, wrong))
        update_op = _div_no_nan(tp_update, math_ops.add(tp_update, wrong_update))
        _collect(graph, metrics_collections, value)
        _collect(graph, updates_collections, update_op)
        return value, update_op


def precision(labels, predictions, weights=None, metrics_collections=None,
              updates_collections=None, name=None):
    """TF1's ``tf.metrics.precision``: true positives / (true + false positives).

    Labels and predictions are read as booleans (nonzero is True).
    """
    return _ratio_metric("precision", labels, predictions, weights, metrics_collections,
                         updates_collections, name, "fp")


def recall(labels, predictions, weights=None, metrics_collections=None,
           updates_collections=None, name=None):
    """TF1's ``tf.metrics.recall``: true positives / (true positives + false negatives)."""
    return _ratio_metric("recall", labels, predictions, weights, metrics_collections,
                         updates_collections, name, "fn")
