"""One compile pipeline for every target, and running a step's local partitions.

Theory of operation (docs/architecture.md, "One run"). Every target compiles through
``partition_run``: the local Session (``exec/local_target.py``), the master
(``cluster/master.py``, over the cluster's devices) and each worker (over its own
devices, for the share the master registered there). The stages:
1. ``compile.prune`` keeps what the fetches and targets need (feeds cut edges).
2. ``compile.placement.place`` gives every op a device (constraints, colocation, soft
   placement, then the greedy cost model); stateful ops keep the device an earlier compile of
   the same target gave them (``DeviceState.pinned``).
3. With ``optimize_graph`` (``config.optimize_graph``; the master leaves it to the workers, which
   hold the kernels and devices), CSE and constant folding run on a rewritable copy
   (``compile.node_graph.NodeGraph``); folding evaluates constant subgraphs here with the host
   kernels.
4. ``PartitionedRun.partitioned()`` splits per device with Send/Recv pairs (ALAP Recv
   scheduling follows with ``optimize_graph``). When everything sits on one device and no pass
   changed anything (``single_device``), there is nothing to split: the placed nodes are
   the one partition.
One representation from here on: the ``Node``s of ``compile.node_graph``. ``compile_run`` (local
targets: a Session, a worker) compiles each partition's nodes straight into an
ExecutionPlan (``exec/plan.py``); the master instead groups the partitions by task and
ships their nodes as graph_defs (``compile/task_graph.py``). No second graph of
Operations is made, and an error names the user's op through ``Node.origin``.

Each CompiledRun chooses its step runner once, when it is built (``exec/runner.py``):
this module only compiles.
"""
from __future__ import annotations

import dataclasses
import secrets

from asyncflow import errors
from asyncflow.compile import optimize, partition as _partition, placement as _placement
from asyncflow.compile import prune as _prune
from asyncflow.compile.fuse_dropout import fuse_dropout
from asyncflow.compile.fuse_matmul_apply import fuse_matmul_apply
from asyncflow.compile.fuse_softmax_xent import fuse_softmax_xent
from asyncflow.compile.fuse_squared_error import fuse_squared_error
from asyncflow.compile.group_applies import group_applies
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.kernels.registry import Preload, get_kernel, supported_device_kinds
from asyncflow.ops.control_flow import is_loop_back_edge
from asyncflow.exec import dispatch, runner as _runner
from asyncflow.exec.context import NodeContext
from asyncflow.exec.devices import cuda_status
from asyncflow.exec.plan import compile_plan


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
    graph: object = dataclasses.field(default=None, repr=False)  # what errors name ops of
    # How a step runs (``exec/runner.py``), chosen once here; it also says whether a
    # Session may run it straight in the caller's task (``runner.inline``: one CPU plan
    # without control flow) under any event loop (``runner.loop_free``: static, no wait).
    runner: object = dataclasses.field(init=False, repr=False)
    # Whether a plan still has ``Preload``s to run before a step (``step.preload`` clears it):
    # the one check a step makes for them, whichever path runs it.
    preloading: bool = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        self.runner = _runner.choose(self.graph, self)
        self.preloading = any(plan.preloads for plan in self.plans)


def _contains_control_flow(ops):
    return any(op.op_def.control_flow or op.control_flow_context is not None for op in ops)


def _host_evaluator(device, resources):
    """``evaluate(nodes, ports)`` for constant folding: run host kernels inline, or None."""
    def evaluate(nodes, ports):
        try:
            values = {}
            for node in nodes:
                kernel = get_kernel(node.type, device.kind)
                if kernel is None or kernel.is_async:
                    return None
                args = [values[port] for port in node.inputs]
                ctx = NodeContext(node, device, resources, kernel)
                if type(ctx.prepared) is Preload:  # (its first run: the plan's, off the loop)
                    return None
                outs = kernel.fn(ctx, *args)
                values.update(((node, i), value) for i, value in enumerate(outs))
            return [values[port] for port in ports]
        except Exception:  # leave the error to the run, which reports it with its op
            return None
    return evaluate


def _explain_missing_gpu(exc, state):
    """``exc`` (a placement error), saying why this process has no GPU when a GPU request
    failed for lack of one: CuPy missing or not matching the driver, and the extra to install."""
    if not state.devices or "GPU" not in exc.message or any(
            placement_kind == "GPU" for placement_kind in map(_placement.device_kind, state.names)):
        return exc
    reason = cuda_status()[1]
    if reason is None:
        return exc
    return type(exc)(None, exc.op, f"{exc.message}. No GPU in this process: {reason}")


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
        """Split per device with Send/Recv pairs (``compile.partition.Partitioned``)."""
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
    try:
        placed = _placement.place(ops, state.names, supported_device_kinds,
                                  allow_soft_placement=config.allow_soft_placement,
                                  pinned=state.pinned)
    except errors.InvalidArgumentError as exc:
        raise _explain_missing_gpu(exc, state) from None
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
        node_graph = optimize.fold_constants(node_graph, _host_evaluator(host, resources))
        node_graph = optimize.fuse_activations(node_graph)
        node_graph = fuse_dropout(node_graph)
        node_graph = fuse_squared_error(node_graph)
        node_graph = fuse_softmax_xent(node_graph)
        node_graph = fuse_matmul_apply(node_graph)
        node_graph = group_applies(node_graph)
    used = {n.device for n in node_graph.nodes}
    single = None
    if len(used) <= 1 and not node_graph.changed:
        single = used.pop() if used else state.names[0]
    return PartitionedRun(graph, ops, feeds, fetches, node_graph, placed.by_name(), single,
                          state, config, optimize_graph)


def compile_run(graph, feeds, fetches, targets, state, config, resources, session=None):
    """``partition_run``, then an ExecutionPlan per partition on this process's devices.
    ``session``: on a worker, the master session that registered the graph (its random ops
    keep one generator per op and session: ``NodeContext.random_generator``).

    Returns:
        A CompiledRun.

    Raises:
        InvalidArgumentError: an unsatisfiable device request.
        NotFoundError: an op without a kernel on its device.
    """
    run = partition_run(graph, feeds, fetches, targets, state, config, resources)
    feeds, fetches = run.feeds, run.fetches
    if run.single_device is not None:
        nodes = run.node_graph
        plan = _compile_plan(nodes.nodes, feeds, nodes.fetches,
                             state.by_name(run.single_device), resources, config, session)
        return CompiledRun([plan], [list(range(len(feeds)))],
                           [(0, i) for i in range(len(fetches))], run.placement, graph)
    parts = run.partitioned()
    plans, feed_routes, fetch_lists = [], [], []
    for part in parts.partitions:
        part_fetches = list(dict.fromkeys(port for index, port in parts.fetches
                                          if parts.partitions[index] is part))
        part_feeds = [feeds[i] for i in part.feeds]
        plans.append(_compile_plan(part.nodes, part_feeds, part_fetches,
                                   state.by_name(part.device), resources, config, session,
                                   alone=len(parts.partitions) == 1))
        feed_routes.append(list(part.feeds))
        fetch_lists.append(part_fetches)
    fetch_routes = [(index, fetch_lists[index].index(port)) for index, port in parts.fetches]
    return CompiledRun(plans, feed_routes, fetch_routes, run.placement, graph)


def _compile_plan(nodes, feeds, fetches, device, resources, config, session=None,
                  alone=True):
    plan = compile_plan(nodes, feeds, fetches, device, resources, session, alone)
    bind = getattr(device, "bind_plan", None)
    if bind is not None:
        bind(plan)  # (before the compiled forms: it may wrap kernels)
    return dispatch.generate_forms(plan, config.compile_loops)


