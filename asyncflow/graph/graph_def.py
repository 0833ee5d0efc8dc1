"""The GraphDef format: a graph as plain data, its attr codec, and writing a def.

Theory of operation:
- ``as_graph_def(graph)`` (``Graph.as_graph_def``) walks the ops in creation order (a
  topological order except for loop back edges) and writes one node per op: ``{"name", "op",
  "input", "device", "attr"}``. Data inputs are ``"src:i"``, control inputs ``"^src"`` (after
  the data inputs), as in TF.
- Attr values carry explicit one-key type tags so that decoding is exact and needs no
  guessing: ``{"type": "float32"}`` (DType), ``{"shape": [2, None] | None}`` (TensorShape),
  ``{"tensor": {"dtype", "shape", "data"}}`` (numpy arrays: little-endian raw bytes, or a
  list of bytes for string tensors), ``{"i": 3}``, ``{"f": 0.5}``, ``{"b": True}``,
  ``{"s": "text"}``, ``{"bytes": b".."}``, ``{"none": True}``, ``{"list": [...]}``,
  ``{"tuple": [...]}`` and ``{"dict": {...}}``. The result is made of dicts, lists, strings,
  bytes, ints, floats, bools and None only, so ``msgpack.packb(..., use_bin_type=True)``
  takes it as is. Colocation travels as TF's ``_class: ["loc:@name"]`` attr, and static
  output shapes (which ``set_shape`` may have refined past inference) as ``_output_shapes``.

The format is one concept with two directions. This module is its one place: the node and
attr layout, the codec (``encode_attr``/``decode_attr``), the reserved attr names
(``COLOCATION_ATTR``, ``SHAPES_ATTR``) and the writer. It reads a graph only through its ops'
fields and never imports ``graph.py``, so ``Graph`` can offer ``as_graph_def`` without an
import circle. The reader, ``graph/importer.py`` (``import_graph_def``), must build into a
``Graph`` and so sits above ``graph.py``; it uses only this module's public names.
Part of the graph layer: never trio, never the runtime.
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes as _dtypes
from asyncflow.graph.shape import TensorShape

GRAPH_DEF_VERSION = {"producer": 1, "min_consumer": 1}
COLOCATION_ATTR = "_class"
SHAPES_ATTR = "_output_shapes"


# -- attr encoding ------------------------------------------------------------------------
def encode_array(array):
    """A numpy array as ``{"tensor": {"dtype", "shape", "data"}}`` (plain data).

    Raises:
        TypeError: for arrays of a dtype asyncflow does not have.
    """
    array = np.asarray(array)
    dtype = _dtypes.as_dtype(array.dtype)
    if dtype.is_string:
        data = [v.encode() if isinstance(v, str) else bytes(v) for v in array.reshape(-1)]
    else:
        data = np.ascontiguousarray(array, dtype=dtype.np.newbyteorder("<")).tobytes()
    return {"tensor": {"dtype": dtype.name, "shape": [int(d) for d in array.shape], "data": data}}


def decode_array(spec):
    """The numpy array of an ``encode_array`` ``{"dtype", "shape", "data"}`` record (read-only).

    Raises:
        ValueError: if the data does not match the shape and dtype.
    """
    dtype = _dtypes.as_dtype(spec["dtype"])
    shape = tuple(int(d) for d in spec["shape"])
    count = int(np.prod(shape, dtype=np.int64))
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in tensor shape {list(shape)}")
    if dtype.is_string:
        items = list(spec["data"])
        if len(items) != count:
            raise ValueError(f"string tensor of shape {list(shape)} has {len(items)} elements")
        out = np.empty(count, dtype=object)
        out[:] = [bytes(v) for v in items] if items else []
        out = out.reshape(shape)
    else:
        data = spec["data"]
        expected = count * dtype.np.itemsize
        if len(data) != expected:
            raise ValueError(f"tensor of dtype {dtype.name} and shape {list(shape)} needs "
                             f"{expected} bytes, got {len(data)}")
        out = np.frombuffer(data, dtype=dtype.np.newbyteorder("<")).astype(dtype.np, copy=False)
        out = out.reshape(shape)
    out.flags.writeable = False
    return out


def encode_attr(value):
    """One attr value as tagged plain data.

    Raises:
        TypeError: for a value of a type that has no encoding (e.g. a Python callable).
    """
    if value is None:
        return {"none": True}
    if isinstance(value, _dtypes.DType):
        return {"type": value.name}
    if isinstance(value, TensorShape):
        return {"shape": None if value.dims is None else list(value.dims)}
    if isinstance(value, (bool, np.bool_)):
        return {"b": bool(value)}
    if isinstance(value, (int, np.integer)):
        return {"i": int(value)}
    if isinstance(value, (float, np.floating)):
        return {"f": float(value)}
    if isinstance(value, str):
        return {"s": value}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value)}
    if isinstance(value, np.ndarray):
        return encode_array(value)
    if isinstance(value, tuple):
        return {"tuple": [encode_attr(v) for v in value]}
    if isinstance(value, list):
        return {"list": [encode_attr(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: encode_attr(v) for k, v in value.items()}}
    raise TypeError(f"attr value of type {type(value).__name__} cannot be serialized")


def decode_attr(value):
    """Inverse of :func:`encode_attr`.

    Raises:
        ValueError: for a record with an unknown or missing tag.
    """
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"attr value {value!r} is not a one-key tagged record")
    (tag, payload), = value.items()
    if tag == "none":
        return None
    if tag == "type":
        return _dtypes.as_dtype(payload)
    if tag == "shape":
        return TensorShape(payload)
    if tag == "b":
        return bool(payload)
    if tag == "i":
        return int(payload)
    if tag == "f":
        return float(payload)
    if tag == "s":
        return str(payload)
    if tag == "bytes":
        return bytes(payload)
    if tag == "tensor":
        return decode_array(payload)
    if tag == "tuple":
        return tuple(decode_attr(v) for v in payload)
    if tag == "list":
        return [decode_attr(v) for v in payload]
    if tag == "dict":
        return {str(k): decode_attr(v) for k, v in payload.items()}
    raise ValueError(f"unknown attr tag {tag!r}")


# -- export -------------------------------------------------------------------------------
def node_def(op, add_shapes=False, debug_info=False, inputs=None):
    """The plain-data node of one Operation (or compile-time ``Node``: pass ``inputs``).

    ``inputs``: the data inputs' names (``"op:i"``), when they are not ``op.inputs``'s.

    With ``debug_info`` the node also carries ``"debug_info": [file, line, function]``, where
    the op was created, so that a worker that imports it names the user's line in errors.

    Raises:
        ValueError: naming the op and attr when an attr value cannot be serialized.
    """
    attr = {}
    for key in sorted(op.attrs):
        try:
            attr[key] = encode_attr(op.attrs[key])
        except TypeError as exc:
            raise ValueError(f"{op.type} '{op.name}': attr {key!r}: {exc}") from None
    if op.colocation_groups:
        attr[COLOCATION_ATTR] = {"list": [{"s": f"loc:@{name}"} for name in op.colocation_groups]}
    if add_shapes:
        attr[SHAPES_ATTR] = {"list": [encode_attr(t.shape) for t in op.outputs]}
    if inputs is None:
        inputs = [f"{t.op.name}:{t.value_index}" for t in op.inputs]
    inputs = list(inputs) + [f"^{c.name}" for c in op.control_inputs]
    node = {"name": op.name, "op": op.type, "input": inputs, "device": op.device or "",
            "attr": attr}
    if debug_info and op.traceback is not None:
        filename, lineno, function = op.traceback
        node["debug_info"] = [str(filename), int(lineno), str(function)]
    return node


def as_graph_def(graph, add_shapes=False):
    """The graph as plain data: ``{"versions": {...}, "node": [node, ...]}``.

    Args:
        graph: the Graph.
        add_shapes: also record each node's static output shapes (``_output_shapes``).

    Returns:
        A dict of plain values, ready for msgpack.

    Raises:
        ValueError: if an op has an attr that cannot be serialized (naming it).
    """
    return {"versions": dict(GRAPH_DEF_VERSION),
            "node": [node_def(op, add_shapes) for op in graph.get_operations()]}
