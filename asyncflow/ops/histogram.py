"""Histograms of fixed-width bins: TF1's ``tf.histogram_fixed_width`` (one
``HistogramFixedWidth`` op: the count of values in each of ``nbins`` equal bins of
``value_range``) and ``tf.histogram_fixed_width_bins`` (each value's bin index: TF1's
composite of elementwise ops, kept op for op).

Theory of operation: values below ``value_range[0]`` count in the first bin, values at or
above ``value_range[1]`` in the last (TF1's clamps). ``nbins`` is an int32 tensor as TF1's:
a constant one gives the static shape ``[nbins]`` and is checked now. The kernel
(``kernels/histogram.py``) maps each value to its bin in TF1's arithmetic (the offset from
``value_range[0]`` in the values' dtype, divided in float64 by the bin width) and counts
with ``bincount`` through ``ctx.xp``. Not differentiable, as TF1's.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import register_op
from asyncflow.graph.registry import not_differentiable
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import math as math_ops
from asyncflow.ops.array import reshape, shape
from asyncflow.ops.construct import as_tensor, check_dtype, graph_of, make, static_value
from asyncflow.ops.numerics import clip_by_value

# TF1's HistogramFixedWidth op: int32, int64, float32 and float64 (its composite
# histogram_fixed_width_bins also takes the half types)
_OP_VALUES = (dtypes.int32, dtypes.int64, dtypes.float32, dtypes.float64)
_VALUES = _OP_VALUES + (dtypes.float16, dtypes.bfloat16)


def _infer_histogram(op):
    values, value_range, nbins = op.inputs
    if value_range.dtype != values.dtype:
        raise TypeError(f"value_range has dtype {value_range.dtype.name}, values "
                        f"{values.dtype.name}")
    if value_range.shape.ndims not in (None, 1) or \
            value_range.shape.ndims == 1 and value_range.shape.dims[0] not in (None, 2):
        raise ValueError(f"value_range must have shape [2], got {value_range.shape}")
    if nbins.shape.ndims not in (None, 0):
        raise ValueError(f"nbins must be a scalar, got shape {nbins.shape}")
    count = static_value(nbins)
    if count is not None and int(count) <= 0:
        raise ValueError(f"Requires nbins > 0: {int(count)}")
    return [(op.get_attr("dtype"), TensorShape([None if count is None else int(count)]))]


register_op("HistogramFixedWidth", infer=_infer_histogram)
not_differentiable("HistogramFixedWidth")


def _operands(values, value_range, nbins, what, range_as_values):
    """The three as tensors: a Python ``value_range`` takes ``values``' dtype where
    ``range_as_values`` (the op's conversion), else its own (TF1's composite converts it
    alone, so a list beside float64 values is float32 and its subtraction refuses it)."""
    values = as_tensor(values, name="values")
    allowed = _VALUES if what == "histogram_fixed_width_bins" else _OP_VALUES
    check_dtype(what, values, lambda d: d in allowed, "values")
    python = isinstance(value_range, (list, tuple))
    value_range = as_tensor(value_range, name="value_range",
                            dtype=values.dtype if python and range_as_values else None)
    nbins = as_tensor(nbins, dtype=dtypes.int32, name="nbins")
    return values, value_range, nbins


def histogram_fixed_width(values, value_range, nbins=100, dtype=dtypes.int32, name=None):
    """TF1's ``tf.histogram_fixed_width``: the count of ``values`` in each of ``nbins``
    equal-width bins over ``value_range`` (``[lo, hi]``), values below ``lo`` counted in the
    first bin and those at or above ``hi`` in the last; a ``dtype`` (int32 or int64) vector
    of ``nbins`` counts, in a scope ``name`` (``histogram_fixed_width``).

    Raises:
        TypeError: for a dtype other than int32/int64, values not int32/int64/float32/64, or a
            value_range of another dtype.
        ValueError: for a known nbins under 1 or a value_range not of shape [2]. A NaN
            value, a range with ``lo >= hi`` or a fed nbins under 1 fails the run naming
            the op.
    """
    dtype = dtypes.as_dtype(dtype)
    if dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"histogram_fixed_width: dtype must be int32 or int64, got "
                        f"{dtype.name}")
    with graph_of([values, value_range, nbins]).name_scope(
            name or "histogram_fixed_width") as scope:
        values, value_range, nbins = _operands(values, value_range, nbins,
                                               "HistogramFixedWidth", True)
        return make("HistogramFixedWidth", (values, value_range, nbins), {"dtype": dtype},
                    scope, "HistogramFixedWidth")


def histogram_fixed_width_bins(values, value_range, nbins=100, dtype=dtypes.int32, name=None):
    """TF1's ``tf.histogram_fixed_width_bins``: the bin index (int32, whatever ``dtype``, as
    TF1's) of each of ``values`` in ``nbins`` equal-width bins over ``value_range``, values
    outside it clamped to the first or last bin; of ``values``' shape, in a scope ``name``
    (``histogram_fixed_width_bins``). TF1's ops: ``floor(nbins * (v - lo) / (hi - lo))``
    clipped to ``[0, nbins - 1]`` and cast (a NaN value's bin is the cast of a NaN).
    """
    del dtype  # (TF1's bins are int32 whatever dtype says)
    with graph_of([values, value_range, nbins]).name_scope(
            name or "histogram_fixed_width_bins"):
        values, value_range, nbins = _operands(values, value_range, nbins,
                                               "histogram_fixed_width_bins", False)
        values_shape = shape(values)
        values = reshape(values, [-1])
        nbins_float = math_ops.cast(nbins, values.dtype)
        scaled = math_ops.truediv(values - value_range[0], value_range[1] - value_range[0],
                                  name="scaled_values")
        indices = math_ops.floor(nbins_float * scaled, name="indices")
        indices = math_ops.cast(clip_by_value(indices, 0, nbins_float - 1), dtypes.int32)
        return reshape(indices, values_shape)
