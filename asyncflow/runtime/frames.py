"""The frame-aware ready-queue loop: runs a partition that contains control flow.

Theory of operation (the paper's executor, TF's ``propagator_state``):
- A value is keyed by (node output, frame, iteration). Each live ``_Frame`` keeps its
  ``_Iteration``s; an iteration holds the values its nodes read (``values``: slot -> value),
  the pending counts of its nodes (``pending``, lazily from the plan), dead-input counts
  (``dead``), each Merge's first live input (``merge_live``), its ``outstanding`` nodes
  (queued or running) and its live child frames (``frames``, by frame name).
- The ready stack holds ``(node index, frame, iteration, dead)`` entries (LIFO, depth
  first). A dead entry of an ordinary node does not run its kernel: all its outputs are
  ``DEAD``. Kernels flagged ``runs_on_dead`` (Send/Recv) run anyway and see ``DEAD`` inputs.
- Propagation by node kind: ordinary nodes feed consumers in the same iteration; ``Enter``
  feeds iteration 0 of the child frame (found or created per parent iteration and frame
  name; a constant Enter is a loop invariant, stored and pushed into every current and
  future iteration); ``Exit`` feeds the parent iteration (a dead Exit of the newest
  iteration is held until the frame is done, then propagated, which is how a loop on an
  untaken branch goes dead); ``NextIteration`` feeds iteration i+1, creating it, unless
  ``parallel_iterations`` iterations are already in flight: then its value is parked until
  the oldest finishes. A dead NextIteration stops deadness: the loop has ended.
- Merge fires once per iteration: on its first live input once its control inputs have
  arrived, or dead when all data inputs are dead (or a dead input comes from an Enter).
- An iteration is done when it has no outstanding nodes and no live child frames, and its
  predecessor is done (iteration 0: all the frame's Enters have arrived). Done iterations are
  deleted in order, so memory stays flat in the number of iterations. A frame is done when
  all its Enters have arrived and no iteration is left; deleting it may finish its parent's
  iteration in turn.
- Frame ids hash (parent frame id, parent iteration, frame name) with blake2b, so every
  process names the same frame alike; waiting kernels see ``ctx.frame_iter`` ("id:iter")
  for their rendezvous keys.
- Fetched values come from the root frame; a dead fetch is an InvalidArgumentError.
- The root frame frees a value after its last reader; loop iterations free theirs when the
  iteration is deleted.
- Time slices (``timeslice``): the loop counts the nodes it runs and, every ``CHECK_EVERY``,
  checkpoints when the slice is over. A simple frame's compiled loop does not run inside the
  Enter that completes it: the Enter queues it (``_Propagator.loops``) and the loop drives it
  (``_run_loops``), checkpointing whenever it yields at the end of a slice.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np
import trio

from asyncflow import errors
from asyncflow.kernels.control_flow import DEAD
from asyncflow.runtime import compiled_loops, timeslice
from asyncflow.runtime.plan import (
    DROP, ENTER, EXIT, MERGE, NORMAL, OFFLOAD_COST, SWITCH, runtime_cost,
)

_FIRED = -(1 << 40)  # a Merge's pending count once it has fired in an iteration
# Run simple loop frames with compiled_loops' straight-line runner (tests switch it off to
# exercise the dynamic path on the same graphs).
COMPILE_LOOPS = True


def frame_id(parent_id, parent_iteration, frame_name):
    """The id of a child frame: the same on every process (never Python's salted hash)."""
    digest = hashlib.blake2b(f"{parent_id}:{parent_iteration}:{frame_name}".encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class _Iteration:
    __slots__ = ("number", "values", "pending", "dead", "merge_live", "outstanding", "frames")

    def __init__(self, number):
        self.number = number
        self.values = {}
        self.pending = {}
        self.dead = {}
        self.merge_live = {}
        self.outstanding = 0
        self.frames = {}


class _Frame:
    __slots__ = ("frame_id", "name", "parent", "parent_iteration", "max_parallel",
                 "iterations", "iteration_count", "outstanding_iterations", "pending_enters",
                 "next_iter_roots", "invariants", "dead_exits", "runner", "arrived")

    def __init__(self, frame_id_, name, parent, parent_iteration, max_parallel, pending_enters):
        self.frame_id = frame_id_
        self.name = name
        self.parent = parent
        self.parent_iteration = parent_iteration
        self.max_parallel = max_parallel
        self.iterations = {0: _Iteration(0)}
        self.iteration_count = 0
        self.outstanding_iterations = 1
        self.pending_enters = pending_enters
        self.next_iter_roots = []
        self.invariants = []
        self.dead_exits = []
        self.runner = None   # a compiled_loops.LoopRunner when the frame is simple
        self.arrived = []    # Enters held for the runner: (node, outputs, dead)


class FrameStatistics:
    """What a control-flow step did (tests and benchmarks read it)."""

    __slots__ = ("frames_created", "iterations_created", "max_live_iterations", "nodes_run",
                 "nodes_dead")

    def __init__(self):
        self.frames_created = 0
        self.iterations_created = 0
        self.max_live_iterations = 0
        self.nodes_run = 0
        self.nodes_dead = 0

    def __repr__(self):
        return (f"FrameStatistics(frames={self.frames_created}, "
                f"iterations={self.iterations_created}, "
                f"max_live_iterations={self.max_live_iterations}, run={self.nodes_run}, "
                f"dead={self.nodes_dead})")


def _tables(nodes):
    """Per node, flattened for the hot loop: where outputs are stored, data edges
    ``(output, consumer, position, consumer is Merge, consumer's initial pending)`` and
    control edges ``(consumer, is Merge, initial pending)``; and whether a node may take the
    inline fast path (an ordinary synchronous kernel reading no variable reference)."""
    stores = [tuple((slot, i) for i, slot in enumerate(n.outputs) if slot != DROP)
              for n in nodes]
    edges = [tuple((out, dst, pos, nodes[dst].kind == MERGE, nodes[dst].pending)
                   for out, dst, pos in n.out_edges) for n in nodes]
    controls = [tuple((dst, nodes[dst].kind == MERGE, nodes[dst].pending)
                      for dst in n.control_out) for n in nodes]
    fast = [n.kind in (NORMAL, SWITCH) and not (n.is_async or n.offload or n.deref
                                                or n.runs_on_dead) for n in nodes]
    return stores, edges, controls, fast, compiled_loops.build_runners(nodes, fast)


class _Propagator:
    """Frame and iteration bookkeeping: activation, deadness, iteration and frame ends."""

    def __init__(self, plan, ready, stats, wrap):
        self.nodes = plan.nodes
        if plan.frame_tables is None:
            plan.frame_tables = _tables(plan.nodes)
        self.stores, self.edges, self.controls, _, self.runners = plan.frame_tables
        self.wrap = wrap
        self.enter_counts = plan.enter_counts
        self.ready = ready
        self.stats = stats
        self.live_iterations = 1
        self.loops = []  # (frame, its compiled loop's generator): for ``_run_loops`` to drive

    def push(self, index, frame, iteration, dead):
        iteration.outstanding += 1
        self.ready.append((index, frame, iteration, dead))

    def activate(self, node, frame, iteration, outputs, node_dead):
        """Deliver ``outputs`` of ``node`` to its consumers in ``iteration`` of ``frame``."""
        index = node.index
        values = iteration.values
        for slot, out_index in self.stores[index]:
            values[slot] = outputs[out_index]
        pending = iteration.pending
        dead = iteration.dead
        ready = self.ready
        for out_index, dst, position, is_merge, initial in self.edges[index]:
            value = outputs[out_index]
            if is_merge:
                self._merge_input(node, frame, iteration, dst, position, value)
                continue
            count = pending.get(dst, initial) - 1
            if value is DEAD:
                dead[dst] = dead.get(dst, 0) + 1
            if count:
                pending[dst] = count
            else:  # ready: no further edge reaches it in this iteration
                iteration.outstanding += 1
                ready.append((dst, frame, iteration, dst in dead))
        for dst, is_merge, initial in self.controls[index]:
            count = pending.get(dst, initial) - 1
            pending[dst] = count
            if is_merge:
                if count == 0:
                    if dst in iteration.merge_live:
                        pending[dst] = _FIRED
                        self.push(dst, frame, iteration, False)
                    elif dead.get(dst, 0) == self.nodes[dst].num_inputs:
                        pending[dst] = _FIRED
                        self.push(dst, frame, iteration, True)
                continue
            if node_dead:
                dead[dst] = dead.get(dst, 0) + 1
            if count == 0:
                iteration.outstanding += 1
                ready.append((dst, frame, iteration, dst in dead))

    def _merge_input(self, node, frame, iteration, dst, position, value):
        """A data input reaches Merge ``dst``: fire on the first live one, or when all are dead."""
        pending = iteration.pending
        count = pending.get(dst, self.nodes[dst].pending)
        if value is not DEAD:
            if dst not in iteration.merge_live:
                iteration.merge_live[dst] = (position, value)
                if count == 0:
                    pending[dst] = _FIRED
                    self.push(dst, frame, iteration, False)
            return
        dead = iteration.dead
        dead_count = dead.get(dst, 0) + 1
        dead[dst] = dead_count
        if count == 0 and dst not in iteration.merge_live and (
                dead_count == self.nodes[dst].num_inputs or node.kind == ENTER):
            pending[dst] = _FIRED
            self.push(dst, frame, iteration, True)

    def propagate(self, node, frame, iteration, outputs, node_dead):
        """Route a finished node's outputs by its kind, then retire it from its iteration."""
        kind = node.kind
        if kind <= MERGE or kind == SWITCH:
            self.activate(node, frame, iteration, outputs, node_dead)
        elif kind == ENTER:
            self._enter(node, frame, iteration, outputs, node_dead)
        elif kind == EXIT:
            if node_dead:
                if iteration.number == frame.iteration_count:
                    frame.dead_exits.append(node)
            else:
                self.activate(node, frame.parent, frame.parent_iteration, outputs, False)
        elif not node_dead:  # NEXT_ITERATION: a dead one ends the loop
            self._next_iteration(node, frame, iteration, outputs)
        iteration.outstanding -= 1
        if iteration.outstanding == 0:
            self.cleanup(frame, iteration.number)

    def _enter(self, node, frame, iteration, outputs, node_dead):
        attrs = node.ctx.attrs
        name = attrs["frame_name"]
        child = iteration.frames.get(name)
        if child is None:
            child = _Frame(frame_id(frame.frame_id, iteration.number, name), name, frame,
                           iteration, max(1, int(attrs.get("parallel_iterations", 10))),
                           self.enter_counts.get(name, 1))
            iteration.frames[name] = child
            child.runner = self.runners.get(name) if COMPILE_LOOPS else None
            self.stats.frames_created += 1
            self.stats.iterations_created += 1
            self._count_live(1)
        child.pending_enters -= 1
        if child.runner is not None:
            child.arrived.append((node, outputs, node_dead))
            if child.pending_enters == 0:
                self._run_compiled(child)
            return
        self._deliver_enter(child, node, outputs, node_dead)
        if child.pending_enters == 0:
            self.cleanup(child, 0)

    def _deliver_enter(self, child, node, outputs, node_dead):
        if node.ctx.attrs.get("is_constant"):
            child.invariants.append((node, outputs, node_dead))
            for live in list(child.iterations.values()):
                self.activate(node, child, live, outputs, node_dead)
        else:
            self.activate(node, child, child.iterations[0], outputs, node_dead)

    def _run_compiled(self, child):
        """All Enters arrived: queue a simple frame's loop, or replay them dynamically."""
        arrived, child.arrived = child.arrived, []
        if any(dead for _, _, dead in arrived):  # a loop on an untaken branch: go dynamic
            child.runner = None
            for node, outputs, node_dead in arrived:
                self._deliver_enter(child, node, outputs, node_dead)
            self.cleanup(child, 0)
            return
        entered = {node.index: outputs[0] for node, outputs, _ in arrived}
        self.loops.append((child, child.runner.run(entered, self.wrap)))

    def finish_compiled(self, child, exits, iterations):
        """A simple frame's loop ran to its end: delete the frame, deliver its Exits."""
        stats = self.stats
        stats.iterations_created += iterations
        stats.nodes_run += child.runner.iteration_nodes * iterations
        parent, parent_iteration = child.parent, child.parent_iteration
        del child.iterations[0]
        self._count_live(-1)
        del parent_iteration.frames[child.name]
        for node, value in exits:
            self.activate(node, parent, parent_iteration, (value,), False)
        if not parent_iteration.outstanding:  # (the Enter has retired meanwhile)
            self.cleanup(parent, parent_iteration.number)

    def _next_iteration(self, node, frame, iteration, outputs):
        if iteration.number == frame.iteration_count:
            if frame.outstanding_iterations >= frame.max_parallel:
                frame.next_iter_roots.append((node, outputs))  # window full: park it
                return
            target = self._new_iteration(frame)
        else:
            target = frame.iterations[iteration.number + 1]
        self.activate(node, frame, target, outputs, False)

    def _new_iteration(self, frame):
        frame.iteration_count += 1
        iteration = _Iteration(frame.iteration_count)
        frame.iterations[iteration.number] = iteration
        frame.outstanding_iterations += 1
        frame.dead_exits = []
        self.stats.iterations_created += 1
        self._count_live(1)
        roots, frame.next_iter_roots = frame.next_iter_roots, []
        for node, outputs in roots:
            self.activate(node, frame, iteration, outputs, False)
        for node, outputs, node_dead in frame.invariants:
            self.activate(node, frame, iteration, outputs, node_dead)
        return iteration

    def _count_live(self, delta):
        self.live_iterations += delta
        if self.live_iterations > self.stats.max_live_iterations:
            self.stats.max_live_iterations = self.live_iterations

    def _done(self, frame, iteration):
        if iteration.outstanding or iteration.frames:
            return False
        if iteration.number == 0:
            return frame.pending_enters == 0
        return iteration.number - 1 not in frame.iterations

    def cleanup(self, frame, number):
        """Delete the finished iterations from ``number`` on; delete the frame when done."""
        if frame.parent is None:
            return
        iterations = frame.iterations
        while number <= frame.iteration_count:
            iteration = iterations.get(number)
            if iteration is None or not self._done(frame, iteration):
                break
            del iterations[number]
            frame.outstanding_iterations -= 1
            self._count_live(-1)
            number += 1
            if frame.next_iter_roots:
                self._new_iteration(frame)
        if frame.pending_enters == 0 and frame.outstanding_iterations == 0:
            self._delete_frame(frame)

    def _delete_frame(self, frame):
        parent, parent_iteration = frame.parent, frame.parent_iteration
        for node in frame.dead_exits:
            self.activate(node, parent, parent_iteration, (DEAD,) * len(node.outputs), True)
        del parent_iteration.frames[frame.name]
        if not parent_iteration.outstanding:
            self.cleanup(parent, parent_iteration.number)


async def _run_waiting(node, args, ctx, report, entry):
    """Run a waiting or offloaded kernel; report ``(node, result, error, start, entry)``."""
    start = _now_us() if ctx.step.trace is not None else 0
    try:
        if node.is_async:
            result = await node.fn(ctx, *args)
        else:
            result = await trio.to_thread.run_sync(node.fn, node.ctx, *args,
                                                   limiter=node.ctx.device.limiter)
    except trio.Cancelled:
        raise
    except BaseException as exc:  # reported, never raised into the nursery
        report.send_nowait((node, None, exc, start, entry))
        return
    report.send_nowait((node, result, None, start, entry))


async def _run_loops(propagator):
    """Run the compiled loops queued by Enters, checkpointing at the end of each slice."""
    loops = propagator.loops
    while loops:
        child, steps = loops.pop()
        try:
            while True:
                try:
                    next(steps)
                except StopIteration as done:
                    exits, iterations = done.value
                    break
                await timeslice.checkpoint()
        finally:
            steps.close()
        propagator.finish_compiled(child, exits, iterations)


async def run_frames(plan, feed_values, step, wrap_error, step_context):
    """Run ``plan`` (which has control flow) once; returns the fetched values in order.

    Args:
        plan: an ExecutionPlan with ``control_flow`` set.
        feed_values: values of ``plan.feed_slots``.
        step: the executor's Step.
        wrap_error, step_context: the executor's error wrapper and StepContext class
            (passed in to avoid an import cycle).

    Raises:
        OpError: the first kernel failure; InvalidArgumentError for a dead fetched tensor.
    """
    nodes = plan.nodes
    root = _Frame(0, "", None, None, 1, 0)
    root_iteration = root.iterations[0]
    root_values = root_iteration.values
    root_values.update(enumerate(feed_values))
    readers = list(plan.slot_readers)
    fetched = plan.fetched
    ready = []
    stats = FrameStatistics()
    device_name = plan.device.name
    propagator = _Propagator(plan, ready, stats,
                             lambda exc, node: wrap_error(exc, node.op, device_name))
    for index in plan.roots:
        propagator.push(index, root, root_iteration, False)
    trace = step.trace
    report_send, report_receive = trio.open_memory_channel(math.inf)
    in_flight = 0
    failure = None
    propagate = propagator.propagate
    activate, cleanup = propagator.activate, propagator.cleanup
    fast = plan.frame_tables[3] if trace is None else [False] * len(nodes)
    start = 0
    loops = propagator.loops
    left = timeslice.BUDGET.left
    async with trio.open_nursery() as nursery:
        while (ready or in_flight) and failure is None:
            while ready and failure is None:
                left -= 1
                if left <= 0:  # every CHECK_EVERY nodes: is the time slice over?
                    if timeslice.due():
                        await timeslice.checkpoint()
                    left = timeslice.CHECK_EVERY
                entry = ready.pop()
                index, frame, iteration, dead = entry
                node = nodes[index]
                if dead and not node.runs_on_dead:
                    stats.nodes_dead += 1
                    propagate(node, frame, iteration, (DEAD,) * len(node.outputs), True)
                    continue
                if fast[index] and frame is not root:  # plain inline kernel in a loop frame
                    values = iteration.values
                    try:
                        args = [values[slot] for slot in node.inputs]
                    except KeyError:  # a fed tensor read inside a frame lives in the root
                        args = [values[slot] if slot in values else root_values[slot]
                                for slot in node.inputs]
                    try:
                        result = node.fn(node.ctx, *args)
                    except (trio.Cancelled, KeyboardInterrupt):
                        raise
                    except BaseException as exc:
                        failure = wrap_error(exc, node.op, device_name)
                        break
                    stats.nodes_run += 1
                    activate(node, frame, iteration, result, False)
                    iteration.outstanding -= 1
                    if not iteration.outstanding:
                        cleanup(frame, iteration.number)
                    continue
                try:
                    if node.kind == MERGE:  # the Merge kernel, inlined: first live input
                        position, value = iteration.merge_live[index]
                        result = (value, _index_value(position))
                    else:
                        args = _gather(node, iteration, root_values, frame is root, readers,
                                       fetched)
                        if node.is_async or (node.offload
                                             and runtime_cost(node, args) >= OFFLOAD_COST):
                            ctx = step_context(node.ctx, step)
                            ctx.frame_iter = f"{frame.frame_id}:{iteration.number}"
                            in_flight += 1
                            nursery.start_soon(_run_waiting, node, args, ctx, report_send, entry)
                            continue
                        if trace is not None:
                            start = _now_us()
                        result = node.fn(node.ctx, *args)
                    stats.nodes_run += 1
                    propagate(node, frame, iteration, result,
                              dead or (node.runs_on_dead and _all_dead(result)))
                    if loops:  # an Enter completed a simple frame: run its whole loop now
                        await _run_loops(propagator)
                except (trio.Cancelled, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    failure = wrap_error(exc, node.op, device_name)
                    break
                if trace is not None:
                    trace.append(_stats_record(node, device_name, start))
            if in_flight and failure is None:
                node, result, exc, start, entry = await report_receive.receive()
                timeslice.restart()  # receiving gave the event loop back
                left = timeslice.CHECK_EVERY
                in_flight -= 1
                if exc is not None:
                    failure = wrap_error(exc, node.op, device_name)
                else:
                    _, frame, iteration, dead = entry
                    stats.nodes_run += 1
                    propagate(node, frame, iteration, result,
                              dead or (node.runs_on_dead and _all_dead(result)))
                    if trace is not None:
                        trace.append(_stats_record(node, device_name, start))
        if failure is not None:
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    step.extras["frame_statistics"] = stats
    out = []
    for slot, deref, name in zip(plan.fetch_slots, plan.fetch_deref, plan.fetch_names):
        value = root_values.get(slot, DEAD)
        if value is DEAD:
            raise errors.InvalidArgumentError(
                None, None, f"The tensor returned for {name} was not valid: it is dead "
                "(computed on an untaken cond branch or outside the iterations that ran)")
        out.append(value.read() if deref else value)
    return out


_INDEX_VALUES = [np.int32(i) for i in range(16)]


def _index_value(position):
    return _INDEX_VALUES[position] if position < 16 else np.int32(position)


def _all_dead(result):
    """Whether a kernel that runs on dead inputs (Recv) produced only dead outputs."""
    if not result:
        return False
    for value in result:
        if value is not DEAD:
            return False
    return True


def _gather(node, iteration, root_values, in_root, readers, fetched):
    """The input values of ``node`` (not a Merge) in ``iteration``."""
    values = iteration.values
    try:
        args = [values[slot] for slot in node.inputs]
    except KeyError:  # a fed tensor read inside a frame lives in the root frame
        args = [values[slot] if slot in values else root_values[slot] for slot in node.inputs]
    if in_root:
        for slot in node.inputs:
            readers[slot] -= 1
            if readers[slot] == 0 and slot not in fetched:
                values.pop(slot, None)
    for position in node.deref:
        if args[position] is not DEAD:
            args[position] = args[position].read()
    return args


def _stats_record(node, device_name, start):
    from asyncflow.runtime.executor import NodeStats
    return NodeStats(node.op.name, node.op.type, device_name, start, _now_us())


def _now_us():
    import time
    return time.perf_counter_ns() // 1000
