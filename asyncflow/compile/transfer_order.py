"""Which cross-worker transfers may share one RecvTensors request (computed by the master).

A worker pulls the remote tensors of a step that its Recvs ask for in the same scheduling round
with one request per peer, and the peer answers once *every* key of it has been sent. That is
a deadlock if one key's value depends, by any path, on the requesting worker receiving another
key of the same request, or on a request of another worker that waits for such a key.

So every transfer gets a **level**, the length of the longest chain of pulls behind it:

    level(k) = 0                                  if no pull (by any task) is among the
                                                  ancestors of Send_k
    level(k) = 1 + max(level(p) for the pulls p among the ancestors of Send_k)   otherwise

and a request only ever carries keys of **one peer and one level**. Keys of a request never
depend on each other (a path from one key to another passes through the requester's Recv of
the first, which would give the second a higher level), and a key of level L depends only on
pulls of lower levels. By induction on L every request is answered, whatever the
interleaving, so batching cannot deadlock. The chain crosses workers (a Recv's producer is its
Send), so two workers exchanging values crosswise (w0 pulls ``b`` and ``f(a)`` from w1 while w1
pulls ``a`` and ``g(b)`` from w0) get two requests each, never one holding both.

Transfers inside a while loop are never batched, nor those downstream of one: an iteration's
values also wait on implicit edges the graph does not show (``parallel_iterations`` holds
iteration i+N until iteration i is done on every device), and the loops' back edges make the
chains unbounded. Levels are a longest-path pass in topological order (Kahn), so nodes on a
cycle are visited once and left without a level.

Example (the parameter-server step): the worker pulls the parameters (level 0, one request)
and the ps pulls all gradients (level 1, one request), in place of one request per tensor.
(The train op's control edges from the updates would be level 2; the master drops them before
partitioning, ``control_edges.py``.)
In a ping-pong (w1 sends ``a``, w0 sends back ``2a``, w1 sends ``2a + 5``) the three values
have levels 0, 1 and 2 and travel one by one.

Pure data over the partitioned nodes: no trio, no transports.
"""
from __future__ import annotations

from asyncflow.device_names import task_of
from asyncflow.compile.partition_loops import loop_of
from asyncflow.compile.node_graph import FeedNode




def _producers(node, send_of):
    out = [p for p, _ in node.inputs if not isinstance(p, FeedNode)]
    out += list(node.control_inputs)
    if node.type == "_Recv":
        send = send_of.get(node.attrs["tensor_name"])
        if send is not None:
            out.append(send)
    return out


def transfer_levels(partitions):
    """``{tensor_name: level}`` of the cross-task transfers that may share a request (see the
    module docstring); pulls of one peer and one level go out together.

    Args:
        partitions: the partitioned graph's partitions (``compile.partition.Partition``).

    Returns:
        A dict from the ``tensor_name`` attr of each batchable transfer to its level (an int
        from 0); transfers inside or downstream of a while loop are absent.
    """
    nodes = [n for part in partitions for n in part.nodes]
    send_of = {n.attrs["tensor_name"]: n for n in nodes if n.type == "_Send"}
    pulls = {n for n in nodes if n.type == "_Recv"
             and task_of(n.attrs["send_device"]) != task_of(n.device)}
    members = set(nodes)
    producers = {n: [p for p in _producers(n, send_of) if p in members] for n in nodes}
    for recv in pulls:  # a pull without its Send in the graph never gets a level
        if send_of.get(recv.attrs["tensor_name"]) not in members:
            producers[recv] = producers[recv] + [recv]
    consumers, pending = {}, {}
    for node, inputs in producers.items():
        pending[node] = len(inputs)
        for producer in inputs:
            consumers.setdefault(producer, []).append(node)
    # depth[n]: the highest level of a pull among n and its ancestors (-1: none); nodes on
    # or after a loop cycle are never reached and get none.
    depth = {}
    ready = [n for n in nodes if pending[n] == 0]
    while ready:
        node = ready.pop()
        below = max((depth[p] for p in producers[node]), default=-1)
        if node in pulls:  # its level: one more than its Send's (its producers include it)
            below = max(below, depth[send_of[node.attrs["tensor_name"]]] + 1)
        depth[node] = below
        for consumer in consumers.get(node, ()):
            pending[consumer] -= 1
            if pending[consumer] == 0:
                ready.append(consumer)
    levels = {}
    for recv in pulls:
        send = send_of.get(recv.attrs["tensor_name"])
        if send in depth and recv in depth and loop_of(recv.control_flow_context) is None:
            levels[recv.attrs["tensor_name"]] = depth[send] + 1
    return levels


def start_order(tasks, partitions, levels):
    """Indices into ``tasks`` (task names) in the order the master sends their RunGraphs.

    A task's wait is the lowest level (``transfer_levels``) among the transfers it receives from
    other tasks (a transfer without a level counts as 0; a task that receives none waits for
    nothing). The master sends the RunGraphs in this order, so a producer (the ps reading its
    variables) starts before its consumers ask it for values, and their pulls find the values
    deposited instead of waiting for the producer's RunGraph to arrive behind theirs.
    """
    waits = {}
    for part in partitions:
        task = task_of(part.device)
        for node in part.nodes:
            if node.type == "_Recv" and task_of(node.attrs["send_device"]) != task:
                level = levels.get(node.attrs["tensor_name"], 0)
                waits[task] = min(waits.get(task, level), level)
    order = sorted(range(len(tasks)), key=lambda i: -waits.get(tasks[i], float("inf")))
    return tuple(order)


# A transfer below this size (by its Recv's static shape) is pushed by its producer; larger
# ones, and those of unknown size, are pulled: from this size on a same-host reply lends a
# tensor's memory instead of copying it through the socket (transports' LEND_BYTES).
PUSH_MAX_BYTES = 1 << 20


def pushed_transfers(partitions, levels, max_bytes=None):
    """The tensor names of the cross-task transfers whose producer pushes them (sorted).

    A push (``PushTensors``) goes out as soon as the producer's Send runs, so the consumer's
    Recv finds its value there instead of asking for it: the request leg of a pull leaves the
    step's critical path. Pushed are the transfers with a level (``transfer_levels``: none in
    or after a while loop, whose iterations also wait on edges the graph does not show) and a
    static size below ``max_bytes`` (default ``PUSH_MAX_BYTES``; 0 pushes none); strings and
    tensors of unknown shape are pulled. Pushes never wait on the consumer (it deposits
    and answers), so they need no levels of their own.
    """
    limit = PUSH_MAX_BYTES if max_bytes is None else max_bytes
    out = set()
    for part in partitions:
        for node in part.nodes:
            if node.type != "_Recv" or node.attrs["tensor_name"] not in levels or \
                    task_of(node.attrs["send_device"]) == task_of(node.device):
                continue
            dtype, shape = node.attrs.get("dtype"), node.attrs.get("shape")
            if dtype is None or dtype.is_string or dtype.np in (None, object) or \
                    shape is None or not shape.is_fully_defined():
                continue
            if shape.num_elements() * dtype.size < limit:
                out.add(node.attrs["tensor_name"])
    return sorted(out)
