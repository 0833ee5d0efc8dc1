"""The compiled forms' code: a static plan's schedule as one straight-line Python function.

The order of a static plan's nodes is fixed, so its code is generated once::

    async def _step(slots, _offload, _wait, _pause, _rec=None):
        v0 = F0(c1, slots[0], K0)[0]
        v0 = F0(c2, v0, K0)[0]
        slots[7] = v0

Values live in locals reused as values die, so the per-op cost does not grow with the graph;
one line per node, so the line that raised names the failing op. It awaits only what the
caller passes in. ``Generator`` writes compiled loops too.
"""
from __future__ import annotations

from asyncflow.runtime import timeslice
from asyncflow.runtime.plan import OFFLOAD_COST, estimate_static_cost, runtime_cost
from asyncflow.runtime.step import now_us, wrap_error


class Generator:
    """The source of one generated function, a line per statement group, and its globals."""

    def __init__(self):
        self.env, self.lines, self.kernels, self.indent = {}, [], {}, 0

    def add(self, prefix, value, name=None):
        """A global holding ``value`` (a new name unless ``name``); returns its name."""
        name = name or f"{prefix}{len(self.env)}"
        self.env[name] = value
        return name

    def constant(self, node):
        """A Const node's value, evaluated now, as a global."""
        return self.add("K", node.fn(node.ctx)[0])

    def call(self, node, args):
        """The expression calling ``node``'s kernel (one global per distinct kernel)."""
        fn = self.kernels.get(node.fn)
        if fn is None:
            fn = self.kernels[node.fn] = self.add("F", node.fn, f"F{len(self.kernels)}")
        return f"{fn}({', '.join([self.add('c', node.ctx)] + args)})"

    @staticmethod
    def store(call, targets):
        """Statements storing the outputs of ``call`` in ``targets`` (None: not kept)."""
        stored = [(position, t) for position, t in enumerate(targets) if t is not None]
        if len(stored) == 1:
            return [f"{stored[0][1]} = {call}[{stored[0][0]}]"]
        if stored:
            return [f"_r = {call}"] + [f"{t} = _r[{p}]" for p, t in stored] + ["_r = None"]
        return [call]

    def line(self, statements, node=None):
        """One source line; a failure on a line of ``node`` names ``node``."""
        self.lines.append(("    " * self.indent + "; ".join(statements), node))

    def function(self, header, title, device_name):
        """Compile the lines as the body of ``header``; returns the function. A failure on
        a node's line is raised located (``wrap_error``) at that node."""
        body = "\n".join("        " + line for line, _ in self.lines) or "        pass"
        source = (f"{header}:\n    try:\n{body}\n"
                  "    except Exception as exc:\n        _locate(exc)\n        raise\n")
        # The failing node is found from the line that raised (one node per line, from
        # line 3) rather than stored per kernel: the code and constants stay small per node.
        node_at = {line: node for line, (_, node) in enumerate(self.lines, start=3)
                   if node is not None}

        def locate(exc):
            node = node_at.get(exc.__traceback__.tb_lineno)
            err = exc if node is None else wrap_error(exc, node.op, device_name)
            if err is not exc:
                raise err
        self.env["_locate"] = locate
        exec(compile(source, f"<asyncflow {title}>", "exec"), self.env)  # noqa: S102
        return self.env[header.split("(")[0].split()[-1]]  # (source from integers, fixed names)


def _waiting_kernel_last(plan):
    """The plan's order with its waiting kernel, if any, as late as possible: every node
    that does not depend on it runs before it (a failure elsewhere surfaces before the wait,
    as in the core, where the waiting kernel would be a task)."""
    schedule = list(plan.schedule)
    waiting = next((n for n in schedule if n.is_async), None)
    after = set() if waiting is None else {waiting.index}
    for node in schedule:  # (in topological order: a consumer comes after its producer)
        if node.index in after:
            after.update(node.consumers)
    return [n for n in schedule if n.index not in after] + [n for n in schedule
                                                            if n.index in after]


def compile_schedule(plan, traced=False):
    """The step function of ``plan`` (``plan.static``), or its ``traced`` twin, which calls
    ``record(node, start[, waited])`` after each kernel (``wait`` records its own).

    Returns:
        ``async fn(slots, offload, wait, pause, record)``: reads feeds from ``slots``, writes
        fetched values back; awaits ``offload(node, args)`` for a kernel whose actual inputs
        are large, ``wait(node, args)`` for its one waiting kernel and ``pause()`` once per
        time slice, nothing else. A kernel's failure raises a located OpError.
    """
    gen = Generator()
    gen.env.update(_OFFLOAD_COST=OFFLOAD_COST, _cost=runtime_cost, _due=timeslice.due,
                   _ts=timeslice, _B=timeslice.BUDGET, _now=now_us)
    # Kernels here cost no interpretation (~0.5 us for a small one): twice as many per check.
    every = max(1, 2 * timeslice.CHECK_EVERY)
    count = 0  # kernels since the last slice check
    last_check = -1
    names = {slot: f"slots[{slot}]" for slot in plan.feed_slots}  # slot -> its expression
    fetch_slots = set(plan.fetch_slots)
    schedule = _waiting_kernel_last(plan)
    last_use = {slot: node.index for node in schedule for slot in node.inputs}
    dead = []   # locals whose value died: reused before a new one is made
    made = 0    # locals made (``v0``...): at most the values alive at once
    for node in schedule:
        i = node.index
        if node.op.type == "Const" and not node.inputs and not traced:  # (traced: shown)
            if node.outputs[0] >= 0:
                names[node.outputs[0]] = gen.constant(node)
            continue
        args = [f"{names[slot]}.read()" if position in node.deref else names[slot]
                for position, slot in enumerate(node.inputs)]
        if node.is_async or node.offload or traced:
            gen.env[f"N{i}"] = node
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
                    f"else {gen.call(node, ['*_a'])})")
        else:
            call = gen.call(node, args)
        statements = gen.store(call, targets)
        if traced and node.offload and not node.is_async:
            statements.append(f"_rec(N{i}, _t, _cost(N{i}, _a) >= _OFFLOAD_COST)")
        elif traced and not node.is_async:
            statements.append(f"_rec(N{i}, _t)")
        # A value dies right after its last reader, unless a new one took its local.
        statements += [f"{name} = None" for name in dying if name not in targets]
        if node.offload and not node.is_async:
            statements = [f"_a = [{', '.join(args)}]"] + statements + ["_a = None"]
        if traced:
            statements.insert(0, "_t = _now()")
        gen.line(statements, node)
        cost = estimate_static_cost(node.op)
        large = node.offload or (cost is not None and cost >= timeslice.LARGE_KERNEL_COST)
        count = every if large else count + 1
        if count >= every:
            # Within an open slice, one clock read; ``_due`` opens it or says it is over.
            gen.line(["if _ts.clock() >= _B.end and _due(): await _pause()"])
            count, last_check = 0, len(gen.lines)
    if last_check >= 0 and all(node is None for _, node in gen.lines[last_check:]):
        del gen.lines[last_check - 1]  # no kernel after it: the run's end is near enough
    for slot in plan.fetch_slots:
        if slot in names and names[slot] != f"slots[{slot}]":
            gen.line([f"slots[{slot}] = {names[slot]}"])
    return gen.function("async def _step(slots, _offload, _wait, _pause, _rec=None)",
                        f"static schedule of {len(plan.schedule)} nodes", plan.device.name)
