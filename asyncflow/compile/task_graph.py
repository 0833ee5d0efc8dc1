"""One task's share of a compiled run as the graph_def the master registers on its worker.

Client feeds that a task reads become placeholders ``_feed_<i>`` (their values ride in the
step's RunGraph); every other node keeps its name, device and debug info (an error on the
worker names the user's line). Used by ``master.py`` when it compiles a run.
"""
from __future__ import annotations

from asyncflow import errors
from asyncflow.compile.node_graph import materialize
from asyncflow.graph.serialize import encode_attr, node_def


def task_graph_def(graph, nodes, feeds, feed_indices, fetch_ports):
    """One task's graph_def; fed tensors become ``_feed_<i>`` placeholders."""
    ops, tensor_of = materialize(nodes, graph)
    renamed = {feeds[i].name: f"_feed_{i}:0" for i in feed_indices}
    defs = []
    for i in feed_indices:
        tensor = feeds[i]
        defs.append({"name": f"_feed_{i}", "op": "Placeholder", "input": [], "device": "",
                     "attr": {"dtype": encode_attr(tensor.dtype),
                              "shape": encode_attr(tensor.shape)}})
    for op in ops:
        try:
            nd = node_def(op, debug_info=True)  # errors on the worker name the user's line
        except ValueError as exc:
            raise errors.UnimplementedError(None, op, f"{exc}: this op cannot be sent to a "
                                            "worker") from None
        nd["input"] = [renamed.get(name, name) for name in nd["input"]]
        defs.append(nd)
    fetch_names = [renamed.get(tensor_of(port).name, tensor_of(port).name) for port in fetch_ports]
    return {"node": defs}, fetch_names
