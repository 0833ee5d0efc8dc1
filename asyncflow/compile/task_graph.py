"""One task's share of a compiled run as the graph_def the master registers on its worker.

Client feeds that a task reads become placeholders ``_feed_<i>`` (their values ride in the
step's RunGraph); every other node keeps its name, device and debug info (an error on the
worker names the user's line). Used by ``master.py`` when it compiles a run.
"""
from __future__ import annotations

from asyncflow import errors
from asyncflow.graph.graph_def import encode_attr, node_def


def task_graph_def(nodes, feeds, feed_indices, fetch_ports):
    """One task's graph_def, from its compile-time nodes (``compile/node_graph.py``, topological);
    fed tensors become ``_feed_<i>`` placeholders. Returns ``(graph_def, fetch names)``."""
    feed_index = {id(feeds[i]): i for i in feed_indices}

    def name_of(port):
        producer, index = port
        tensor = getattr(producer, "tensor", None)  # a FeedNode: the client feeds it
        if tensor is not None:
            return f"_feed_{feed_index[id(tensor)]}:0"
        return f"{producer.name}:{index}"
    defs = []
    for i in feed_indices:
        tensor = feeds[i]
        defs.append({"name": f"_feed_{i}", "op": "Placeholder", "input": [], "device": "",
                     "attr": {"dtype": encode_attr(tensor.dtype),
                              "shape": encode_attr(tensor.shape)}})
    for node in nodes:
        try:  # debug_info: errors on the worker name the user's line
            nd = node_def(node, debug_info=True, inputs=[name_of(p) for p in node.inputs])
        except ValueError as exc:
            raise errors.UnimplementedError(None, node, f"{exc}: this op cannot be sent to a "
                                            "worker") from None
        defs.append(nd)
    return {"node": defs}, [name_of(port) for port in fetch_ports]
