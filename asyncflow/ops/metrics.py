"""TF1's ``tf.metrics`` (``metrics_impl``): streaming metrics over local variables.

Theory of operation: each metric keeps running sums in float32 variables created with
``trainable=False`` in the ``LOCAL_VARIABLES`` and ``METRIC_VARIABLES`` collections (so
``local_variables_initializer()`` resets them) and returns ``(value, update_op)``: running
``update_op`` adds one batch to the sums and gives the metric including that batch; ``value``
reads the sums without changing them. ``mean`` keeps a weighted total and a count;
``accuracy`` and ``mean_squared_error`` are means of per-element results; ``precision`` and
``recall`` count true/false positives/negatives of boolean-cast labels and predictions;
``auc`` counts all four at each of ``num_thresholds`` thresholds and sums the area under the
ROC or PR curve through them. A ratio whose denominator is 0 is 0, as in TF1. No new op
types: variables, assigns and math.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph.graph import GraphKeys
from asyncflow.ops import math as math_ops
from asyncflow.ops import sources
from asyncflow.ops.array import identity, reshape, size
from asyncflow.ops.construct import as_tensor, graph_of
from asyncflow.ops.control import control_dependencies
from asyncflow.ops.layout import squeeze
from asyncflow.ops.logging_ops import assert_less_equal
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


_AUC_SUMS = ("trapezoidal", "careful_interpolation", "minoring", "majoring")


def auc(labels, predictions, weights=None, num_thresholds=200, metrics_collections=None,
        updates_collections=None, curve="ROC", name=None, summation_method="trapezoidal",
        thresholds=None):
    """TF1's ``tf.metrics.auc``: the area under the ROC (or PR) curve, streamed.

    ``num_thresholds`` thresholds ``-eps, 1/(n-1), ..., (n-2)/(n-1), 1 + eps`` (or the given
    ``thresholds``, with ``-eps`` and ``1 + eps`` added) count true/false positives and
    negatives in four ``[num_thresholds]`` local variables; the area is a Riemann sum over
    them (``trapezoidal``; ``minoring``/``majoring`` take the lower/upper point). Predictions
    must lie in [0, 1] (checked when the update runs, as TF1's assertions do).

    Raises:
        ValueError: an unknown curve or summation method, fewer than 2 thresholds, or
            ``careful_interpolation`` on a PR curve (not implemented here).
    """
    if curve not in ("ROC", "PR"):
        raise ValueError(f"auc: curve must be 'ROC' or 'PR', got {curve!r}")
    if summation_method not in _AUC_SUMS:
        raise ValueError(f"auc: summation_method must be one of {_AUC_SUMS}, got "
                         f"{summation_method!r}")
    if curve == "PR" and summation_method == "careful_interpolation":
        raise ValueError("auc: careful_interpolation of a PR curve is not supported; use "
                         "summation_method='trapezoidal', 'minoring' or 'majoring'")
    eps = 1e-7
    if thresholds is not None:
        cuts = [0.0 - eps] + [float(t) for t in thresholds] + [1.0 + eps]
    else:
        if int(num_thresholds) < 2:
            raise ValueError(f"auc: num_thresholds must be > 1, got {num_thresholds}")
        count = int(num_thresholds)
        cuts = [0.0 - eps] + [(i + 1) * 1.0 / (count - 1) for i in range(count - 2)] + [1.0 + eps]
    labels, predictions = _bools_and_scores(labels, predictions)
    graph = graph_of([labels, predictions])
    with graph.name_scope(name or "auc"):
        checks = [assert_less_equal(math_ops.cast(0.0, dtypes.float32), predictions,
                                    message="auc: predictions must be in [0, 1]"),
                  assert_less_equal(predictions, math_ops.cast(1.0, dtypes.float32),
                                    message="auc: predictions must be in [0, 1]")]
        with control_dependencies(checks):
            scores = reshape(predictions, [1, -1])
        truth = reshape(labels, [1, -1])
        above = math_ops.greater(scores, sources.constant([[c] for c in cuts], dtypes.float32))
        below = math_ops.logical_not(above)
        falsy = math_ops.logical_not(truth)
        row_weights = None
        if weights is not None:
            row_weights = reshape(_weights_for("auc", weights, predictions), [1, -1])
        sums, updates = [], []
        for key, cond in (("true_positives", math_ops.logical_and(truth, above)),
                          ("false_negatives", math_ops.logical_and(truth, below)),
                          ("true_negatives", math_ops.logical_and(falsy, below)),
                          ("false_positives", math_ops.logical_and(falsy, above))):
            variable = Variable(sources.zeros([len(cuts)], dtypes.float32), trainable=False,
                                name=key,
                                collections=[GraphKeys.LOCAL_VARIABLES,
                                             GraphKeys.METRIC_VARIABLES])
            hits = math_ops.cast(cond, dtypes.float32)
            if row_weights is not None:
                hits = math_ops.multiply(hits, row_weights)
            sums.append(identity(variable))
            updates.append(assign_add(variable, math_ops.reduce_sum(hits, axis=1)))
        value = _auc_area(*sums, curve, summation_method, len(cuts), "value")
        update_op = _auc_area(*updates, curve, summation_method, len(cuts), "update_op")
        _collect(graph, metrics_collections, value)
        _collect(graph, updates_collections, update_op)
        return value, update_op


def _bools_and_scores(labels, predictions):
    labels, predictions = _checked("auc", labels, predictions)
    if not (predictions.dtype.is_floating or predictions.dtype.is_integer):
        raise TypeError(f"auc: predictions must be numeric, got {predictions.dtype.name}")
    if labels.dtype != dtypes.bool:
        if not (labels.dtype.is_floating or labels.dtype.is_integer):
            raise TypeError(f"auc: labels must be bool or numeric, got {labels.dtype.name}")
        labels = math_ops.not_equal(labels, math_ops.cast(0, labels.dtype))
    return labels, math_ops.cast(predictions, dtypes.float32)


def _auc_area(tp, fn, tn, fp, curve, method, count, name):
    eps = 1.0e-6
    recall = math_ops.divide(math_ops.add(tp, eps), math_ops.add(math_ops.add(tp, fn), eps))
    if curve == "ROC":
        x = math_ops.divide(fp, math_ops.add(math_ops.add(fp, tn), eps))
        y = recall
    else:
        x = recall
        y = math_ops.divide(math_ops.add(tp, eps), math_ops.add(math_ops.add(tp, fp), eps))
    width = math_ops.subtract(x[:count - 1], x[1:])
    if method in ("trapezoidal", "careful_interpolation"):
        height = math_ops.divide(math_ops.add(y[:count - 1], y[1:]), 2.0)
    elif method == "minoring":
        height = math_ops.minimum(y[:count - 1], y[1:])
    else:
        height = math_ops.maximum(y[:count - 1], y[1:])
    return math_ops.reduce_sum(math_ops.multiply(width, height), name=name)
