"""``af.Print``: an identity on its first input that prints tensors when it runs (TF1).

The op is stateful (never folded, deduplicated or pruned as pure while its output is used)
and passes the gradient to its first input only.
"""
from __future__ import annotations

from asyncflow.graph import register_gradient, register_op
from asyncflow.ops.construct import as_tensor, make


def _infer_print(op):
    first = op._inputs[0]
    return [(first.dtype, first.shape)]


register_op("Print", infer=_infer_print, stateful=True)


@register_gradient("Print")
def _print_grad(op, grad):
    return [grad] + [None] * (len(op._inputs) - 1)


def Print(input_, data, message=None, first_n=None, summarize=None, name=None):  # noqa: N802
    """``input_`` unchanged; prints ``message`` and ``data``'s values to stderr when run.

    Args:
        input_: the tensor passed through.
        data: a list of tensors to print.
        message: a prefix for the printed line.
        first_n: print only the first ``first_n`` runs of this op (per session).
        summarize: print at most this many entries of each tensor (default 3).
        name: op name.
    """
    tensors = (as_tensor(input_),) + tuple(as_tensor(t) for t in (data or ()))
    return make("Print", tensors, {"message": message or "",
                                   "first_n": -1 if first_n is None else int(first_n),
                                   "summarize": 3 if summarize is None else int(summarize)},
                name, "Print")


__all__ = ["Print"]
