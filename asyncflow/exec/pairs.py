"""Two independent kernels at once on the intra-op pool: inter-op overlap without a thread
hand-off per kernel (TF1's inter-op pool runs independent ready ops at once).

A static plan's schedule (``exec/codegen.py``) runs its kernels one after another on the
calling thread; a kernel is only handed to another thread whole when it is large enough to
repay the round trip (offload, from 64M multiply-adds for a GEMM), or split over the intra-op
pool from 16M. The backward pass of a dense layer holds two GEMMs that read the same
gradient and nothing of each other (the weight gradient ``x^T @ dy`` and the input gradient
``dy @ W^T``); run back to back they leave the second core idle or pay a hand-off each to
split. ``pair_schedule`` moves such a partner up next to its mate, and the generated code
calls ``run_pair``, which runs the two as one split of two chunks, a whole kernel each: one
hand-off for both (measured on this 2-core VM, ``bench/bench_gemm_floor.py``: a
[256,128]x[128,256] weight gradient and its [128,256]x[256,256] input gradient, 0.357 ms one
after the other, 0.305 each split over both threads, 0.254 paired).

Which kernels pair (``pair_schedule``): offloadable kernels (pure numerical work that already
may run off the event loop) of stateless ops with a cost function (GEMMs, convolutions), not
waiting ones, whose actual cost lies between ``1 / PAIR_SHARE`` of the offload threshold and
the threshold (a larger one is offloaded; a smaller one costs less than the hand-off). A
partner moves up only past nodes that do not feed it (no data or control edge) and are not
stateful (so what it reads, a variable's value included, is what it read in its old place).
Inside a pair a kernel does not split again (``intra_op.run_alone``): each runs whole on its
thread.

Dense optimizer applies pair with each other the same way (TF1's inter-op pool runs the
updates of different variables at once): a training step's applies come last, one after the
other on one thread, each of the larger ones (``APPLY_PAIR_MIN`` elements and more) a few
hundred microseconds of numpy passes. An apply's partner is the apply of another variable
whose size is closest to its own within ``LOOKAHEAD`` nodes; it moves up past nodes that do
not feed it and touch none of its variables (its variable and slots: what it reads and
writes is what it read and wrote in its old place), and past no other stateful op. The
smaller applies that follow (a bias's) join the partner's side, in the schedule's order,
while that side's elements stay within the first's: one call on the other thread instead of
one small kernel each after the pair. Each apply reads and writes only its own variable's
arrays, so the bits are those of one thread.

A group of applies is one update with respect to a Ctrl-C (TF1 applies a step whole: its
interrupt waits for ``sess.run``): ``run_group`` holds SIGINT while its members run; the side
no pool thread took is handed back to its own lines (after a slice check: the loop is held for
one side, as a pair's), unless a Ctrl-C was noted meanwhile: then the caller runs it at once,
inside the hold, so every member is applied, then the KeyboardInterrupt goes up (each apply
kernel holds it around its own call as well, ``kernels/sigint_hold.py``). Running it always
(the first form) held the loop for both sides without a checkpoint: two 1M-element float32
RMSProp applies 1.27 ms against one's 0.50, 2.6x (``bench/bench_group_hold.py``). The hold
covers these applies' compute only, never a wait: applies in separate nodes of a step, a side
handed back included, may still be cut between them (docs/architecture.md, "A Ctrl-C and an
update").
"""
from __future__ import annotations

from asyncflow.exec.plan import estimate_static_cost, runtime_cost
from asyncflow.kernels import sigint_hold

# A paired kernel costs at least this share of its offload threshold: 4M multiply-adds for
# a GEMM (about 0.08 ms of BLAS on one core here), four times a pool hand-off.
PAIR_SHARE = 16
# How far ahead in the schedule a partner is looked for.
LOOKAHEAD = 8
# A dense apply pairs from this many elements of its variable (RMSProp's eleven passes over
# 64k float32 take about 0.1 ms here, three times a pool hand-off).
APPLY_PAIR_MIN = 1 << 16
# The dense updates (one variable's arrays each, elementwise): ``ops/training.py``.
APPLIES = frozenset({"ApplyGradientDescent", "ApplyMomentum", "ApplyAdam", "ApplyAdagrad",
                      "ApplyRMSProp", "ApplyCenteredRMSProp"})


def _pairable(node):
    op_def = node.op.op_def
    # Only kernels that count their own cost (GEMMs, convolutions: multiply-adds): a
    # reduction's or an elementwise op's never repays the hand-off at these sizes, and a
    # candidate whose batch is unknown costs two cost estimates a step to refuse.
    if not node.offload or node.is_async or op_def.stateful or op_def.cost is None:
        return False
    cost = estimate_static_cost(node.op)  # None: a dim unknown (a batch), decided when run
    return cost is None or node.offload_cost // PAIR_SHARE <= cost < node.offload_cost


def _apply_size(node, least=None):
    """The elements of a dense apply's variable when it pairs (``least`` or more, by default
    ``APPLY_PAIR_MIN``; statically known), else None."""
    if node.op.type not in APPLIES or node.is_async:
        return None
    count = node.op.out_spec(0)[1].num_elements()
    return count if count is not None and count >= (
        APPLY_PAIR_MIN if least is None else least) else None


def pair_schedule(schedule):
    """``(order, firsts)``: ``schedule`` with each pairable node's partner moved up right after
    it, and ``{index of a node that starts a pair: how many partners follow it}`` (one, or
    several applies: module docstring). Partners count their cost in the same units (the same
    offload threshold: two GEMMs, two reductions), so a bias gradient's small reduction does
    not take the place of a GEMM's partner; an apply pairs with applies."""
    order = list(schedule)
    firsts = {}
    applies = None  # (variable keys per node, other stateful nodes), computed when needed
    position = 0
    while position < len(order) - 1:
        node = order[position]
        size = _apply_size(node)
        if size is not None:
            if applies is None:
                applies = touched_resources(_Schedule(order))
            count = _apply_group(order, position, size, *applies)
            if count:
                firsts[node.index] = count
            position += 1 + count
            continue
        if not _pairable(node):
            position += 1
            continue
        for ahead in range(position + 1, min(position + 1 + LOOKAHEAD, len(order))):
            candidate = order[ahead]
            if (candidate.offload_cost == node.offload_cost and _pairable(candidate)
                    and _may_move_up(order, position, ahead)):
                order.insert(position + 1, order.pop(ahead))
                firsts[node.index] = 1
                position += 1  # the partner is taken
                break
        position += 1
    return order, firsts


def _may_move_up(order, position, ahead):
    """Whether ``order[ahead]`` may run right after ``order[position]``: nothing from there
    up to it feeds it, and nothing between is stateful."""
    candidate = order[ahead].index
    for between in order[position:ahead]:
        if candidate in between.consumers:
            return False
        if between is not order[position] and between.op.op_def.stateful:
            return False
    return True


def touched_resources(plan):
    """``{node index: {variable key}}`` for the nodes touching variables (a key: the index
    of the node making the ref, followed through ref-forwarding ops), and the set of nodes
    that are stateful otherwise."""
    maker = {}   # ref slot -> key
    for node in plan.schedule:
        for position, slot in enumerate(node.outputs):
            if slot >= 0 and node.op.out_spec(position)[2]:
                refs = [maker[s] for s in node.inputs if s in maker]
                maker[slot] = refs[0] if refs else node.index
    keys, other = {}, set()
    for node in plan.schedule:
        touched = {maker[s] for s in node.inputs if s in maker}
        own = {maker[s] for s in node.outputs if s in maker}
        touched |= own
        if touched:
            keys[node.index] = touched
        elif node.op.op_def.stateful:
            other.add(node.index)
    return keys, other


class _Schedule:
    __slots__ = ("schedule",)

    def __init__(self, schedule):
        self.schedule = schedule


def _apply_group(order, position, size, keys, other):
    """Move the partners of the apply at ``order[position]`` up right after it: the apply of
    the closest size (``APPLY_PAIR_MIN`` or more), then smaller ones while the partners'
    elements stay within ``size``; returns how many."""
    first = _apply_partner(order, position, position + 1, keys, other,
                           lambda n: abs(n - size), APPLY_PAIR_MIN)
    if first is None:
        return 0
    taken = _apply_size(order[first], 0)
    order.insert(position + 1, order.pop(first))
    count = 1
    while True:
        more = _apply_partner(order, position, position + 1 + count, keys, other,
                              lambda n: 0 if taken + n <= size else None, 0)
        if more is None:
            return count
        taken += _apply_size(order[more], 0)
        order.insert(position + 1 + count, order.pop(more))
        count += 1


def _apply_partner(order, position, start, keys, other, rank, least):
    """The position (from ``start``, within ``LOOKAHEAD``) of the apply of at least ``least``
    elements that ``rank`` ranks lowest (None: not wanted) and that may move up to ``start``:
    nothing from ``order[position]`` up to it feeds it or touches its variables, and no
    other stateful op lies between."""
    best = None
    group = set().union(*(keys.get(node.index, set()) for node in order[position:start]))
    for ahead in range(start, min(start + LOOKAHEAD, len(order))):
        candidate = order[ahead]
        elements = _apply_size(candidate, least)
        if elements is None or (score := rank(elements)) is None:
            continue
        mine = keys.get(candidate.index, set())
        if mine & group:
            continue  # (one variable's updates keep their order)
        if any(candidate.index in between.consumers or between.index in other
               or mine & keys.get(between.index, set()) for between in order[position:ahead]):
            continue
        if best is None or score < best[1]:
            best = (ahead, score)
    return None if best is None else best[0]


class Failed:
    """A paired kernel's error, raised on its own line of the generated code."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


def run_pair(first, first_args, second, second_args):
    """Both kernels at once on the device's intra-op pool, each whole on one thread: their
    ``[outputs or Failed, outputs or Failed]``; None when they do not pair at these inputs
    (no pool of 2 or more threads, or a cost outside the pairing range): then the caller
    runs each as it would alone. The calling thread computes one of the two at most: when
    no pool thread took the other by then (no free core), it is handed back undone (its
    entry None) and the caller runs it on its own line, after a time-slice check, so a pair
    holds the event loop no longer than one kernel (two GEMMs under the offload threshold
    took up to ~2.6 ms here)."""
    pool = getattr(first.ctx.device, "intra_op", None)
    if pool is None or pool.threads < 2:
        return None
    for node, args in ((first, first_args), (second, second_args)):
        cost = runtime_cost(node, args)
        if not node.offload_cost // PAIR_SHARE <= cost < node.offload_cost:
            return None
    results = [None, None]

    def run(index, _):
        node, args = (first, first_args) if index == 0 else (second, second_args)
        try:
            results[index] = node.fn(node.ctx, *args)
        except Exception as exc:  # noqa: BLE001 -- raised on the kernel's own line
            results[index] = Failed(exc)
    pool.run_alone(run, ((0, 1), (1, 2)), caller_limit=1)
    return results


def run_group(first, first_args, rest):
    """``run_pair`` for a dense apply and the applies that go with it (``rest``: ``(node,
    args)`` pairs, run in order on the other thread): ``[outputs or Failed, ...]``; an entry
    None where not run (the rest handed back undone, or after a failure among them, as in one
    thread); None without a pool of 2 or more threads.

    A Ctrl-C in the group waits for every member (module docstring): SIGINT is held
    (``kernels/sigint_hold.py``) while the group runs, and the side no pool thread took is
    run here, inside the hold, when a Ctrl-C was noted meanwhile (else handed back). The
    hold covers these applies' compute only."""
    pool = getattr(first.ctx.device, "intra_op", None)
    if pool is None or pool.threads < 2:
        return None
    handler = sigint_hold.hold()
    try:
        return _run_group(pool, first, first_args, rest)
    finally:
        if handler is not None:
            sigint_hold.give_back(handler)


def _run_group(pool, first, first_args, rest):
    results = [None] * (1 + len(rest))

    def run(index, _):
        for position, (node, args) in (((0, (first, first_args)),) if index == 0
                                       else enumerate(rest, start=1)):
            try:
                results[position] = node.fn(node.ctx, *args)
            except Exception as exc:  # noqa: BLE001 -- raised on the kernel's own line
                results[position] = Failed(exc)
                return
    for start, stop in pool.run_alone(run, ((0, 1), (1, 2)), caller_limit=1):
        if start == 1 and results[0].__class__ is Failed:
            break  # (the first failed: the step stops on its line, as in one thread)
        if not sigint_hold.noted():
            break  # (handed back: its own lines, after a slice check)
        run(start, stop)  # (not ``alone``: a large member splits, as on its own line)
    return results


def done(pair, index):
    """Whether the pair ran its ``index``th kernel (None: not paired, or handed back)."""
    return pair is not None and pair[index] is not None


def outputs(pair, index):
    """The outputs of the pair's ``index``th kernel, or its error raised."""
    result = pair[index]
    if result.__class__ is Failed:
        raise result.error
    return result
