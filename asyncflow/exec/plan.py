"""Compile a partition (ops placed on one device) into an ``ExecutionPlan`` of integers.

Theory of operation:
- Every value the step produces or receives lives in a *slot* (an index into a list made
  fresh per step). Feeds get the first slots; each op output that someone reads or fetches
  gets the next; outputs nobody reads map to ``DROP`` and are discarded.
- Each node records its kernel, its per-node context, the slots it reads, which of those
  it must dereference (variable references read by value consumers), the slots it writes,
  the nodes waiting on it (one entry per edge) and its initial pending count.
- ``schedule`` is the nodes in topological order, a waiting kernel and what depends on it
  last. When the partition has no control flow, at most one kernel that may be large
  enough to offload, and at most one waiting kernel (not a Send/Recv) or, on a CPU, only
  Sends and Recvs in an order that cannot wait where the core would not
  (``transfers_in_order``), the executor runs this schedule straight through (the static
  form, ``codegen.py``, which frees each value after its last reader). Otherwise it runs the core's flat propagator, with
  ``slot_readers`` counting the reads of each slot so buffers die after their last consumer.
- A partition with control flow (``control_flow``) runs over the frames propagator of
  ``frames.py``, which also needs each node's ``kind``, its data edges with ports
  (``out_edges``), its control edges (``control_out``) and the number of Enter nodes per
  frame name (``enter_counts``: a frame's first iteration is not done before all arrived).
  A Merge's ``pending`` counts only its control inputs: it fires on its first live input.

The plan holds no trio objects.
"""
from __future__ import annotations

import dataclasses
import operator

from asyncflow import errors
from asyncflow.kernels.registry import Preload, get_kernel
from asyncflow.exec.context import NodeContext

DROP = -1
NORMAL, MERGE, ENTER, EXIT, NEXT_ITERATION, SWITCH = range(6)
_KINDS = {"Merge": MERGE, "Enter": ENTER, "RefEnter": ENTER, "Exit": EXIT, "RefExit": EXIT,
          "NextIteration": NEXT_ITERATION, "RefNextIteration": NEXT_ITERATION,
          "Switch": SWITCH, "RefSwitch": SWITCH}
# Estimated element-operations above which an offloadable kernel runs on a worker thread.
OFFLOAD_COST = 1 << 22
# A CPU partition whose waiting kernels are all Sends and Recvs runs as a static plan (when
# its order allows: ``transfers_in_order``); False: in the core, the reference (tests).
STATIC_TRANSFERS = True
# An offloadable kernel's runtime cost is remembered per node for the shapes it last ran on
# (``runtime_cost``, ``offload_due``), and the static form tests it without a list of its
# arguments (``codegen.py``); False: computed again every step, as before (bench A/B only).
MEMO_COSTS = True
_NO_SHAPES = (None, 0)  # a memo no shapes match: the first run computes the cost


@dataclasses.dataclass(slots=True)
class NodePlan:
    index: int
    op: object  # the compile-time Node (``compile/node_graph.py``); ``op.origin``: the user's op
    fn: object
    ctx: NodeContext
    inputs: tuple
    deref: tuple
    outputs: tuple
    consumers: tuple = ()
    pending: int = 0
    is_async: bool = False
    offload: bool = False
    # Control flow (used by the frames propagator, ``exec/frames.py``, only):
    kind: int = 0               # NORMAL, MERGE, ENTER, EXIT, NEXT_ITERATION, SWITCH
    out_edges: tuple = ()       # (output index, consumer index, consumer input position)
    control_out: tuple = ()     # consumers through control edges
    num_inputs: int = 0         # data inputs (Merge readiness)
    runs_on_dead: bool = False  # Send/Recv: run even when an input is dead
    nowait: object = None       # an async kernel's synchronous twin, tried inline first
    subscribe: object = None    # an async kernel's subscribing form (registry), or None
    plain: bool = False         # none of is_async, offload, deref: the kernel just runs
    gather: object = None       # with 2 or more inputs: ``itemgetter`` of their slots
    offload_cost: int = OFFLOAD_COST  # runtime cost from which an offload kernel goes to a thread
    blocking_io: bool = False   # always on a thread (offload_cost 0): kernels/registry.py
    abandon: bool = False       # a cancelled step stops waiting for its thread (a read)
    cost_fn: object = None      # the op's cost function (``OpDef.cost``) or None: sizes
    cost_memo: tuple = _NO_SHAPES  # (input shapes, runtime cost) of the last run: one
    #                                tuple, replaced whole (another thread may read it)


@dataclasses.dataclass(slots=True)
class ExecutionPlan:
    device: object
    nodes: list
    num_slots: int
    feed_slots: tuple
    fetch_slots: tuple
    fetch_deref: tuple
    roots: tuple
    slot_readers: list
    fetched: frozenset
    static: bool
    schedule: tuple
    static_fn: object = None    # compiled forms (``executor.prepare``): the step function,
    traced_fn: object = None    # its traced twin (``executor.TracedForm``: compiled on the
    #                             first traced run, the field itself set with static_fn)
    control_flow: bool = False  # run over the frames propagator (frames.py)
    waits: bool = False  # holds a waiting (async) kernel
    enter_counts: dict = dataclasses.field(default_factory=dict)  # frame name -> Enter nodes
    fetch_names: tuple = ()
    frame_tables: object = None  # the frames propagator's tables and compiled loops
    may_offload: bool = False  # some kernel may run on a worker thread (inputs large enough)
    blocking_reads: bool = False  # some kernel is a blocking read (a close must cancel it)
    thread_form: object = None  # a heavy step's form on a worker thread (thread_step.py)
    # Send/Recv run by the static form (``codegen.py``, ``dispatch.Transfers``): CPU only.
    transfers: bool = False
    # Nodes whose prepare hook asked for a ``Preload`` (registry.py): run on a worker thread
    # before the first step (``step.preload``), then emptied.
    preloads: tuple = ()


_TRANSFER_TYPES = frozenset({"_Send", "_Recv"})


def estimate_static_cost(node):
    """Estimated work from static shapes, or None when a shape is unknown."""
    shapes = [producer.out_spec(index)[1] for producer, index in node.inputs]
    if any(not s.is_fully_defined() for s in shapes):
        return None
    if node.op_def.cost is not None:
        return node.op_def.cost([s.as_list() for s in shapes], node)
    return sum(s.num_elements() for s in shapes)


def _slot_key(port):
    """A port's key in the slot table: a fed tensor (``FeedNode``) by its Tensor."""
    tensor = getattr(port[0], "tensor", None)  # a FeedNode's
    return port if tensor is None else tensor


def compile_plan(nodes, feeds, fetches, device, resources, session=None, alone=True):
    """Compile ``nodes`` (topologically ordered, all on ``device``).

    Args:
        nodes: the compile-time ``Node``s of the partition (``compile/node_graph.py``), in
            topological order; their producers are in ``nodes`` or are ``FeedNode``s.
        feeds: Tensors whose values the caller supplies, in order.
        fetches: ports ``(node, output index)`` whose values the step returns, in order
            (unique; a fed tensor's port is its ``FeedNode``'s).
        device: the runtime Device the partition runs on.
        resources: the ResourceManager stateful kernels use.
        session: on a worker, the master session that registered the graph (``NodeContext``).
        alone: the run's only plan here (``runner.PlanRunner``); the CPU partitions of a run
            of several start in the core, which drains them into each other, so their plans
            get no static form for transfers they would never use.

    Returns:
        An ExecutionPlan.

    Raises:
        NotFoundError: naming an op whose type has no kernel for the device.
    """
    slot_of = {}
    for i, tensor in enumerate(feeds):
        slot_of[tensor] = i
    num_slots = len(feeds)
    fetch_keys = [_slot_key(port) for port in fetches]
    read = set(fetch_keys)
    for node in nodes:
        read.update(node.inputs)
    outputs_of = []
    for node in nodes:  # all outputs first: a loop's Merge reads a NextIteration made later
        outputs = []
        for index in range(len(node.out_specs)):
            if (node, index) in read:
                slot_of[(node, index)] = num_slots
                outputs.append(num_slots)
                num_slots += 1
            else:
                outputs.append(DROP)
        outputs_of.append(outputs)
    plan_of = {}
    for index, node in enumerate(nodes):
        kernel = get_kernel(node.type, device.kind)
        if kernel is None:
            raise errors.NotFoundError(
                None, node, f"No kernel registered for {node.type} '{node.name}' on device "
                f"{device.name} (created at {node.creation_site()})")
        inputs, deref = [], []
        for position, port in enumerate(node.inputs):
            slot = slot_of.get(_slot_key(port))
            if slot is None:
                raise errors.InternalError(None, node, f"{node.name}: input "
                                           f"{port[0].name}:{port[1]} has no slot")
            inputs.append(slot)
            if port[0].out_spec(port[1])[2] and not node.op_def.is_ref_input(position):
                deref.append(position)
        plan_of[node] = NodePlan(
            index, node, kernel.fn, NodeContext(node, device, resources, kernel, session),
            tuple(inputs), tuple(deref), tuple(outputs_of[index]), is_async=kernel.is_async,
            offload=kernel.offload, kind=_KINDS.get(node.type, NORMAL),
            num_inputs=len(inputs), runs_on_dead=kernel.runs_on_dead, nowait=kernel.nowait,
            subscribe=kernel.subscribe, plain=not (kernel.is_async or kernel.offload or deref),
            offload_cost=0 if kernel.blocking_io else OFFLOAD_COST * kernel.offload_scale,
            blocking_io=kernel.blocking_io, abandon=kernel.abandon, cost_fn=node.op_def.cost,
            gather=operator.itemgetter(*inputs) if len(inputs) > 1 else None)
    nodes = list(plan_of.values())
    consumers = [[] for _ in nodes]
    out_edges = [[] for _ in nodes]
    control_out = [[] for _ in nodes]
    for node in nodes:
        for position, (producer, value_index) in enumerate(node.op.inputs):
            source = plan_of.get(producer)
            if source is not None:
                consumers[source.index].append(node.index)
                out_edges[source.index].append((value_index, node.index, position))
                if node.kind != MERGE:  # a Merge waits for its first live input only
                    node.pending += 1
        for control in node.op.control_inputs:
            source = plan_of.get(control)
            if source is not None:
                consumers[source.index].append(node.index)
                control_out[source.index].append(node.index)
                node.pending += 1
    for node, waiting, edges, controls in zip(nodes, consumers, out_edges, control_out):
        node.consumers = tuple(waiting)
        node.out_edges = tuple(edges)
        node.control_out = tuple(controls)
    slot_readers = [0] * num_slots
    for node in nodes:
        for slot in node.inputs:
            slot_readers[slot] += 1
    fetch_slots = tuple(slot_of[key] for key in fetch_keys)
    # Two or more kernels known to be large could overlap on worker threads: that needs the
    # core's flat propagator. Unknown shapes (a [None, 64] batch) count as small: the fast path
    # still sends a kernel whose actual inputs are large to a thread, one at a time.
    known_large = 0
    for node in nodes:
        if node.offload and not node.blocking_io:  # (IO: on a thread, whatever its size)
            cost = estimate_static_cost(node.op)
            if cost is not None and cost >= node.offload_cost:
                known_large += 1
    # A partition holding only part of a cond branch (its Switch on another device) still
    # sees dead tensors arrive through Recv: it needs the frames propagator too.
    control_flow = any(n.op.op_def.control_flow or n.op.control_flow_context is not None
                       for n in nodes)
    # One waiting kernel (a queue op, an async py_func) may stay on the static path: its
    # schedule awaits it in place. A CPU partition whose only waiting kernels are Sends and
    # Recvs may too (``transfers``): a Send is a call to the rendezvous, a Recv subscribes
    # where it stands and is taken (awaited if not there yet) by its first consumer, in the
    # schedule's order, which ``transfers_in_order`` checks cannot wait where the core would
    # not (else the partition runs in the core, whose dataflow needs no order).
    waiting = [n for n in nodes if n.is_async]
    moves = [n for n in waiting if n.op.type in _TRANSFER_TYPES]
    transfers = STATIC_TRANSFERS and alone and bool(moves) and len(moves) == len(waiting)
    static = (not control_flow and known_large <= 1
              and (len(waiting) <= 1 and not moves or transfers and device.kind == "CPU"))
    # The static form's order: the waiting kernel (every Recv) and what depends on it as late
    # as possible, so a failure elsewhere surfaces before the wait (as in the core, where it
    # is a task) and every Send that can go goes before a Recv is awaited.
    after = {n.index for n in waiting if n.op.type != "_Send"} if static else set()
    for node in nodes:  # (in topological order: a consumer comes after its producer)
        if node.index in after:
            after.update(node.consumers)
    # (and a Recv without inputs first: its pull starts before anything runs)
    first = {n.index for n in moves if n.op.type == "_Recv" and not n.pending} \
        if static else set()
    schedule = [n for n in nodes if n.index in first] \
        + [n for n in nodes if n.index not in after] \
        + [n for n in nodes if n.index in after and n.index not in first]
    if static and transfers:
        static = transfers_in_order(nodes, schedule, [(n,) for n in schedule])
    enter_counts = {}
    for node in nodes:
        if node.kind == ENTER:
            frame = node.op.attrs["frame_name"]
            enter_counts[frame] = enter_counts.get(frame, 0) + 1
    return ExecutionPlan(
        device=device, nodes=nodes, num_slots=num_slots,
        feed_slots=tuple(range(len(feeds))), fetch_slots=fetch_slots,
        fetch_deref=tuple(bool(node.out_spec(index)[2]) for node, index in fetches),
        roots=tuple(n.index for n in reversed(nodes) if n.pending == 0 and n.kind != MERGE),
        slot_readers=slot_readers, fetched=frozenset(fetch_slots), static=static,
        waits=bool(waiting), may_offload=any(n.offload for n in nodes),
        blocking_reads=any(n.abandon for n in nodes),
        schedule=tuple(schedule), control_flow=control_flow, enter_counts=enter_counts,
        transfers=static and transfers,
        preloads=tuple(n for n in nodes if type(n.ctx.prepared) is Preload),
        fetch_names=tuple(getattr(key, "name", None) or f"{key[0].name}:{key[1]}"
                          for key in fetch_keys))


def transfers_in_order(nodes, order, lines):
    """Whether a static form running ``lines`` (each a tuple of the nodes whose kernels that
    line runs or whose arguments it reads: a pair's or a group's, ``exec/pairs.py``; ``order``
    their nodes in order) may await each Recv at the first line of one of its consumers.

    Awaiting a Recv there waits where the core would not (a deadlock across partitions: the
    value this partition waits for may need a Send it has not made yet) unless every Send on
    a later line depends on that Recv here, so could not have gone before it anyway.
    """
    recv_bit = {n.index: 1 << k for k, n in
                enumerate(n for n in nodes if n.op.type == "_Recv")}
    if not recv_bit:
        return True
    depends = [0] * len(nodes)  # per node: the Recvs it waits for (bits), itself included
    for node in order:  # (topological: producers first)
        mask = depends[node.index] | recv_bit.get(node.index, 0)
        depends[node.index] = mask
        for consumer in node.consumers:
            depends[consumer] |= mask
    taken = 0       # the Recvs awaited on the lines so far
    for line in lines:
        for node in line:  # (a line awaits what its nodes read before it runs them)
            taken |= depends[node.index] & ~recv_bit.get(node.index, 0)
        for node in line:
            if node.op.type == "_Send" and taken & ~depends[node.index]:
                return False
    return True


def runtime_cost(node, args):
    """Estimated work of running ``node`` on ``args`` (actual arrays).

    A cost function's figure depends only on the shapes and the op's static attributes, so
    it is remembered for the shapes of the node's last run (``NodePlan.cost_memo``): a step
    whose shapes did not change reads it back; any other shapes compute it again. Without a
    cost function the cost is the inputs' sizes, cheaper than a memo.
    """
    cost_fn = node.cost_fn
    if cost_fn is None:
        return sum(getattr(a, "size", 1) for a in args)
    if not MEMO_COSTS:
        return cost_fn([a.shape for a in args], node.op)
    shapes = tuple([a.shape for a in args])
    memo = node.cost_memo
    if memo[0] == shapes:
        return memo[1]
    return _remember(node, shapes)


def offload_due(node, shapes):
    """Whether ``node``'s kernel on inputs of ``shapes`` (a tuple) goes to a worker thread:
    its cost (remembered per node for its last shapes, ``runtime_cost``) reaches the node's
    own threshold, which its device's kernel set (``offload_cost``). The static form's test
    (codegen.py)."""
    memo = node.cost_memo
    if memo[0] == shapes:
        return memo[1] >= node.offload_cost
    return _remember(node, shapes) >= node.offload_cost


def _remember(node, shapes):
    """``node``'s cost function on ``shapes`` (a tuple), kept as its memo: one tuple, set
    whole, so a reader on another thread sees the shapes with their own cost."""
    cost = node.cost_fn(list(shapes), node.op)
    node.cost_memo = (shapes, cost)
    return cost
