"""The frames propagator: values keyed by (node output, frame, iteration), dead tensors.

Theory of operation: ``docs/control_flow.md`` ("Executor semantics") gives the rules this
implements (TF's ``propagator_state``): dead nodes run no kernel, a Merge fires once per
iteration, ``parallel_iterations`` windows, iterations deleted as they finish (memory flat
in the iteration count), a simple frame run by its compiled loop. Entries are
``(node, args, iteration)``; frame ids are ``rendezvous_keys.frame_id``'s, the same on every
process.
"""
from __future__ import annotations

import collections
import dataclasses

from asyncflow import errors, rendezvous_keys
from asyncflow.kernels.control_flow import DEAD
from asyncflow.exec import codegen
from asyncflow.exec.core import PAUSE, Own, fetched_values
from asyncflow.exec.plan import DROP, ENTER, EXIT, MERGE, NORMAL, SWITCH

_FIRED = -(1 << 40)  # a Merge's pending count once it has fired in an iteration
# How a data edge reaches its consumer: as its sole input (its entry's arguments are the
# value itself), counted with its other inputs (gathered from the iteration once all are
# there), or as one of a Merge's inputs.
_SOLE, _COUNTED, _MERGE_IN = range(3)


class _Iteration:
    __slots__ = ("frame", "number", "values", "pending", "dead", "merge_live", "outstanding",
                 "frames")

    def __init__(self, frame, number):
        self.frame, self.number, self.outstanding = frame, number, 0
        self.values, self.pending, self.dead, self.merge_live, self.frames = {}, {}, {}, {}, {}


class _Frame:
    __slots__ = ("frame_id", "name", "parent", "parent_iteration", "max_parallel",
                 "iterations", "iteration_count", "outstanding_iterations", "pending_enters",
                 "next_iter_roots", "invariants", "exits", "runner", "arrived")

    def __init__(self, frame_id_, name, parent, parent_iteration, max_parallel, pending_enters):
        self.frame_id, self.name, self.max_parallel = frame_id_, name, max_parallel
        self.parent, self.parent_iteration = parent, parent_iteration
        self.iterations = {0: _Iteration(self, 0)}
        self.iteration_count, self.outstanding_iterations = 0, 1
        self.pending_enters = pending_enters
        self.next_iter_roots, self.invariants = [], []
        self.exits = []      # delivered when the frame is done: (node, outputs, dead)
        self.runner = None   # a codegen.LoopRunner when the frame is simple
        self.arrived = []    # Enters held for the runner: (node, outputs, dead)


@dataclasses.dataclass(slots=True)
class FrameStatistics:
    """What a control-flow step did (tests and benchmarks read it)."""

    frames_created: int = 0
    iterations_created: int = 0
    max_live_iterations: int = 0
    nodes_run: int = 0
    nodes_dead: int = 0


# A plan's tables for ``Frames``, per node: the ``(slot, output index)`` an iteration stores
# (what a counted consumer gathers, fetches); data edges ``(output, consumer index, consumer,
# position, how, its pending)``; control edges ``(consumer index, consumer, is a Merge,
# pending)``; per slot, the reads that gather it; ``{frame name: LoopRunner}``.
Tables = collections.namedtuple("Tables", "stores edges controls readers runners")


def tables(plan, compile_loops=True):
    """The ``Tables`` of ``plan``; no compiled loop without ``compile_loops``."""
    nodes = plan.nodes

    how = [_MERGE_IN if n.kind == MERGE else _SOLE if n.pending == 1 and len(n.inputs) == 1
           else _COUNTED for n in nodes]
    edges = [tuple((out, dst, nodes[dst], pos, how[dst], nodes[dst].pending)
                   for out, dst, pos in n.out_edges) for n in nodes]
    readers = list(plan.slot_readers)
    for node, out_edges in zip(nodes, edges):
        for out, _, _, _, mode, _ in out_edges:
            if mode != _COUNTED:
                readers[node.outputs[out]] -= 1  # it has the value from its edge
    stores = [tuple((slot, i) for i, slot in enumerate(n.outputs)
                    if slot != DROP and (readers[slot] or slot in plan.fetched)) for n in nodes]
    controls = [tuple((dst, nodes[dst], nodes[dst].kind == MERGE, nodes[dst].pending)
                      for dst in n.control_out) for n in nodes]
    simple = [n.kind in (NORMAL, SWITCH) and not (n.is_async or n.offload or n.deref
                                                  or n.runs_on_dead) for n in nodes]
    runners = codegen.build_runners(nodes, simple, plan.device.name) if compile_loops else {}
    return Tables(stores, edges, controls, readers, runners)


class Frames:
    """The propagator of a partition with control flow (see the module docstring)."""

    def __init__(self, plan, feed_values, step):
        self.plan, self.step, self.nodes, self.tables = plan, step, plan.nodes, plan.frame_tables
        self.ready, self.stats, self.live_iterations = [], FrameStatistics(), 1
        self.root = _Frame(0, "", None, None, 1, 0)
        root_iteration = self.root.iterations[0]
        self.root_values = root_iteration.values
        self.root_values.update(enumerate(feed_values))
        self.readers = list(self.tables.readers)
        self.dead_entry, self.loop_entry = Own(self._run_dead), Own(self._step_loop)
        self.complete, self.activate, self.push = self._hot_paths()
        for index in plan.roots:
            self.push(self.nodes[index], root_iteration, False)

    def release(self):
        """The run is over (``core.Run.close``): drop the hot paths and the own entries, which
        refer back to this propagator, and the root frame's iterations, which refer back to
        it, so a step with control flow is freed when it ends, not by the cyclic GC; ``values``
        still answers (from ``root_values``)."""
        self.complete = self.activate = self.push = None
        self.dead_entry = self.loop_entry = None
        self.root.iterations.clear()

    def _hot_paths(self):
        """``complete(node, where, outputs)``, ``activate(node, iteration, outputs, dead)``
        and ``push(node, iteration, dead)``, over locals. An entry's ``where`` is its
        iteration, or ``(iteration,)`` for a Send or Recv that runs dead; a dead node's
        entry is ``(dead_entry, node, iteration)``."""
        root_values, readers, fetched = self.root_values, self.readers, self.plan.fetched
        stores, edges, controls, _, _ = self.tables
        ready, stats, dead_entry = self.ready, self.stats, self.dead_entry
        root_iteration = self.root.iterations[0]
        cleanup = self.cleanup

        def push(node, iteration, dead):
            """``node`` is ready in ``iteration``: queue its entry, its arguments gathered."""
            iteration.outstanding += 1
            if dead and not node.runs_on_dead:
                ready.append((dead_entry, node, iteration))
                return
            values, inputs = iteration.values, node.inputs
            try:
                if len(inputs) == 1:
                    args = [values[inputs[0]]]
                else:
                    args = [*node.gather(values)] if inputs else []
            except KeyError:  # a fed tensor read inside a frame lives in the root frame
                args = [values[slot] if slot in values else root_values[slot]
                        for slot in inputs]
            if iteration is root_iteration:
                for slot in inputs:
                    readers[slot] -= 1
                    if readers[slot] == 0 and slot not in fetched:
                        values.pop(slot, None)  # its last reader has it: free the buffer
            ready.append((node, args, (iteration,) if dead else iteration))

        def fire(merge, iteration, dead):
            """Merge ``merge`` fires: on its first live input, in its position (DEAD
            elsewhere: the Merge kernel's contract), else dead."""
            iteration.pending[merge.index] = _FIRED
            if dead:
                push(merge, iteration, True)
                return
            position, value = iteration.merge_live[merge.index]
            args = [DEAD] * merge.num_inputs
            args[position] = value
            iteration.outstanding += 1
            ready.append((merge, args, iteration))

        def activate(node, iteration, outputs, node_dead):
            """Deliver ``outputs`` of ``node`` to its consumers in ``iteration``."""
            index = node.index
            values = iteration.values
            for slot, out_index in stores[index]:
                values[slot] = outputs[out_index]
            for out_index, dst, consumer, position, mode, initial in edges[index]:
                value = outputs[out_index]
                if mode == _SOLE:  # its only input: ready now, its argument in hand
                    iteration.outstanding += 1
                    if value is not DEAD:
                        ready.append((consumer, [value], iteration))
                    elif consumer.runs_on_dead:
                        ready.append((consumer, [value], (iteration,)))
                    else:
                        ready.append((dead_entry, consumer, iteration))
                    continue
                pending, dead = iteration.pending, iteration.dead
                count = pending.get(dst, initial)
                if mode == _MERGE_IN:
                    if value is not DEAD:
                        if dst not in iteration.merge_live:
                            iteration.merge_live[dst] = (position, value)
                            if count == 0:
                                fire(consumer, iteration, False)
                        continue
                    dead[dst] = dead.get(dst, 0) + 1
                    if count == 0 and dst not in iteration.merge_live and (
                            dead[dst] == consumer.num_inputs or node.kind == ENTER):
                        fire(consumer, iteration, True)
                    continue
                if value is DEAD:
                    dead[dst] = dead.get(dst, 0) + 1
                if count > 1:
                    pending[dst] = count - 1
                else:  # ready: no further edge reaches it in this iteration
                    push(consumer, iteration, dst in dead)
            for dst, consumer, is_merge, initial in controls[index]:
                pending, dead = iteration.pending, iteration.dead
                count = pending.get(dst, initial) - 1
                pending[dst] = count
                if is_merge:
                    if count == 0:
                        if dst in iteration.merge_live:
                            fire(consumer, iteration, False)
                        elif dead.get(dst, 0) == consumer.num_inputs:
                            fire(consumer, iteration, True)
                    continue
                if node_dead:
                    dead[dst] = dead.get(dst, 0) + 1
                if count == 0:
                    push(consumer, iteration, dst in dead)

        def complete(node, where, outputs):
            stats.nodes_run += 1
            if node.runs_on_dead:  # dead if it ran dead, or all it gave is dead
                if where.__class__ is tuple:  # it ran dead
                    self.propagate(node, where[0], outputs, True)
                else:
                    self.propagate(node, where, outputs,
                                   bool(outputs) and all(value is DEAD for value in outputs))
            elif node.kind <= MERGE or node.kind == SWITCH:  # (``propagate``'s first case)
                activate(node, where, outputs, False)
                where.outstanding -= 1
                if not where.outstanding:
                    cleanup(where.frame, where.number)
            else:
                self.propagate(node, where, outputs, False)

        return complete, activate, push

    @staticmethod
    def frame_iter(where):
        """Where a waiting kernel's rendezvous keys say it runs."""
        iteration = where[0] if where.__class__ is tuple else where
        return rendezvous_keys.frame_iter(iteration.frame.frame_id, iteration.number)

    def values(self):
        """The fetched values, from the root frame; the step's FrameStatistics are kept."""
        self.step.extras["frame_statistics"] = self.stats
        for slot, name in zip(self.plan.fetch_slots, self.plan.fetch_names):
            if self.root_values.get(slot, DEAD) is DEAD:
                raise errors.InvalidArgumentError(
                    None, None, f"The tensor returned for {name} was not valid: it is dead "
                    "(computed on an untaken cond branch or outside the iterations that ran)")
        return fetched_values(self.plan, self.root_values)

    def _run_dead(self, node, iteration):
        """A dead node runs no kernel: its outputs are all ``DEAD``."""
        self.stats.nodes_dead += 1
        self.propagate(node, iteration, (DEAD,) * len(node.outputs), True)

    def _step_loop(self, steps, child):
        """Step a compiled loop: ``PAUSE`` when the slice ran out (it stays queued); at its
        end, delete its frame and deliver the Exits."""
        try:
            next(steps)
        except StopIteration as done:
            exits, iterations = done.value
            self.stats.iterations_created += iterations
            self.stats.nodes_run += child.runner.iteration_nodes * iterations
            del child.iterations[0]
            self.live_iterations -= 1
            child.exits = [(node, (value,), False) for node, value in exits]
            self._delete_frame(child)
            return None
        self.ready.append((self.loop_entry, steps, child))
        return PAUSE

    def propagate(self, node, iteration, outputs, node_dead):
        """Route a finished node's outputs by its kind, then retire it from its iteration."""
        kind = node.kind
        frame = iteration.frame
        if kind <= MERGE or kind == SWITCH:
            self.activate(node, iteration, outputs, node_dead)
        elif kind == ENTER:
            self._enter(node, iteration, outputs, node_dead)
        elif kind == EXIT:
            if node_dead:
                if iteration.number == frame.iteration_count:
                    frame.exits.append((node, (DEAD,) * len(node.outputs), True))
            else:
                self.activate(node, frame.parent_iteration, outputs, False)
        elif not node_dead:  # NEXT_ITERATION: a dead one ends the loop
            self._next_iteration(node, iteration, outputs)
        iteration.outstanding -= 1
        if iteration.outstanding == 0:
            self.cleanup(frame, iteration.number)

    def _enter(self, node, iteration, outputs, node_dead):
        attrs = node.ctx.attrs
        name = attrs["frame_name"]
        child = iteration.frames.get(name)
        if child is None:
            frame = iteration.frame
            child = _Frame(rendezvous_keys.frame_id(frame.frame_id, iteration.number, name), name, frame,
                           iteration, max(1, int(attrs.get("parallel_iterations", 10))),
                           self.plan.enter_counts.get(name, 1))
            iteration.frames[name] = child
            child.runner = self.tables.runners.get(name)
            self.stats.frames_created += 1
            self._count_iteration()
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
                self.activate(node, live, outputs, node_dead)
        else:
            self.activate(node, child.iterations[0], outputs, node_dead)

    def _run_compiled(self, child):
        """All Enters arrived: queue a simple frame's loop, or replay them dynamically."""
        arrived, child.arrived = child.arrived, []
        if any(dead for _, _, dead in arrived):  # a loop on an untaken branch: go dynamic
            child.runner = None
            for node, outputs, node_dead in arrived:
                self._deliver_enter(child, node, outputs, node_dead)
            self.cleanup(child, 0)
            return
        steps = child.runner.run({node.index: outputs[0] for node, outputs, _ in arrived})
        self.ready.append((self.loop_entry, steps, child))

    def _next_iteration(self, node, iteration, outputs):
        frame = iteration.frame
        if iteration.number == frame.iteration_count:
            if frame.outstanding_iterations >= frame.max_parallel:
                frame.next_iter_roots.append((node, outputs))  # window full: park it
                return
            target = self._new_iteration(frame)
        else:
            target = frame.iterations[iteration.number + 1]
        self.activate(node, target, outputs, False)

    def _new_iteration(self, frame):
        frame.iteration_count += 1
        iteration = _Iteration(frame, frame.iteration_count)
        frame.iterations[iteration.number] = iteration
        frame.outstanding_iterations += 1
        frame.exits = []
        self._count_iteration()
        roots, frame.next_iter_roots = frame.next_iter_roots, []
        for node, outputs in roots:
            self.activate(node, iteration, outputs, False)
        for node, outputs, node_dead in frame.invariants:
            self.activate(node, iteration, outputs, node_dead)
        return iteration

    def _count_iteration(self):
        self.stats.iterations_created += 1
        self.live_iterations += 1
        if self.live_iterations > self.stats.max_live_iterations:
            self.stats.max_live_iterations = self.live_iterations

    def cleanup(self, frame, number):
        """Delete the finished iterations from ``number`` on; delete the frame when done."""
        if frame.parent is None:
            return
        iterations = frame.iterations
        while number <= frame.iteration_count:
            iteration = iterations.get(number)
            # Done: nothing outstanding, no live child frame, and its predecessor done
            # (iteration 0: every Enter of the frame arrived).
            if iteration is None or iteration.outstanding or iteration.frames or (
                    frame.pending_enters if number == 0 else number - 1 in iterations):
                break
            del iterations[number]
            frame.outstanding_iterations -= 1
            self.live_iterations -= 1
            number += 1
            if frame.next_iter_roots:
                self._new_iteration(frame)
        if frame.pending_enters == 0 and frame.outstanding_iterations == 0:
            self._delete_frame(frame)

    def _delete_frame(self, frame):
        parent_iteration = frame.parent_iteration
        for node, outputs, dead in frame.exits:
            self.activate(node, parent_iteration, outputs, dead)
        del parent_iteration.frames[frame.name]
        if not parent_iteration.outstanding:  # (its Enters may have retired meanwhile)
            self.cleanup(frame.parent, parent_iteration.number)
