"""Which of MaxPool's tied maxima (+0 and -0) a window keeps: its first cell in tap order, as
TF1's CPU MaxPool does (its running ``cwiseMax`` keeps the accumulator on a tie), whatever the
chunking, the thread count or the channel count.

numpy breaks a +0/-0 tie by operand position, not by order: ``maximum`` returns its second
operand for float32/float64 and its first for float16 (numpy 2.4), and ``fmax`` one operand in
its vector body and the other in its scalar tail. So ``accumulating_max(xp, dtype)`` gives the
``maximum`` call that keeps the accumulator, with its operands swapped where the array module
returns the second; the rule is probed once per array module and dtype, over lengths that
reach a vector body, its tail and a strided loop. Where no rule holds everywhere (and after
``fmax``, which has none), ``first_zero_signs`` sets the sign of each zero maximum from its
window's first zero cell (passes that the common path never pays).
"""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import is_floating

_RULES = {}  # (array module, dtype) -> "first" / "second" / None
_PROBE = ((1, 1), (5, 1), (16, 1), (67, 1), (203, 1), (67, 3))  # (length, stride)


def all_above_minus_inf(values):
    """Whether every value is above -inf and none is NaN (one reduction: ``min`` keeps NaN)."""
    return not is_floating(values.dtype) or not values.size or bool(values.min() > -np.inf)


def window_max(xp, views, out):
    """MaxPool's reduction of the tap ``views`` into ``out``, as TF's CPU MaxPool: NaN cells
    ignored, nothing below the lowest finite value, a +0/-0 tie kept by the first cell.
    ``maximum`` (which keeps NaN) first; only where that leaves a NaN or a -inf are the
    windows reduced again by ``fmax`` from the lowest value, and the zeros' signs set."""
    xp.copyto(out, views[0])
    update = accumulating_max(xp, out.dtype)
    for view in views[1:]:
        if update is None:
            xp.maximum(out, view, out=out)
        else:
            update(out, view)
    if not all_above_minus_inf(out):
        out.fill(np.finfo(out.dtype).min)
        for view in views:
            xp.fmax(out, view, out=out)
        update = None
    if update is None:
        first_zero_signs(xp, views, out)


def accumulating_max(xp, dtype):
    """``update(acc, view)``: ``acc = max(acc, view)`` in place, keeping ``acc`` on a +0/-0
    tie; None where ``xp.maximum`` keeps no one operand at every position (then reduce and
    call ``first_zero_signs``)."""
    key = (xp.__name__, np.dtype(dtype))  # (not ``.str``: bfloat16's is "<V2", no float's)
    rule = _RULES.get(key)
    if key not in _RULES:
        rule = _RULES[key] = _probe(xp, np.dtype(dtype))
    if rule == "first":
        return lambda acc, view: xp.maximum(acc, view, out=acc)
    if rule == "second":
        return lambda acc, view: xp.maximum(view, acc, out=acc)
    return None


def _probe(xp, dtype):
    if not is_floating(dtype):
        return "first"  # no signed zeros: any order gives the same bits (bfloat16 has them)
    size = max(n * step for n, step in _PROBE)
    plus, minus = xp.zeros(size, dtype), xp.full(size, -0.0, dtype)
    kept = set()
    for n, step in _PROBE:
        a, b = plus[:n * step:step], minus[:n * step:step]
        for first, first_negative in ((a, False), (b, True)):
            second = b if first is a else a
            signs = xp.signbit(xp.maximum(first, second))
            if bool(signs.all()):
                kept.add("first" if first_negative else "second")
            elif not bool(signs.any()):
                kept.add("second" if first_negative else "first")
            else:
                return None
    return kept.pop() if len(kept) == 1 else None


def first_zero_signs(xp, views, out):
    """Give each zero of ``out`` (the window maxima over the tap ``views``) the sign of its
    window's first zero cell in tap order. Where no zero is a maximum it costs one pass."""
    if not is_floating(out.dtype):
        return
    zero = out == 0
    if not bool(zero.any()):
        return
    hit = xp.empty(zero.shape, dtype=bool)
    for view in reversed(views):  # the first zero cell is written last
        xp.equal(view, 0, out=hit)
        hit &= zero
        xp.copyto(out, view, where=hit)
