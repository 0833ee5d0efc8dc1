"""Which cross-worker transfers may share one RecvTensors request (computed by the master).

A worker pulls the remote tensors of a step that its Recvs ask for in the same scheduling round
with one request per peer, and the peer answers once *every* key of it has been sent. That is
a deadlock if one key's value depends on something the requesting worker R computes only after
it has received another key of the same request. So a transfer (a Send on peer P, its Recv on R)
is *batchable* when no node of R among its value's ancestors waits on a remote pull itself:

    batchable(k)  iff  no R-node in ancestors(Send_k) depends on a Recv of R from another task

Ancestors are followed across workers: through data and control inputs within a partition, and
from each Recv to its Send. Under that rule every R-node that a batched key needs can run
without any pulled value, so every key of a request is produced whatever R does with the others.

Transfers inside a while loop are never batched: an iteration's values also wait on implicit
edges the graph does not show (``parallel_iterations`` holds iteration i+N until iteration i is
done on every device), so the rule above cannot vouch for them. The loops' back edges make the
dependency graph cyclic; ``_waits_on_pull`` is a reachability search, so it visits each node once.

Example (the parameter server step): the ps pulls gradients from a worker; their ancestors on
the ps are the parameter reads, which wait on no pull, so all gradients travel in one request.
In a ping-pong (w1 sends ``a``, w0 sends back ``2a``, w1 sends ``2a + 5``), w0's pull of the last
value is not batchable: its w0 ancestor ``2a`` waits on w0's pull of ``a``.

Pure data over the partitioned nodes: no trio, no transports.
"""
from __future__ import annotations

from asyncflow.graph.partition_loops import loop_of
from asyncflow.graph.rewrite import FeedNode


def task_of(device):
    return device.split("/device:", 1)[0]


def _producers(node, send_of):
    out = [p for p, _ in node.inputs if not isinstance(p, FeedNode)]
    out += list(node.control_inputs)
    if node.type == "_Recv":
        send = send_of.get(node.attrs["tensor_name"])
        if send is not None:
            out.append(send)
    return out


def batchable_transfers(partitions):
    """Tensor names of the Send/Recv pairs whose pulls may be batched (see module docstring).

    Args:
        partitions: the partitioned graph's partitions (``graph.partition.Partition``).

    Returns:
        A set of ``tensor_name`` attrs (cross-task transfers outside while loops only).
    """
    nodes = [n for part in partitions for n in part.nodes]
    send_of = {n.attrs["tensor_name"]: n for n in nodes if n.type == "_Send"}
    pulls = {n for n in nodes if n.type == "_Recv"
             and task_of(n.attrs["send_device"]) != task_of(n.device)}
    waits_on_pull = _waits_on_pull(nodes, pulls, send_of)
    out = set()
    for recv in pulls:
        if loop_of(recv.control_flow_context) is not None:
            continue
        requester = task_of(recv.device)
        send = send_of.get(recv.attrs["tensor_name"])
        if send is None:
            continue
        if not any(task_of(n.device) == requester and waits_on_pull.get(n, False)
                   for n in _ancestors(send, send_of)):
            out.add(recv.attrs["tensor_name"])
    return out


def _waits_on_pull(nodes, pulls, send_of):
    """``{node: True}`` for nodes that transitively depend on a pull of their own task.

    Computed forward from the pulls (a reachability search), so the cycles of while loops
    (a Merge reads its NextIteration) are visited once each.
    """
    consumers = {}
    for node in nodes:
        task = task_of(node.device)
        for producer in _producers(node, send_of):
            if task_of(producer.device) == task:
                consumers.setdefault(producer, []).append(node)
    memo = dict.fromkeys(pulls, True)
    stack = list(pulls)
    while stack:
        for consumer in consumers.get(stack.pop(), ()):
            if consumer not in memo:
                memo[consumer] = True
                stack.append(consumer)
    return memo


def _ancestors(node, send_of):
    seen, stack = set(), [node]
    while stack:
        current = stack.pop()
        for producer in _producers(current, send_of):
            if producer not in seen:
                seen.add(producer)
                stack.append(producer)
    return seen
