"""Edit distance: TF1's ``tf.edit_distance``, the Levenshtein distance between the sequences
of two SparseTensors, grouped by all but their last index.

Theory of operation: one ``EditDistance`` op of TF1's six inputs (each SparseTensor's indices,
values and dense shape) and its ``normalize`` attribute. The output is float32 of shape
``max(hypothesis_shape, truth_shape)[:-1]``: an entry with sequences on either side holds
their distance (divided by the truth's length under ``normalize``: ``inf`` where the truth is
empty), an entry with none is 0, as TF1's. Not differentiable. The kernel
(``kernels/edit_distance.py``) runs on the host, as TF1's (values may be strings), and groups
entries by index whatever their order (TF1's kernel walks them in the order given, so an
input out of row-major order gives it other groups).
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import register_op
from asyncflow.graph.registry import not_differentiable
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import make, static_value
from asyncflow.ops.sparse_ops import SparseTensor, SparseTensorValue


def _infer_edit_distance(op):
    h_indices, h_values, h_shape, t_indices, t_values, t_shape = op.inputs
    if t_values.dtype != h_values.dtype:
        raise TypeError(f"Input 'truth_values' has type {t_values.dtype.name} that does not "
                        f"match type {h_values.dtype.name} of argument 'hypothesis_values'")
    ranks = [s.shape.dims[0] if s.shape.ndims == 1 else None for s in (h_shape, t_shape)]
    if None not in ranks and ranks[0] != ranks[1]:
        raise ValueError(f"Num elements of hypothesis_shape does not match truth_shape: "
                         f"{ranks[0]} vs. {ranks[1]}")
    known = [static_value(s) for s in (h_shape, t_shape)]
    if any(value is None for value in known):
        return [(dtypes.float32, TensorShape(None))]
    dims = np.maximum(np.reshape(known[0], -1), np.reshape(known[1], -1))
    return [(dtypes.float32, TensorShape([int(d) for d in dims[:-1]]))]


register_op("EditDistance", infer=_infer_edit_distance)
not_differentiable("EditDistance")


def _sparse(value, what):
    if isinstance(value, SparseTensorValue):
        return SparseTensor(*value)
    if not isinstance(value, SparseTensor):
        raise TypeError(f"{what} must be a SparseTensor, got {type(value).__name__}")
    return value


def edit_distance(hypothesis, truth, normalize=True, name="edit_distance"):
    """TF1's ``tf.edit_distance``: the Levenshtein distance between the sequences of the
    SparseTensors ``hypothesis`` and ``truth`` (their last dimension), float32 of shape
    ``max(shapes)[:-1]``; with ``normalize`` divided by the truth's length.

    Raises:
        TypeError: for an argument that is not a SparseTensor (or SparseTensorValue), or
            values of two dtypes.
        ValueError: for dense shapes of known, different ranks (fed ones fail the run
            naming the op).
    """
    hypothesis, truth = _sparse(hypothesis, "Hypothesis"), _sparse(truth, "Truth")
    inputs = (hypothesis.indices, hypothesis.values, hypothesis.dense_shape,
              truth.indices, truth.values, truth.dense_shape)
    return make("EditDistance", inputs, {"normalize": bool(normalize)}, name, "edit_distance")
