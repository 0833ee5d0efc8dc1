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
"""
from __future__ import annotations

from asyncflow.exec.plan import estimate_static_cost, runtime_cost

# A paired kernel costs at least this share of its offload threshold: 4M multiply-adds for
# a GEMM (about 0.08 ms of BLAS on one core here), four times a pool hand-off.
PAIR_SHARE = 16
# How far ahead in the schedule a partner is looked for.
LOOKAHEAD = 8


def _pairable(node):
    op_def = node.op.op_def
    # Only kernels that count their own cost (GEMMs, convolutions: multiply-adds): a
    # reduction's or an elementwise op's never repays the hand-off at these sizes, and a
    # candidate whose batch is unknown costs two cost estimates a step to refuse.
    if not node.offload or node.is_async or op_def.stateful or op_def.cost is None:
        return False
    cost = estimate_static_cost(node.op)  # None: a dim unknown (a batch), decided when run
    return cost is None or node.offload_cost // PAIR_SHARE <= cost < node.offload_cost


def pair_schedule(schedule):
    """``(order, firsts)``: ``schedule`` with each pairable node's partner moved up right after
    it, and the indices of the nodes that start a pair. Partners count their cost in the same
    units (the same offload threshold: two GEMMs, two reductions), so a bias gradient's
    small reduction does not take the place of a GEMM's partner."""
    order = list(schedule)
    firsts = set()
    position = 0
    while position < len(order) - 1:
        node = order[position]
        if not _pairable(node):
            position += 1
            continue
        for ahead in range(position + 1, min(position + 1 + LOOKAHEAD, len(order))):
            candidate = order[ahead]
            if (candidate.offload_cost == node.offload_cost and _pairable(candidate)
                    and _may_move_up(order, position, ahead)):
                order.insert(position + 1, order.pop(ahead))
                firsts.add(node.index)
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


def done(pair, index):
    """Whether the pair ran its ``index``th kernel (None: not paired, or handed back)."""
    return pair is not None and pair[index] is not None


def outputs(pair, index):
    """The outputs of the pair's ``index``th kernel, or its error raised."""
    result = pair[index]
    if result.__class__ is Failed:
        raise result.error
    return result
