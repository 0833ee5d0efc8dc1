"""``af.Print``: an identity on its first input that prints tensors when it runs (TF1), and
``Assert`` with TF1's check ops built on it (``assert_less_equal``, ...).

Print is stateful (never folded, deduplicated or pruned as pure while its output is used)
and passes the gradient to its first input only. Assert is a stateful op with no output: run
(as a target, or as a control dependency) it fails the step with InvalidArgumentError showing
its data when its condition is false.
"""
from __future__ import annotations

from asyncflow.graph import register_gradient, register_op
from asyncflow.ops.construct import as_tensor, make


def _infer_print(op):
    first = op.inputs[0]
    return [(first.dtype, first.shape)]


register_op("Print", infer=_infer_print, stateful=True)


@register_gradient("Print")
def _print_grad(op, grad):
    return [grad] + [None] * (len(op.inputs) - 1)


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


register_op("Assert", infer=lambda op: [], stateful=True, differentiable=False)


def Assert(condition, data, summarize=None, name=None):  # noqa: N802 - TF1's name
    """An op that fails the step (InvalidArgumentError showing ``data``) when the scalar bool
    ``condition`` is false."""
    from asyncflow.ops.construct import make_op
    tensors = (as_tensor(condition),) + tuple(as_tensor(t) for t in (data or ()))
    return make_op("Assert", tensors, {"summarize": 3 if summarize is None else int(summarize)},
                   name, "Assert")


def _assert_compare(compare, symbol, x, y, data, summarize, message, name, default_name):
    from asyncflow.ops import math as _math
    x, y = as_tensor(x), as_tensor(y)
    with x.graph.name_scope(name or default_name):
        condition = _math.reduce_all(compare(x, y))
        if data is None:
            data = [message or "", f"Condition x {symbol} y did not hold element-wise:",
                    f"x ({x.name}) = ", x, f"y ({y.name}) = ", y]
        elif message:
            data = [message] + list(data)
        return Assert(condition, data, summarize=summarize)


def assert_less_equal(x, y, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_less_equal``: an Assert op that ``x <= y`` everywhere."""
    from asyncflow.ops import math as _math
    return _assert_compare(_math.less_equal, "<=", x, y, data, summarize, message, name,
                           "assert_less_equal")


def assert_less(x, y, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_less``: an Assert op that ``x < y`` everywhere."""
    from asyncflow.ops import math as _math
    return _assert_compare(_math.less, "<", x, y, data, summarize, message, name, "assert_less")


def assert_equal(x, y, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_equal``: an Assert op that ``x == y`` everywhere."""
    from asyncflow.ops import math as _math
    return _assert_compare(_math.equal, "==", x, y, data, summarize, message, name,
                           "assert_equal")


__all__ = ["Assert", "Print", "assert_equal", "assert_less", "assert_less_equal"]
