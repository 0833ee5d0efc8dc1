"""Kernels of the summary ops: serialized ``Summary`` protocol buffers, encoded by hand.

The kernels output string scalars holding a serialized ``tensorflow.Summary`` message, which
``FileWriter.add_summary`` wraps into an ``Event``. Encoding needs only the protobuf wire
format: varints, 64-bit and 32-bit little-endian fields and length-delimited fields
(``encode_field``). ``Summary{value=1 repeated Value{tag=1, simple_value=2 float,
histo=5 HistogramProto}}``, ``HistogramProto{min=1, max=2, num=3, sum=4, sum_squares=5,
bucket_limit=6 packed double, bucket=7 packed double}``.

Histograms use TF's default buckets (limits growing by 10% from 1e-12 to 1e20, mirrored for
negative values, plus 0 and +-DBL_MAX), with runs of empty buckets collapsed as TF's
``Histogram::EncodeToProto`` does. Concatenating serialized messages merges their repeated
fields, so ``MergeSummary`` is a concatenation after a duplicate-tag check.

``summary/proto.py`` builds the rest (Event, GraphDef, decoding) on these primitives.
"""
from __future__ import annotations

import struct
import sys
import zlib

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import register_kernel

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


# -- wire format primitives ------------------------------------------------------------------
def encode_varint(value):
    """A non-negative int (negative int64 as two's complement) as a base-128 varint."""
    value = int(value)
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def encode_key(number, wire_type):
    return encode_varint((number << 3) | wire_type)


def encode_field(number, value, kind):
    """One field: ``kind`` is ``"varint"``, ``"double"``, ``"float"`` or ``"bytes"``."""
    if kind == "varint":
        return encode_key(number, VARINT) + encode_varint(value)
    if kind == "double":
        return encode_key(number, FIXED64) + struct.pack("<d", value)
    if kind == "float":
        return encode_key(number, FIXED32) + struct.pack("<f", value)
    if isinstance(value, str):
        value = value.encode()
    return encode_key(number, LENGTH) + encode_varint(len(value)) + bytes(value)


def encode_packed_doubles(number, values):
    data = np.asarray(values, dtype="<f8").tobytes()
    return encode_field(number, data, "bytes")


def decode_fields(data):
    """Yield ``(number, wire_type, value)``: ints for varints, bytes otherwise.

    Raises:
        ValueError: for a truncated or malformed message.
    """
    data = memoryview(bytes(data))
    pos, end = 0, len(data)

    def varint():
        nonlocal pos
        result = shift = 0
        while True:
            if pos >= end or shift > 63:
                raise ValueError("truncated or overlong varint")
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return result
    while pos < end:
        key = varint()
        number, wire_type = key >> 3, key & 7
        if wire_type == VARINT:
            yield number, wire_type, varint()
            continue
        size = {FIXED64: 8, FIXED32: 4}.get(wire_type)
        if size is None:
            if wire_type != LENGTH:
                raise ValueError(f"unsupported wire type {wire_type}")
            size = varint()
        if pos + size > end:
            raise ValueError("truncated field")
        yield number, wire_type, bytes(data[pos:pos + size])
        pos += size


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
    """Serialized HistogramProto of ``values`` with TF's default buckets."""
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
    return b"".join([
        encode_field(1, low, "double"), encode_field(2, high, "double"),
        encode_field(3, float(values.size), "double"), encode_field(4, float(values.sum()), "double"),
        encode_field(5, float(np.dot(values, values)), "double"),
        encode_packed_doubles(6, limits), encode_packed_doubles(7, buckets)])


def summary_value(tag, simple_value=None, histo=None, image=None):
    """One serialized ``Summary`` holding a single Value."""
    body = encode_field(1, tag, "bytes")
    if simple_value is not None:
        body += encode_field(2, float(simple_value), "float")
    if image is not None:
        body += encode_field(4, image, "bytes")
    if histo is not None:
        body += encode_field(5, histo, "bytes")
    return encode_field(1, body, "bytes")


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
    """Serialized ``Summary.Image{height=1, width=2, colorspace=3, encoded_image_string=4}``."""
    height, width, channels = image.shape
    return b"".join([encode_field(1, height, "varint"), encode_field(2, width, "varint"),
                     encode_field(3, channels, "varint"), encode_field(4, png(image), "bytes")])


def to_uint8_images(images):
    """TF1's image normalization: floats >= 0 scale so the largest is 255; with negatives,
    0 maps to 127 and the values scale so the smallest is 0 or the largest 255."""
    images = np.asarray(images)
    if images.dtype == np.uint8:
        return images
    values = images.astype(np.float64)
    finite = values[np.isfinite(values)]
    low = finite.min() if finite.size else 0.0
    high = finite.max() if finite.size else 0.0
    if low >= 0:
        scale = 255.0 / high if high > 0 else 0.0
        offset = 0.0
    else:
        scale = min(128.0 / -low if low < 0 else np.inf, 127.0 / high if high > 0 else np.inf)
        offset = 128.0
    out = np.where(np.isfinite(values), values * scale + offset, 0.0)
    return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)


def summary_tags(serialized):
    """The tags of a serialized Summary's values, in order."""
    tags = []
    for number, _, value in decode_fields(serialized):
        if number == 1:
            tags += [v.decode() for n, _, v in decode_fields(value) if n == 1]
    return tags


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
    images = to_uint8_images(images)
    count = min(ctx.attrs["max_images"], images.shape[0])
    tag = ctx.attrs["tag"]
    parts = [summary_value(tag + ("/image" if count == 1 else f"/image/{k}"),
                           image=image_proto(images[k])) for k in range(count)]
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
