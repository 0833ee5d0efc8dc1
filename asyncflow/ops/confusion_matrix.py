"""TF1's ``tf.confusion_matrix`` (``tf.math.confusion_matrix``), written as TF1 writes it:
``scatter_nd`` of the weights (ones by default) at ``[label, prediction]``, in a scope
``name`` (``confusion_matrix``). It adds no op type.
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes
from asyncflow.ops import math as math_ops
from asyncflow.ops.construct import as_tensor, graph_of, static_value
from asyncflow.ops.layout import squeeze, stack
from asyncflow.ops.logging_ops import assert_less, assert_non_negative
from asyncflow.ops.control import control_dependencies
from asyncflow.ops.scatter_nd import scatter_nd
from asyncflow.ops.sources import ones_like


def confusion_matrix(labels, predictions, num_classes=None, dtype=dtypes.int32, name=None,
                     weights=None):
    """TF1's ``tf.confusion_matrix``: ``[num_classes, num_classes]``, row ``i`` column ``j``
    the (weighted) count of ``labels == i`` with ``predictions == j``. ``num_classes``
    defaults to one more than the largest label or prediction. Of labels and predictions
    whose known ranks differ by one, a last dim of 1 on the larger is squeezed (TF1's).

    Raises:
        ValueError: for labels and predictions (or weights) of different known shapes.
        InvalidArgumentError (when it runs): for a negative label or prediction, or one not
            below ``num_classes`` (TF1's asserts, naming them).
    """
    dtype = dtypes.as_dtype(dtype)
    with graph_of([labels, predictions, weights]).name_scope(name or "confusion_matrix"):
        labels, predictions = (as_tensor(labels, name="labels"),
                               as_tensor(predictions, name="predictions"))
        known = [static_value(t) for t in (labels, predictions)]  # (before the casts)
        labels, predictions = _squeeze_last(labels, predictions)
        labels = math_ops.cast(labels, dtypes.int64)
        predictions = math_ops.cast(predictions, dtypes.int64)
        if not labels.shape.is_compatible_with(predictions.shape):
            raise ValueError(f"confusion_matrix: labels {labels.shape} and predictions "
                             f"{predictions.shape} must have the same shape")
        checks = [assert_non_negative(labels, message="`labels` contains negative values"),
                  assert_non_negative(predictions,
                                      message="`predictions` contains negative values")]
        if num_classes is None:
            if all(v is not None for v in known):  # (TF1 folds the constants' maximum)
                num_classes = as_tensor(np.int64(max(int(np.max(v, initial=-1))
                                                     for v in known) + 1))
            else:
                num_classes = math_ops.add(math_ops.maximum(math_ops.reduce_max(predictions),
                                                            math_ops.reduce_max(labels)), 1)
        else:
            num_classes = as_tensor(num_classes)
            n = static_value(num_classes)
            num_classes = math_ops.cast(num_classes, dtypes.int64) if n is None else \
                as_tensor(np.int64(n))
            checks += [assert_less(labels, num_classes,
                                   message="`labels` out of bound"),
                       assert_less(predictions, num_classes,
                                   message="`predictions` out of bound")]
        if weights is not None:
            weights = math_ops.cast(as_tensor(weights), dtype)
            if not weights.shape.is_compatible_with(predictions.shape):
                raise ValueError(f"confusion_matrix: weights {weights.shape} and predictions "
                                 f"{predictions.shape} must have the same shape")
        with control_dependencies(checks):
            indices = stack([labels, predictions], axis=1)
            values = ones_like(predictions, dtype=dtype) if weights is None else weights
            n = static_value(num_classes)
            shape = stack([num_classes, num_classes]) if n is None else \
                np.array([int(n), int(n)], np.int64)
            matrix = scatter_nd(indices, values, shape)
            matrix.set_shape([None, None])
            return matrix


def _squeeze_last(labels, predictions):
    """TF1's ``remove_squeezable_dimensions`` for known ranks: of labels ``[n, 1]`` and
    predictions ``[n]`` (or the other way round), the last dim of the larger squeezed."""
    ranks = labels.shape.ndims, predictions.shape.ndims
    if None in ranks or abs(ranks[1] - ranks[0]) != 1:
        return labels, predictions
    if ranks[1] > ranks[0]:
        if predictions.shape.dims[-1] in (None, 1):
            predictions = squeeze(predictions, [-1])
    elif labels.shape.dims[-1] in (None, 1):
        labels = squeeze(labels, [-1])
    return labels, predictions
