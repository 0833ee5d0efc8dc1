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
for it, and the step's order is the graph's. But a control edge through a NoOp on another
task may be **bypassed**: an op ``C`` that waits for a NoOp ``N`` waits, in effect, for ``N``'s
control inputs, so ``C`` may take those directly. The master does so when it carries fewer
cross-task transfers (counted per edge, as the partitioner makes them) than the path through
``N``; afterwards ``N`` may be a sink group and lose its own cross-task inputs. That is the
global step: ``minimize(loss, global_step)`` builds ``update`` (a NoOp beside the gradients, on
the worker, waiting for the ps's updates) and the ps's ``AssignAdd`` of the step counter,
which waits for ``update``: a control ping-pong ps -> worker -> ps in every step. The
increment's ``1`` is a Const built under the same control dependency on the worker; a small
Const with control inputs carries nothing but them, so each task that reads one gets a
**copy** with the same control inputs (``copy_gated_consts``), and the original goes when
nothing reads it. Copied and bypassed, the increment waits for the updates on its own task,
and no control edge crosses a task.

Example: ``train = opt.minimize(loss)`` placed on ``/job:worker/task:0`` with the variables on
``/job:ps/task:0`` is a NoOp with four control inputs, the ps's ApplyGradientDescent ops.
Nothing consumes ``train``, so its four cross-task control inputs go; the worker's RunGraph
ends with its own last op, and the ps's with the updates.

Pure data over the placed nodes: no trio, no transports.
"""
from __future__ import annotations

import numpy as np

from asyncflow.device_names import device_of, task_of as _task
from asyncflow.compile.partition import CONST_COPY_BYTES
from asyncflow.compile.node_graph import Node




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


def _plain(node):
    return node.control_flow_context is None


def bypass_remote_noops(node_graph):
    """Let ops wait for the control inputs of a NoOp on another task instead of the NoOp,
    where that carries fewer cross-task transfers; returns how many edges were replaced.

    Modifies ``node_graph``'s nodes (see ``drop_remote_controls_of_sinks``).
    """
    uses = {}  # node -> how many edges consume it
    for node in node_graph.nodes:
        for producer in [p for p, _ in node.inputs] + node.control_inputs:
            uses[producer] = uses.get(producer, 0) + 1
    bypassed = 0
    for node in node_graph.nodes:  # topological: a NoOp's own inputs are already rewritten
        if not _plain(node):
            continue
        task = _task(node.device)
        controls, replaced = [], False
        for control in node.control_inputs:
            through = control.control_inputs
            if control.type == "NoOp" and _plain(control) and _task(control.device) != task \
                    and all(_plain(p) for p in through):
                # The NoOp's own inputs stop crossing only if nothing else consumes it.
                before = 1 + (sum(_task(p.device) != _task(control.device) for p in through)
                              if uses.get(control) == 1 else 0)
                after = sum(_task(p.device) != task for p in through)
                if after < before:
                    controls.extend(through)
                    replaced = True
                    bypassed += 1
                    continue
            controls.append(control)
        if replaced:
            node.control_inputs = list(dict.fromkeys(controls))
    if bypassed:
        node_graph.changed = True
    return bypassed


def copy_gated_consts(node_graph):
    """Give each task that reads a small Const built under a control dependency its own copy
    (same value, same control inputs); returns how many copies were made.

    Such a Const carries no information but its control inputs, so its value need not travel:
    the copy waits for the same ops. The original goes when nothing reads it any more (it has
    no effect). Modifies ``node_graph``'s nodes.
    """
    targets = set(node_graph.targets) | {port[0] for port in node_graph.fetches}
    copies, order = 0, []
    readers, control_users = {}, set()
    for node in node_graph.nodes:
        for producer, _ in node.inputs:
            readers.setdefault(producer, []).append(node)
        control_users.update(node.control_inputs)
    for node in node_graph.nodes:
        order.append(node)
        value = node.attrs.get("value") if node.type == "Const" else None
        if value is None or node.inputs or not node.control_inputs or not _plain(node) or \
                np.asarray(value).nbytes > CONST_COPY_BYTES:
            continue
        made = {}
        for reader in readers.get(node, ()):
            if _task(reader.device) == _task(node.device) or not _plain(reader):
                continue
            copy = made.get(reader.device)
            if copy is None:
                copy = made[reader.device] = Node(
                    f"{node.name}/_copy_{device_of(reader.device)}", "Const", node.op_def,
                    dict(node.attrs), [], list(node.control_inputs), reader.device,
                    node.out_specs, node.traceback, node.seq + 0.5)
                order.append(copy)
                copies += 1
            reader.inputs = [(copy, i) if p is node else (p, i) for p, i in reader.inputs]
        still_read = any(p is node for r in readers.get(node, ()) for p, _ in r.inputs)
        if made and node not in targets and not still_read and node not in control_users:
            order.remove(node)  # read by nobody now: it has no effect
    if copies:
        node_graph.nodes = order
        node_graph.changed = True
    return copies


def carry_fewer_control_edges(node_graph):
    """Copy gated Consts, bypass remote NoOps, then drop the sink groups' cross-task control
    inputs (see the module docstring); returns ``(copied, bypassed, dropped)`` counts."""
    return (copy_gated_consts(node_graph), bypass_remote_noops(node_graph),
            drop_remote_controls_of_sinks(node_graph))


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
