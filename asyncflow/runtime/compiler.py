"""One compile pipeline for every target, and running a step's local partitions.

Theory of operation (DESIGN.md, data flow steps 2-3). Every target compiles through
``partition_run``: the local Session (``runtime/target.py``), the master
(``distributed/master.py``, over the cluster's devices) and each worker (over its own
devices, for the share the master registered there). The stages:
1. ``graph.prune`` keeps what the fetches and targets need (feeds cut edges).
2. ``graph.placement.place`` gives every op a device (constraints, colocation, soft
   placement, then the greedy cost model); stateful ops keep the device an earlier compile of
   the same target gave them (``DeviceState.pinned``).
3. With ``optimize_graph`` (``config.optimize_graph``; the master leaves it to the workers, which
   hold the kernels and devices), CSE and constant folding run on a rewritable copy
   (``graph.rewrite.NodeGraph``); folding evaluates constant subgraphs here with the host
   kernels.
4. ``PartitionedRun.partitioned()`` splits per device with Send/Recv pairs (ALAP Recv
   scheduling follows with ``optimize_graph``). When everything sits on one device and no pass
   changed anything, local targets compile the user's own ops directly
   (``single_device``): the common case costs nothing extra.
``compile_run`` (local targets: a Session, a worker) then makes each partition fresh
Operations (``materialize``) and an ExecutionPlan; the master instead groups the partitions
by task and ships them as graph_defs.

``run_partitions`` runs the partitions of a step around one ``LocalRendezvous``. It first
*starts* every CPU partition inline in the calling task (``executor.start_plan``), one
after the other: a partition's Recv whose Send has not run yet subscribes, and a later
partition's Send completes it there, the running drain draining the partition it fed
(``core.drive``). Partitions that finish this way need no task; a
step whose partitions all finish (the common small step) opens no nursery at all. Runs
that stopped only because the time slice ran out (``Run.paused``) go on in the same
task after a checkpoint, one slice at a time, for as long as nothing else stops them. The
partitions left (kernels that must run as tasks, Recvs from elsewhere, GPU devices)
each get a task in one nursery and finish there. The first failure
aborts the rendezvous (waking every Recv) and cancels the other partitions, and is the
error raised: the root cause, never a derived cancellation and never an ExceptionGroup.
Fetched values leave their device through ``device.to_host`` (an awaited stream event on
a GPU).
"""
from __future__ import annotations

import contextlib
import dataclasses
import secrets

import trio

from asyncflow import errors
from asyncflow.graph import optimize, partition as _partition, placement as _placement
from asyncflow.graph import prune as _prune
from asyncflow.graph.graph import Operation
from asyncflow.graph.rewrite import NodeGraph, materialize
from asyncflow.kernels.registry import get_kernel, supported_device_kinds
from asyncflow.ops.control_flow import is_loop_back_edge
from asyncflow.runtime import core, executor
from asyncflow.runtime import timeslice
from asyncflow.runtime.context import NodeContext
from asyncflow.runtime.plan import compile_plan
from asyncflow.runtime.rendezvous import LocalRendezvous


@dataclasses.dataclass
class DeviceState:
    """What a target remembers across compiles: the devices it places on (full names, in
    order; the first is the default), each device's incarnation (it goes into rendezvous
    keys), and the devices stateful ops were given (``pinned``), so they keep them."""

    names: list
    incarnations: dict
    pinned: dict = dataclasses.field(default_factory=dict)
    devices: dict = dataclasses.field(default_factory=dict)  # name -> Device (local targets)

    @classmethod
    def local(cls, devices, incarnation=None):
        """The state of this process's ``devices``: a random incarnation each, or the
        worker's ``incarnation`` for all of them."""
        names = [d.name for d in devices]
        return cls(names, {name: incarnation or secrets.randbits(63) | 1 for name in names},
                   devices={d.name: d for d in devices})

    def by_name(self, name):
        return self.devices[name]


@dataclasses.dataclass
class CompiledRun:
    """One signature's plans, which feeds each reads, and where each fetch comes from."""

    plans: list
    feed_routes: list      # per plan: indices into the run's feed list
    fetch_routes: list     # per fetch: (plan index, position in that plan's fetches)
    placement: dict = dataclasses.field(default_factory=dict)   # op name -> device
    # The one plan when the run is a single CPU plan without control flow: it runs inline,
    # without a rendezvous or a partition runner (``LocalTarget.run_inline``); else None.
    inline: object = None
    # ``inline`` when its plan is static and never waits: any event loop may await it.
    loop_free: object = None

    def __post_init__(self):
        if len(self.plans) == 1:
            plan = self.plans[0]
            if plan.device.kind == "CPU" and not plan.control_flow:
                self.inline = plan
                if plan.static and not plan.waits:
                    self.loop_free = plan


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


@dataclasses.dataclass
class PartitionedRun:
    """``partition_run``'s result: a signature pruned, placed and rewritten."""

    graph: object
    ops: list              # the pruned Operations, topologically ordered
    feeds: list
    fetches: list
    node_graph: NodeGraph  # placed (and rewritten with ``optimize_graph``)
    placement: dict        # op name -> device
    single_device: str | None  # the one device, when nothing needs splitting or rewriting
    state: DeviceState = dataclasses.field(repr=False)
    config: object = dataclasses.field(repr=False)
    optimize_graph: bool = True

    def partitioned(self):
        """Split per device with Send/Recv pairs (``graph.partition.Partitioned``)."""
        parts = _partition.partition(self.node_graph, self.state.names, self.state.incarnations,
                                     compress=self.config.compress_transfers,
                                     per_edge=_partition.edge_compression(self.graph))
        if self.optimize_graph:
            optimize.schedule_recvs(parts)
        return parts


def partition_run(graph, feeds, fetches, targets, state, config, resources=None,
                  optimize_graph=None, rewrite=None):
    """Prune, place and rewrite ``(feeds, fetches, targets)``: the one compile pipeline.

    Args:
        graph: the Graph the tensors and ops belong to.
        feeds, fetches, targets: fed Tensors, fetched Tensors, target Operations.
        state: the target's DeviceState (its ``pinned`` is updated).
        config: the SessionConfig (soft placement, placement log, compression, optimize).
        resources: the ResourceManager constant folding evaluates with.
        optimize_graph: run CSE, constant folding and Recv scheduling (default:
            ``config.optimize_graph``; folding needs ``state.devices``).
        rewrite: called with the placed NodeGraph before anything else changes it (the
            master drops cross-task control edges that order nothing there).

    Returns:
        A PartitionedRun.

    Raises:
        InvalidArgumentError: a fetch that cannot be computed, an unsatisfiable device request.
    """
    feeds, fetches, targets = list(feeds), list(fetches), list(targets)
    try:
        ops = _prune.prune(fetches, targets, feeds, skip_edge=is_loop_back_edge)
    except ValueError as exc:
        raise errors.InvalidArgumentError(None, None, str(exc)) from None
    placed = _placement.place(ops, state.names, supported_device_kinds,
                              allow_soft_placement=config.allow_soft_placement,
                              pinned=state.pinned)
    for op, device in placed.assignment.items():
        if op.op_def.stateful:
            state.pinned.setdefault(op.name, device)
    if config.log_device_placement:
        for line in placed.log:
            print(line)
    if optimize_graph is None:
        optimize_graph = config.optimize_graph
    node_graph = NodeGraph.from_ops(ops, feeds, fetches, targets, placed.assignment)
    if rewrite is not None:
        rewrite(node_graph)
    if optimize_graph and not _contains_control_flow(ops):
        node_graph = optimize.eliminate_common_subexpressions(node_graph)
        host = state.by_name(state.names[0])
        node_graph = optimize.fold_constants(node_graph, _host_evaluator(graph, host, resources))
        node_graph = optimize.fuse_activations(node_graph)
    used = {n.device for n in node_graph.nodes}
    single = None
    if len(used) <= 1 and not node_graph.changed:
        single = used.pop() if used else state.names[0]
    return PartitionedRun(graph, ops, feeds, fetches, node_graph, placed.by_name(), single,
                          state, config, optimize_graph)


def compile_run(graph, feeds, fetches, targets, state, config, resources):
    """``partition_run``, then an ExecutionPlan per partition on this process's devices.

    Returns:
        A CompiledRun.

    Raises:
        InvalidArgumentError: an unsatisfiable device request.
        NotFoundError: an op without a kernel on its device.
    """
    run = partition_run(graph, feeds, fetches, targets, state, config, resources)
    feeds, fetches = run.feeds, run.fetches
    if run.single_device is not None:
        plan = _compile_plan(run.ops, feeds, fetches, state.by_name(run.single_device),
                             resources, config)
        return CompiledRun([plan], [list(range(len(feeds)))],
                           [(0, i) for i in range(len(fetches))], run.placement)
    parts = run.partitioned()
    plans, feed_routes, fetch_lists = [], [], []
    for part in parts.partitions:
        part_ops, tensor_of = materialize(part.nodes, graph)
        part_fetches = [tensor_of(port) for index, port in parts.fetches
                        if parts.partitions[index] is part]
        part_fetches = list(dict.fromkeys(part_fetches))
        part_feeds = [feeds[i] for i in part.feeds]
        plans.append(_compile_plan(part_ops, part_feeds, part_fetches,
                                   state.by_name(part.device), resources, config))
        feed_routes.append(list(part.feeds))
        fetch_lists.append((part_fetches, tensor_of))
    fetch_routes = []
    for index, port in parts.fetches:
        part_fetches, tensor_of = fetch_lists[index]
        fetch_routes.append((index, part_fetches.index(tensor_of(port))))
    return CompiledRun(plans, feed_routes, fetch_routes, run.placement)


def _compile_plan(ops, feeds, fetches, device, resources, config):
    plan = compile_plan(ops, feeds, fetches, device, resources)
    bind = getattr(device, "bind_plan", None)
    if bind is not None:
        bind(plan)  # (before the compiled forms: it may wrap kernels)
    return executor.prepare(plan, config.compile_loops)


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
                if run is None or not run.done:
                    left.append(index)
                else:  # finished inline: a CPU device's ``to_host`` does not suspend
                    run.close()
                    results[index] = await _fetch_to_host(plans[index], run.prop.values())
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
        if plan.device.kind != "CPU":
            continue  # another device's partition runs whole through run_plan, in a task
        try:
            run = executor.start_plan(
                plan, [plan.device.put(feed_values[i]) for i in compiled.feed_routes[index]],
                step)
        except Exception as exc:  # noqa: BLE001 - becomes the step's error, as in a task
            failure = exc
        else:
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
    checkpoint and resume them in this task, inside ``Step.park`` (a long loop can be closed);
    returns the first failure (see ``_start_inline``).
    """
    if not any(run is not None and run.paused for run in runs):
        return None
    with (step.park() if step.park is not None else contextlib.nullcontext()) as parked:
        while all(run is not None and not run.waiting for run in runs):
            paused = [run for run in runs if run.paused]
            if not paused:
                break
            await timeslice.checkpoint()
            for run in paused:
                if run.paused:  # (another's drain may have drained it meanwhile)
                    run.drain()
            failure = next((run.failure for run in runs if run.failure is not None), None)
            if failure is not None:
                return _abandon_inline(step, runs, failure)
    if parked is not None and parked.cancelled_caught:
        started = [run for run in runs if run is not None]
        return _abandon_inline(step, started, errors.session_closed())
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
                values = await core.finish(run)
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
