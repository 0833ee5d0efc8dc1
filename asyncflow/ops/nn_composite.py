"""``tf.nn`` functions composed of existing ops, with no op type of their own: ``crelu``,
``weighted_cross_entropy_with_logits``, ``xw_plus_b`` and ``relu_layer`` (TF1's ``nn_ops``/``nn_impl`` definitions, op for op,
so values and gradients follow TF1's). Their gradients are those of the ops used.
"""
from __future__ import annotations

from asyncflow.ops import math as _math
from asyncflow.ops.bias_add import bias_add
from asyncflow.ops.construct import as_tensor, graph_of
from asyncflow.ops.layout import concat
from asyncflow.ops.activations import relu


def crelu(features, name=None, axis=-1):
    """Concatenated ReLU: ``relu(concat([x, -x], axis))``, twice as many channels on ``axis``."""
    graph = graph_of([features])
    with graph.name_scope(name or "CRelu") as scope:
        features = as_tensor(features)
        return relu(concat([features, _math.negative(features)], axis), name=scope)


def weighted_cross_entropy_with_logits(labels=None, logits=None, pos_weight=None, name=None,
                                       targets=None):
    """``sigmoid_cross_entropy_with_logits`` with the positive term weighted by ``pos_weight``:
    ``(1 - z) x + (1 + (q - 1) z) (log1p(exp(-|x|)) + relu(-x))``, as TF1 computes it.
    ``targets`` is ``labels``' old name.

    Raises:
        ValueError: without labels, logits or pos_weight, or with different shapes.
    """
    if labels is not None and targets is not None:
        raise ValueError("weighted_cross_entropy_with_logits: give labels or targets, not both")
    labels = targets if labels is None else labels
    if labels is None or logits is None or pos_weight is None:
        raise ValueError("weighted_cross_entropy_with_logits needs labels, logits and "
                         "pos_weight")
    graph = graph_of([logits, labels])
    with graph.name_scope(name or "logistic_loss") as scope:
        logits = as_tensor(logits)
        labels = as_tensor(labels, dtype=logits.dtype)
        if not logits.shape.is_compatible_with(labels.shape):
            raise ValueError(f"weighted_cross_entropy_with_logits: logits and labels must have "
                             f"the same shape ({logits.shape} vs {labels.shape})")
        pos_weight = as_tensor(pos_weight, dtype=logits.dtype)
        log_weight = _math.add(1.0, _math.multiply(_math.subtract(pos_weight, 1.0), labels))
        tail = _math.add(_math.log1p(_math.exp(_math.negative(_math.abs(logits)))),
                         relu(_math.negative(logits)))
        return _math.add(_math.multiply(_math.subtract(1.0, labels), logits),
                         _math.multiply(log_weight, tail), name=scope)


def xw_plus_b(x, weights, biases, name=None):
    """TF1's ``tf.nn.xw_plus_b``: ``bias_add(matmul(x, weights), biases)`` (a 2-D ``x``)."""
    graph = graph_of([x, weights, biases])
    with graph.name_scope(name or "xw_plus_b") as scope:
        return bias_add(_math.matmul(as_tensor(x), as_tensor(weights)), biases, name=scope)


def relu_layer(x, weights, biases, name=None):
    """TF1's ``tf.nn.relu_layer``: ``relu(matmul(x, weights) + biases)``."""
    graph = graph_of([x, weights, biases])
    with graph.name_scope(name or "relu_layer") as scope:
        return relu(bias_add(_math.matmul(as_tensor(x), as_tensor(weights)), biases),
                    name=scope)
