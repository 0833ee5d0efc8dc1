"""Meta graphs: a graph plus its collections and Saver, on disk without the code that built it.

A meta graph is plain data written with msgpack::

    {"meta_info_def": {"format", "format_version", "asyncflow_version"},
     "graph_def": Graph.as_graph_def(add_shapes=True),
     "collection_def": {key: [item, ...]},
     "saver_def": Saver.as_saver_def() or None}

Collection items are tagged: ``{"variable": {variable_name, initializer_name,
snapshot_name, initial_value_name, trainable}}``, ``{"tensor": name}``,
``{"operation": name}``, ``{"saver": saver_def}`` or ``{"value": tagged attr}`` (strings,
numbers). A collection holding anything else is skipped with a warning, as TF1 does.

``import_scoped_meta_graph`` imports the graph def into the default graph, then rebuilds the
collections: variables become ``Variable`` objects around the imported VariableV2, Assign
and read ops (shared between GLOBAL_VARIABLES and TRAINABLE_VARIABLES, as when built), so
optimizers and initializers work on them. ``saver.import_meta_graph`` (``af.train``'s, as in
TF1's saver.py) wraps it and returns a Saver wired to the imported save and restore ops; this
module knows Savers only as the ``make_saver`` it is handed, so it never imports saver.py.
"""
from __future__ import annotations

import base64
import json
import os
import warnings

import msgpack

from asyncflow.graph import graph_def as _graph_def
from asyncflow.graph import importer
from asyncflow.graph.graph import Graph, GraphKeys, Operation, Tensor, get_default_graph
from asyncflow.kernels.checkpoint import atomic_write
from asyncflow.ops.state import Variable
from asyncflow.version import __version__

FORMAT = "asyncflow.MetaGraphDef"
FORMAT_VERSION = 1
MAX_FILE_BYTES = 1 << 31


# -- collections --------------------------------------------------------------------------
def _encode_item(item):
    if isinstance(item, Variable):
        return {"variable": {
            "variable_name": item.op.name,
            "initializer_name": item.initializer.name,
            "snapshot_name": item._snapshot.name,
            "initial_value_name": None if item.initial_value is None else item.initial_value.name,
            "trainable": item.trainable}}
    if isinstance(item, Tensor):
        return {"tensor": item.name}
    if isinstance(item, Operation):
        return {"operation": item.name}
    if hasattr(item, "as_saver_def"):
        return {"saver": item.as_saver_def()}
    return {"value": _graph_def.encode_attr(item)}


def _collection_defs(graph, collection_list):
    keys = graph.get_all_collection_keys() if collection_list is None else collection_list
    out = {}
    for key in keys:
        try:
            out[key] = [_encode_item(item) for item in graph.get_collection(key)]
        except TypeError as exc:
            warnings.warn(f"Collection {key!r} is not exported: {exc}", stacklevel=3)
    return out


def _prefixed(prefix, name):
    return prefix + name if name else name


def _saver_def_with_prefix(saver_def, prefix):
    out = dict(saver_def)
    for key in ("filename_tensor_name", "step_tensor_name", "save_tensor_name",
                "restore_op_name", "commit_op_name", "latest_tensor_name"):
        if key in saver_def:
            out[key] = _prefixed(prefix, saver_def[key])
    if "commit_feed_names" in saver_def:
        out["commit_feed_names"] = {k: _prefixed(prefix, name)
                                    for k, name in saver_def["commit_feed_names"].items()}
    return out


class _CollectionDecoder:
    """Turns tagged items back into graph objects; one Variable per VariableV2."""

    def __init__(self, graph, prefix, make_saver):
        self.graph = graph
        self.prefix = prefix
        self.make_saver = make_saver
        self.variables = {}

    def decode(self, item):
        (tag, payload), = item.items()
        graph, prefix = self.graph, self.prefix
        if tag == "tensor":
            return graph.get_tensor_by_name(prefix + payload)
        if tag == "operation":
            return graph.get_operation_by_name(prefix + payload)
        if tag == "value":
            return _graph_def.decode_attr(payload)
        if tag == "saver":
            return self.make_saver(_saver_def_with_prefix(payload, prefix), graph)
        if tag == "variable":
            name = prefix + payload["variable_name"]
            if name not in self.variables:
                initial = payload.get("initial_value_name")
                self.variables[name] = Variable._from_ops(
                    graph.get_operation_by_name(name),
                    graph.get_operation_by_name(prefix + payload["initializer_name"]),
                    graph.get_tensor_by_name(prefix + payload["snapshot_name"]),
                    initial_value=graph.get_tensor_by_name(prefix + initial) if initial else None,
                    trainable=payload.get("trainable", True))
            return self.variables[name]
        raise ValueError(f"unknown collection item kind {tag!r}")


# -- export and import -------------------------------------------------------------------------
def export_meta_graph(filename=None, graph=None, collection_list=None, saver_def=None,
                      as_text=False, clear_devices=False):
    """The meta graph of ``graph`` (default graph), written to ``filename`` when given.

    Args:
        filename: where to write it (msgpack; JSON text with ``as_text``), or None.
        graph: the graph to export.
        collection_list: the collection keys to export (default: all).
        saver_def: a Saver's ``as_saver_def()``; default: the last Saver in the graph's
            SAVERS collection, if any.
        as_text: write JSON text instead of msgpack.
        clear_devices: drop every node's device.

    Returns:
        The meta graph (plain data).

    Raises:
        ValueError: if an op has an attr that cannot be serialized.
    """
    graph = graph if graph is not None else get_default_graph()
    if saver_def is None:
        savers = [s for s in graph.get_collection(GraphKeys.SAVERS) if hasattr(s, "as_saver_def")]
        saver_def = savers[-1].as_saver_def() if savers else None
    graph_def = graph.as_graph_def(add_shapes=True)
    if clear_devices:
        for node in graph_def["node"]:
            node["device"] = ""
    meta = {"meta_info_def": {"format": FORMAT, "format_version": FORMAT_VERSION,
                              "asyncflow_version": __version__},
            "graph_def": graph_def,
            "collection_def": _collection_defs(graph, collection_list),
            "saver_def": saver_def}
    if filename is not None:
        write_meta_graph_file(filename, meta, as_text=as_text)
    return meta


def _to_json(value):
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    return value


def _from_json(value):
    if isinstance(value, dict):
        if set(value) == {"__bytes__"}:
            return base64.b64decode(value["__bytes__"])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def _encode_file(data, as_text):
    if as_text:
        return json.dumps(_to_json(data), indent=1).encode()
    return msgpack.packb(data, use_bin_type=True)


def encode_file(meta, as_text=False):
    """The bytes of a meta graph file (msgpack, or JSON text), as ``write_meta_graph_file``
    writes them."""
    return _encode_file(meta, as_text)


def write_meta_graph_file(filename, meta, as_text=False):
    """Write a meta graph atomically (msgpack, or JSON text)."""
    directory = os.path.dirname(os.path.abspath(filename))
    os.makedirs(directory, exist_ok=True)
    content = _encode_file(meta, as_text)
    atomic_write(filename, lambda f: f.write(content))


def read_file(path):
    """A graph def or meta graph written by this module (msgpack or JSON text).

    Raises:
        ValueError: if the file is neither.
    """
    with open(path, "rb") as fileobj:
        data = fileobj.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    if data[:1] in (b"{", b"[", b" ", b"\n"):
        return _from_json(json.loads(data))
    try:
        return msgpack.unpackb(data, raw=False)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise ValueError(f"{path} is not a graph file: {exc}") from None


def import_scoped_meta_graph(meta_graph_or_file, make_saver, clear_devices=False,
                            import_scope=None):
    """Import a meta graph into the default graph and rebuild its collections.

    Args:
        meta_graph_or_file: a path, or the data ``export_meta_graph`` returned.
        make_saver: ``make_saver(saver_def, graph)`` builds a Saver around imported ops (for
            the SAVERS collection).
        clear_devices: ignore the devices recorded in the graph.
        import_scope: a name prefix for the imported ops (default: none, names unchanged).

    Returns:
        ``(graph, saver_def)``: the graph imported into and the meta graph's saver def with
        the import prefix applied (None when it has none).

    Raises:
        ValueError: for a malformed file or a name clash with the default graph.
    """
    meta = meta_graph_or_file
    if isinstance(meta, (str, os.PathLike)):
        meta = read_file(meta)
    info = meta.get("meta_info_def") or {}
    if info.get("format") != FORMAT:
        raise ValueError(f"not an asyncflow meta graph (format {info.get('format')!r})")
    graph_def = meta["graph_def"]
    if clear_devices:
        graph_def = dict(graph_def, node=[dict(n, device="") for n in graph_def["node"]])
    graph = get_default_graph()
    importer.import_graph_def(graph_def, name=import_scope or "")
    prefix = f"{import_scope}/" if import_scope else ""
    decoder = _CollectionDecoder(graph, prefix, make_saver)
    for key, items in (meta.get("collection_def") or {}).items():
        ref = graph.get_collection_ref(key)
        for item in items:
            ref.append(decoder.decode(item))
    saver_def = meta.get("saver_def")
    return graph, None if saver_def is None else _saver_def_with_prefix(saver_def, prefix)


def write_graph(graph_or_graph_def, logdir, name, as_text=False):
    """Write a graph def to ``logdir/name`` (msgpack, or JSON text); returns the path."""
    if isinstance(graph_or_graph_def, Graph):
        graph_or_graph_def = graph_or_graph_def.as_graph_def(add_shapes=True)
    path = os.path.join(logdir, name)
    os.makedirs(logdir, exist_ok=True)
    content = _encode_file(graph_or_graph_def, as_text)
    atomic_write(path, lambda f: f.write(content))
    return path


def read_graph(path):
    """The graph def in a file written by ``write_graph`` (for ``af.import_graph_def``)."""
    graph_def = read_file(path)
    if not isinstance(graph_def, dict) or "node" not in graph_def:
        raise ValueError(f"{path} does not hold a graph def")
    return graph_def
