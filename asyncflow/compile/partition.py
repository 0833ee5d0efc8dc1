"""Partitioning: split a placed NodeGraph per device, with Send/Recv on every crossing edge.

Theory of operation (paper §3.2.2; docs/architecture.md):
- A data edge from a producer on device A to a consumer on device B becomes
  ``producer -> _Send`` on A and ``_Recv -> consumer`` on B. There is one Send/Recv pair per
  (tensor, destination device): every consumer of that tensor on B shares the one Recv, so
  the data moves once.
- A control edge from A to B becomes a tiny ``Const`` (control input: the producer) ``->
  _Send`` on A and ``_Recv -> Identity -> control edge`` on B, one per (producer, B).
- Both ends carry the same attrs (``tensor_name``, ``send_device``,
  ``send_device_incarnation``, ``recv_device``), from which each process builds the same
  rendezvous key ``src;incarnation_hex;dst;tensor_name;frame:iter`` with no hashing, so keys
  agree across processes. ``tensor_name`` is ``edge_<n>_<producer>_<slot>`` with ``n``
  counting crossings in topological order.
- float32 data edges may travel lossily as bfloat16 (``compress`` attr): per edge through
  ``set_transfer_compression(tensor, mode)`` or for the whole session.
- Fed tensors need no transfer: the caller's value goes to every partition that reads it.
- Small constants need none either across tasks: a ``Const`` without inputs, control inputs
  or loop frame, of at most ``CONST_COPY_BYTES``, read on another task gets a copy there
  (``<name>/_copy_<device>``) instead of a Send/Recv, saving a pull per step (e.g. an
  optimizer's learning rate built on the worker and read by the ps's update ops).

The result is data (``Partitioned``): per device its nodes in topological order, which feeds
it reads, and where each fetch is produced. Pure: no trio, no kernels.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from asyncflow import dtypes
from asyncflow.device_names import device_of, task_of
from asyncflow.compile.partition_loops import add_control_loops, colocate_loop_edges
from asyncflow.graph.registry import get_op_def
from asyncflow.compile.node_graph import FeedNode, Node, NodeGraph, topological
from asyncflow.graph.shape import TensorShape

COMPRESSION_MODES = ("truncate", "round")
CONST_COPY_BYTES = 1024
_EDGE_COMPRESSION = "transfer_compression"


def set_transfer_compression(tensor, mode):
    """Send ``tensor`` across devices as bfloat16 (``"truncate"``/``"round"``), or never (``""``).

    The per-edge choice overrides ``SessionConfig.compress_transfers``; it only affects
    float32 tensors.

    Raises:
        ValueError: for an unknown mode.
    """
    if mode not in COMPRESSION_MODES + ("", None):
        raise ValueError(f"compression mode must be one of {COMPRESSION_MODES} or '', got {mode!r}")
    table = tensor.graph.extensions.setdefault(_EDGE_COMPRESSION, {})
    table[tensor.name] = mode or ""


def edge_compression(graph):
    """``{tensor name: mode}`` chosen with ``set_transfer_compression`` in ``graph``."""
    return dict(graph.extensions.get(_EDGE_COMPRESSION, {}))


@dataclasses.dataclass
class Partition:
    """One device's share: nodes (topological), and the indices of the feeds it reads."""

    device: str
    nodes: list
    feeds: list


@dataclasses.dataclass
class Partitioned:
    """Partitions (ordered by the session's device order), and per fetch its partition index
    and port; ``graph`` holds every node including the Send/Recv pairs."""

    partitions: list
    fetches: list
    graph: NodeGraph


class _Builder:
    def __init__(self, incarnations, compress, per_edge):
        self.incarnations = incarnations
        self.compress = compress or ""
        self.per_edge = per_edge
        self.count = 0
        self.recv_of = {}      # (producer, index, dst) -> Recv node
        self.control_of = {}   # (producer, dst) -> Identity node
        self.copy_of = {}      # (Const producer, dst) -> its copy on dst's task
        self.added = []

    def _attrs(self, name, src, dst):
        return {"tensor_name": name, "send_device": src, "recv_device": dst,
                "send_device_incarnation": int(self.incarnations[src]),
                "client_terminated": False}

    def _pair(self, producer, index, dst, spec, compress):
        """Add a Send after ``(producer, index)`` and a Recv on ``dst``; returns the Recv."""
        dtype, shape, _ = spec
        name = f"edge_{self.count}_{producer.name}_{index}"
        self.count += 1
        attrs = self._attrs(name, producer.device, dst)
        attrs["compress"] = compress if dtype is dtypes.float32 else ""
        send = Node(f"{name}/_Send", "_Send", get_op_def("_Send"), dict(attrs),
                    [(producer, index)], [], producer.device, (), producer.traceback,
                    producer.seq + 0.5)
        recv = Node(f"{name}/_Recv", "_Recv", get_op_def("_Recv"),
                    dict(attrs, dtype=dtype, shape=shape), [], [], dst,
                    [(dtype, shape, False)], producer.traceback, producer.seq + 0.5)
        self.added += [send, recv]
        return recv

    def data_input(self, producer, index, consumer):
        if task_of(producer.device) != task_of(consumer.device) and _copyable_const(producer):
            return (self._const_copy(producer, consumer.device), 0)
        key = (producer, index, consumer.device)
        recv = self.recv_of.get(key)
        if recv is None:
            tensor_name = f"{producer.name}:{index}"
            compress = self.per_edge.get(tensor_name, self.compress)
            recv = self.recv_of[key] = self._pair(producer, index, consumer.device,
                                                  producer.out_spec(index), compress)
        return (recv, 0)

    def _const_copy(self, const, device):
        copy = self.copy_of.get((const, device))
        if copy is None:
            copy = self.copy_of[(const, device)] = Node(
                f"{const.name}/_copy_{device_of(device)}", "Const", const.op_def,
                dict(const.attrs), [], [], device, const.out_specs, const.traceback,
                const.seq + 0.5)
            self.added.append(copy)
        return copy

    def control_input(self, producer, consumer):
        key = (producer, consumer.device)
        identity = self.control_of.get(key)
        if identity is None:
            value = np.zeros((0,), np.float32)
            const = Node(f"{producer.name}/_control_const_{self.count}", "Const",
                         get_op_def("Const"), {"value": value, "dtype": dtypes.float32}, [],
                         [producer], producer.device, [(dtypes.float32, TensorShape([0]), False)],
                         producer.traceback, producer.seq + 0.25)
            self.added.append(const)
            recv = self._pair(const, 0, consumer.device, const.out_specs[0], "")
            identity = Node(f"{recv.name}/_control_identity", "Identity", get_op_def("Identity"),
                            {}, [(recv, 0)], [], consumer.device,
                            [(dtypes.float32, TensorShape([0]), False)], producer.traceback,
                            producer.seq + 0.75)
            self.added.append(identity)
            self.control_of[key] = identity
        return identity




def _copyable_const(node):
    if node.type != "Const" or node.inputs or node.control_inputs or \
            node.control_flow_context is not None:
        return False
    value = node.attrs.get("value")
    return value is not None and np.asarray(value).nbytes <= CONST_COPY_BYTES


def partition(node_graph, devices, incarnations, compress=None, per_edge=None):
    """Split ``node_graph`` per device, adding Send/Recv pairs on crossing edges.

    Args:
        node_graph: a placed NodeGraph (not modified).
        devices: full device names in the session's order (orders the partitions).
        incarnations: ``{device name: int}``, each device's incarnation.
        compress: the session's lossy mode for float32 crossings (None, "truncate", "round").
        per_edge: ``{tensor name: mode}`` overriding ``compress`` per original tensor.

    Returns:
        A Partitioned.
    """
    graph = node_graph.copy()
    if colocate_loop_edges(graph.nodes):  # a back edge or an Enter must not cross devices
        graph.changed = True
    builder = _Builder(incarnations, compress, per_edge or {})
    for node in graph.nodes:
        inputs = []
        for producer, index in node.inputs:
            if isinstance(producer, FeedNode) or producer.device == node.device:
                inputs.append((producer, index))
            else:
                inputs.append(builder.data_input(producer, index, node))
        node.inputs = inputs
        node.control_inputs = [c if c.device == node.device else builder.control_input(c, node)
                               for c in node.control_inputs]
    # Recvs inside while loops need per-(frame, device) control loops (partition_loops).
    control_loops = add_control_loops(graph.nodes + builder.added, builder, Node)
    if builder.added:
        graph.changed = True
    graph.nodes = graph.nodes + builder.added + control_loops
    by_device = {}
    for node in graph.nodes:
        by_device.setdefault(node.device, []).append(node)
    order = {d: i for i, d in enumerate(devices)}
    partitions, index_of = [], {}
    feed_index = {t: i for i, t in enumerate(graph.feeds)}
    for device in sorted(by_device, key=lambda d: (order.get(d, len(order)), d)):
        nodes = topological(by_device[device])
        feeds = sorted({feed_index[p.tensor] for n in nodes for p, _ in n.inputs
                        if isinstance(p, FeedNode)})
        index_of[device] = len(partitions)
        partitions.append(Partition(device, nodes, feeds))
    fetches = []
    for port in graph.fetches:
        producer = port[0]
        fetches.append((index_of[producer.device], port))
    graph.nodes = [n for p in partitions for n in p.nodes]
    return Partitioned(partitions, fetches, graph)
