"""Summary ops: ``ScalarSummary``, ``HistogramSummary``, ``MergeSummary``.

Each outputs a string scalar holding a serialized ``Summary`` protocol buffer (see
``kernels/summary_ops.py``), which ``af.summary.FileWriter.add_summary`` writes to an event
file. The builders (``af.summary.scalar`` ...) live in ``asyncflow/summary``; this module
declares the op types, their shape inference and their builders at the graph level.
As in TF1 the tag is the summary's name under the enclosing name scope.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, make


def _infer_scalar(op):
    value = op.inputs[0]
    if not value.dtype.is_numeric and not value.dtype.is_bool:
        raise TypeError(f"summary value must be numeric, got {value.dtype.name}")
    if value.shape.ndims not in (None, 0):
        raise ValueError(f"tags and values are not the same shape: [] != {value.shape} "
                         "(af.summary.scalar takes a scalar)")
    return [(dtypes.string, TensorShape([]))]


def _infer_histogram(op):
    values = op.inputs[0]
    if not values.dtype.is_numeric and not values.dtype.is_bool:
        raise TypeError(f"histogram values must be numeric, got {values.dtype.name}")
    return [(dtypes.string, TensorShape([]))]


def _infer_merge(op):
    for tensor in op.inputs:
        if not tensor.dtype.is_string:
            raise TypeError(f"MergeSummary inputs must be string tensors, got {tensor.name} "
                            f"({tensor.dtype.name})")
    return [(dtypes.string, TensorShape([]))]


register_op("ScalarSummary", infer=_infer_scalar, stateful=True)
register_op("HistogramSummary", infer=_infer_histogram, stateful=True)
register_op("MergeSummary", infer=_infer_merge, stateful=True)


def _infer_image(op):
    images = op.inputs[0]
    if images.shape.ndims not in (None, 4) or (
            images.shape.ndims == 4 and images.shape.as_list()[3] not in (None, 1, 3, 4)):
        raise ValueError(f"images must be 4-D [batch, height, width, channels] with 1, 3 or 4 "
                         f"channels, got shape {images.shape}")
    if not (images.dtype.is_floating or images.dtype.name == "uint8"):
        raise TypeError(f"images must be uint8 or floating, got {images.dtype.name}")
    return [(dtypes.string, TensorShape([]))]


register_op("ImageSummary", infer=_infer_image, stateful=True)
not_differentiable("ScalarSummary", "HistogramSummary", "MergeSummary", "ImageSummary")


def scalar_summary(tag, value, name=None):
    """A ScalarSummary op's output: a serialized Summary with ``simple_value``."""
    return make("ScalarSummary", (as_tensor(value),), {"tag": str(tag)}, name, "ScalarSummary")


def histogram_summary(tag, values, name=None):
    """A HistogramSummary op's output: a serialized Summary with a ``histo``."""
    return make("HistogramSummary", (as_tensor(values),), {"tag": str(tag)}, name,
                "HistogramSummary")


def image_summary(tag, images, max_outputs=3, name=None):
    """An ImageSummary op's output: a serialized Summary with up to ``max_outputs`` PNGs."""
    if int(max_outputs) < 1:
        raise ValueError(f"ImageSummary '{tag}': max_outputs must be at least 1, got "
                         f"{max_outputs}")
    return make("ImageSummary", (as_tensor(images),), {"tag": str(tag),
                                                        "max_images": int(max_outputs)},
                name, "ImageSummary")


def merge_summary(inputs, name=None):
    """One serialized Summary holding the values of every input summary."""
    tensors = tuple(as_tensor(t) for t in inputs)
    return make("MergeSummary", tensors, None, name, "MergeSummary")
