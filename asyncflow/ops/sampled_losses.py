"""Sampled losses: ``nce_loss`` and ``sampled_softmax_loss`` (TF1's ``nn_impl``), composed.

Theory of operation (TF1's ``_compute_sampled_logits``): sample ``num_sampled`` classes
(default: ``log_uniform_candidate_sampler`` with ``unique=True``), look up the rows of the
true and sampled classes in the output weights and biases with one ``embedding_lookup`` (so
their gradient is an IndexedSlices of ``batch * num_true + num_sampled`` rows, applied
sparsely where the weights live), compute true logits ``[batch, num_true]`` and sampled logits
``[batch, num_sampled]``, optionally give accidental hits a logit of ``-FLT_MAX``, and subtract
``log(expected_count)`` of each class. ``nce_loss`` is the sigmoid cross entropy of those
logits against labels ``1 / num_true`` (true) and 0 (sampled), summed per row;
``sampled_softmax_loss`` is their softmax cross entropy.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.ops import math as math_ops
from asyncflow.ops import nn as nn_ops
from asyncflow.ops import sources
from asyncflow.ops.array import reshape, stop_gradient
from asyncflow.ops.candidate_sampling import (
    compute_accidental_hits, log_uniform_candidate_sampler,
)
from asyncflow.ops.construct import as_tensor
from asyncflow.ops.embedding import embedding_lookup
from asyncflow.ops.layout import concat, expand_dims
from asyncflow.ops.shapes import dims_of
from asyncflow.ops.sparse_ops import sparse_to_dense


def _weights_list(weights):
    if hasattr(weights, "_get_variable_list"):
        return weights._get_variable_list()
    return list(weights) if isinstance(weights, (list, tuple)) else [weights]


def _compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes,
                            num_true, sampled_values, subtract_log_q, remove_accidental_hits,
                            partition_strategy, seed, name):
    inputs = as_tensor(inputs)
    graph = inputs.graph
    with graph.name_scope(name):
        labels = math_ops.cast(as_tensor(labels), dtypes.int64)
        labels_flat = reshape(labels, [-1])
        if sampled_values is None:
            sampled_values = log_uniform_candidate_sampler(
                labels, num_true, num_sampled, True, num_classes, seed=seed)
        sampled, true_expected, sampled_expected = (stop_gradient(as_tensor(s))
                                                    for s in sampled_values)
        sampled = math_ops.cast(sampled, dtypes.int64)
        all_ids = concat([labels_flat, sampled], 0)
        all_w = embedding_lookup(_weights_list(weights), all_ids,
                                 partition_strategy=partition_strategy)
        all_w = math_ops.cast(all_w, inputs.dtype)
        true_count = dims_of(labels_flat)[0]
        true_w, sampled_w = all_w[:true_count], all_w[true_count:]
        sampled_logits = math_ops.matmul(inputs, sampled_w, transpose_b=True)
        all_b = math_ops.cast(embedding_lookup(_weights_list(biases), all_ids,
                                               partition_strategy=partition_strategy),
                              inputs.dtype)
        true_b, sampled_b = all_b[:true_count], all_b[true_count:]
        dim = dims_of(true_w)[1]
        dots = math_ops.multiply(expand_dims(inputs, 1), reshape(true_w, [-1, num_true, dim]))
        true_logits = math_ops.reduce_sum(dots, axis=2) + reshape(true_b, [-1, num_true])
        sampled_logits = sampled_logits + sampled_b
        if remove_accidental_hits:
            rows, positions, hit_weights = compute_accidental_hits(labels, sampled, num_true)
            indices = concat([reshape(math_ops.cast(rows, dtypes.int64), [-1, 1]),
                              reshape(positions, [-1, 1])], 1)
            shape = math_ops.cast(sources.constant([0, num_sampled]), dtypes.int64) + \
                math_ops.cast(concat([reshape(dims_of(labels)[0], [1]),
                                      sources.constant([0])], 0), dtypes.int64)
            sampled_logits = sampled_logits + sparse_to_dense(
                indices, shape, math_ops.cast(hit_weights, sampled_logits.dtype),
                default_value=0.0, validate_indices=False)
        if subtract_log_q:
            true_logits = true_logits - math_ops.log(math_ops.cast(true_expected, inputs.dtype))
            sampled_logits = sampled_logits - math_ops.log(
                math_ops.cast(sampled_expected, inputs.dtype))
        logits = concat([true_logits, sampled_logits], 1)
        targets = concat([sources.ones_like(true_logits) / float(num_true),
                          sources.zeros_like(sampled_logits)], 1)
        return logits, targets


def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1,
             sampled_values=None, remove_accidental_hits=False, partition_strategy="mod",
             name="nce_loss"):
    """Noise-contrastive estimation loss per example, TF1's ``tf.nn.nce_loss``.

    Args:
        weights: ``[num_classes, dim]`` tensor or variable, a list of shards, or a
            PartitionedVariable.
        biases: ``[num_classes]``, sharded the same way.
        labels: int ``[batch, num_true]`` target classes.
        inputs: ``[batch, dim]`` activations.
        num_sampled: negative classes sampled per batch.
        num_classes: the number of classes.
        num_true: target classes per example.
        sampled_values: a sampler's ``(sampled, true_expected, sampled_expected)``; default
            ``log_uniform_candidate_sampler(unique=True)``.
        remove_accidental_hits: drop sampled classes equal to a target.
        partition_strategy: ``"mod"`` or ``"div"`` for sharded weights.
        name: the name scope.

    Returns:
        A ``[batch]`` tensor of losses.
    """
    logits, targets = _compute_sampled_logits(
        weights, biases, labels, inputs, num_sampled, num_classes, num_true, sampled_values,
        True, remove_accidental_hits, partition_strategy, None, name)
    losses = nn_ops.sigmoid_cross_entropy_with_logits(labels=targets, logits=logits,
                                                      name="sampled_losses")
    return math_ops.reduce_sum(losses, axis=1)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes,
                         num_true=1, sampled_values=None, remove_accidental_hits=True,
                         partition_strategy="mod", name="sampled_softmax_loss", seed=None):
    """Sampled softmax loss per example, TF1's ``tf.nn.sampled_softmax_loss``.

    Arguments as for ``nce_loss``; accidental hits are removed by default and ``seed`` seeds
    the default sampler.

    Returns:
        A ``[batch]`` tensor of losses.
    """
    logits, targets = _compute_sampled_logits(
        weights, biases, labels, inputs, num_sampled, num_classes, num_true, sampled_values,
        True, remove_accidental_hits, partition_strategy, seed, name)
    return nn_ops.softmax_cross_entropy_with_logits(labels=stop_gradient(targets),
                                                    logits=logits)
