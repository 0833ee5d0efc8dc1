"""The frames propagator: values keyed by (node output, frame, iteration), dead tensors.

Theory of operation (the paper's control flow, TF's ``propagator_state``), for the core
(``core.py``), which drains its ``ready`` entries ``(node index, frame, iteration, dead)``:
- Each live ``_Frame`` keeps its ``_Iteration``s; an iteration holds the values its nodes
  read (slot -> value), its nodes' pending and dead-input counts (lazily from the plan),
  each Merge's first live input, its ``outstanding`` nodes and its live child frames.
- ``take``: a dead entry of an ordinary node runs no kernel (its outputs are all ``DEAD``);
  kernels flagged ``runs_on_dead`` (Send/Recv) run anyway. A Merge gets its first live input
  in its position and ``DEAD`` elsewhere (the Merge kernel's contract).
- ``complete`` routes outputs by node kind: ordinary nodes feed their iteration; ``Enter``
  feeds iteration 0 of the child frame (a constant Enter, a loop invariant, every current and
  future iteration); ``Exit`` feeds the parent iteration (a dead Exit of the newest iteration
  is held until the frame is done: a loop on an untaken branch goes dead); ``NextIteration``
  feeds iteration i+1, unless ``parallel_iterations`` are in flight: it is parked until the
  oldest finishes. A dead NextIteration ends the loop. Merge fires once per iteration: on
  its first live input once its control inputs arrived, or dead when all data inputs are.
- An iteration is done when it has no outstanding nodes and no live child frames and its
  predecessor is done; done iterations are deleted in order (memory flat in the iteration
  count). A frame is done when all its Enters arrived and no iteration is left.
- A *simple* frame (``compiled_loops``, a compiled form chosen when the plan is built) runs
  straight-line once all its Enters arrived live: the frame is queued as a loop entry
  (index -1) that ``take`` steps until the loop ends; when the slice runs out there, ``take``
  answers ``PAUSE`` and the core's owner checkpoints before stepping it again.
- Frame ids hash (parent id, parent iteration, frame name) with blake2b, so every process
  names a frame alike; waiting kernels see ``ctx.frame_iter`` ("id:iter") for their keys.
- The root frame frees a value after its last reader; a dead fetch is an
  InvalidArgumentError.
"""
from __future__ import annotations

import dataclasses
import hashlib

from asyncflow import errors
from asyncflow.kernels.control_flow import DEAD
from asyncflow.runtime import compiled_loops
from asyncflow.runtime.core import PAUSE
from asyncflow.runtime.plan import DROP, ENTER, EXIT, MERGE, NORMAL, SWITCH
from asyncflow.runtime.step import wrap_error

_FIRED = -(1 << 40)  # a Merge's pending count once it has fired in an iteration
# An entry's mark: False (a live node), True (dead), or one of these, both truthy, so that a
# live ordinary node is told by one test.
_MERGE = "live Merge"     # a Merge firing on its first live input
_LOOP = "compiled loop"   # (-1, frame, its loop's generator, _LOOP)


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


@dataclasses.dataclass(slots=True)
class FrameStatistics:
    """What a control-flow step did (tests and benchmarks read it)."""

    frames_created: int = 0
    iterations_created: int = 0
    max_live_iterations: int = 0
    nodes_run: int = 0
    nodes_dead: int = 0


def tables(plan, compile_loops=True):
    """Per node, flattened for ``complete``: where outputs are stored, data edges
    ``(output, consumer, position, consumer is Merge, consumer's initial pending)`` and
    control edges ``(consumer, is Merge, initial pending)``; and the compiled loops of the
    plan's simple frames (``{frame name: LoopRunner}``, none without ``compile_loops``)."""
    nodes = plan.nodes
    stores = [tuple((slot, i) for i, slot in enumerate(n.outputs) if slot != DROP)
              for n in nodes]
    edges = [tuple((out, dst, pos, nodes[dst].kind == MERGE, nodes[dst].pending)
                   for out, dst, pos in n.out_edges) for n in nodes]
    controls = [tuple((dst, nodes[dst].kind == MERGE, nodes[dst].pending)
                      for dst in n.control_out) for n in nodes]
    simple = [n.kind in (NORMAL, SWITCH) and not (n.is_async or n.offload or n.deref
                                                  or n.runs_on_dead) for n in nodes]
    runners = compiled_loops.build_runners(nodes, simple) if compile_loops else {}
    return stores, edges, controls, runners


class Frames:
    """The propagator of a partition with control flow (see the module docstring)."""

    def __init__(self, plan, feed_values, step):
        self.plan = plan
        self.step = step
        self.nodes = plan.nodes
        self.stores, self.edges, self.controls, self.runners = plan.frame_tables
        device_name = plan.device.name
        self.wrap = lambda exc, node: wrap_error(exc, node.op, device_name)
        self.enter_counts = plan.enter_counts
        self.ready = []
        self.stats = FrameStatistics()
        self.live_iterations = 1
        self.root = _Frame(0, "", None, None, 1, 0)
        self.root_values = self.root.iterations[0].values
        self.root_values.update(enumerate(feed_values))
        self.readers = list(plan.slot_readers)
        for index in plan.roots:
            self.push(index, self.root, self.root.iterations[0], False)
        self.take, self.complete, self.activate = self._hot_paths()

    def _hot_paths(self):
        """``take(entry) -> (node, args)``, ``complete(entry, node, outputs)`` and
        ``activate(node, frame, iteration, outputs, dead)``, over locals.

        ``take`` answers ``(None, None)`` for an entry it handled (a dead node) and
        ``(None, PAUSE)`` when a compiled loop stopped at the end of its slice.
        """
        nodes, root, root_values = self.nodes, self.root, self.root_values
        readers, fetched, stats = self.readers, self.plan.fetched, self.stats
        stores, edges, controls, ready = self.stores, self.edges, self.controls, self.ready
        propagate, cleanup = self.propagate, self.cleanup
        merge_input, push = self._merge_input, self.push

        def activate(node, frame, iteration, outputs, node_dead):
            """Deliver ``outputs`` of ``node`` to its consumers in ``iteration`` of ``frame``."""
            index = node.index
            values = iteration.values
            for slot, out_index in stores[index]:
                values[slot] = outputs[out_index]
            for out_index, dst, position, is_merge, initial in edges[index]:
                value = outputs[out_index]
                if is_merge:
                    merge_input(node, frame, iteration, dst, position, value)
                    continue
                if initial == 1:  # its only input: ready now, no count to keep
                    iteration.outstanding += 1
                    ready.append((dst, frame, iteration, value is DEAD))
                    continue
                pending, dead = iteration.pending, iteration.dead
                count = pending.get(dst, initial) - 1
                if value is DEAD:
                    dead[dst] = dead.get(dst, 0) + 1
                if count:
                    pending[dst] = count
                else:  # ready: no further edge reaches it in this iteration
                    iteration.outstanding += 1
                    ready.append((dst, frame, iteration, dst in dead))
            for dst, is_merge, initial in controls[index]:
                if initial == 1 and not is_merge:  # (as above)
                    iteration.outstanding += 1
                    ready.append((dst, frame, iteration, node_dead))
                    continue
                pending, dead = iteration.pending, iteration.dead
                count = pending.get(dst, initial) - 1
                pending[dst] = count
                if is_merge:
                    if count == 0:
                        if dst in iteration.merge_live:
                            pending[dst] = _FIRED
                            push(dst, frame, iteration, _MERGE)
                        elif dead.get(dst, 0) == nodes[dst].num_inputs:
                            pending[dst] = _FIRED
                            push(dst, frame, iteration, True)
                    continue
                if node_dead:
                    dead[dst] = dead.get(dst, 0) + 1
                if count == 0:
                    iteration.outstanding += 1
                    ready.append((dst, frame, iteration, dst in dead))

        def take(entry):
            index, frame, iteration, mark = entry
            if mark:  # not a live ordinary node
                if mark is _LOOP:
                    return self._step_loop(entry)
                node = nodes[index]
                if mark is _MERGE:  # its first live input in its position, DEAD elsewhere
                    position, value = iteration.merge_live[index]
                    args = [DEAD] * node.num_inputs
                    args[position] = value
                    return node, args
                if not node.runs_on_dead:
                    stats.nodes_dead += 1
                    propagate(node, frame, iteration, (DEAD,) * len(node.outputs), True)
                    return None, None
            node = nodes[index]
            values = iteration.values
            inputs = node.inputs
            try:
                args = [values[slot] for slot in inputs]
            except KeyError:  # a fed tensor read inside a frame lives in the root frame
                args = [values[slot] if slot in values else root_values[slot]
                        for slot in inputs]
            if frame is root:
                for slot in inputs:
                    readers[slot] -= 1
                    if readers[slot] == 0 and slot not in fetched:
                        values.pop(slot, None)
            return node, args

        def complete(entry, node, outputs):
            _, frame, iteration, mark = entry
            stats.nodes_run += 1
            dead = mark is True
            if node.runs_on_dead and not dead and outputs:
                dead = all(value is DEAD for value in outputs)
            kind = node.kind
            if kind <= MERGE or kind == SWITCH:  # (``propagate``'s first case, inlined)
                activate(node, frame, iteration, outputs, dead)
                iteration.outstanding -= 1
                if not iteration.outstanding:
                    cleanup(frame, iteration.number)
            else:
                propagate(node, frame, iteration, outputs, dead)

        return take, complete, activate

    @staticmethod
    def frame_iter(entry):
        """What a waiting kernel's rendezvous keys name: "frame id:iteration"."""
        return f"{entry[1].frame_id}:{entry[2].number}"

    def values(self):
        """The fetched values, from the root frame; the step's FrameStatistics are kept."""
        self.step.extras["frame_statistics"] = self.stats
        plan, out = self.plan, []
        for slot, deref, name in zip(plan.fetch_slots, plan.fetch_deref, plan.fetch_names):
            value = self.root_values.get(slot, DEAD)
            if value is DEAD:
                raise errors.InvalidArgumentError(
                    None, None, f"The tensor returned for {name} was not valid: it is dead "
                    "(computed on an untaken cond branch or outside the iterations that ran)")
            out.append(value.read() if deref else value)
        return out

    def _step_loop(self, entry):
        _, child, steps, _ = entry
        try:
            next(steps)
        except StopIteration as done:
            exits, iterations = done.value
            self.finish_compiled(child, exits, iterations)
            return None, None
        self.ready.append(entry)  # the slice is over: the owner checkpoints, then resumes
        return None, PAUSE

    def push(self, index, frame, iteration, dead):
        iteration.outstanding += 1
        self.ready.append((index, frame, iteration, dead))

    def _merge_input(self, node, frame, iteration, dst, position, value):
        """A data input reaches Merge ``dst``: fire on the first live one, or when all are dead."""
        pending = iteration.pending
        count = pending.get(dst, self.nodes[dst].pending)
        if value is not DEAD:
            if dst not in iteration.merge_live:
                iteration.merge_live[dst] = (position, value)
                if count == 0:
                    pending[dst] = _FIRED
                    self.push(dst, frame, iteration, _MERGE)
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
            child.runner = self.runners.get(name)
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
        self.ready.append((-1, child, child.runner.run(entered, self.wrap), _LOOP))

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
        parent, parent_iteration = frame.parent, frame.parent_iteration
        for node in frame.dead_exits:
            self.activate(node, parent, parent_iteration, (DEAD,) * len(node.outputs), True)
        del parent_iteration.frames[frame.name]
        if not parent_iteration.outstanding:
            self.cleanup(parent, parent_iteration.number)
