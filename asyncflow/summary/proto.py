"""TensorBoard's file formats by hand: Event and GraphDef protobufs, TFRecord framing, CRC32C.

No TensorFlow and no protobuf runtime are needed. Messages are built from the wire-format
primitives of ``kernels/summary_ops.py`` (which also encodes ``Summary``):

- ``Event{wall_time=1 double, step=2 int64, file_version=3 string, graph_def=4 bytes,
  summary=5 Summary}``.
- ``GraphDef{node=1 repeated NodeDef, versions=4 VersionDef{producer=1}}``, ``NodeDef{name=1,
  op=2, input=3 repeated, device=4, attr=5 map<string, AttrValue>}`` (a map entry is a
  message ``{key=1, value=2}``), ``AttrValue{list=1, s=2, i=3, f=4, b=5, type=6 DataType,
  shape=7 TensorShapeProto, tensor=8 TensorProto}``. Every node also gets
  ``_output_shapes`` so TensorBoard labels edges with shapes; ``/`` in names makes the
  collapsible name scopes of the Graphs tab.
- A TFRecord is ``uint64 length, uint32 masked_crc32c(length), data, uint32
  masked_crc32c(data)``, all little-endian; ``mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8``.

The decoders (``iter_records``, ``decode_event``, ``decode_summary``, ``decode_graph_def``)
read these files back for tests and tools; they check every CRC.
"""
from __future__ import annotations

import struct

import numpy as np

from asyncflow import dtypes
from asyncflow.kernels.summary_ops import (  # noqa: F401  (re-exported wire primitives)
    DEFAULT_BUCKET_LIMITS, decode_fields, encode_field, encode_key, encode_varint,
    histogram_proto, summary_value,
)

FILE_VERSION = "brain.Event:2"
GRAPH_PRODUCER = 22
DATA_TYPE_ENUM = {
    dtypes.float32: 1, dtypes.float64: 2, dtypes.int32: 3, dtypes.uint8: 4, dtypes.int16: 5,
    dtypes.int8: 6, dtypes.string: 7, dtypes.int64: 9, dtypes.bool: 10, dtypes.bfloat16: 14,
    dtypes.uint16: 17, dtypes.float16: 19, dtypes.uint32: 22, dtypes.uint64: 23,
}
_MASK_DELTA = 0xA282EAD8


# -- CRC32C (Castagnoli) --------------------------------------------------------------------
def _crc_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _crc_table()


def _crc32c_python(data, crc=0):
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:  # an optional C implementation; the pure-Python one is the fallback
    from crc32c import crc32c as _crc32c_native  # type: ignore
except ImportError:  # pragma: no cover - depends on the environment
    _crc32c_native = None


def crc32c(data):
    """The CRC32C of ``data`` (uses the ``crc32c`` package when installed)."""
    if _crc32c_native is not None:
        return _crc32c_native(bytes(data))
    return _crc32c_python(data)


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


# -- TFRecord framing --------------------------------------------------------------------------
def tfrecord(data):
    """``data`` framed as one TFRecord."""
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + bytes(data)
            + struct.pack("<I", masked_crc32c(data)))


def iter_records(fileobj):
    """Yield the payloads of the TFRecords in a binary file object.

    Raises:
        ValueError: on a CRC mismatch or a truncated record (a partial last record written
            by a crashed writer ends the iteration silently instead).
    """
    while True:
        header = fileobj.read(12)
        if len(header) < 12:
            return
        length_bytes, crc = header[:8], struct.unpack("<I", header[8:])[0]
        if masked_crc32c(length_bytes) != crc:
            raise ValueError("TFRecord length CRC mismatch")
        length, = struct.unpack("<Q", length_bytes)
        data = fileobj.read(length)
        footer = fileobj.read(4)
        if len(data) < length or len(footer) < 4:
            return
        if masked_crc32c(data) != struct.unpack("<I", footer)[0]:
            raise ValueError("TFRecord data CRC mismatch")
        yield data


# -- Event ---------------------------------------------------------------------------------------
def event(wall_time, step=0, file_version=None, graph_def=None, summary=None):
    """A serialized Event."""
    out = encode_field(1, float(wall_time), "double")
    if step:
        out += encode_field(2, int(step), "varint")
    if file_version is not None:
        out += encode_field(3, file_version, "bytes")
    if graph_def is not None:
        out += encode_field(4, graph_def, "bytes")
    if summary is not None:
        out += encode_field(5, summary, "bytes")
    return out


# -- GraphDef ----------------------------------------------------------------------------------
def shape_proto(shape):
    """TensorShapeProto of a TensorShape (unknown dims are -1)."""
    if shape.dims is None:
        return encode_field(3, 1, "varint")
    return b"".join(encode_field(2, encode_field(1, -1 if d is None else d, "varint"), "bytes")
                    for d in shape.dims)


def tensor_proto(array):
    """TensorProto of a numpy array (raw ``tensor_content``, or ``string_val`` for strings)."""
    array = np.asarray(array)
    dtype = dtypes.as_dtype(array.dtype)
    out = encode_field(1, DATA_TYPE_ENUM[dtype], "varint")
    out += encode_field(2, b"".join(encode_field(2, encode_field(1, int(d), "varint"), "bytes")
                                    for d in array.shape), "bytes")
    if dtype.is_string:
        for item in array.reshape(-1):
            out += encode_field(8, item.encode() if isinstance(item, str) else bytes(item), "bytes")
    else:
        data = np.ascontiguousarray(array.reshape(-1), dtype=dtype.np.newbyteorder("<")).tobytes()
        out += encode_field(4, data, "bytes")
    return out


def _list_value(items):
    items = list(items)
    if all(isinstance(v, dtypes.DType) for v in items):
        body = b"".join(encode_field(6, DATA_TYPE_ENUM.get(v, 0), "varint") for v in items)
    elif all(hasattr(v, "dims") and hasattr(v, "is_fully_defined") for v in items):
        body = b"".join(encode_field(7, shape_proto(v), "bytes") for v in items)
    elif all(isinstance(v, (bool, np.bool_)) for v in items):
        body = b"".join(encode_field(5, int(v), "varint") for v in items)
    elif all(isinstance(v, (int, np.integer)) for v in items):
        body = b"".join(encode_field(3, int(v), "varint") for v in items)
    elif all(isinstance(v, (int, float, np.number)) for v in items):
        body = b"".join(encode_field(4, float(v), "float") for v in items)
    else:
        body = b"".join(encode_field(2, v if isinstance(v, (str, bytes)) else repr(v), "bytes")
                        for v in items)
    return encode_field(1, body, "bytes")


def attr_value(value):
    """A serialized AttrValue for an op attr, or None to leave the attr out."""
    if value is None:
        return None
    if isinstance(value, dtypes.DType):
        return encode_field(6, DATA_TYPE_ENUM.get(value, 0), "varint")
    if hasattr(value, "dims") and hasattr(value, "is_fully_defined"):
        return encode_field(7, shape_proto(value), "bytes")
    if isinstance(value, (bool, np.bool_)):
        return encode_field(5, int(value), "varint")
    if isinstance(value, (int, np.integer)):
        return encode_field(3, int(value), "varint")
    if isinstance(value, (float, np.floating)):
        return encode_field(4, float(value), "float")
    if isinstance(value, (str, bytes)):
        return encode_field(2, value, "bytes")
    if isinstance(value, np.ndarray):
        try:
            return encode_field(8, tensor_proto(value), "bytes")
        except (KeyError, TypeError):
            return encode_field(2, repr(value), "bytes")
    if isinstance(value, (list, tuple)):
        return _list_value(value)
    return encode_field(2, repr(value), "bytes")


def node_def_proto(op):
    """A serialized NodeDef of an Operation (attrs, colocation and output shapes)."""
    out = encode_field(1, op.name, "bytes") + encode_field(2, op.type, "bytes")
    for tensor in op._inputs:
        out += encode_field(3, f"{tensor.op.name}:{tensor.value_index}"
                            if tensor.value_index else tensor.op.name, "bytes")
    for control in op._control_inputs:
        out += encode_field(3, f"^{control.name}", "bytes")
    if op.device:
        out += encode_field(4, op.device, "bytes")
    attrs = dict(op._attrs)
    if op._colocation:
        attrs["_class"] = [f"loc:@{name}" for name in op._colocation]
    attrs["_output_shapes"] = [t.shape for t in op._outputs]
    for key in sorted(attrs):
        encoded = attr_value(attrs[key])
        if encoded is None:
            continue
        entry = encode_field(1, key, "bytes") + encode_field(2, encoded, "bytes")
        out += encode_field(5, entry, "bytes")
    return out


def graph_def_proto(operations):
    """A serialized GraphDef of a list of Operations."""
    nodes = b"".join(encode_field(1, node_def_proto(op), "bytes") for op in operations)
    return nodes + encode_field(4, encode_field(1, GRAPH_PRODUCER, "varint"), "bytes")


# -- decoding --------------------------------------------------------------------------------------
def _double(raw):
    return struct.unpack("<d", raw)[0]


def decode_histogram(data):
    """A HistogramProto as a dict (min, max, num, sum, sum_squares, bucket_limit, bucket)."""
    out = {"bucket_limit": [], "bucket": []}
    names = {1: "min", 2: "max", 3: "num", 4: "sum", 5: "sum_squares"}
    for number, _, value in decode_fields(data):
        if number in names:
            out[names[number]] = _double(value)
        elif number in (6, 7):
            key = "bucket_limit" if number == 6 else "bucket"
            out[key] += list(np.frombuffer(value, dtype="<f8"))
    return out


def decode_summary(data):
    """A Summary as a list of ``{"tag", "simple_value" | "histo"}`` dicts."""
    values = []
    for number, _, value in decode_fields(data):
        if number != 1:
            continue
        item = {}
        for field, wire, raw in decode_fields(value):
            if field == 1:
                item["tag"] = raw.decode()
            elif field == 2 and wire == 5:
                item["simple_value"] = struct.unpack("<f", raw)[0]
            elif field == 5:
                item["histo"] = decode_histogram(raw)
        values.append(item)
    return values


def decode_event(data):
    """An Event as a dict with the fields that are set."""
    out = {}
    for number, _, value in decode_fields(data):
        if number == 1:
            out["wall_time"] = _double(value)
        elif number == 2:
            out["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3:
            out["file_version"] = value.decode()
        elif number == 4:
            out["graph_def"] = value
        elif number == 5:
            out["summary"] = decode_summary(value)
    return out


def decode_graph_def(data):
    """A GraphDef as a list of ``{"name", "op", "input", "device", "attr_keys"}`` dicts."""
    nodes = []
    for number, _, value in decode_fields(data):
        if number != 1:
            continue
        node = {"name": "", "op": "", "input": [], "device": "", "attr_keys": []}
        for field, _, raw in decode_fields(value):
            if field == 1:
                node["name"] = raw.decode()
            elif field == 2:
                node["op"] = raw.decode()
            elif field == 3:
                node["input"].append(raw.decode())
            elif field == 4:
                node["device"] = raw.decode()
            elif field == 5:
                node["attr_keys"] += [k.decode() for n, _, k in decode_fields(raw) if n == 1]
        nodes.append(node)
    return nodes
