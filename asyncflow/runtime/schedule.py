"""The static fast path: a partition's schedule compiled to one straight-line Python function.

For a partition without control flow (and at most one waiting kernel), the order of nodes is fixed, so
instead of interpreting the plan (look up inputs, loop over outputs) for every node of every
step, we generate the code once::

    async def _step(slots, _offload, _wait, _pause):
        n = 0; v1 = f0(c0, slots[0], K1)[0]
        n = 1; v2 = f1(c1, v1, K1)[0]; v1 = None
        ...
        slots[7] = v9

Values live in local variables (the fastest storage CPython has); constants are evaluated
once at compile time and referenced as globals; a value dies (``= None``) right after its
last reader; ``n`` records the running node so a failure is reported against the right op.
A kernel that may be large (``offload``) is awaited through the ``_offload`` argument only
when its actual inputs are big.

A plan's one waiting kernel (a queue op, an async ``py_func``: see ``plan``) is awaited in
place through the ``_wait`` argument, which tries its synchronous twin first.

Time slices (see ``timeslice``): every ``2 * CHECK_EVERY`` kernels, and after every kernel that
may be offloaded or whose static shapes say it is large, the function asks ``_due()`` whether the slice is over and then awaits ``_pause()``
(the caller's loop's checkpoint, which honours cancellation). A schedule shorter than that
(a trivial run) holds no check at all; the checks cost one clock read per ``2 *
CHECK_EVERY`` small kernels.

The generated function awaits nothing else but ``_pause``, so a plan without a waiting
kernel runs under any event loop: trio passes an offload on ``trio.to_thread`` and a trio
checkpoint, asyncio callers (``asyncflow.aio``) the loop's executor and ``asyncio.sleep(0)``.
It holds no trio objects and no graph objects besides the kernels'
contexts; it is rebuilt only when the plan is.
"""
from __future__ import annotations

from asyncflow.runtime import timeslice
from asyncflow.runtime.plan import OFFLOAD_COST, estimate_static_cost, runtime_cost


def _is_const(node):
    return node.op.type == "Const" and not node.inputs


def _waiting_kernel_last(plan):
    """The plan's order with its waiting kernel, if any, as late as possible.

    Every node that does not depend on the waiting kernel runs before it, so while the step
    waits nothing else of it could have run (a failure elsewhere surfaces before the wait,
    as on the ready-queue path where the waiting kernel would be a task).
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


def compile_schedule(plan):
    """Generate the straight-line step function of ``plan``.

    Args:
        plan: an ExecutionPlan whose ``static`` flag is set.

    Returns:
        ``async fn(slots, offload, wait, pause)`` that runs every node, reading feeds from
        ``slots`` and writing fetched values back into their slots; ``offload(node, args)``
        is awaited to run a large kernel on a worker thread (the caller's event loop decides
        how), ``wait(node, args)`` to run the plan's one waiting kernel, if it has one, and
        ``pause()`` when the time slice is over: nothing else is ever awaited. On failure it
        raises the kernel's exception with ``exc._asyncflow_node`` set to the failing
        NodePlan.
    """
    env = {"_OFFLOAD_COST": OFFLOAD_COST, "_cost": runtime_cost, "_due": timeslice.due,
           "_ts": timeslice, "_B": timeslice.BUDGET}
    # Kernels here cost no interpretation (~0.5 us for a small one): twice as many per check.
    every = max(1, 2 * timeslice.CHECK_EVERY)
    count = 0  # kernels since the last slice check
    last_check = -1
    names = {}          # slot -> expression holding its value
    feed_slots = set(plan.feed_slots)
    fetch_slots = set(plan.fetch_slots)
    schedule = _waiting_kernel_last(plan)
    last_use = {}
    for node in schedule:
        for slot in node.inputs:
            last_use[slot] = node.index
    lines = []
    for slot in plan.feed_slots:
        names[slot] = f"slots[{slot}]"
    for node in schedule:
        i = node.index
        if _is_const(node):
            env[f"K{i}"] = node.fn(node.ctx)[0]
            if node.outputs[0] >= 0:
                names[node.outputs[0]] = f"K{i}"
            continue
        env[f"f{i}"], env[f"c{i}"], env[f"N{i}"] = node.fn, node.ctx, node
        args = []
        for position, slot in enumerate(node.inputs):
            expr = names[slot]
            args.append(f"{expr}.read()" if position in node.deref else expr)
        call_args = ", ".join([f"c{i}"] + args)
        if node.is_async:
            arg_list = "[" + ", ".join(args) + "]"
            lines.append(f"n = {i}; _r = await _wait(N{i}, {arg_list})")
        elif node.offload:
            arg_list = "[" + ", ".join(args) + "]"
            call = (f"(await _offload(N{i}, _a)) if _cost(N{i}, _a) >= _OFFLOAD_COST "
                    f"else f{i}(c{i}, *_a)")
            lines.append(f"n = {i}; _a = {arg_list}; _r = {call}")
        else:
            lines.append(f"n = {i}; _r = f{i}({call_args})")
        for position, slot in enumerate(node.outputs):
            if slot < 0:
                continue
            target = f"v{slot}"
            names[slot] = target
            lines.append(f"{target} = _r[{position}]")
        for slot in node.inputs:
            if last_use.get(slot) == i and slot not in fetch_slots and slot not in feed_slots \
                    and names[slot].startswith("v"):
                lines.append(f"{names[slot]} = None")
        count = every if node.offload or _large(node) else count + 1
        if count >= every:
            # Within an open slice, one clock read; ``_due`` opens it or says it is over.
            lines.append("if _ts.clock() >= _B.end and _due(): await _pause()")
            count, last_check = 0, len(lines)
    if last_check >= 0 and not any(line.startswith("n = ") for line in lines[last_check:]):
        del lines[last_check - 1]  # no kernel after it: the run's end is near enough
    for slot in plan.fetch_slots:
        if slot in names and names[slot] != f"slots[{slot}]":
            lines.append(f"slots[{slot}] = {names[slot]}")
    body = "\n".join("        " + line for line in lines) or "        pass"
    source = (
        "async def _step(slots, _offload, _wait, _pause):\n"
        "    n = -1\n"
        "    try:\n"
        f"{body}\n"
        "    except BaseException as exc:\n"
        "        exc._asyncflow_node = _NODES.get(n)\n"
        "        raise\n"
    )
    env["_NODES"] = {node.index: node for node in plan.schedule}
    code = compile(source, f"<asyncflow static schedule of {len(plan.schedule)} nodes>", "exec")
    exec(code, env)  # noqa: S102 - source generated above from integers and fixed names
    return env["_step"]
