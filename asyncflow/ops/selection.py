"""Selecting the largest entries: ``top_k`` and ``in_top_k`` (TF1's ``tf.nn.top_k``,
``tf.nn.in_top_k``).

``TopKV2`` outputs the ``k`` largest values along the last axis (sorted, largest first; equal
values keep their order) and their indices; its gradient sends each value's gradient back to
the index it came from. ``InTopKV2`` says whether each target's prediction is among the top
``k`` of its row (ties at the k-th value count as in, as in TF); it is not differentiable.
"""
from __future__ import annotations

import collections

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import math as _math
from asyncflow.ops.construct import INTEGER, NUMERIC, as_tensor, check_dtype, make_op
from asyncflow.ops.tiling import one_hot


def _infer_top_k(op):
    x = op.inputs[0]
    check_dtype(op.type, x, NUMERIC)
    k = op.get_attr("k")
    if x.shape.ndims is None:
        return [(x.dtype, TensorShape(None)), (dtypes.int32, TensorShape(None))]
    if x.shape.ndims == 0:
        raise ValueError("input must have at least 1 dimension")
    last = x.shape.dims[-1]
    if last is not None and last < k:
        raise ValueError(f"input must have at least k={k} columns, has {last}")
    dims = list(x.shape.dims[:-1]) + [k]
    return [(x.dtype, TensorShape(dims)), (dtypes.int32, TensorShape(dims))]


register_op("TopKV2", infer=_infer_top_k)

# TF1's result type: a tuple, also read as ``.values`` and ``.indices``.
TopKV2 = collections.namedtuple("TopKV2", ["values", "indices"])


def top_k(input, k=1, sorted=True, name=None):  # noqa: A002 - TF1's argument names
    """The ``k`` largest entries of the last axis and their indices: ``(values, indices)``.

    Raises:
        ValueError: if ``k`` is negative or larger than the last dimension.
    """
    k = int(k)
    if k < 0:
        raise ValueError(f"top_k: k must be >= 0, got {k}")
    op = make_op("TopKV2", (as_tensor(input),), {"k": k, "sorted": bool(sorted)}, name,
                 "TopKV2")
    return TopKV2(op.outputs[0], op.outputs[1])


@register_gradient("TopKV2")
def _top_k_grad(op, grad_values, grad_indices=None):
    x = op.inputs[0]
    depth = x.shape.dims[-1] if x.shape.ndims is not None else None
    if depth is None:
        raise ValueError(f"TopKV2 '{op.name}': the gradient needs a known last dimension")
    # grad[..., j] goes to position indices[..., j]: one_hot spreads it, the sum over j folds.
    spread = one_hot(op.outputs[1], depth, dtype=x.dtype)
    expanded = _math.multiply(spread, _expand_last(grad_values))
    return [_math.reduce_sum(expanded, axis=-2)]


def _expand_last(tensor):
    from asyncflow.ops.layout import expand_dims
    return expand_dims(tensor, -1)


def _infer_in_top_k(op):
    """TF1's InTopKV2: float32 predictions ``[batch, classes]``, integer targets ``[batch]``;
    the result is ``[batch]``, its size from either input."""
    predictions, targets = op.inputs
    if predictions.dtype is not dtypes.float32:
        raise TypeError(f"InTopKV2 '{op.name}': predictions must be float32 (TF1's kernel), "
                        f"got {predictions.dtype.name}")
    check_dtype(op.type, targets, INTEGER, "targets")
    if predictions.shape.ndims not in (None, 2):
        raise ValueError(f"predictions must be 2-D, got shape {predictions.shape}")
    if targets.shape.ndims not in (None, 1):
        raise ValueError(f"InTopKV2 '{op.name}': targets must be 1-D, got shape {targets.shape}")
    batch = TensorShape([predictions.shape.dims[0]] if predictions.shape.ndims else [None])
    if targets.shape.ndims is not None:
        if not batch.is_compatible_with(targets.shape):
            raise ValueError(f"InTopKV2 '{op.name}': predictions {predictions.shape} and "
                             f"targets {targets.shape} disagree on the batch size")
        batch = batch.merge_with(targets.shape)
    return [(dtypes.bool, batch)]


register_op("InTopKV2", infer=_infer_in_top_k)
not_differentiable("InTopKV2")


def in_top_k(predictions, targets, k, name=None):
    """Whether ``predictions[i, targets[i]]`` is among the ``k`` largest of row ``i``."""
    return make_op("InTopKV2", (as_tensor(predictions), as_tensor(targets)), {"k": int(k)},
                   name, "InTopKV2").outputs[0]
