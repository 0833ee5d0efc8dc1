"""From a pruned run signature to per-device ExecutionPlans, and running them as one step.

Theory of operation (DESIGN.md, data flow steps 2-3):
1. ``graph.placement.place`` gives every op a device (constraints, colocation, soft
   placement, then the greedy cost model); stateful ops keep the device an earlier compile of
   the same session gave them (``DeviceState.pinned``).
2. With ``optimize_graph`` on, CSE and constant folding run on a rewritable copy
   (``graph.rewrite.NodeGraph``); folding evaluates constant subgraphs here with the host
   kernels.
3. ``graph.partition.partition`` splits per device with Send/Recv pairs; ALAP Recv
   scheduling follows. Each partition becomes fresh Operations (``materialize``) and then an
   ExecutionPlan. When everything sits on one device and no pass changed anything, the
   user's own ops are compiled directly (the common case costs nothing extra).
4. ``run_partitions`` runs the partitions of a step around one ``LocalRendezvous``. It first
   *starts* every CPU partition inline in the calling task (``executor.start_plan``), one
   after the other: a partition's Recv whose Send has not run yet subscribes, and a later
   partition's Send completes it there, the step's driver draining the partition it fed
   (``drive``). Partitions that finish this way need no task; a
   step whose partitions all finish (the common small step) opens no nursery at all. Runs
   that stopped only because the time slice ran out (``executor.paused``) go on in the same
   task after a checkpoint, one slice at a time, for as long as nothing else stops them. The
   partitions left (kernels that must run as tasks, Recvs from elsewhere, GPU devices,
   control flow) each get a task in one nursery and finish as before. The first failure
   aborts the rendezvous (waking every Recv) and cancels the other partitions, and is the
   error raised: the root cause, never a derived cancellation and never an ExceptionGroup.
   Fetched values leave their device through ``device.to_host`` (an awaited stream event on
   a GPU).
"""
from __future__ import annotations

import dataclasses
import secrets

import trio

from asyncflow import errors
from asyncflow.graph import optimize, partition as _partition, placement as _placement
from asyncflow.graph.graph import Operation
from asyncflow.graph.rewrite import NodeGraph, materialize
from asyncflow.kernels.registry import get_kernel, supported_device_kinds
from asyncflow.runtime import executor
from asyncflow.runtime import timeslice
from asyncflow.runtime.context import NodeContext
from asyncflow.runtime.plan import compile_plan
from asyncflow.runtime.rendezvous import LocalRendezvous


@dataclasses.dataclass
class DeviceState:
    """What one session remembers across compiles: device incarnations, pinned placements."""

    devices: list
    incarnations: dict = dataclasses.field(default_factory=dict)
    pinned: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        for device in self.devices:
            self.incarnations.setdefault(device.name, secrets.randbits(63) | 1)

    def by_name(self, name):
        return next(d for d in self.devices if d.name == name)


@dataclasses.dataclass
class CompiledRun:
    """One signature's plans, which feeds each reads, and where each fetch comes from."""

    plans: list
    feed_routes: list      # per plan: indices into the run's feed list
    fetch_routes: list     # per fetch: (plan index, position in that plan's fetches)
    placement: dict = dataclasses.field(default_factory=dict)   # op name -> device


def _contains_control_flow(ops):
    return any(op.op_def.control_flow or op._control_flow_context is not None for op in ops)


def _host_evaluator(graph, device, resources):
    """``evaluate(nodes, ports)`` for constant folding: run host kernels inline, or None."""
    def evaluate(nodes, ports):
        try:
            ops, tensor_of = materialize(nodes, graph)
            values = {}
            for op in ops:
                kernel = get_kernel(op.type, device.kind)
                if kernel is None or kernel.is_async:
                    return None
                args = [values[t] for t in op._inputs]
                for tensor, value in zip(op._outputs, kernel.fn(NodeContext(op, device, resources),
                                                                 *args)):
                    values[tensor] = value
            return [values[tensor_of(p)] for p in ports]
        except Exception:  # leave the error to the run, which reports it with its op
            return None
    return evaluate


def compile_run(graph, ops, feeds, fetches, targets, state, config, resources):
    """Place, optimize, partition and compile ``ops`` (pruned, topologically ordered).

    Returns:
        A CompiledRun.

    Raises:
        InvalidArgumentError: an unsatisfiable device request.
        NotFoundError: an op without a kernel on its device.
    """
    names = [d.name for d in state.devices]
    placed = _placement.place(ops, names, supported_device_kinds,
                              allow_soft_placement=config.allow_soft_placement,
                              pinned=state.pinned)
    for op, device in placed.assignment.items():
        if op.op_def.stateful:
            state.pinned.setdefault(op.name, device)
    if config.log_device_placement:
        for line in placed.log:
            print(line)
    feeds, fetches = list(feeds), list(fetches)
    node_graph = NodeGraph.from_ops(ops, feeds, fetches, targets, placed.assignment)
    if config.optimize_graph and not _contains_control_flow(ops):
        node_graph = optimize.eliminate_common_subexpressions(node_graph)
        host = state.devices[0]
        node_graph = optimize.fold_constants(node_graph, _host_evaluator(graph, host, resources))
    used = {n.device for n in node_graph.nodes}
    if len(used) <= 1 and not node_graph.changed:
        device = state.by_name(used.pop()) if used else state.devices[0]
        plan = _compile_plan(ops, feeds, fetches, device, resources)
        return CompiledRun([plan], [list(range(len(feeds)))],
                           [(0, i) for i in range(len(fetches))], placed.by_name())
    parts = _partition.partition(node_graph, names, state.incarnations,
                                 compress=config.compress_transfers,
                                 per_edge=_partition.edge_compression(graph))
    if config.optimize_graph:
        optimize.schedule_recvs(parts)
    plans, feed_routes, fetch_lists = [], [], []
    for part in parts.partitions:
        part_ops, tensor_of = materialize(part.nodes, graph)
        part_fetches = [tensor_of(port) for index, port in parts.fetches
                        if parts.partitions[index] is part]
        part_fetches = list(dict.fromkeys(part_fetches))
        part_feeds = [feeds[i] for i in part.feeds]
        plans.append(_compile_plan(part_ops, part_feeds, part_fetches,
                                   state.by_name(part.device), resources))
        feed_routes.append(list(part.feeds))
        fetch_lists.append((part_fetches, tensor_of))
    fetch_routes = []
    for index, port in parts.fetches:
        part_fetches, tensor_of = fetch_lists[index]
        fetch_routes.append((index, part_fetches.index(tensor_of(port))))
    return CompiledRun(plans, feed_routes, fetch_routes, placed.by_name())


def _compile_plan(ops, feeds, fetches, device, resources):
    plan = compile_plan(ops, feeds, fetches, device, resources)
    bind = getattr(device, "bind_plan", None)
    if bind is not None:
        bind(plan)
    return plan


def _original_op(exc, graph):
    """Errors from a partition name the user's Operation, not its compile-time copy."""
    op = getattr(exc, "op", None)
    if isinstance(op, Operation):
        original = graph._ops_by_name.get(op.name)
        if original is not None and original is not op:
            exc.op = original
    return exc


async def _fetch_to_host(plan, values):
    to_host = plan.device.to_host
    return [await to_host(v) for v in values]


async def run_partitions(graph, compiled, feed_values, step):
    """Run every plan of ``compiled`` for ``step``; returns the fetched values in order.

    Raises:
        OpError: the first failure of any partition (its root cause).
    """
    plans = compiled.plans
    timeslice.begin()
    if len(plans) == 1:
        device = plans[0].device
        try:
            values = await executor.run_plan(plans[0], [device.put(v) for v in feed_values], step)
        except errors.OpError as exc:
            _original_op(exc, graph)
            raise
        host = await _fetch_to_host(plans[0], values)
        # CSE may have merged fetches: the routes map each requested fetch to its value.
        return [host[position] for _, position in compiled.fetch_routes]
    if step.rendezvous is None:
        step.rendezvous = LocalRendezvous()
    results = [None] * len(plans)
    runs = [None] * len(plans)  # runs started inline; None: runs whole as a task
    try:
        failure = _start_inline(compiled, feed_values, step, runs)
        if failure is None:
            failure = await _go_on_inline(step, runs)
        if failure is None:
            left = []
            for index, run in enumerate(runs):
                if run is None or run.remaining:
                    left.append(index)
                else:  # finished inline: a CPU device's ``to_host`` does not suspend
                    run.close()
                    results[index] = await _fetch_to_host(plans[index], run.values())
            if left:
                failure = await _finish_in_tasks(compiled, feed_values, step, runs, left,
                                                 results)
    finally:
        for run in runs:
            if run is not None:
                run.close()  # idempotent; drops the subscriptions of a cancelled step
    if failure is not None:
        raise _original_op(failure, graph)
    return [results[plan_index][position] for plan_index, position in compiled.fetch_routes]


def _start_inline(compiled, feed_values, step, runs):
    """Start the CPU partitions in the calling task (``runs[i]``); returns the first failure.

    On a failure the started runs are closed (their subscriptions dropped) and the rendezvous
    is aborted, waking anything else waiting on it (nothing runs as a task yet).
    """
    started = []
    for index, plan in enumerate(compiled.plans):
        try:
            run = executor.start_plan(
                plan, [plan.device.put(feed_values[i]) for i in compiled.feed_routes[index]],
                step)
        except Exception as exc:  # noqa: BLE001 - becomes the step's error, as in a task
            failure = exc
        else:
            if run is None:
                continue
            runs[index] = run
            started.append(run)
            # This drain may have run (and failed) partitions started before.
            failure = next((r.failure for r in started if r.failure is not None), None)
        if failure is not None:
            return _abandon_inline(step, started, failure)
    return None


def _abandon_inline(step, runs, failure):
    """Close the inline ``runs`` (dropping their subscriptions) and abort the step's rendezvous
    with ``failure``, waking anything waiting on it; returns ``failure``."""
    for run in runs:
        run.close()
    step.rendezvous.abort(failure)
    return failure


async def _go_on_inline(step, runs):
    """While every unfinished run only paused at the end of a time slice (none needs a task),
    checkpoint and resume them in this task; returns the first failure (see ``_start_inline``).
    """
    while all(run is not None and not run.waiting for run in runs):
        paused = [run for run in runs if executor.paused(run)]
        if not paused:
            return None
        await timeslice.checkpoint()
        for run in paused:
            if executor.paused(run):  # (another's drain may have drained it meanwhile)
                executor.resume(run)
        failure = next((run.failure for run in runs if run.failure is not None), None)
        if failure is not None:
            return _abandon_inline(step, runs, failure)
    return None


async def _finish_in_tasks(compiled, feed_values, step, runs, left, results):
    """Finish the partitions ``left`` (started or not), one task each; the first failure."""
    plans, rendezvous = compiled.plans, step.rendezvous
    failures = []

    async def finish_one(index, nursery):
        plan, run = plans[index], runs[index]
        try:
            if run is None:
                feeds = [plan.device.put(feed_values[i]) for i in compiled.feed_routes[index]]
                values = await executor.run_plan(plan, feeds, step)
            else:
                values = await executor.finish_plan(run)
            results[index] = await _fetch_to_host(plan, values)
        except Exception as exc:  # reported once; the rest of the step is torn down
            if not failures:
                failures.append(exc)
                rendezvous.abort(exc)
                nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for index in left:
            nursery.start_soon(finish_one, index, nursery)
    return failures[0] if failures else None
