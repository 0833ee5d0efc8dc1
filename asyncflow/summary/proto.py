"""TensorBoard's event files: Event and GraphDef messages and the TFRecord framing around them.

The messages are TensorBoard's own protobuf classes as ``tensorboardX`` ships them
(``tensorboardX.proto``: the same ``.proto`` files as TensorFlow's, without TensorFlow):

- ``Event{wall_time, step, file_version, graph_def (serialized GraphDef), summary}``.
- ``GraphDef{node: NodeDef{name, op, input, device, attr: map<string, AttrValue>},
  versions{producer}}``. Every node also gets ``_output_shapes`` so TensorBoard labels edges
  with shapes; ``/`` in names makes the collapsible name scopes of the Graphs tab. An attr
  value with no AttrValue form (a Python object) is written as its ``repr`` string.
- A TFRecord is ``uint64 length, uint32 masked_crc32c(length), data, uint32
  masked_crc32c(data)``, all little-endian; ``mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8``.
  The CRC32C comes from ``google-crc32c`` (C, with the CPU's CRC instruction where there is
  one).

TensorBoard reads the files; the tests read the framing back with their own reader, checking
every CRC.
"""
from __future__ import annotations

import functools
import struct
import types

import google_crc32c
import numpy as np

from asyncflow import dtypes

FILE_VERSION = "brain.Event:2"
GRAPH_PRODUCER = 22
DATA_TYPE_ENUM = {  # TensorFlow's DataType numbers (uint32/uint64 are newer than tensorboardX's copy)
    dtypes.float32: 1, dtypes.float64: 2, dtypes.int32: 3, dtypes.uint8: 4, dtypes.int16: 5,
    dtypes.int8: 6, dtypes.string: 7, dtypes.int64: 9, dtypes.bool: 10, dtypes.bfloat16: 14,
    dtypes.uint16: 17, dtypes.float16: 19, dtypes.uint32: 22, dtypes.uint64: 23,
}
_MASK_DELTA = 0xA282EAD8


@functools.cache
def _pb():
    """tensorboardX's protobuf modules, imported on first use: importing the package costs
    about 0.1 s, which ``import asyncflow`` should not pay for a FileWriter it may never make."""
    from tensorboardX.proto import (
        attr_value_pb2, event_pb2, graph_pb2, node_def_pb2, tensor_pb2, tensor_shape_pb2,
        versions_pb2,
    )
    return types.SimpleNamespace(
        AttrValue=attr_value_pb2.AttrValue, Event=event_pb2.Event, GraphDef=graph_pb2.GraphDef,
        NodeDef=node_def_pb2.NodeDef, TensorProto=tensor_pb2.TensorProto,
        TensorShapeProto=tensor_shape_pb2.TensorShapeProto, VersionDef=versions_pb2.VersionDef)


# -- TFRecord framing --------------------------------------------------------------------------
def masked_crc32c(data):
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def tfrecord(data):
    """``data`` framed as one TFRecord."""
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + bytes(data)
            + struct.pack("<I", masked_crc32c(data)))


# -- Event ---------------------------------------------------------------------------------------
def event(wall_time, step=0, file_version=None, graph_def=None, summary=None):
    """A serialized Event (``graph_def`` and ``summary`` given serialized too)."""
    message = _pb().Event(wall_time=float(wall_time), step=int(step))
    if file_version is not None:
        message.file_version = file_version
    if graph_def is not None:
        message.graph_def = bytes(graph_def)
    if summary is not None:
        message.summary.MergeFromString(bytes(summary))
    return message.SerializeToString()


# -- GraphDef ----------------------------------------------------------------------------------
def shape_proto(shape):
    """TensorShapeProto of a TensorShape (unknown dims are -1)."""
    if shape.dims is None:
        return _pb().TensorShapeProto(unknown_rank=True)
    return _pb().TensorShapeProto(
        dim=[_pb().TensorShapeProto.Dim(size=-1 if d is None else d)
             for d in shape.dims])


def tensor_proto(array):
    """TensorProto of a numpy array (raw ``tensor_content``, or ``string_val`` for strings).

    Raises:
        KeyError: for a dtype TensorBoard has no number for.
    """
    array = np.asarray(array)
    dtype = dtypes.as_dtype(array.dtype)
    shape = _pb().TensorShapeProto(
        dim=[_pb().TensorShapeProto.Dim(size=int(d)) for d in array.shape])
    message = _pb().TensorProto(dtype=DATA_TYPE_ENUM[dtype], tensor_shape=shape)
    if dtype.is_string:
        message.string_val.extend(item.encode() if isinstance(item, str) else bytes(item)
                                  for item in array.reshape(-1))
    else:
        message.tensor_content = np.ascontiguousarray(
            array.reshape(-1), dtype=dtype.np.newbyteorder("<")).tobytes()
    return message


def _is_shape(value):
    return hasattr(value, "dims") and hasattr(value, "is_fully_defined")


def _text(value):
    """Bytes for AttrValue's ``s`` (protobuf takes bytes, not str)."""
    if isinstance(value, bytes):
        return value
    return (value if isinstance(value, str) else repr(value)).encode()


def _list_value(items):
    items = list(items)
    out = _pb().AttrValue.ListValue()
    if all(isinstance(v, dtypes.DType) for v in items):
        out.type.extend(DATA_TYPE_ENUM.get(v, 0) for v in items)
    elif all(_is_shape(v) for v in items):
        out.shape.extend(shape_proto(v) for v in items)
    elif all(isinstance(v, (bool, np.bool_)) for v in items):
        out.b.extend(bool(v) for v in items)
    elif all(isinstance(v, (int, np.integer)) and -2**63 <= v < 2**63 for v in items):
        out.i.extend(int(v) for v in items)
    elif all(isinstance(v, (int, float, np.number)) for v in items):
        out.f.extend(float(v) for v in items)
    else:
        out.s.extend(_text(v) for v in items)
    return _pb().AttrValue(list=out)


def attr_value(value):
    """An AttrValue for an op attr, or None to leave the attr out."""
    if value is None:
        return None
    if isinstance(value, dtypes.DType):
        return _pb().AttrValue(type=DATA_TYPE_ENUM.get(value, 0))
    if _is_shape(value):
        return _pb().AttrValue(shape=shape_proto(value))
    if isinstance(value, (bool, np.bool_)):
        return _pb().AttrValue(b=bool(value))
    if isinstance(value, (int, np.integer)) and -2**63 <= value < 2**63:
        return _pb().AttrValue(i=int(value))
    if isinstance(value, (float, np.floating)):
        return _pb().AttrValue(f=float(value))
    if isinstance(value, np.ndarray):
        try:
            return _pb().AttrValue(tensor=tensor_proto(value))
        except (KeyError, TypeError):
            pass
    elif isinstance(value, (list, tuple)):
        return _list_value(value)
    return _pb().AttrValue(s=_text(value))


def node_def_proto(op):
    """The NodeDef of an Operation (attrs, colocation and output shapes)."""
    node = _pb().NodeDef(name=op.name, op=op.type, device=op.device or "")
    node.input.extend(f"{tensor.op.name}:{tensor.value_index}" if tensor.value_index
                      else tensor.op.name for tensor in op.inputs)
    node.input.extend(f"^{control.name}" for control in op.control_inputs)
    attrs = dict(op.attrs)
    if op.colocation_groups:
        attrs["_class"] = [f"loc:@{name}" for name in op.colocation_groups]
    attrs["_output_shapes"] = [t.shape for t in op.outputs]
    for key in sorted(attrs):
        value = attr_value(attrs[key])
        if value is not None:
            node.attr[key].CopyFrom(value)
    return node


def graph_def_proto(operations):
    """A serialized GraphDef of a list of Operations."""
    graph_def = _pb().GraphDef(node=[node_def_proto(op) for op in operations],
                               versions=_pb().VersionDef(producer=GRAPH_PRODUCER))
    return graph_def.SerializeToString()
