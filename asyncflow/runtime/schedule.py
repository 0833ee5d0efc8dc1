"""The static plan's compiled form: its schedule as one straight-line Python function.

For a partition without control flow (and at most one waiting kernel) the order of nodes is
fixed, so the code is generated once instead of interpreting the plan on every step::

    async def _step(slots, _offload, _wait, _pause, _rec=None):
        v0 = F0(c1, slots[0], K0)[0]
        v0 = F1(c2, v0, K0)[0]
        slots[7] = v0

Values live in locals reused as values die (a 25,000-op chain needs one), so the per-op cost
does not grow with the graph; constants are evaluated at compile time (``K``), one global
per distinct kernel (``F``) beside each node's context (``c``); each node is one source
line, so a failure names the op of the line that raised (``_NODE_AT``). It awaits only
what the caller passes in (``_offload``, ``_wait``, ``_pause``), so a plan without a
waiting kernel runs under any event loop. The traced twin times each kernel.
"""
from __future__ import annotations

from asyncflow.runtime import timeslice
from asyncflow.runtime.plan import OFFLOAD_COST, estimate_static_cost, runtime_cost
from asyncflow.runtime.step import now_us


def _is_const(node):
    return node.op.type == "Const" and not node.inputs


def _waiting_kernel_last(plan):
    """The plan's order with its waiting kernel, if any, as late as possible.

    Every node that does not depend on the waiting kernel runs before it, so while the step
    waits nothing else of it could have run (a failure elsewhere surfaces before the wait,
    as in the core, where the waiting kernel would be a task).
    """
    schedule = list(plan.schedule)
    waiting = next((n for n in schedule if n.is_async), None)
    if waiting is None:
        return schedule
    downstream, stack = set(), [waiting.index]
    while stack:
        for consumer in plan.nodes[stack.pop()].consumers:
            if consumer not in downstream:
                downstream.add(consumer)
                stack.append(consumer)
    before = [n for n in schedule if n is not waiting and n.index not in downstream]
    return before + [waiting] + [n for n in schedule if n.index in downstream]


def _large(node):
    cost = estimate_static_cost(node.op)
    return cost is not None and cost >= timeslice.LARGE_KERNEL_COST


def compile_schedule(plan, traced=False):
    """Generate the straight-line step function of ``plan``.

    Args:
        plan: an ExecutionPlan whose ``static`` flag is set.
        traced: make the traced twin, which calls ``record(node, start[, waited])`` after
            each kernel (the waiting kernel's ``wait`` records it itself, given its start).

    Returns:
        ``async fn(slots, offload, wait, pause, record)``: reads feeds from ``slots``, writes
        fetched values back; awaits ``offload(node, args)`` for a kernel whose actual inputs
        are large, ``wait(node, args)`` for the plan's one waiting kernel and ``pause()`` once
        per time slice (checked every ``2 * CHECK_EVERY`` kernels and after each possibly
        large one), nothing else. A failure raises the kernel's exception with
        ``exc._asyncflow_node`` set to its NodePlan (None outside any kernel).
    """
    env = {"_OFFLOAD_COST": OFFLOAD_COST, "_cost": runtime_cost, "_due": timeslice.due,
           "_ts": timeslice, "_B": timeslice.BUDGET, "_now": now_us}
    # Kernels here cost no interpretation (~0.5 us for a small one): twice as many per check.
    every = max(1, 2 * timeslice.CHECK_EVERY)
    count = 0  # kernels since the last slice check
    last_check = -1
    names = {}          # slot -> expression holding its value
    fetch_slots = set(plan.fetch_slots)
    schedule = _waiting_kernel_last(plan)
    last_use = {}
    for node in schedule:
        for slot in node.inputs:
            last_use[slot] = node.index
    lines = []          # (source line, the NodePlan it runs or None)
    kernels = {}        # kernel function -> its global's name (one per distinct kernel)
    dead = []           # locals whose value died: reused before a new one is made
    made = 0            # locals made (``v0``...): at most the values alive at once
    for slot in plan.feed_slots:
        names[slot] = f"slots[{slot}]"
    for node in schedule:
        i = node.index
        if _is_const(node) and not traced:  # (traced: run, so that the trace shows it)
            env[f"K{i}"] = node.fn(node.ctx)[0]
            if node.outputs[0] >= 0:
                names[node.outputs[0]] = f"K{i}"
            continue
        fn = kernels.get(node.fn)
        if fn is None:
            fn = kernels[node.fn] = f"F{len(kernels)}"
            env[fn] = node.fn
        env[f"c{i}"] = node.ctx
        args = []
        for position, slot in enumerate(node.inputs):
            expr = names[slot]
            args.append(f"{expr}.read()" if position in node.deref else expr)
        if node.is_async or node.offload or traced:
            env[f"N{i}"] = node
        # Values read here for the last time free their locals (before the outputs take
        # theirs: the call's arguments are evaluated before its result is stored).
        dying = [names[slot] for slot in dict.fromkeys(node.inputs)
                 if last_use[slot] == i and slot not in fetch_slots
                 and names[slot].startswith("v")]
        dead.extend(dying)
        targets = []
        for slot in node.outputs:
            if slot < 0 or (slot not in last_use and slot not in fetch_slots):
                targets.append(None)  # nobody reads it
                continue
            if dead:
                names[slot] = dead.pop()
            else:
                names[slot], made = f"v{made}", made + 1
            targets.append(names[slot])
        if node.is_async:
            call = f"(await _wait(N{i}, [{', '.join(args)}]{', _t' if traced else ''}))"
        elif node.offload:
            call = (f"((await _offload(N{i}, _a)) if _cost(N{i}, _a) >= _OFFLOAD_COST "
                    f"else {fn}(c{i}, *_a))")
        else:
            call = f"{fn}({', '.join([f'c{i}'] + args)})"
        stored = [(position, t) for position, t in enumerate(targets) if t is not None]
        if len(stored) == 1:
            statements = [f"{stored[0][1]} = {call}[{stored[0][0]}]"]
        elif stored:
            statements = [f"_r = {call}"] + [f"{t} = _r[{p}]" for p, t in stored] + ["_r = None"]
        else:
            statements = [call]
        if traced and node.offload and not node.is_async:
            statements.append(f"_rec(N{i}, _t, _cost(N{i}, _a) >= _OFFLOAD_COST)")
        elif traced and not node.is_async:
            statements.append(f"_rec(N{i}, _t)")
        if node.offload and not node.is_async:
            statements = [f"_a = [{', '.join(args)}]"] + statements + ["_a = None"]
        if traced:
            statements.insert(0, "_t = _now()")
        # A value dies right after its last reader, unless a new one took its local.
        statements += [f"{name} = None" for name in dying if name not in targets]
        lines.append(("; ".join(statements), node))
        count = every if node.offload or _large(node) else count + 1
        if count >= every:
            # Within an open slice, one clock read; ``_due`` opens it or says it is over.
            lines.append(("if _ts.clock() >= _B.end and _due(): await _pause()", None))
            count, last_check = 0, len(lines)
    if last_check >= 0 and all(node is None for _, node in lines[last_check:]):
        del lines[last_check - 1]  # no kernel after it: the run's end is near enough
    for slot in plan.fetch_slots:
        if slot in names and names[slot] != f"slots[{slot}]":
            lines.append((f"slots[{slot}] = {names[slot]}", None))
    body = "\n".join("        " + line for line, _ in lines) or "        pass"
    source = (
        "async def _step(slots, _offload, _wait, _pause, _rec=None):\n"
        "    try:\n"
        f"{body}\n"
        "    except BaseException as exc:\n"
        "        exc._asyncflow_node = _NODE_AT.get(exc.__traceback__.tb_lineno)\n"
        "        raise\n"
    )
    # The failing node is found from the line that raised (one node per line, from line 3)
    # rather than stored per kernel: the schedule's code and constants stay small per node.
    env["_NODE_AT"] = {line: node for line, (_, node) in enumerate(lines, start=3)
                       if node is not None}
    code = compile(source, f"<asyncflow static schedule of {len(plan.schedule)} nodes>", "exec")
    exec(code, env)  # noqa: S102 - source generated above from integers and fixed names
    return env["_step"]
