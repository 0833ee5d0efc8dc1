"""The compiled form of a simple loop frame: its iterations as one generated generator.

A frame is *simple* when it holds one loop and nothing that needs the general machinery (no
nested frame, no Merge but the loop's own, every Switch keyed on its one LoopCond, only
synchronous inline kernels reading nothing from outside but through its Enters). Once its
Enters arrived live, ``LoopRunner.run`` runs the iterations one after another (which
``parallel_iterations``, an upper bound, allows) and yields when the time slice is over.
Its code comes from ``schedule.Generator``::

    while True: cond part; if not pred: break; body part; merges <- next values
"""
from __future__ import annotations

import numpy as np

from asyncflow.runtime import schedule, timeslice
from asyncflow.runtime.plan import DROP, ENTER, EXIT, MERGE, NEXT_ITERATION, NORMAL, SWITCH


class LoopRunner:
    """``run(entered)``: a generator over {Enter node index: value} that yields at the end
    of a slice and returns ``([(exit node, value)], iterations)``; raises a located OpError.
    ``cond_part``, ``body_part``, ``constants``: the nodes of each part, in order."""

    __slots__ = ("run", "iteration_nodes", "cond_part", "body_part", "constants")


def build_runners(nodes, simple, device_name):
    """``{frame name: LoopRunner}`` for every simple frame of a plan's ``nodes``
    (``simple[i]``: node ``i`` is an ordinary synchronous inline kernel)."""
    frames = {}
    for node in nodes:
        if node.kind == ENTER:
            frames.setdefault(node.ctx.attrs["frame_name"], []).append(node)
    built = {name: _build(nodes, simple, enters, device_name) for name, enters in frames.items()}
    return {name: runner for name, runner in built.items() if runner is not None}


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


def _build(nodes, simple, enters, device_name):
    # The frame's nodes, up to its Exits; an Enter among them: a nested frame, left dynamic.
    members = sorted(_reach(nodes, [dst for enter in enters for dst in enter.consumers], EXIT))
    if not members or any(nodes[index].kind == ENTER for index in members):
        return None
    enter_of = {enter.outputs[0]: enter for enter in enters}
    produced = {slot for index in members for slot in nodes[index].outputs} | set(enter_of)
    pivots = [nodes[i] for i in members if nodes[i].op.type == "LoopCond"]
    if len(pivots) != 1:
        return None
    pivot = pivots[0].outputs[0]
    back_of = {n.outputs[0]: n.inputs[0] for n in nodes if n.kind == NEXT_ITERATION}
    # The locals of the values: an invariant Enter's, a Merge's (its index output: 0 in the
    # first iteration, 1 after); a Switch's true port is its data's.
    invariants = [enter for enter in enters if enter.ctx.attrs.get("is_constant")]
    names = {enter.outputs[0]: f"e{k}" for k, enter in enumerate(invariants)}
    variant = set(enter_of) - set(names)  # read only by their Merges
    merges, false_ports, body_roots, kernels, exits = [], {}, [], [], []
    for index in members:
        node = nodes[index]
        if any(slot not in produced or (slot in variant and node.kind != MERGE)
               for slot in node.inputs):
            return None
        if node.kind == MERGE:
            enter = enter_of.get(node.inputs[0])
            if len(node.inputs) != 2 or enter is None or enter.outputs[0] in names \
                    or node.inputs[1] not in back_of:
                return None
            names[node.outputs[0]] = f"m{len(merges)}"
            if node.outputs[1] != DROP:
                names[node.outputs[1]] = "_index"
            merges.append((f"m{len(merges)}", enter.index, back_of[node.inputs[1]]))
        elif node.kind == SWITCH:
            if node.inputs[1] != pivot:
                return None
            false_ports[node.outputs[0]] = node.inputs[0]
            if node.outputs[1] != DROP:
                names[node.outputs[1]] = node.inputs[0]  # (resolved below: its data's name)
            body_roots.extend(dst for out, dst, _ in node.out_edges if out == 1)
            body_roots.extend(node.control_out)
        elif node.kind == EXIT:
            exits.append(node)
        elif node.kind == NORMAL and simple[index]:
            kernels.append(node)
        elif node.kind != NEXT_ITERATION:
            return None
    if not merges or any(node.inputs[0] not in false_ports for node in exits):
        return None
    # (a NextIteration leads to the next iteration, not further into this one)
    body = _reach(nodes, body_roots, NEXT_ITERATION, set(members))
    runner = LoopRunner()
    runner.constants, runner.cond_part, runner.body_part = [], [], []
    for node in kernels:
        into = (runner.constants if node.op.type == "Const" and not node.inputs
                else runner.body_part if node.index in body else runner.cond_part)
        into.append(node)
    runner.iteration_nodes = len(kernels) + 2 * len(merges)
    gen = schedule.Generator()
    for node in runner.constants:
        names[node.outputs[0]] = gen.constant(node)

    def name(slot):
        expr = names.get(slot, f"v{slot}")
        return name(expr) if isinstance(expr, int) else expr  # a true port: its data's

    def part(kernels_):
        for node in kernels_:
            call = gen.call(node, [name(slot) for slot in node.inputs])
            gen.line(gen.store(call, [name(s) if s != DROP else None for s in node.outputs]), node)

    exit_values = [(gen.add("X", node), name(false_ports[node.inputs[0]])) for node in exits]
    gen.env.update(_B=timeslice.BUDGET, _due=timeslice.due, _ts=timeslice, _Z=np.int32(0),
                   _O=np.int32(1), _W=max(1, runner.iteration_nodes))
    gen.line(["_index = _Z", "_n = 0", "_left = _B.left"]
             + [f"e{k} = entered[{enter.index}]" for k, enter in enumerate(invariants)]
             + [f"{m} = entered[{enter}]" for m, enter, _ in merges])
    gen.line(["while True:"])
    gen.indent = 1
    part(runner.cond_part)
    gen.line([f"if not {name(pivot)}: break"])
    part(runner.body_part)
    gen.line([", ".join(m for m, _, _ in merges) + " = "
              + ", ".join(name(slot) for _, _, slot in merges),
              "_index = _O", "_n += 1", "_left -= _W"])
    gen.line(["if _left <= 0:"])
    gen.line(["    if _due(): yield; _left = _B.left"])  # (the owner's checkpoint restarted it)
    gen.line(["    else: _left = _ts.CHECK_EVERY"])
    gen.indent = 0
    returned = ", ".join(f"({x}, {v})" for x, v in exit_values)
    gen.line(["_B.left = _left", f"return [{returned}], _n"])
    runner.run = gen.function("def _loop(entered)", f"loop {enters[0].ctx.attrs['frame_name']}",
                              device_name)
    return runner
