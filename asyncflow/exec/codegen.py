"""The compiled forms' code, generated once per plan by ``Generator``: a static plan's
schedule as one straight-line function, and a simple loop frame's iterations as a generator
(which frames are simple: ``docs/control_flow.md``, "Simple loops run straight-line").
A static plan's step function::

    async def _step(slots, _offload, _wait, _pause, _rec=None):
        v0 = F0(c1, slots[0], K0)[0]
        v0 = F0(c2, v0, K0)[0]
        slots[7] = v0

Values live in locals reused as values die, so the per-op cost does not grow with the graph;
one line per node, so the line that raised names the failing op. It awaits only what the
caller passes in. A loop's generator runs the iterations one after another (which
``parallel_iterations``, an upper bound, allows), yielding when the time slice is over::

    while True: cond part; if not pred: break; body part; merges <- next values

Generated code is debuggable: each function gets its own file name (``<asyncflow 3: static
schedule of 12 nodes on /job:...>``) registered in ``linecache`` for as long as the function
lives, so tracebacks, ``pdb`` and profilers show its lines; its globals are named after the
ops and kernels they hold (``F_MatMul(c_dense_MatMul, v0, v1)``) and every node's line ends
with a comment naming the op and its type. With the environment variable
``ASYNCFLOW_DUMP_CODE`` set to a directory, each function's source is also written there as
a ``.py`` file, which then is the function's file name.
"""
from __future__ import annotations

import itertools
import linecache
import os
import re
import weakref

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import ANY, get_kernel
from asyncflow.exec import pairs, plan as plan_mod, timeslice
from asyncflow.exec.plan import (DROP, ENTER, EXIT, MERGE, NEXT_ITERATION, NORMAL, SWITCH,
                                    estimate_static_cost, offload_due, runtime_cost,
                                    transfers_in_order)
from asyncflow.exec.step import now_us


DUMP_ENV = "ASYNCFLOW_DUMP_CODE"  # a directory: every generated function's source lands there
# A VariableV2's line reads its resource bound to the plan, and an Identity of a variable's
# read is the read itself, with no kernel call (``Generator.read``); False: both call their
# kernels every step, as before (bench A/B only).
BIND_VARIABLES = True
_functions = itertools.count(1)
_NOT_IDENTIFIER = re.compile(r"[^0-9A-Za-z_]+")


class Generator:
    """The source of one generated function, a line per statement group, and its globals."""

    def __init__(self, kernel_calls=False):
        self.env, self.lines, self.kernels, self.indent = {}, [], {}, 0
        self.kernel_calls = kernel_calls  # every node's kernel called (no ``read``)

    def add(self, prefix, value, name=None, label=None):
        """A global holding ``value``; returns its name: ``name``, else ``prefix`` and
        ``label`` (an op's name, made an identifier, unique here), else a numbered one."""
        if name is None and label:
            base = f"{prefix}_{_NOT_IDENTIFIER.sub('_', label).strip('_')[:60]}"
            name, suffix = base, 1
            while name in self.env:
                suffix += 1
                name = f"{base}_{suffix}"
        name = name or f"{prefix}{len(self.env)}"
        self.env[name] = value
        return name

    def constant(self, node):
        """A Const node's value, evaluated now, as a global."""
        return self.add("K", node.fn(node.ctx)[0], label=node.op.name)

    def call(self, node, args):
        """The expression calling ``node``'s kernel (one global per distinct kernel), or a
        one-tuple of its output read inline where ``read`` gives one (``store`` unpacks it)."""
        inline = self.read(node, args)
        if inline is not None:
            return _Read(f"({inline},)")
        fn = self.kernels.get(node.fn)
        if fn is None:
            fn = self.kernels[node.fn] = self.add("F", node.fn, label=node.op.type)
        return f"{fn}({', '.join([self.add('c', node.ctx, label=node.op.name)] + args)})"

    def read(self, node, args):
        """The expression of ``node``'s one output without its kernel call, or None
        (``BIND_VARIABLES``; the traced twin, ``kernel_calls``, calls every kernel).

        A ``VariableV2``'s is its resource, bound here: the line reads the resource by weak
        reference while the manager's epoch is the one it was looked up under and otherwise
        looks it up again (``_variable_binder``: created on first use, found again after a
        ``reset``), as the kernel (``NodeContext.variable_resource``) does every step; an
        uninitialized variable still raises at its reader's ``read()``, naming the variable.
        An ``Identity`` of a variable's read (its argument ``ref.read()``) is the read.
        Only a node whose ``fn`` is the registered kernel: a GPU's plan wraps every kernel
        (``GpuDevice.bind_plan``: device current, arguments moved), and keeps its calls.
        """
        if not BIND_VARIABLES or self.kernel_calls or node.is_async or node.offload:
            return None
        kind = node.op.type
        if kind == "VariableV2" and not node.inputs and node.fn is _kernel_fn(kind):
            label = node.op.name
            names = (self.add("Vr", _unbound, label=label),  # (a reference to nothing,
                     self.add("Vm", _Unbound, label=label),  # an epoch no manager has)
                     self.add("Ve", None, label=label))
            bind = self.add("V", _variable_binder(self.env, names, node.ctx), label=label)
            ref, manager, epoch = names
            return f"({ref}() if {manager}.epoch == {epoch} else None) or {bind}()"
        if kind == "Identity" and node.deref == (0,) and node.fn is _kernel_fn(kind):
            return args[0]  # (``x.read()``: the value, as the kernel returns its input)
        return None

    @staticmethod
    def store(call, targets):
        """Statements storing the outputs of ``call`` in ``targets`` (None: not kept)."""
        if type(call) is _Read:  # (an inline read: its one output, no tuple)
            value = call[1:-2]
            return [f"{targets[0]} = {value}" if targets[0] is not None else value]
        stored = [(position, t) for position, t in enumerate(targets) if t is not None]
        if len(stored) == 1:
            return [f"{stored[0][1]} = {call}[{stored[0][0]}]"]
        if stored:
            return [f"_r = {call}"] + [f"{t} = _r[{p}]" for p, t in stored] + ["_r = None"]
        return [call]

    def line(self, statements, node=None):
        """One source line; a failure on a line of ``node`` names ``node`` (and the line
        ends with a comment naming its op)."""
        text = "    " * self.indent + "; ".join(statements)
        if node is not None:
            text += f"  # {node.op.name} ({node.op.type})"
        self.lines.append((text, node))

    def function(self, header, title, device_name, prologue=(), final=()):
        """Compile the lines as the body of ``header``; returns the function. A failure on
        a node's line is raised located (``errors.located``) at that node. ``prologue``:
        statements before the body's ``try``; ``final``: its ``finally`` clause."""
        body = "\n".join("        " + line for line, _ in self.lines) or "        pass"
        source = (f"{header}:\n" + "".join(f"    {line}\n" for line in prologue)
                  + f"    try:\n{body}\n"
                  "    except Exception as exc:\n        _locate(exc)\n        raise\n")
        if final:
            source += "    finally:\n" + "".join(f"        {line}\n" for line in final)
        # The failing node is found from the line that raised (one node per line, from
        # line 3) rather than stored per kernel: the code and constants stay small per node.
        node_at = {line: node for line, (_, node)
                   in enumerate(self.lines, start=3 + len(prologue)) if node is not None}

        def locate(exc):
            node = node_at.get(exc.__traceback__.tb_lineno)
            err = exc if node is None else errors.located(exc, node.op, device_name)
            if err is not exc:
                try:
                    raise err
                finally:  # (this frame, in err's traceback, would hold err: a cycle)
                    del exc, err
        self.env["_locate"] = locate
        number = next(_functions)
        filename = _dump(number, title, source) or f"<asyncflow {number}: {title} on {device_name}>"
        exec(compile(source, filename, "exec"), self.env)  # noqa: S102
        fn = self.env[header.split("(")[0].split()[-1]]  # (source from integers, fixed names)
        # Registered for as long as the function lives (``checkcache`` keeps entries without
        # an mtime): tracebacks, pdb and profilers show the generated lines.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        weakref.finalize(fn, _forget, filename)
        return fn


class _Read(str):
    """``Generator.call``'s expression for an output read inline: ``(expr,)``, a tuple
    wherever it is used; ``store`` assigns ``expr`` itself."""

    __slots__ = ()


class _Unbound:
    epoch = -1  # (a manager's epoch starts at 0)


def _unbound():
    return None


def _kernel_fn(op_type):
    kernel = get_kernel(op_type, ANY)
    return None if kernel is None else kernel.fn


def _variable_binder(env, names, ctx):
    """The slow path of a bound ``VariableV2`` line: the resource, looked up as its kernel
    does, and its binding (weak reference, manager, epoch) stored in the generated function's
    globals ``names`` for the next reads. The epoch is stored last, so a line on another
    thread that sees the new epoch also sees the new reference."""
    ref_name, manager_name, epoch_name = names

    def bind():
        resource, (manager, epoch, ref) = ctx.variable_binding()
        env[ref_name], env[manager_name] = ref, manager
        env[epoch_name] = epoch
        return resource
    return bind


def _forget(filename):
    linecache.cache.pop(filename, None)


def _dump(number, title, source):
    """With ``ASYNCFLOW_DUMP_CODE`` set, write ``source`` there; returns the file's path."""
    directory = os.environ.get(DUMP_ENV)
    if not directory:
        return None
    os.makedirs(directory, exist_ok=True)
    name = _NOT_IDENTIFIER.sub("_", title).strip("_")[:80]
    path = os.path.join(os.path.abspath(directory), f"asyncflow_{os.getpid()}_{number}_{name}.py")
    with open(path, "w", encoding="utf-8") as file:
        file.write(source)
    return path


def compile_schedule(plan, traced=False, on_thread=False):
    """The step function of ``plan`` (``plan.static``), or its ``traced`` twin, which calls
    ``record(node, start[, waited])`` after each kernel (``wait`` records its own).

    Returns:
        ``async fn(slots, offload, wait, pause, record)``: reads feeds from ``slots``, writes
        fetched values back; awaits ``offload(node, args)`` for a kernel whose actual inputs
        are large, ``wait(node, args)`` for its one waiting kernel and ``pause()`` once per
        time slice, nothing else. A kernel's failure raises a located OpError.
        With ``on_thread`` (a plan without waiting kernels, run whole on a worker thread:
        ``exec/thread_step.py``), a plain ``fn(slots, offload, stop, pause)`` instead: it
        calls ``offload(node, args)`` where it would await it, and ``pause()`` where it
        would check the time slice, only when ``stop[0]`` is set.
    """
    gen = Generator(kernel_calls=traced)
    gen.env.update(_cost=runtime_cost, _big=offload_due, _due=timeslice.due,
                   _ts=timeslice, _B=timeslice.BUDGET, _now=now_us)
    # Kernels here cost no interpretation (~0.5 us for a small one): twice as many per check.
    every = max(1, 2 * timeslice.CHECK_EVERY)
    count = 0  # kernels since the last slice check
    last_check = -1
    names = {slot: f"slots[{slot}]" for slot in plan.feed_slots}  # slot -> its expression
    fetch_slots = set(plan.fetch_slots)
    schedule, firsts = (plan.schedule, ()) if traced else pairs.pair_schedule(plan.schedule)
    if plan.transfers and not transfers_in_order(plan.nodes, schedule, _lines(schedule, firsts)):
        schedule, firsts = plan.schedule, ()  # (the order plan.py checked)
    # Send/Recv (``plan.transfers``): a Recv subscribes on its line (``h3 = _R(N3)``) and is
    # taken on the first line that reads it or runs one of its consumers (``v2 = (h3.outputs
    # or await _T(h3))[0]``: awaited only if not there yet); a Send is ``_S(N5, v2)``.
    untaken = {}  # Recv node index -> (the local its value goes to or None, its consumers)
    gen.env.update(_pair=pairs.run_pair, _group=pairs.run_group, _out=pairs.outputs,
                   _done=pairs.done)
    partner = None  # the second node of the pair being generated
    members = {}    # a group's partners (dense applies, exec/pairs.py): node index -> place
    last_use = {slot: node.index for node in schedule for slot in node.inputs}
    dead = []   # locals whose value died: reused before a new one is made
    made = 0    # locals made (``v0``...): at most the values alive at once
    for position, node in enumerate(schedule):
        i = node.index
        if plan.transfers and node.op.type == "_Recv":
            gen.env[f"N{i}"] = node
            slot = node.outputs[0]
            if slot >= 0 and (slot in last_use or slot in fetch_slots):
                if dead:
                    names[slot] = dead.pop()
                else:
                    names[slot], made = f"v{made}", made + 1
                untaken[i] = (names[slot], frozenset(node.consumers))
            else:
                untaken[i] = (None, frozenset(node.consumers))
            gen.line([f"h{i} = _R(N{i})"], node)
            continue
        if node.op.type == "Const" and not node.inputs and not traced:  # (traced: shown)
            if node.outputs[0] >= 0:
                names[node.outputs[0]] = gen.constant(node)
            continue
        args = [f"{names[slot]}.read()" if position in node.deref else names[slot]
                for position, slot in enumerate(node.inputs)]
        if node.is_async or node.offload or traced or i in firsts or node is partner \
                or i in members:
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
        # An offloadable kernel on a line of its own, its arguments plain names: tested and
        # called on them directly (no list of them a step; its cost remembered per shapes).
        direct = (plan_mod.MEMO_COSTS and node.offload and not node.is_async and not traced
                  and not node.deref and i not in firsts and node is not partner
                  and i not in members)
        if node.is_async and plan.transfers:  # (a Send: Recvs were handled above)
            call = f"_S(N{i}, {args[0]})"
        elif node.is_async:
            call = f"(await _wait(N{i}, [{', '.join(args)}]{', _t' if traced else ''}))"
        elif direct:  # (direct implies node.offload)
            call = _offload_test(gen, node, args, on_thread)
        elif node.offload:
            given = "_b" if node is partner else "_a"  # (a pair's second: read with the first)
            offload = f"_offload(N{i}, {given})"
            if not on_thread:
                offload = f"(await {offload})"
            call = (f"({offload} if _cost(N{i}, {given}) >= "
                    f"{node.offload_cost} else {gen.call(node, ['*' + given])})")
        else:
            call = gen.call(node, args)
        pair_first = i in firsts
        group = pair_first and node.op.type in pairs.APPLIES
        if group:  # (dense applies: their partners' calls are direct, no offload)
            pair_first = False
            rest = schedule[position + 1:position + 1 + firsts[i]]
            members = {m.index: place for place, m in enumerate(rest, start=1)}
            rest_args = ", ".join(
                f"(N{m.index}, [{', '.join(_arguments(names, m))}])" for m in rest)
            call = f"(_out(_p, 0) if _done(_p, 0) else {call})"
        elif i in members:
            call = f"(_out(_p, {members[i]}) if _done(_p, {members[i]}) else {call})"
        if pair_first:  # (untraced, synchronous, offloadable: see exec/pairs.py)
            partner = schedule[position + 1]
            b_args = [f"{names[slot]}.read()" if p in partner.deref else names[slot]
                      for p, slot in enumerate(partner.inputs)]
            call = f"(_out(_p, 0) if _done(_p, 0) else {call})"
        elif node is partner:  # (None: not paired, or handed back undone)
            call = f"(_out(_p, 1) if _done(_p, 1) else {call})"
        statements = gen.store(call, targets)
        if traced and (not node.is_async or plan.transfers):  # (an offloaded kernel
            # waited if it was large)
            waited = f", _cost(N{i}, _a) >= {node.offload_cost}" if node.offload else ""
            statements.append(f"_rec(N{i}, _t{waited})")
        # A value dies right after its last reader, unless a new one took its local.
        statements += [f"{name} = None" for name in dying if name not in targets]
        if pair_first:
            statements = [f"_a = [{', '.join(args)}]", f"_b = [{', '.join(b_args)}]",
                          f"_p = _pair(N{i}, _a, N{partner.index}, _b)"] + statements + \
                ["_a = None"]
        elif node is partner:
            statements = statements + ["_b = None", "_p = None"]
            partner = None
        elif group:
            statements = [f"_p = _group(N{i}, [{', '.join(args)}], ({rest_args},))"] + statements
        elif i in members and members[i] == len(members):
            statements.append("_p = None")
            members = {}
        elif node.offload and not node.is_async and not direct:
            statements = [f"_a = [{', '.join(args)}]"] + statements + ["_a = None"]
        if traced:
            statements.insert(0, "_t = _now()")
        if untaken:
            line = [node] + (schedule[position + 1:position + 1 + firsts[i]] if i in firsts
                             else [])
            statements = _takes(untaken, line, traced) + statements
        gen.line(statements, node)
        cost = estimate_static_cost(node.op)
        large = node.offload or (cost is not None and cost >= timeslice.LARGE_KERNEL_COST)
        count = every if large else count + 1
        if count >= every or pair_first or group:  # (a pair's second may run on its own line)
            # Within an open slice, one clock read; ``_due`` opens it or says it is over.
            gen.line(["if _stop[0]: _pause()" if on_thread else
                      "if _ts.clock() >= _B.end and _due(): await _pause()"])
            count, last_check = 0, len(gen.lines)
    if last_check >= 0 and all(node is None for _, node in gen.lines[last_check:]):
        del gen.lines[last_check - 1]  # no kernel after it: the run's end is near enough
    if untaken:  # (Recvs nobody here reads: fetched, or waited for by nothing)
        gen.line(_takes(untaken, None, traced))
    for slot in plan.fetch_slots:
        if slot in names and names[slot] != f"slots[{slot}]":
            gen.line([f"slots[{slot}] = {names[slot]}"])
    if on_thread:
        return gen.function("def _step(slots, _offload, _stop, _pause)",
                            f"static schedule of {len(plan.schedule)} nodes, on a thread",
                            plan.device.name)
    if plan.transfers:  # (``_wait``: the step's ``dispatch.Transfers``)
        return gen.function("async def _step(slots, _offload, _wait, _pause, _rec=None)",
                            f"static schedule of {len(plan.schedule)} nodes", plan.device.name,
                            prologue=["_S, _R, _T = _wait.send, _wait.subscribe, _wait.take"],
                            final=["_wait.close()"])
    return gen.function("async def _step(slots, _offload, _wait, _pause, _rec=None)",
                        f"static schedule of {len(plan.schedule)} nodes", plan.device.name)


def _offload_test(gen, node, args, on_thread):
    """The expression running offloadable ``node`` on ``args`` (plain names): on a worker
    thread (``_offload``, its list of arguments made only then) when its runtime cost reaches
    ``node.offload_cost``, else inline. What can be decided once is: a blocking read always
    goes (threshold 0); a cost function is asked only for shapes unlike the node's last
    (``plan.offload_due``); without one the cost is the inputs' sizes, a constant's counted
    now (all constant: the test itself made now)."""
    offload = f"_offload(N{node.index}, [{', '.join(args)}])"
    if not on_thread:
        offload = f"(await {offload})"
    inline = gen.call(node, args)
    if node.offload_cost == 0:  # (every cost is 0 or more)
        return offload
    if node.cost_fn is not None:
        shapes = "".join(f"{arg}.shape, " for arg in args)
        return f"({offload} if _big(N{node.index}, ({shapes})) else {inline})"
    known, sizes = 0, []
    for arg in args:
        if arg in gen.env:  # a constant's global (``Generator.constant``)
            known += getattr(gen.env[arg], "size", 1)
        else:
            sizes.append(f"getattr({arg}, 'size', 1)")
    if not sizes:
        return offload if known >= node.offload_cost else inline
    total = " + ".join(sizes + ([str(known)] if known else []))
    return f"({offload} if {total} >= {node.offload_cost} else {inline})"


def _lines(schedule, firsts):
    """The nodes of each line of a static form over ``schedule`` (a pair or a group of
    ``firsts``, exec/pairs.py, reads its partners' arguments and may run them on its line)."""
    lines, position = [], 0
    while position < len(schedule):
        count = 1 + firsts.get(schedule[position].index, 0) if firsts else 1
        lines.append(tuple(schedule[position:position + count]))
        position += count
    return lines


def _takes(untaken, line, traced):
    """The statements taking each Recv of ``untaken`` that a node of ``line`` consumes (None:
    all of them), removed from ``untaken``: the value if there, else awaited."""
    indices = {n.index for n in line} if line is not None else None
    statements = []
    for recv, (name, consumers) in list(untaken.items()):
        if indices is not None and indices.isdisjoint(consumers):
            continue
        del untaken[recv]
        take = f"(await _T(h{recv}))" if traced else f"(h{recv}.outputs or await _T(h{recv}))"
        statements += [f"{name} = {take}[0]" if name else take, f"h{recv} = None"]
    return statements



def _arguments(names, node):
    """The argument expressions of ``node``'s kernel call."""
    return [f"{names[slot]}.read()" if position in node.deref else names[slot]
            for position, slot in enumerate(node.inputs)]


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
    gen = Generator()
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
