"""The compiled form of a simple loop frame: iterations run straight-line.

A frame is *simple* when it holds one loop and nothing that needs the general machinery: no
nested frame, no Merge but the loop's own (Enter + NextIteration inputs), every Switch keyed
on the frame's one LoopCond, every node a synchronous inline kernel reading no variable
reference and nothing from outside the frame but through its Enters. Its dataflow in one
iteration is then fixed, so once all its Enters arrived live ``LoopRunner`` runs::

    merges <- entered values; run the cond part; if not pred: exits <- switch data; stop;
    run the body part (downstream of a Switch's true port); merges <- next values

and hands the Exit values to the parent frame. Iterations run one after another, which
``parallel_iterations`` allows (an upper bound); results equal the general path's since a
simple frame has no side effects outside its own dataflow order. A frame entered with a dead
value (a loop on an untaken cond branch) takes the general path. Values live in one dict
reused by every iteration. ``run`` is a generator that counts kernels in the time-slice
budget and yields when the slice is over, so its owner can checkpoint between iterations.
"""
from __future__ import annotations

import numpy as np

from asyncflow.runtime import timeslice
from asyncflow.runtime.plan import DROP, ENTER, EXIT, MERGE, NEXT_ITERATION, NORMAL, SWITCH

_ZERO, _ONE = np.int32(0), np.int32(1)
# A Const node inside a simple loop gives the same value in every iteration (its only input
# is the pivot's control edge), so the runner evaluates it once per run of the loop.


class LoopRunner:
    """Runs one simple frame to completion (see module docstring)."""

    def __init__(self, merges, switches, exits, pivot_slot, cond_part, body_part, iteration_nodes):
        self.merges = merges            # (output slot, index slot, enter node, next-value slot)
        self.switches = switches        # (data slot, true-port slot)
        self.exits = exits              # (exit node, switch data slot)
        self.pivot_slot = pivot_slot
        self.cond_part = cond_part      # (fn, ctx, input slots, output slots, node)
        self.body_part = body_part
        self.iteration_nodes = iteration_nodes
        self.invariants = []            # (slot, constant Enter node index)
        self.constants = []             # Const steps, the same in every iteration: run once

    def run(self, entered, wrap):
        """Run the loop from ``entered`` ({Enter node index: value}); a generator.

        Yields (None) whenever the time slice is over: the caller checkpoints, then resumes it.

        Returns:
            ``(exit values [(exit node, value)], iterations)``, as the generator's value.

        Raises:
            OpError: located by ``wrap(exc, node)`` at the failing node.
        """
        values = {}
        for slot, index in self.invariants:
            values[slot] = entered[index]
        _run_part(self.constants, values, wrap)
        current = [entered[enter] for _, _, enter, _ in self.merges]
        iterations = 0
        merges, cond_part, body_part = self.merges, self.cond_part, self.body_part
        budget, weight = timeslice.BUDGET, max(1, self.iteration_nodes)
        left = budget.left
        while True:
            index_value = _ZERO if iterations == 0 else _ONE
            for (slot, index_slot, _, _), value in zip(merges, current):
                values[slot] = value
                if index_slot != DROP:
                    values[index_slot] = index_value
            _run_part(cond_part, values, wrap)
            if not values[self.pivot_slot]:
                break
            for data_slot, true_slot in self.switches:
                if true_slot != DROP:
                    values[true_slot] = values[data_slot]
            _run_part(body_part, values, wrap)
            current = [values[next_slot] for _, _, _, next_slot in merges]
            iterations += 1
            left -= weight
            if left <= 0:
                if timeslice.due():
                    yield
                    left = budget.left  # (the caller's checkpoint restarted it)
                else:
                    left = timeslice.CHECK_EVERY
        budget.left = left
        return [(node, values[data_slot]) for node, data_slot in self.exits], iterations


def _run_part(part, values, wrap):
    node = None
    try:
        for fn, ctx, inputs, outputs, node in part:
            result = fn(ctx, *[values[slot] for slot in inputs])
            for slot, value in zip(outputs, result):
                values[slot] = value
    except BaseException as exc:
        if node is None or isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise wrap(exc, node) from exc


def build_runners(nodes, simple):
    """``{frame name: LoopRunner}`` for every simple frame of a plan's ``nodes``.

    ``simple[i]`` says node ``i`` is an ordinary synchronous inline kernel.
    """
    frames = {}
    for node in nodes:
        if node.kind == ENTER:
            frames.setdefault(node.ctx.attrs["frame_name"], []).append(node)
    runners = {}
    for name, enters in frames.items():
        runner = _build(nodes, simple, enters)
        if runner is not None:
            runners[name] = runner
    return runners


def _reach(nodes, roots, stop, within=None):
    """The nodes reachable from ``roots`` along data and control edges, not past a node of
    kind ``stop`` (which is included) nor outside ``within``."""
    seen, stack = set(), list(roots)
    while stack:
        index = stack.pop()
        if index in seen or (within is not None and index not in within):
            continue
        seen.add(index)
        node = nodes[index]
        if node.kind != stop:
            stack.extend(dst for _, dst, _ in node.out_edges)
            stack.extend(node.control_out)
    return seen


def _build(nodes, simple, enters):
    # The frame's nodes, up to its Exits; an Enter among them: a nested frame, left dynamic.
    members = _reach(nodes, [dst for enter in enters for dst in enter.consumers], EXIT)
    if not members or any(nodes[index].kind == ENTER for index in members):
        return None
    enter_slots = {enter.outputs[0]: enter.index for enter in enters}
    produced = {slot for index in members for slot in nodes[index].outputs} | set(enter_slots)
    pivots = [i for i in members if nodes[i].op.type == "LoopCond"]
    if len(pivots) != 1:
        return None
    pivot_slot = nodes[pivots[0]].outputs[0]
    merges, switches, exits, body_roots = [], [], [], []
    for index in sorted(members):
        node = nodes[index]
        if any(slot not in produced for slot in node.inputs):
            return None
        if node.kind == MERGE:
            entry = _merge_entry(nodes, node, enter_slots)
            if entry is None:
                return None
            merges.append(entry)
        elif node.kind == SWITCH:
            if node.inputs[1] != pivot_slot:
                return None
            switches.append((node.inputs[0], node.outputs[1]))
            body_roots.extend(dst for out, dst, _ in node.out_edges if out == 1)
            body_roots.extend(node.control_out)
        elif node.kind == EXIT:
            source = _switch_of(nodes, members, node)
            if source is None:
                return None
            exits.append((node, source))
        elif node.kind not in (NEXT_ITERATION,) and not (node.kind == NORMAL and simple[index]):
            return None
    # (a NextIteration leads to the next iteration, not further into this one)
    body = _reach(nodes, body_roots, NEXT_ITERATION, members)
    cond_part, body_part, constants = [], [], []
    for index in sorted(members):
        node = nodes[index]
        if node.kind != NORMAL:
            continue
        # (a dropped output is written to a throwaway key)
        kept = tuple(slot if slot != DROP else "discard" for slot in node.outputs)
        step = (node.fn, node.ctx, node.inputs, kept, node)
        if node.op.type == "Const" and not node.inputs:
            constants.append(step)
        else:
            (body_part if index in body else cond_part).append(step)
    runner = LoopRunner(merges, switches, exits, pivot_slot, cond_part, body_part,
                        len(cond_part) + len(body_part) + len(constants) + 2 * len(merges))
    runner.constants = constants
    runner.invariants = [(slot, index) for slot, index in enter_slots.items()
                         if nodes[index].ctx.attrs.get("is_constant")]
    return runner


def _merge_entry(nodes, merge, enter_slots):
    if len(merge.inputs) != 2 or merge.inputs[0] not in enter_slots:
        return None
    enter = nodes[enter_slots[merge.inputs[0]]]
    if enter.ctx.attrs.get("is_constant"):
        return None
    back = next((n for n in nodes if n.kind == NEXT_ITERATION
                 and merge.inputs[1] in n.outputs), None)
    if back is None:
        return None
    index_slot = merge.outputs[1] if len(merge.outputs) > 1 else DROP
    return (merge.outputs[0], index_slot, enter.index, back.inputs[0])


def _switch_of(nodes, members, exit_node):
    """The data slot of the Switch whose false port feeds ``exit_node``, or None."""
    for index in members:
        node = nodes[index]
        if node.kind == SWITCH and node.outputs[0] == exit_node.inputs[0]:
            return node.inputs[0]
    return None
