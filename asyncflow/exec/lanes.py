"""A static plan's schedule in two lanes: TF1's inter-op parallelism without a hand-off per
kernel (issue 37).

The static schedule (``exec/codegen.py``) runs its kernels one after another on the thread of
the event loop. TF1's inter-op pool runs independent ready ops at once: a layer's weight
gradient beside the input gradient that the next layer's backward needs, an optimizer's apply
beside the GEMMs that follow it. Handing each such kernel to a thread costs a wake-up
(0.03-0.1 ms on this VM), as much as a small kernel. Here the schedule is split once, when the
plan is built, into two lanes: lane 0 is the step function the event loop awaits, lane 1 a
generator that one thread of the device's intra-op pool runs for the whole step. The lanes
synchronise only where a value, a control edge or a resource's order crosses them: the
producing lane stores the value in the step's slots and sets a flag; the consuming lane reads
the flag (a list item: no lock) and waits on the step's condition only when it is not set.
numpy releases the GIL in GEMMs and large ufunc loops, so both lanes compute at once.

Which node goes where (``assign``): list scheduling (HLFET) over the kernels' estimated times
(``estimate_static_cost`` with an unknown dimension taken as ``GUESS_DIM``, in the offload
threshold's units: a GEMM's multiply-adds count ``1 / offload_scale``), highest bottom level
first, each node on the lane where it finishes first, a cross-lane edge costing ``SYNC_S``.
Both lanes follow one topological order (the order nodes were picked), so neither can wait
for a node the other has still to reach behind its own wait: no deadlock. Lanes are used
only where they pay: a CPU device whose intra-op pool has 2 or more threads, no waiting
kernel, and a predicted step at least ``MIN_GAIN_S`` and ``MIN_GAIN_SHARE`` shorter than one
lane, where the kernels large enough to split run over the pool's threads
(``one_lane_seconds``; in two lanes only lane 0's kernels before lane 1 starts do, the rest
are counted whole). Counted whole in one lane too, a step of large kernels (the convnet's)
looked a fifth shorter in two lanes and ran 12-17% longer there (bench/RESULTS.md).

What stays as it is with one lane:
- the bits: every kernel gets the same inputs and runs whole (a kernel on lane 1 does not
  split again: ``intra_op.run_alone``'s rule; from lane 1's start to the step's end neither
  does one of lane 0 on the loop's thread, whose thread and lane 1's take the two cores; a
  kernel of lane 0 large enough to be offloaded to a worker thread may still split there;
  in lane 0's tail, after the last value lane 1 needs, a GEMM whose chunks keep its bits
  splits, and the lane thread takes the chunks left once lane 1 ends: ``LaneRun.tail``);
- stateful order: nodes touching one variable (through a ref input or a read of it, the
  variable's own node included) keep their order among themselves; every other stateful op
  (random draws, queues, ``py_func``) stays on lane 0 in the schedule's order; control
  edges are edges;
- errors: a failure in either lane ends the step with an OpError naming the op (lane 1's is
  raised by lane 0 when it next waits for lane 1, or at the step's end); lane 0 then stops
  lane 1 at its next kernel boundary and waits for it, so no kernel of the step runs after
  the step returned;
- the time slice (``exec/timeslice.py``): lane 0 checks the slice as the one-lane schedule
  does; a wait for lane 1 blocks at most until the slice ends, then awaits ``pause()``
  (a checkpoint: cancellation and other tasks get in), and resumes waiting.
- one core: lane 1 is handed to the pool's lane thread when lane 0 produces its first input.
  Whenever lane 0 must wait for lane 1 and no thread is inside lane 1's generator (the thread
  has not started, or has not woken after the flag it waited for was set: no free core),
  lane 0 runs lane 1's kernels itself, in lane 1's order, up to the one it waits for (a
  kernel that one lane would offload goes to a worker thread from there, as in one lane:
  the loop is not held for it); the thread goes on from there when it gets a core. So a
  step costs at most a submit and a few flags more than one lane when the second core is
  taken.
"""
from __future__ import annotations

import os

from asyncflow.exec import intra_op, timeslice
from asyncflow.exec.codegen import Generator, compile_schedule
from asyncflow.exec.lane_run import Cores, LaneRun
from asyncflow.exec.pairs import touched_resources
from asyncflow.exec.plan import OFFLOAD_COST, runtime_cost
from asyncflow.kernels.intra_op import MIN_SPLIT_WORK

# Two lanes where they pay; ``ASYNCFLOW_LANES=0`` in the environment (or False here, before a
# plan is built) keeps every static schedule in one lane, as before (benchmarks compare both).
ENABLED = os.environ.get("ASYNCFLOW_LANES", "1") != "0"
GUESS_DIM = 128         # an unknown dimension (a batch), for the cost estimates only
OVERHEAD_S = 4e-6       # a kernel's call, whatever its size
UNIT_S = 0.33e-9        # one unit of the offload threshold's cost (measured: GEMMs, applies)
SYNC_S = 50e-6          # a cross-lane edge: a flag, sometimes a thread's wake-up
WAKE_S = 100e-6         # lane 1's thread starts this late (a wake-up on a quiet machine)
SOURCE_S = 1e-6         # a variable's node (a source: returns its ref)
MIN_LANE1_S = 20e-6     # a kernel this small goes to lane 1 only after a lane-1 producer
#                         or before consumers that may all follow it there
# The predicted saving a step must show to run in two lanes. The model leaves out the
# threads' wake-ups and the two lanes' shared caches, and it still favours two lanes: with
# the splits counted (``assign``), the MLP's step is predicted 11% (0.19 ms) shorter in two
# lanes (it ran 2-6% longer there), the autoencoder's 19% (0.62 ms; it ran 1% longer to 7%
# shorter) and the convnet's 1% (it ran 12-17% longer). Counting every kernel whole had
# predicted them 18%, 29% and 21% shorter (bench/RESULTS.md).
MIN_GAIN_S = 500e-6
# And at least this share of the one-lane step.
MIN_GAIN_SHARE = 0.15
GUESSED_TWICE_S = 50e-6  # a kernel estimated on two or more guessed dims: one lane from here
MAX_NODES = 400         # a larger schedule stays in one lane (the scheduler is quadratic)
# The two-lane step's ``finally``: the loop thread's flags first (kernels whole while lane 1
# is live, lane 0's tail joinable), as stores, then the stop. Python runs a pending signal's
# handler (a second Ctrl-C) only where it checks for one: a function's entry, a loop's back
# edge, the return of a call into C; none lies between the interrupt that ends the step and
# these stores (their setattrs are C's; not so under a Python trace function, pdb's). Done inside ``LaneRun.stop`` (a call), a Ctrl-C on its first line or in its halt's
# lock left them set: every later kernel on the loop's thread ran whole, for good.
_FINAL = ["if _L.alone: _W.active = _L.alone = False",
          "if _L.tailing: _W.join, _L.tailing = None, False",
          "_L.stop()"]
# Kernels that return a view or a shape: a call's cost, whatever their inputs' size.
_VIEWS = frozenset({"Identity", "StopGradient", "Shape", "Reshape", "ExpandDims", "Squeeze",
                    "NoOp", "Size", "Rank", "VariableV2"})


def _guess_cost(node):
    """The estimated units of work of a plan node (unknown dims as ``GUESS_DIM``)."""
    op = node.op
    if op.type in _VIEWS:
        return 0
    shapes = []
    for producer, index in op.inputs:
        shape = producer.out_spec(index)[1]
        if shape.ndims is None:
            return 0
        shapes.append([GUESS_DIM if d is None else d for d in shape.as_list()])
    try:
        if op.op_def.cost is not None:
            cost = op.op_def.cost(shapes, op)
        else:
            cost = 0
            for dims in shapes:
                count = 1
                for d in dims:
                    count *= d
                cost += count
    except Exception:  # noqa: BLE001 -- a cost function that does not take guesses: small
        return 0
    return cost * OFFLOAD_COST // max(1, node.offload_cost)


def seconds(node):
    """A node's estimated time on one core."""
    return OVERHEAD_S + _guess_cost(node) * UNIT_S


def one_lane_seconds(node, threads):
    """A node's estimated time in the one-lane schedule, where a kernel whose work reaches the
    intra-op split threshold (``MIN_SPLIT_WORK`` element-operations, a GEMM's multiply-adds
    counted as in these units) runs over the pool's ``threads`` threads, a hand-off more. In
    two lanes every kernel is counted whole (``run_alone``'s rule from lane 1's start)."""
    units = _guess_cost(node)
    if threads < 2 or units < MIN_SPLIT_WORK:
        return OVERHEAD_S + units * UNIT_S
    return OVERHEAD_S + units * UNIT_S / threads + SYNC_S


def _guessed_twice(nodes):
    """Whether a kernel estimated at ``GUESSED_TWICE_S`` or more rests on an input with two or
    more unknown dims: its ``GUESS_DIM`` guesses multiply (128^k elements), so the estimate
    can be off by orders of magnitude, and such a plan keeps one lane (a [?, ?, 32] tensor fed
    as [4, 4, 32] was guessed 85 us a kernel: two lanes ran 2.2x the one-lane step,
    bench/RESULTS.md). Smaller ones (the MLP's dropout gradients on [?, ?], 20 us) do not
    decide it."""
    for node in nodes:
        if node.op.type in _VIEWS or seconds(node) < GUESSED_TWICE_S:
            continue
        for producer, index in node.op.inputs:
            shape = producer.out_spec(index)[1]
            if shape.ndims is not None and shape.as_list().count(None) > 1:
                return True
    return False


def _hoisted(node):
    return node.op.type == "Const" and not node.inputs


def assign(plan, threads=2):
    """``(order, lane_of, deps, predicted seconds in two lanes, in one)``, or None where
    lanes do not apply (in one lane, the large kernels split over ``threads``). ``order``: the
    nodes (hoisted constants aside) in the order they were picked, a topological order;
    ``deps``: each node's data, control and resource-order predecessors."""
    nodes = [n for n in plan.schedule if not _hoisted(n)]
    if not 2 <= len(nodes) <= MAX_NODES or any(n.is_async for n in nodes):
        return None
    index_set = {n.index for n in nodes}
    by_index = {n.index: n for n in nodes}
    deps = {n.index: set() for n in nodes}
    for n in nodes:
        for consumer in n.consumers:
            if consumer in index_set:
                deps[consumer].add(n.index)
    keys, other = touched_resources(plan)
    last_of = {}  # resource key ("other": every other stateful op) -> last node so far
    for n in nodes:  # (schedule order: the order one lane keeps)
        for key in keys.get(n.index, ("other",) if n.index in other else ()):
            if key in last_of:
                deps[n.index].add(last_of[key])
            last_of[key] = n.index
    lane1_ok = {n.index for n in nodes if n.index not in other}
    stateful = {n.index for n in nodes if n.op.op_def.stateful}
    cost = {n.index: seconds(n) for n in nodes}
    consumers = {n.index: [] for n in nodes}
    for i, ds in deps.items():
        for d in ds:
            consumers[d].append(i)
    level = {}
    for n in reversed(nodes):  # bottom levels (schedule order is topological)
        level[n.index] = cost[n.index] + max((level[c] for c in consumers[n.index]), default=0)
    waiting = {i: len(ds) for i, ds in deps.items()}
    longest = max(level.values())
    # Sources (a variable's node: a few microseconds) first, on lane 0: picked by level they
    # would wait behind the longest chain and hold back what they feed.
    free, finish, lane_of, order = [0.0, WAKE_S], {}, {}, []
    lane1_start = None
    candidates = []
    for n in nodes:
        if waiting[n.index] == 0 and cost[n.index] <= OVERHEAD_S:
            finish[n.index] = free[0] = free[0] + SOURCE_S
            lane_of[n.index] = 0
            order.append(n)
            for c in consumers[n.index]:
                waiting[c] -= 1
    candidates = [i for i, count in waiting.items() if count == 0 and i not in lane_of]
    while candidates:
        # Each lane's best next node: the earliest to start there, the highest level first
        # among those that start as early; the lane that starts first takes its node.
        best = None
        for lane in (0, 1):
            for i in candidates:
                if lane == 1 and i not in lane1_ok:
                    continue
                start = free[lane]
                for d in deps[i]:
                    ready = finish[d] + (SYNC_S if lane_of[d] != lane else 0.0)
                    if ready > start:
                        start = ready
                # A small kernel goes to lane 1 after a producer there, or where what it
                # feeds can follow it there (a sink, an update), off the longest chain:
                # lane 0 then never waits early in the step for a thread still waking up.
                if lane == 1 and cost[i] < MIN_LANE1_S and not (
                        any(lane_of[d] == 1 for d in deps[i])
                        or start + level[i] + SYNC_S < longest
                        and all(c in lane1_ok and c in stateful for c in consumers[i])):
                    continue
                key = (start + lane * SYNC_S, -level[i], lane)  # (lane 1 must gain a sync)
                if best is None or key < best[0]:
                    best = (key, i)
        (start, _, lane), i = best
        start -= lane * SYNC_S
        candidates.remove(i)
        finish[i] = free[lane] = start + cost[i]
        lane_of[i] = lane
        if lane == 1 and lane1_start is None:
            lane1_start = start
        order.append(by_index[i])
        for c in consumers[i]:
            waiting[c] -= 1
            if waiting[c] == 0:
                candidates.append(c)
    # Lane 0's kernels that end before lane 1 starts still split (``intra_op.run_alone`` holds
    # from lane 1's start): what they save moves the rest of the step earlier.
    split_saving = sum(cost[n.index] - one_lane_seconds(n, threads) for n in order
                       if lane_of[n.index] == 0 and lane1_start is not None
                       and finish[n.index] <= lane1_start)
    return (order, lane_of, deps, max(free) - split_saving,
            sum(one_lane_seconds(n, threads) for n in nodes))


def compile_lanes(plan):
    """The two-lane step function of ``plan`` (same signature as ``compile_schedule``'s), or
    None where one lane is as good (see the module docstring)."""
    pool = getattr(plan.device, "intra_op", None)
    if (not ENABLED or pool is None or pool.threads < 2 or plan.device.kind != "CPU"
            or plan.waits or not plan.static):
        return None
    assigned = assign(plan, pool.threads)
    if assigned is None or _guessed_twice(assigned[0]):
        return None
    order, lane_of, deps, two, one = assigned
    if not any(lane_of.values()) or two > min(one - MIN_GAIN_S, one * (1 - MIN_GAIN_SHARE)):
        return None
    return _generate(plan, order, lane_of, deps, pool)


def _generate(plan, order, lane_of, deps, pool):
    fetch_slots, feed_slots = set(plan.fetch_slots), set(plan.feed_slots)
    node_of = {node.index: node for node in order}
    producer = {slot: node.index for node in order for slot in node.outputs if slot >= 0}
    # Flags: one per node that the other lane waits for (a value, a control edge, an order).
    flag = {}
    for node in order:
        for d in sorted(deps[node.index]):
            if lane_of[d] != lane_of[node.index] and d not in flag:
                flag[d] = len(flag)
    crossing = {slot for node in order for slot in node.inputs
                if slot in producer and lane_of[producer[slot]] != lane_of[node.index]}
    const = {node.outputs[0]: node for node in plan.schedule
             if _hoisted(node) and node.outputs[0] >= 0}
    lanes_nodes = [[n for n in order if lane_of[n.index] == lane] for lane in (0, 1)]
    # Lane 1 is handed to the pool once lane 0 made what its first waiting node needs.
    position0 = {node.index: p for p, node in enumerate(lanes_nodes[0])}
    first_need = None
    for node in lanes_nodes[1]:
        needs = [d for d in deps[node.index] if lane_of[d] == 0]
        if needs:
            first_need = max(needs, key=position0.__getitem__)
            break
    last_need = max((d for node in lanes_nodes[1] for d in deps[node.index] if lane_of[d] == 0),
                    key=position0.__getitem__, default=None)  # (its tail after it: ``tail``)
    every = max(1, 2 * timeslice.CHECK_EVERY)
    functions = []
    for lane in (1, 0):
        g = Generator()
        g.env.update(_ts=timeslice, _B=timeslice.BUDGET, _due=timeslice.due, _cost=runtime_cost)
        names = {slot: f"slots[{slot}]" for slot in feed_slots}
        for slot, node in const.items():
            names[slot] = g.constant(node)
        mine = lanes_nodes[lane]
        last_use = {slot: node.index for node in mine for slot in node.inputs}
        waited = set()
        if lane == 0 and first_need is None:
            g.line(["_L.start()", "_L.tail()"])
        count = 0
        for node in mine:
            i = node.index
            for d in sorted(deps[i]):
                if lane_of[d] != lane and flag[d] not in waited:
                    k = flag[d]
                    waited.add(k)
                    g.line([f"if not _f[{k}]: await _L.need({k}, _pause, _offload)"
                            if lane == 0
                            else f"while not _f[{k}]: yield {k}"])
                    for slot in node_of[d].outputs:
                        if slot in crossing:
                            names[slot] = f"slots[{slot}]"
            args = [f"{names[slot]}.read()" if p in node.deref else names[slot]
                    for p, slot in enumerate(node.inputs)]
            dying = [names[slot] for slot in dict.fromkeys(node.inputs)
                     if last_use[slot] == i and slot not in fetch_slots
                     and slot not in feed_slots and slot not in const]
            targets, stores = [], []
            for slot in node.outputs:
                used_here = slot in last_use or (slot in fetch_slots and lane == 0)
                if slot < 0 or not (used_here or slot in crossing or slot in fetch_slots):
                    targets.append(None)
                elif not used_here:  # only the other lane (or the fetch) reads it
                    names[slot] = f"slots[{slot}]"
                    targets.append(names[slot])
                else:
                    names[slot] = f"v{slot}"
                    targets.append(names[slot])
                    if slot in crossing or slot in fetch_slots and lane == 1:
                        stores.append(f"slots[{slot}] = v{slot}")
            if node.offload:
                g.env[f"N{i}"] = node
                # Lane 1's generator hands a kernel one lane would offload to lane 0 when
                # lane 0 runs it (``LaneRun._until``): it goes to a worker thread from there.
                wait = "await _offload" if lane == 0 else "yield"
                far = "" if lane == 0 else "_L.on_loop and "
                call = (f"(({wait}(N{i}, _a)) if {far}_cost(N{i}, _a) >= "
                        f"{node.offload_cost} else {g.call(node, ['*_a'])})")
                statements = ([f"_a = [{', '.join(args)}]"] + Generator.store(call, targets)
                              + ["_a = None"])
            else:
                statements = Generator.store(g.call(node, args), targets)
            statements += stores
            if i in flag:
                statements.append(f"_L.give({flag[i]})")
            statements += [f"{name} = None" for name in dying if name not in targets]
            g.line(statements, node)
            if lane == 1:
                g.line(["yield -1"])  # a kernel boundary: lane 1 may be stopped here
                continue
            if i == first_need:
                g.line(["_L.start()"])
            if i == last_need:
                g.line(["_L.tail()"])
            large = node.offload or seconds(node) >= 50e-6
            count = every if large else count + 1
            if count >= every:
                g.line(["if _ts.clock() >= _B.end and _due(): await _pause()"])
                count = 0
        title = f"lane {lane} of a static schedule of {len(plan.schedule)} nodes"
        if lane == 1:
            functions.append(g.function("def _lane1(slots, _L, _f)", title, plan.device.name))
            continue
        g.line(["await _L.join(_pause, _offload)"])
        for slot in plan.fetch_slots:
            if slot in producer and lane_of[producer[slot]] == 1:
                continue
            if slot in names and names[slot] != f"slots[{slot}]":
                g.line([f"slots[{slot}] = {names[slot]}"])
        g.line(["_A.end(_t)"])
        g.env.update(_Lanes=LaneRun, _lane1=functions[0], _pool=pool, _n=len(flag),
                     _A=Cores(), _one=compile_schedule(plan), _W=intra_op.whole)
        return g.function("async def _step(slots, _offload, _wait, _pause, _rec=None)",
                          title, plan.device.name,
                          prologue=["if _A.skip: _A.skip -= 1; return await _one("
                                    "slots, _offload, _wait, _pause, _rec)",
                                    "_t = _A.begin()",
                                    "_L = _Lanes(_lane1, slots, _n, _pool)", "_f = _L.flags",
                                    "_pause = _L.pausing(_pause)",
                                    "_offload = _L.pausing(_offload)"],
                          final=_FINAL)
