"""GraphDef reading: ``import_graph_def`` rebuilds a graph from the plain data of ``graph_def``.

Theory of operation:
- The format (nodes, tagged attrs) is one concept, described in ``graph/graph_def.py``: that
  module writes a def (``Graph.as_graph_def``) and holds the attr codec and the reserved attr
  names under public names; this module reads a def back through the same names.
- Why two modules and not one: writing is a method of ``Graph`` (``graph.py`` imports
  ``graph_def.py``), and reading builds into a ``Graph`` (this module imports ``graph.py``).
  One module doing both would form an import circle with ``graph.py``, which the layer test
  forbids even through a function-level import. So the format and its writer live below
  ``graph.py`` and the reader above it, as TF keeps ``import_graph_def`` in its own
  ``importer.py``.
- ``import_graph_def`` rebuilds every node through ``Graph.create_op``, so shape and dtype
  inference rerun and the same validation applies as when building by hand. Nodes are
  created in the def's order; an input that names a node defined later (a loop back edge)
  is wired to a stand-in first and patched once its producer exists.

This module is part of the graph layer: it never imports trio or the runtime.
"""
from __future__ import annotations

from asyncflow.graph.graph import Operation, Tensor, get_default_graph
from asyncflow.graph.graph_def import COLOCATION_ATTR, SHAPES_ATTR, decode_attr

_MAX_DEBUG_TEXT = 1000


def _debug_info(name, value):
    """The ``(file, line, function)`` of a node's ``debug_info``; ValueError if malformed."""
    if not (isinstance(value, list) and len(value) == 3 and isinstance(value[0], str)
            and isinstance(value[1], int) and not isinstance(value[1], bool)
            and isinstance(value[2], str)):
        raise ValueError(f"node '{name}': debug_info must be [file, line, function]")
    return (value[0][:_MAX_DEBUG_TEXT], value[1], value[2][:_MAX_DEBUG_TEXT])


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
        if index >= len(op.outputs):
            raise ValueError(f"input '{src}:{index}' names output {index} of node '{src}', "
                             f"which has {len(op.outputs)} outputs")
        return op.outputs[index]

    def build(self, node, names):
        name, op_type = node["name"], node["op"]
        attrs, colocation, shapes = {}, (), None
        for key, value in (node.get("attr") or {}).items():
            if key == COLOCATION_ATTR:
                colocation = tuple(self.prefix + v["s"][len("loc:@"):] for v in value["list"])
            elif key == SHAPES_ATTR:
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
            op.set_creation_site(_debug_info(name, node["debug_info"]))
        if colocation:
            op.set_creation_site(op.traceback, colocation)
        if shapes is not None:
            for tensor, shape in zip(op.outputs, shapes):
                tensor.set_shape(shape)
        self.created[name] = op
        return op

    def finish(self):
        for op, position, src, index in self.patches:
            tensor = self.resolve(src, index)
            if tensor.dtype is not op.inputs[position].dtype:
                raise ValueError(f"{op.type} '{op.name}': back edge {src}:{index} has dtype "
                                 f"{tensor.dtype.name}, expected {op.inputs[position].dtype.name}")
            op.update_input(position, tensor)
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
            if target is None or index >= len(target.outputs):
                raise ValueError(f"Requested return_element {element!r} not found in graph_def.")
            results.append(target.outputs[index])
        else:
            target = importer.created.get(element)
            if target is None:
                raise ValueError(f"Requested return_element {element!r} not found in graph_def.")
            results.append(target)
    return results
