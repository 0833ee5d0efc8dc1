"""Cross-task control edges a distributed step does not need to carry (computed by the master).

A control edge from an op on task A to an op on task B costs the step a transfer: the
partitioner turns it into ``Const -> _Send`` on A and ``_Recv -> Identity`` on B, and B pulls
it with a RecvTensors request that A answers only once the producer ran. In the
parameter-server step that is the train op's wait for the ps's updates: after the ps applied
the gradients, it answers the worker's pull, and only then does the worker's RunGraph end.

Many such edges carry nothing a step needs. A **sink group** is a ``NoOp`` (``tf.group``, the
op ``minimize`` returns) whose every consumer, by data or control edge, is itself a sink group,
outside any while loop: running it has no effect, and nothing in the step waits for it. A
control input of a sink group from another task only orders a no-op after its producer. The
master already waits for every task's RunGraph, and every op shipped to a worker is a target
there (``worker.py``), so the producer runs before the step ends whether or not the edge is
carried. The master drops these edges before partitioning: the step keeps its meaning (the
updates are applied when ``Session.run`` returns; an update's failure fails the step) and
loses one transfer per edge, and with it the last request of the parameter-server step.

Edges into anything else are kept: a stateful op or a value read after a remote op must wait
for it, and the step's order is the graph's.

Example: ``train = opt.minimize(loss)`` placed on ``/job:worker/task:0`` with the variables on
``/job:ps/task:0`` is a NoOp with four control inputs, the ps's ApplyGradientDescent ops.
Nothing consumes ``train``, so its four cross-task control inputs go; the worker's RunGraph
ends with its own last op, and the ps's with the updates.

Pure data over the placed nodes: no trio, no transports.
"""
from __future__ import annotations


def _task(device):
    return (device or "").split("/device:", 1)[0]


def sink_groups(node_graph):
    """The NoOps of ``node_graph`` whose every consumer is a sink group (see the docstring)."""
    consumers = {node: [] for node in node_graph.nodes}
    for node in node_graph.nodes:
        for producer, _ in node.inputs:
            if producer in consumers:
                consumers[producer].append(node)
        for producer in node.control_inputs:
            if producer in consumers:
                consumers[producer].append(node)
    fetched = {port[0] for port in node_graph.fetches}
    sinks = set()
    for node in reversed(node_graph.nodes):  # topological: consumers come later
        if node.type == "NoOp" and node.control_flow_context is None and node not in fetched \
                and all(c in sinks for c in consumers[node]):
            sinks.add(node)
    return sinks


def drop_remote_controls_of_sinks(node_graph):
    """Remove the control inputs that sink groups take from other tasks; returns how many.

    Modifies ``node_graph``'s nodes (the master's own copy for one compile) and marks it
    changed when it removed any.
    """
    dropped = 0
    for node in sink_groups(node_graph):
        task = _task(node.device)
        kept = [c for c in node.control_inputs
                if _task(c.device) == task or c.control_flow_context is not None]
        dropped += len(node.control_inputs) - len(kept)
        node.control_inputs = kept
    if dropped:
        node_graph.changed = True
    return dropped
