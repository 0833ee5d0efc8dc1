"""GraphDef: a graph as plain data, and back (``Graph.as_graph_def``, ``import_graph_def``).

Theory of operation:
- ``as_graph_def(graph)`` walks the ops in creation order (a topological order except for
  loop back edges) and writes one node per op: ``{"name", "op", "input", "device", "attr"}``.
  Data inputs are ``"src:i"``, control inputs ``"^src"`` (after the data inputs), as in TF.
- Attr values carry explicit one-key type tags so that decoding is exact and needs no
  guessing: ``{"type": "float32"}`` (DType), ``{"shape": [2, None] | None}`` (TensorShape),
  ``{"tensor": {"dtype", "shape", "data"}}`` (numpy arrays: little-endian raw bytes, or a
  list of bytes for string tensors), ``{"i": 3}``, ``{"f": 0.5}``, ``{"b": True}``,
  ``{"s": "text"}``, ``{"bytes": b".."}``, ``{"none": True}``, ``{"list": [...]}``,
  ``{"tuple": [...]}`` and ``{"dict": {...}}``. The result is made of dicts, lists, strings,
  bytes, ints, floats, bools and None only, so ``msgpack.packb(..., use_bin_type=True)``
  takes it as is. Colocation travels as TF's ``_class: ["loc:@name"]`` attr, and static
  output shapes (which ``set_shape`` may have refined past inference) as ``_output_shapes``.
- ``import_graph_def`` rebuilds every node through ``Graph.create_op``, so shape and dtype
  inference rerun and the same validation applies as when building by hand. Nodes are
  created in the def's order; an input that names a node defined later (a loop back edge)
  is wired to a stand-in first and patched once its producer exists.

This module is part of the graph layer: it never imports trio or the runtime.
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes as _dtypes
from asyncflow.graph.graph import Operation, Tensor, get_default_graph
from asyncflow.graph.shape import TensorShape

GRAPH_DEF_VERSION = {"producer": 1, "min_consumer": 1}
_COLOCATION_ATTR = "_class"
_SHAPES_ATTR = "_output_shapes"


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
def node_def(op, add_shapes=False, debug_info=False):
    """The plain-data node of one Operation.

    With ``debug_info`` the node also carries ``"debug_info": [file, line, function]``, where
    the op was created, so that a worker that imports it names the user's line in errors.

    Raises:
        ValueError: naming the op and attr when an attr value cannot be serialized.
    """
    attr = {}
    for key in sorted(op._attrs):
        try:
            attr[key] = encode_attr(op._attrs[key])
        except TypeError as exc:
            raise ValueError(f"{op.type} '{op.name}': attr {key!r}: {exc}") from None
    if op._colocation:
        attr[_COLOCATION_ATTR] = {"list": [{"s": f"loc:@{name}"} for name in op._colocation]}
    if add_shapes:
        attr[_SHAPES_ATTR] = {"list": [encode_attr(t.shape) for t in op._outputs]}
    inputs = [f"{t.op.name}:{t.value_index}" for t in op._inputs]
    inputs += [f"^{c.name}" for c in op._control_inputs]
    node = {"name": op.name, "op": op.type, "input": inputs, "device": op.device or "",
            "attr": attr}
    if debug_info and op._traceback is not None:
        filename, lineno, function = op._traceback
        node["debug_info"] = [str(filename), int(lineno), str(function)]
    return node


_MAX_DEBUG_TEXT = 1000


def _debug_info(name, value):
    """The ``(file, line, function)`` of a node's ``debug_info``; ValueError if malformed."""
    if not (isinstance(value, list) and len(value) == 3 and isinstance(value[0], str)
            and isinstance(value[1], int) and not isinstance(value[1], bool)
            and isinstance(value[2], str)):
        raise ValueError(f"node '{name}': debug_info must be [file, line, function]")
    return (value[0][:_MAX_DEBUG_TEXT], value[1], value[2][:_MAX_DEBUG_TEXT])


def as_graph_def(graph=None, add_shapes=False):
    """The graph as plain data: ``{"versions": {...}, "node": [node, ...]}``.

    Args:
        graph: the Graph (default: the default graph).
        add_shapes: also record each node's static output shapes (``_output_shapes``).

    Returns:
        A dict of plain values, ready for msgpack.

    Raises:
        ValueError: if an op has an attr that cannot be serialized (naming it).
    """
    graph = graph if graph is not None else get_default_graph()
    return {"versions": dict(GRAPH_DEF_VERSION),
            "node": [node_def(op, add_shapes) for op in graph.get_operations()]}


# -- import -------------------------------------------------------------------------------
def _parse_input(name):
    """``"^op"`` -> ("op", None); ``"op:1"`` -> ("op", 1); ``"op"`` -> ("op", 0)."""
    if name.startswith("^"):
        return name[1:], None
    op_name, sep, index = name.rpartition(":")
    if sep and index.isdigit():
        return op_name, int(index)
    return name, 0


def _normalize_map(input_map, graph):
    out = {}
    for key, tensor in (input_map or {}).items():
        if hasattr(tensor, "_as_tensor") and not isinstance(tensor, Tensor):
            tensor = tensor._as_tensor()
        if not isinstance(tensor, (Tensor, Operation)):
            raise TypeError(f"input_map value for {key!r} must be a Tensor, got {tensor!r}")
        if tensor.graph is not graph:
            raise ValueError(f"input_map value for {key!r} ({tensor.name}) is not in the "
                             "graph being imported into")
        src, index = _parse_input(key)
        out[(src, index)] = tensor
    return out


class _Importer:
    """State of one ``import_graph_def`` call."""

    def __init__(self, graph, prefix, input_map):
        self.graph = graph
        self.prefix = prefix
        self.input_map = input_map
        self.used_keys = set()
        self.created = {}      # node name -> Operation
        self.patches = []      # (op, position, src, index)

    def resolve(self, src, index):
        key = (src, index)
        if key in self.input_map:
            self.used_keys.add(key)
            return self.input_map[key]
        op = self.created.get(src)
        if op is None:
            return None
        if index is None:
            return op
        if index >= len(op._outputs):
            raise ValueError(f"input '{src}:{index}' names output {index} of node '{src}', "
                             f"which has {len(op._outputs)} outputs")
        return op._outputs[index]

    def build(self, node, names):
        name, op_type = node["name"], node["op"]
        attrs, colocation, shapes = {}, (), None
        for key, value in (node.get("attr") or {}).items():
            if key == _COLOCATION_ATTR:
                colocation = tuple(self.prefix + v["s"][len("loc:@"):] for v in value["list"])
            elif key == _SHAPES_ATTR:
                shapes = decode_attr(value)
            else:
                attrs[key] = decode_attr(value)
        inputs, controls, deferred = [], [], []
        for text in node.get("input") or ():
            src, index = _parse_input(text)
            target = self.resolve(src, index)
            if index is None:
                if target is None:
                    raise ValueError(f"node '{name}': control input '^{src}' names no earlier node")
                controls.append(target.op if isinstance(target, Tensor) else target)
                continue
            if target is None:
                if src not in names:
                    raise ValueError(f"node '{name}' ({op_type}): input '{text}' names no node "
                                     "of the graph def")
                deferred.append((len(inputs), src, index))
            inputs.append(target)
        for position, src, index in deferred:
            stand_in = next((t for t in inputs if t is not None), None)
            if stand_in is None:
                raise ValueError(f"node '{name}' ({op_type}): every input is defined later; "
                                 "cannot order the import")
            inputs[position] = stand_in
        full = self.prefix + name
        try:
            op = self.graph.create_op(op_type, inputs, attrs, name=full + "/",
                                      control_inputs=controls, device=node.get("device") or None)
        except KeyError as exc:
            raise ValueError(f"node '{name}': {exc.args[0]}") from None
        for position, src, index in deferred:
            self.patches.append((op, position, src, index))
        if "debug_info" in node:  # where the exporter's user created it, for errors
            op._traceback = _debug_info(name, node["debug_info"])
        if colocation:
            op._colocation = colocation
        if shapes is not None:
            for tensor, shape in zip(op._outputs, shapes):
                tensor.set_shape(shape)
        self.created[name] = op
        return op

    def finish(self):
        for op, position, src, index in self.patches:
            tensor = self.resolve(src, index)
            if tensor.dtype is not op._inputs[position].dtype:
                raise ValueError(f"{op.type} '{op.name}': back edge {src}:{index} has dtype "
                                 f"{tensor.dtype.name}, expected {op._inputs[position].dtype.name}")
            op._update_input(position, tensor)
        unused = set(self.input_map) - self.used_keys
        if unused:
            names = sorted(s if i is None else f"{s}:{i}" for s, i in unused)
            raise ValueError(f"Attempted to map inputs that were not found in graph_def: {names}")


def import_graph_def(graph_def, input_map=None, return_elements=None, name=None):
    """Add the nodes of ``graph_def`` to the default graph.

    Args:
        graph_def: a structure made by ``Graph.as_graph_def()`` (possibly after a msgpack
            round trip).
        input_map: ``{"name:i" or "name": Tensor}``: use these tensors of the default graph
            instead of the def's tensors (``"^name": Operation`` for control inputs).
        return_elements: names in the def (``"op"`` for an Operation, ``"op:0"`` for a
            Tensor) to return.
        name: the prefix for imported names; ``None`` means ``"import"`` (uniquified like a
            name scope), ``""`` imports the names unchanged.

    Returns:
        The list of elements named by ``return_elements``, or None.

    Raises:
        ValueError: for a malformed def, a duplicate name, an unused ``input_map`` key or an
            unknown return element; ValueError/TypeError from shape inference, naming the op.
    """
    graph = get_default_graph()
    if not isinstance(graph_def, dict) or "node" not in graph_def:
        raise ValueError("graph_def must be a dict with a 'node' list (from as_graph_def())")
    nodes = list(graph_def["node"])
    names = {node["name"] for node in nodes}
    if len(names) != len(nodes):
        raise ValueError("graph_def has duplicate node names")
    if name == "":
        prefix = ""
    else:
        with graph.name_scope(name or "import") as scope:
            prefix = scope
    importer = _Importer(graph, prefix, _normalize_map(input_map, graph))
    with graph.colocate_with(None):
        for node in nodes:
            importer.build(node, names)
    importer.finish()
    if return_elements is None:
        return None
    results = []
    for element in return_elements:
        src, index = _parse_input(element)
        if ":" in element:
            target = importer.created.get(src)
            if target is None or index >= len(target._outputs):
                raise ValueError(f"Requested return_element {element!r} not found in graph_def.")
            results.append(target._outputs[index])
        else:
            target = importer.created.get(element)
            if target is None:
                raise ValueError(f"Requested return_element {element!r} not found in graph_def.")
            results.append(target)
    return results
