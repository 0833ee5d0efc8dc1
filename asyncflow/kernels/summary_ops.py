"""Kernels of the summary ops: serialized ``Summary`` protocol buffers.

The kernels output string scalars holding a serialized ``tensorflow.Summary`` message, which
``FileWriter.add_summary`` wraps into an ``Event``. The messages are TensorBoard's own protobuf
classes as ``tensorboardX`` ships them (``tensorboardX.proto.summary_pb2``; no TensorFlow),
imported on the first summary a process builds, so ``import asyncflow`` does not pay for them.

Histograms use TF's default buckets (limits growing by 10% from 1e-12 to 1e20, mirrored for
negative values, plus 0 and +-DBL_MAX), with runs of empty buckets collapsed as TF's
``Histogram::EncodeToProto`` does. Concatenating serialized messages merges their repeated
fields, so ``MergeSummary`` is a concatenation after every input parsed and its tags were
checked for duplicates.
"""
from __future__ import annotations

import struct
import sys
import zlib

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import register_kernel


def summary_pb2():
    """``tensorboardX.proto.summary_pb2`` (imported on first use: about 0.1 s)."""
    from tensorboardX.proto import summary_pb2 as module
    return module


# -- Summary messages ------------------------------------------------------------------------
def _default_bucket_limits():
    positive, value = [], 1.0e-12
    while value < 1.0e20:
        positive.append(value)
        value *= 1.1
    positive.append(sys.float_info.max)
    return np.array([-v for v in reversed(positive)] + [0.0] + positive, dtype=np.float64)


DEFAULT_BUCKET_LIMITS = _default_bucket_limits()


def histogram_proto(values):
    """The HistogramProto of ``values`` with TF's default buckets."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    counts = np.bincount(np.searchsorted(DEFAULT_BUCKET_LIMITS, values, side="right"),
                         minlength=len(DEFAULT_BUCKET_LIMITS))[:len(DEFAULT_BUCKET_LIMITS)]
    limits, buckets = [], []
    i, n = 0, len(counts)
    while i < n:
        end, count = DEFAULT_BUCKET_LIMITS[i], counts[i]
        i += 1
        if count <= 0:
            while i < n and counts[i] <= 0:
                end, count = DEFAULT_BUCKET_LIMITS[i], counts[i]
                i += 1
        limits.append(end)
        buckets.append(float(count))
    if values.size:
        low, high = float(values.min()), float(values.max())
    else:
        low, high = sys.float_info.max, -sys.float_info.max
    return summary_pb2().HistogramProto(
        min=low, max=high, num=float(values.size), sum=float(values.sum()),
        sum_squares=float(np.dot(values, values)), bucket_limit=limits, bucket=buckets)


def summary_value(tag, simple_value=None, histo=None, image=None):
    """One serialized ``Summary`` holding a single Value (``histo``, ``image``: messages)."""
    value = summary_pb2().Summary.Value(tag=tag)
    if simple_value is not None:
        value.simple_value = float(simple_value)
    if image is not None:
        value.image.CopyFrom(image)
    if histo is not None:
        value.histo.CopyFrom(histo)
    return summary_pb2().Summary(value=[value]).SerializeToString()


def png(image):
    """PNG bytes of a ``[height, width, channels]`` uint8 array (1, 3 or 4 channels)."""
    height, width, channels = image.shape
    color = {1: 0, 3: 2, 4: 6}[channels]
    rows = np.concatenate([np.zeros((height, 1), np.uint8),
                           np.ascontiguousarray(image).reshape(height, width * channels)], axis=1)

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    header = struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows.tobytes())) + chunk(b"IEND", b""))


def image_proto(image):
    """The ``Summary.Image`` of a ``[height, width, channels]`` uint8 array (PNG-encoded)."""
    height, width, channels = image.shape
    return summary_pb2().Summary.Image(height=height, width=width, colorspace=channels,
                                       encoded_image_string=png(image))


_BAD_COLOR = np.array([255, 0, 0, 255], np.uint8)  # TF1's default: opaque red


def to_uint8_image(image):
    """One ``[height, width, channels]`` image as TF1's ImageSummary writes it.

    uint8 passes as it is. A float image is scaled on its own (not with the batch): if its
    smallest value is >= 0, by 255 / its largest; else by 127 / its largest absolute value,
    then shifted by 128 (0 becomes 128). A scale below 1e-6 of range writes zeros. Values
    are truncated to uint8 (C's cast), the arithmetic is in the image's own float type, and
    a pixel with a non-finite channel is left out of the range and painted red.
    """
    image = np.asarray(image)
    if image.dtype == np.uint8:
        return image
    depth = image.shape[-1]
    pixels = image.reshape(-1, depth)
    finite = np.isfinite(pixels).all(axis=1)
    seen = pixels[finite]
    low = float(seen.min()) if seen.size else np.inf
    high = float(seen.max()) if seen.size else -np.inf
    if low < 0:
        largest = max(abs(low), abs(high))
        scale, offset = (0.0 if largest < 1e-6 else 127.0 / largest), 128.0
    else:
        scale, offset = (0.0 if high < 1e-6 else 255.0 / high), 0.0
    kind = pixels.dtype.type
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = pixels * kind(scale) + kind(offset)
    out = np.clip(np.trunc(np.where(finite[:, None], scaled, 0)), 0, 255).astype(np.uint8)
    out[~finite] = _BAD_COLOR[:depth]
    return out.reshape(image.shape)


def summary_tags(serialized):
    """The tags of a serialized Summary's values, in order.

    Raises:
        ValueError: if ``serialized`` is not a Summary.
    """
    from google.protobuf.message import DecodeError
    try:
        summary = summary_pb2().Summary.FromString(serialized)
    except DecodeError as exc:
        raise ValueError(f"not a serialized Summary ({exc})") from None
    return [value.tag for value in summary.value]


def _string_scalar(data):
    out = np.empty((), dtype=object)
    out[()] = data
    return out


def _bytes_of(value):
    value = value.reshape(()).item() if hasattr(value, "reshape") else value
    return bytes(value)


# -- kernels --------------------------------------------------------------------------------------
# Summaries make host strings (TF1 has CPU kernels only): placement puts them on a CPU and
# a GPU value reaches them through a Send/Recv.
@register_kernel("ScalarSummary", "CPU")
def _scalar_summary(ctx, value):
    value = np.asarray(value)
    return (_string_scalar(summary_value(ctx.attrs["tag"], simple_value=float(value.reshape(())))),)


@register_kernel("HistogramSummary", "CPU")
def _histogram_summary(ctx, values):
    values = np.asarray(values)
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Nan in summary histogram for: {ctx.attrs['tag']}")
    return (_string_scalar(summary_value(ctx.attrs["tag"], histo=histogram_proto(values))),)


@register_kernel("ImageSummary", "CPU")
def _image_summary(ctx, images):
    images = np.asarray(images)
    limit = ctx.attrs["max_images"]
    count = min(limit, images.shape[0])
    tag = ctx.attrs["tag"]
    # TF1 names the images by max_outputs, not by how many there are
    parts = [summary_value(tag + ("/image" if limit == 1 else f"/image/{k}"),
                           image=image_proto(to_uint8_image(images[k]))) for k in range(count)]
    return (_string_scalar(b"".join(parts)),)


@register_kernel("MergeSummary", "CPU")
def _merge_summary(ctx, *inputs):
    parts, seen = [], set()
    for value in inputs:
        for item in np.asarray(value, dtype=object).reshape(-1):
            data = _bytes_of(item)
            try:
                tags = summary_tags(data)
            except ValueError as exc:
                raise errors.InvalidArgumentError(
                    None, ctx.name, f"Could not parse one of the summary inputs: {exc}") from None
            for tag in tags:
                if tag in seen:
                    raise errors.InvalidArgumentError(None, ctx.name, f"Duplicate tag {tag} "
                                                      "found in summary inputs")
                seen.add(tag)
            parts.append(data)
    return (_string_scalar(b"".join(parts)),)
