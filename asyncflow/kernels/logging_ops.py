"""Kernels of ``Print`` (TF1's format, to stderr) and ``Assert`` (see ops/logging_ops.py)."""
from __future__ import annotations

import sys

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import register_kernel


class _PrintCount:
    __slots__ = ("count",)

    def __init__(self):
        self.count = 0


def summarize(value, limit):
    """TF1's ``SummarizeValue``: at most ``limit`` entries, ``...`` when cut, nested brackets."""
    array = np.asarray(value)
    if array.ndim == 0:
        return _item(array[()])
    flat = array.reshape(-1)
    shown = [_item(v) for v in flat[:limit if limit >= 0 else flat.size]]
    cut = limit >= 0 and flat.size > limit
    # TF1 prints [[1 2][3 4]]: brackets follow the shape, no commas; a cut value ends in
    # "..." inside its brackets ([1 2 3...]).
    text = _nest(shown, list(array.shape))
    if cut:
        body = text.rstrip("]")
        text = body + "..." + "]" * (len(text) - len(body))
    return text


def _item(value):
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (np.floating, float)):
        if abs(value) < 1e16:
            return np.format_float_positional(value, trim="-")
        return format(float(value), "g")  # C++'s stream: nan, inf, -inf, 1e+20
    return str(value)


def _nest(items, shape):
    if len(shape) <= 1:
        return "[" + " ".join(items) + "]"
    inner = int(np.prod(shape[1:])) or 1
    parts = [_nest(items[k:k + inner], shape[1:]) for k in range(0, len(items), inner)]
    return "[" + "".join(parts) + "]"


@register_kernel("Print", "CPU")
def _print(ctx, first, *data):
    first_n = ctx.attrs["first_n"]
    if first_n >= 0:
        counter = ctx.resources.lookup_or_create("", f"Print:{ctx.name}", _PrintCount)
        counter.count += 1
        if counter.count > first_n:
            return (first,)
    parts = [summarize(value, ctx.attrs["summarize"]) for value in data]
    print(ctx.attrs["message"] + "".join(parts), file=sys.stderr, flush=True)
    return (first,)


@register_kernel("Assert", "CPU")
def _assert(ctx, condition, *data):
    if bool(np.all(condition)):
        return ()
    # TF1's form: each item in brackets, which an array's summary already has.
    parts = " ".join(_bracketed(summarize(value, ctx.attrs["summarize"]), value)
                     for value in data)
    raise errors.InvalidArgumentError(None, ctx.name, f"assertion failed: {parts}")


def _bracketed(text, value):
    return text if np.ndim(value) else f"[{text}]"

