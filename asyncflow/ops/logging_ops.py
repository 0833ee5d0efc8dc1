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
        # (given ``data``, TF1 shows it alone: ``message`` is not shown)
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


def assert_greater(x, y, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_greater``: an Assert op that ``x > y`` everywhere."""
    from asyncflow.ops import math as _math
    return _assert_compare(_math.greater, ">", x, y, data, summarize, message, name,
                           "assert_greater")


def assert_greater_equal(x, y, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_greater_equal``: an Assert op that ``x >= y`` everywhere."""
    from asyncflow.ops import math as _math
    return _assert_compare(_math.greater_equal, ">=", x, y, data, summarize, message, name,
                           "assert_greater_equal")


def assert_none_equal(x, y, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_none_equal``: an Assert op that ``x != y`` everywhere."""
    from asyncflow.ops import math as _math
    return _assert_compare(_math.not_equal, "!=", x, y, data, summarize, message, name,
                           "assert_none_equal")


def _assert_sign(compare, symbol, x, data, summarize, message, name, default_name):
    """An Assert op that ``x <symbol> 0`` everywhere, worded as TF1's."""
    from asyncflow.ops import math as _math
    x = as_tensor(x)
    with x.graph.name_scope(name or default_name):
        condition = _math.reduce_all(compare(x, as_tensor(0, dtype=x.dtype)))
        if data is None:
            data = [message or "", f"Condition x {symbol} 0 did not hold element-wise:",
                    f"x ({x.name}) = ", x]
        # (given ``data``, TF1 shows it alone: ``message`` is not shown)
        return Assert(condition, data, summarize=summarize)


def assert_positive(x, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_positive``: an Assert op that ``x > 0`` everywhere."""
    from asyncflow.ops import math as _math
    return _assert_sign(_math.greater, ">", x, data, summarize, message, name,
                        "assert_positive")


def assert_negative(x, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_negative``: an Assert op that ``x < 0`` everywhere."""
    from asyncflow.ops import math as _math
    return _assert_sign(_math.less, "<", x, data, summarize, message, name, "assert_negative")


def assert_non_negative(x, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_non_negative``: an Assert op that ``x >= 0`` everywhere."""
    from asyncflow.ops import math as _math
    return _assert_sign(_math.greater_equal, ">=", x, data, summarize, message, name,
                        "assert_non_negative")


def assert_non_positive(x, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_non_positive``: an Assert op that ``x <= 0`` everywhere."""
    from asyncflow.ops import math as _math
    return _assert_sign(_math.less_equal, "<=", x, data, summarize, message, name,
                        "assert_non_positive")


def _rank_arg(rank):
    """A wanted rank as TF1 takes it: a Python int, or a scalar int32 tensor (its int when it is
    a constant, else the tensor, compared when the step runs)."""
    import numpy as np

    from asyncflow import dtypes
    from asyncflow.ops.construct import static_value
    if not hasattr(rank, "op"):
        return int(rank)
    if rank.dtype is not dtypes.int32:
        raise TypeError(f"{rank.name} must be of type int32; got {rank.dtype.name}")
    if rank.shape.ndims not in (None, 0):
        raise ValueError("Rank must be a scalar.")
    value = static_value(rank)
    return rank if value is None else int(np.asarray(value))


def _assert_rank(x, rank, at_least, message, name, default_name):
    from asyncflow.ops import math as _math
    from asyncflow.ops.array import rank as rank_of, shape as shape_of
    from asyncflow.ops.control import no_op
    x = as_tensor(x)
    wanted = _rank_arg(rank)
    words = "at least " if at_least else ""
    known = isinstance(wanted, int)
    if x.shape.ndims is not None and known:  # decided now, as TF1 decides a static rank
        if x.shape.ndims < wanted or (not at_least and x.shape.ndims != wanted):
            raise ValueError(f"{message + ' ' if message else ''}Tensor {x.name} must have "
                             f"rank {words}{wanted}. Received rank {x.shape.ndims}, shape "
                             f"{x.shape}")
        return no_op(name=name or default_name)
    with x.graph.name_scope(name or default_name):
        compare = _math.greater_equal if at_least else _math.equal
        condition = compare(rank_of(x), wanted)
        if not known:  # TF1's data for a rank tensor
            return Assert(condition, [message or "", f"Tensor {x.name} must have rank"
                                      f"{' at least' if at_least else ''}", wanted,
                                      "Received shape: ", shape_of(x)])
        return Assert(condition, [message or "", f"Tensor {x.name} must have rank {words}"
                                  f"{wanted}. Received rank:", rank_of(x)])


def assert_rank(x, rank, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_rank``: a ValueError now when ``x``'s rank is known and not ``rank``
    (a no-op when it is), else an Assert op checking it when the step runs. ``rank`` is an int
    or a scalar int32 tensor (a non-constant one is always checked when the step runs)."""
    del data, summarize
    return _assert_rank(x, rank, False, message, name, "assert_rank")


def assert_rank_at_least(x, rank, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_rank_at_least`` (see ``assert_rank``)."""
    del data, summarize
    return _assert_rank(x, rank, True, message, name, "assert_rank_at_least")


def assert_type(tensor, tf_type, message=None, name=None):
    """TF1's ``tf.assert_type``: a TypeError now unless ``tensor``'s dtype is ``tf_type``;
    else a no-op."""
    from asyncflow import dtypes
    from asyncflow.ops.control import no_op
    tensor = as_tensor(tensor)
    if tensor.dtype is not dtypes.as_dtype(tf_type):
        raise TypeError(f"{message + ' ' if message else ''}{tensor.name} must be of type "
                        f"{dtypes.as_dtype(tf_type).name}, got {tensor.dtype.name}")
    return no_op(name=name or "assert_type")


def assert_integer(x, message=None, name=None):
    """TF1's ``tf.assert_integer``: a TypeError now unless ``x`` is of an integer dtype;
    else a no-op."""
    from asyncflow.ops.control import no_op
    x = as_tensor(x)
    if not x.dtype.is_integer:
        raise TypeError(f"{message + ' ' if message else ''}Expected integer type for "
                        f"{x.name}, got {x.dtype.name}")
    return no_op(name=name or "assert_integer")


def assert_scalar(tensor, name=None, message=None):
    """TF1's ``tf.assert_scalar``: ``tensor`` itself, after a ValueError when its rank is known
    and not 0."""
    tensor = as_tensor(tensor)
    if tensor.shape.ndims not in (None, 0):
        raise ValueError(f"{message + ' ' if message else ''}Expected scalar shape for "
                         f"{tensor.name}, saw shape: {tensor.shape}")
    return tensor


def assert_near(x, y, rtol=None, atol=None, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_near``: an Assert op that ``|x - y| < atol + rtol * |y|`` everywhere
    (``rtol`` and ``atol`` default to 10 epsilons of ``x``'s dtype)."""
    import numpy as np

    from asyncflow.ops import math as _math
    x = as_tensor(x)
    y = as_tensor(y, dtype=x.dtype)
    eps = float(np.finfo(x.dtype.np).eps)  # (an integer x: numpy's ValueError, as TF1's)
    rtol, atol = (10 * eps if v is None else v for v in (rtol, atol))
    words = f"rtol = {rtol}, atol = {atol}"
    rtol, atol = as_tensor(rtol, dtype=x.dtype), as_tensor(atol, dtype=x.dtype)
    with x.graph.name_scope(name or "assert_near"):
        if data is None:
            data = [message or "", f"x and y not equal to tolerance {words}",
                    f"x ({x.name}) = ", x, f"y ({y.name}) = ", y]
        # (given ``data``, TF1 shows it alone: ``message`` is not shown)
        tol = _math.add(atol, _math.multiply(rtol, _math.abs(y)))
        condition = _math.reduce_all(_math.less(_math.abs(_math.subtract(x, y)), tol))
        return Assert(condition, data, summarize=summarize)


def assert_rank_in(x, ranks, data=None, summarize=None, message=None, name=None):
    """TF1's ``tf.assert_rank_in``: a ValueError now when ``x``'s rank is known and none of
    ``ranks`` (a no-op when it is one), else an Assert op checking it when the step runs.
    Each rank is an int or a scalar int32 tensor, as in ``assert_rank``."""
    from asyncflow.ops import math as _math
    from asyncflow.ops.array import rank as rank_of, shape as shape_of
    from asyncflow.ops.control import no_op
    x = as_tensor(x)
    wanted = tuple(_rank_arg(r) for r in ranks)  # ints, or scalar int32 tensors (as TF1)
    prefix = f"{message} " if message else ""
    if x.shape.ndims is not None and all(isinstance(r, int) for r in wanted):
        if x.shape.ndims not in wanted:
            raise ValueError(f"{prefix}Tensor {x.name} must have rank in {wanted}.  Received "
                             f"rank {x.shape.ndims}, shape {x.shape}")
        return no_op(name=name or "assert_rank_in")
    with x.graph.name_scope(name or "assert_rank_in"):
        from asyncflow import dtypes  # (int32 even for no ranks: TF1's Assert then fails)
        if all(isinstance(r, int) for r in wanted):
            condition = _math.reduce_any(_math.equal(rank_of(x), as_tensor(
                list(wanted), dtype=dtypes.int32)))
        else:  # a rank tensor among them: one comparison each
            condition = _math.equal(rank_of(x), wanted[0])
            for r in wanted[1:]:
                condition = _math.logical_or(condition, _math.equal(rank_of(x), r))
        if data is None:
            data = [message or "", f"Tensor {x.name} must have rank in", *wanted,
                    "Received shape: ", shape_of(x)]
        return Assert(condition, data, summarize=summarize)


def assert_same_float_dtype(tensors=None, dtype=None):
    """TF1's ``tf.assert_same_float_dtype``: the one floating dtype of ``tensors`` (and
    ``dtype``), float32 when there is none; a ValueError when they differ or are no floats."""
    from asyncflow import dtypes
    found = dtypes.as_dtype(dtype) if dtype is not None else None
    first = None
    for tensor in tensors or ():
        if tensor is None:  # skipped, as TF1 does (an absent optional argument)
            continue
        if found is None:
            found, first = tensor.dtype, tensor
        elif tensor.dtype is not found:
            what = f" as {first.name}" if first is not None else ""
            raise ValueError(f"{tensor.name}, type={tensor.dtype.name}, must be of the same "
                             f"type ({found.name}){what}.")
    if found is None:
        return dtypes.float32
    if not found.is_floating:
        raise ValueError(f"Expected floating point type, got {found.name}.")
    return found


def assert_proper_iterable(values):
    """TF1's ``tf.assert_proper_iterable``: a TypeError for a Tensor, a SparseTensor, an array,
    a string or bytes (iterable, but not a sequence of values) or anything not iterable. A
    Variable passes, as in TF1 (whose Variable defines ``__iter__``)."""
    import numpy as np

    from asyncflow.graph import Tensor
    # (SparseTensor and Variable by their attributes: importing ops/sparse_ops.py or
    # ops/state.py here would close an import circle through ops/control_flow.py)
    sparse = hasattr(values, "op") and hasattr(values, "dense_shape")
    variable = hasattr(values, "op") and hasattr(values, "initializer")
    if isinstance(values, (Tensor, np.ndarray, str, bytes)) or sparse:
        raise TypeError(f'Expected argument "values" to be a "proper" iterable.  Found: '
                        f"{type(values)}")
    if not hasattr(values, "__iter__") and not variable:
        raise TypeError(f'Expected argument "values" to be iterable.  Found: {type(values)}')


def is_numeric_tensor(tensor):
    """TF1's ``tf.is_numeric_tensor``: a tensor of a numeric (not bool nor string) dtype (a
    Variable, no Tensor in TF1 either, is not one)."""
    from asyncflow.graph import Tensor
    return isinstance(tensor, Tensor) and tensor.dtype.is_numeric


def _monotonic(x, compare, name, default_name):
    """All of ``compare(x[i + 1], x[i])`` over the flattened ``x`` (true with < 2 elements)."""
    from asyncflow.ops import math as _math
    from asyncflow.ops.array import reshape
    x = as_tensor(x)
    with x.graph.name_scope(name or default_name):
        flat = reshape(x, [-1])
        if not is_numeric_tensor(flat):
            raise TypeError(f"Expected x to be numeric, instead found: {flat}")
        return _math.reduce_all(compare(flat[1:], flat[:-1]))


def is_non_decreasing(x, name=None):
    """TF1's ``tf.is_non_decreasing``: whether ``x`` (flattened) never decreases."""
    from asyncflow.ops import math as _math
    return _monotonic(x, _math.greater_equal, name, "is_non_decreasing")


def is_strictly_increasing(x, name=None):
    """TF1's ``tf.is_strictly_increasing``: whether ``x`` (flattened) always increases."""
    from asyncflow.ops import math as _math
    return _monotonic(x, _math.greater, name, "is_strictly_increasing")
