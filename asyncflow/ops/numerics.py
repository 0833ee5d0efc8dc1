"""Numerics: clipping by value and by norm, global norms, TF1's ``norm``,
``reduce_euclidean_norm``, ``reduce_logsumexp``, ``reduce_variance``, ``reduce_std``,
``div_no_nan``, ``reciprocal_no_nan``, ``xlogy``, ``xdivy`` and ``zero_fraction``
(compositions of math ops, as TF1 writes them or with
TF1's values and gradients), and NaN/Inf checks.

Theory of operation: the clipping functions are compositions of math ops exactly as TF1
writes them (``minimum(maximum(...))``, a norm computed with ``where`` so a zero norm has a
finite gradient), so their gradients come from the math family's gradient functions and
match TF1's, ties included. ``CheckNumerics`` is a primitive: the identity that fails the run
with an ``InvalidArgumentError`` naming the op and the user's message when its input has a NaN
or an infinity; its gradient checks the incoming gradient the same way.

Kernels live in ``asyncflow/kernels/numerics.py``.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.indexed_slices import IndexedSlices
from asyncflow.ops import array
from asyncflow.ops import math as math_ops
from asyncflow.ops import sources
from asyncflow.ops.array import identity
from asyncflow.ops.construct import (
    FLOATING, NUMERIC, as_tensor, check_dtype, graph_of, make, operands,
)
from asyncflow.ops.layout import squeeze


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """Clamp ``t`` elementwise to ``[clip_value_min, clip_value_max]``.

    Args:
        t: a numeric tensor.
        clip_value_min, clip_value_max: scalars or tensors broadcastable to ``t``'s shape.
        name: op name scope.

    Returns:
        A tensor of ``t``'s shape and dtype.

    Raises:
        ValueError: if the bounds would broadcast ``t`` to a larger shape.
        TypeError: if the bounds' dtypes differ from ``t``'s.
    """
    t = as_tensor(t)
    with graph_of((t,)).name_scope(name or "clip_by_value"):
        lower = math_ops.minimum(t, clip_value_max)
        clipped = math_ops.maximum(lower, clip_value_min)
    if not clipped.shape.is_compatible_with(t.shape):
        raise ValueError(f"clip_by_value: the bounds broadcast {t.name} of shape {t.shape} to "
                         f"{clipped.shape}; the result must keep the input's shape")
    return clipped


def _l2norm(t, axes, keepdims):
    """sqrt(sum(t*t)) whose gradient at zero is zero instead of NaN (TF1's trick)."""
    squares = math_ops.reduce_sum(math_ops.multiply(t, t), axis=axes, keepdims=keepdims)
    positive = math_ops.greater(squares, 0)
    safe = math_ops.where(positive, squares, sources.ones_like(squares))
    return math_ops.where(positive, math_ops.sqrt(safe), squares)


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """Scale ``t`` so its L2 norm (over ``axes``) is at most ``clip_norm``.

    Args:
        t: a floating tensor.
        clip_norm: a positive scalar (or tensor broadcastable to the reduced shape).
        axes: the axes whose slices are normed separately; None norms the whole tensor.
        name: op name scope.

    Returns:
        ``t * clip_norm / max(norm, clip_norm)``, the shape of ``t``. An ``IndexedSlices``
        stays one: its values are clipped by their own norm (TF1).

    Raises:
        TypeError: if ``t`` is not floating.
    """
    if isinstance(t, IndexedSlices):
        values = clip_by_norm(t.values, clip_norm, axes, name)
        return IndexedSlices(values, t.indices, t.dense_shape)
    t = as_tensor(t)
    check_dtype("clip_by_norm", t, FLOATING, "t")
    with graph_of((t,)).name_scope(name or "clip_by_norm"):
        norm = _l2norm(t, axes, keepdims=True)
        clip_norm = as_tensor(clip_norm, dtype=t.dtype)
        scaled = math_ops.multiply(t, clip_norm)
        out = identity(math_ops.divide(scaled, math_ops.maximum(norm, clip_norm)))
    out.set_shape(t.shape)
    return out


def global_norm(t_list, name=None):
    """``sqrt(sum(l2norm(t)**2 for t in t_list))``; None entries are skipped.

    Raises:
        TypeError: if ``t_list`` is not a list or tuple.
        ValueError: if it holds no tensors.
    """
    if not isinstance(t_list, (list, tuple)):
        raise TypeError("global_norm: t_list must be a list or tuple of tensors")
    tensors = [as_tensor(_values_of(t)) for t in t_list if t is not None]
    if not tensors:
        raise ValueError("global_norm: t_list has no tensors")
    with graph_of(tensors).name_scope(name or "global_norm"):
        squares = [math_ops.reduce_sum(math_ops.multiply(t, t)) for t in tensors]
        return math_ops.sqrt(math_ops.add_n(squares), name="global_norm")


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """Scale every tensor of ``t_list`` by ``clip_norm / max(global_norm, clip_norm)``.

    Args:
        t_list: a list or tuple of tensors or ``IndexedSlices`` (None entries pass through
            as None; IndexedSlices stay sparse).
        clip_norm: a positive scalar.
        use_norm: a precomputed global norm to use instead of computing it.
        name: op name scope.

    Returns:
        ``(clipped_list, global_norm)``. A NaN or Inf global norm makes every output NaN, as
        in TF1, so a diverged step is visible.

    Raises:
        TypeError: if ``t_list`` is not a list or tuple.
    """
    if not isinstance(t_list, (list, tuple)) or isinstance(t_list, str):
        raise TypeError("clip_by_global_norm: t_list must be a list or tuple of tensors")
    norm = global_norm(t_list) if use_norm is None else as_tensor(use_norm)
    with graph_of((norm,)).name_scope(name or "clip_by_global_norm"):
        clip_norm = as_tensor(clip_norm, dtype=norm.dtype)
        one = as_tensor(1.0, dtype=norm.dtype)
        scale = math_ops.multiply(clip_norm, math_ops.minimum(
            math_ops.divide(one, norm), math_ops.divide(one, clip_norm)))
        clipped = []
        for t in t_list:
            if t is None:
                clipped.append(None)
                continue
            values = as_tensor(_values_of(t))
            values = identity(math_ops.multiply(values, math_ops.cast(scale, values.dtype)))
            clipped.append(IndexedSlices(values, t.indices, t.dense_shape)
                           if isinstance(t, IndexedSlices) else values)
    return clipped, norm


def _values_of(t):
    """An IndexedSlices counts by its values (TF1: duplicates are not merged first)."""
    return t.values if isinstance(t, IndexedSlices) else t


def _infer_check_numerics(op):
    x = op.inputs[0]
    check_dtype(op.type, x, FLOATING)
    return [(x.dtype, x.shape)]


register_op("CheckNumerics", infer=_infer_check_numerics)


def check_numerics(tensor, message, name=None):
    """The same tensor; running it fails with InvalidArgumentError if it has NaN or Inf.

    Args:
        tensor: a floating tensor.
        message: text included in the error.
        name: op name.

    Returns:
        A tensor equal to ``tensor``.

    Raises:
        TypeError: if ``tensor`` is not floating.
    """
    return make("CheckNumerics", (as_tensor(tensor),), {"message": str(message)}, name,
                "CheckNumerics")


@register_gradient("CheckNumerics")
def _check_numerics_grad(op, grad):
    return [check_numerics(grad, "Not a number (NaN) or infinity (Inf) values detected in "
                                 f"gradient. {op.get_attr('message')}")]


def _norm_axes(axis):
    """TF1's checks: None, an int (a vector norm) or a pair of distinct ints (a matrix norm)."""
    if isinstance(axis, (tuple, list)) and len(axis) == 2:
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in axis) \
                or axis[0] == axis[1]:
            raise ValueError("norm: 'axis' must be None, an integer, or a tuple of 2 unique "
                             f"integers, got {axis}")
        return tuple(axis), True
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
        raise ValueError("norm: 'axis' must be None, an integer, or a tuple of 2 unique "
                         f"integers, got {axis}")
    return (None if axis is None else (axis,)), False


def _is_inf(ord):  # noqa: A002 - TF1's argument name
    return isinstance(ord, (int, float)) and not isinstance(ord, bool) and ord == float("inf")


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None,  # noqa: A002
         keep_dims=None):
    """TF1's ``tf.norm``: a vector norm over ``axis`` (None: all entries) or, for a pair of
    axes, a matrix norm.

    Vector norms: ``'euclidean'`` (= 2), 1, ``np.inf`` and any real p > 0. Matrix norms:
    ``'euclidean'``/``'fro'`` (Frobenius), 1 (largest column sum) and ``np.inf`` (largest row
    sum); the spectral norm (``ord=2`` over two axes) needs the SVD's gradient and is refused.

    Raises:
        ValueError: for an unsupported ``ord`` or ``axis``, or a spectral matrix norm.
        TypeError: for a non-floating tensor with a norm that takes a square root or power.
    """
    if keep_dims is not None:
        keepdims = keep_dims
    keepdims = bool(keepdims)
    axes, is_matrix = _norm_axes(axis)
    real = isinstance(ord, (int, float)) and not isinstance(ord, bool)
    if is_matrix:
        if ord not in ("euclidean", "fro", 1, 2) and not _is_inf(ord):
            raise ValueError("norm: 'ord' must be a supported matrix norm in "
                             f"['euclidean', 'fro', 1, 2, inf], got {ord}")
        if ord == 2:
            raise ValueError("norm: the spectral matrix norm (ord=2 over two axes) is not "
                             "supported (it needs the SVD's gradient, which asyncflow lacks)")
    elif ord != "euclidean" and not (real and ord > 0):
        raise ValueError(f"norm: 'ord' must be a supported vector norm, got {ord}")
    t = as_tensor(tensor)
    sums = ord == 1 or _is_inf(ord)
    check_dtype("norm", t, NUMERIC if sums else FLOATING, "tensor")
    with graph_of((t,)).name_scope(name or "norm"):
        if ord in ("euclidean", "fro", 2):
            result = math_ops.sqrt(math_ops.reduce_sum(math_ops.multiply(t, t), axes,
                                                       keepdims=True))
        elif sums:
            result = math_ops.abs(t)
            if ord == 1:  # the largest column sum for a matrix
                result = math_ops.reduce_sum(result, None if axes is None else axes[0], True)
                if is_matrix:
                    result = math_ops.reduce_max(result, axes[1], keepdims=True)
            else:  # the largest row sum for a matrix
                if is_matrix:
                    result = math_ops.reduce_sum(result, axes[1], keepdims=True)
                result = math_ops.reduce_max(result, None if axes is None else axes[0], True)
        else:
            powered = math_ops.pow(math_ops.abs(t), as_tensor(ord, dtype=t.dtype))
            result = math_ops.pow(math_ops.reduce_sum(powered, axes, keepdims=True),
                                  as_tensor(1.0 / ord, dtype=t.dtype))
        if not keepdims:
            result = squeeze(result, None if axes is None else list(axes))
        return result


def reduce_euclidean_norm(input_tensor, axis=None, keepdims=False, name=None):
    """TF's ``tf.math.reduce_euclidean_norm``: ``sqrt(sum(x * x))`` over ``axis``.

    Integer tensors give the square root truncated to their dtype (TF's integer kernel).

    Raises:
        TypeError: for a non-numeric tensor.
    """
    x = as_tensor(input_tensor)
    check_dtype("reduce_euclidean_norm", x, NUMERIC, "input_tensor")
    if x.dtype.is_bool:
        raise TypeError("reduce_euclidean_norm: value passed to input_tensor has dtype bool, "
                        "which is not allowed here")
    with graph_of((x,)).name_scope(name or "EuclideanNorm"):
        squares = math_ops.reduce_sum(math_ops.multiply(x, x), axis, keepdims=keepdims)
        if x.dtype.is_floating:
            return math_ops.sqrt(squares)
        root = math_ops.sqrt(math_ops.cast(squares, dtypes.float64))
        return math_ops.cast(math_ops.floor(root), x.dtype)


def count_nonzero(input_tensor=None, axis=None, keepdims=None, dtype=dtypes.int64, name=None,
                  reduction_indices=None, keep_dims=None, input=None):  # noqa: A002 (TF's name)
    """TF's ``tf.math.count_nonzero``: how many elements over ``axis`` are not zero (not
    False for bool tensors), counted in int64 and cast to ``dtype`` as TF does."""
    x = as_tensor(input if input_tensor is None else input_tensor)
    axis = reduction_indices if axis is None else axis
    keepdims = bool(keep_dims if keepdims is None else keepdims)
    with graph_of((x,)).name_scope(name or "count_nonzero"):
        zero = sources.zeros([], dtype=x.dtype)
        nonzero = math_ops.cast(math_ops.not_equal(x, zero), dtypes.int64)
        return math_ops.cast(math_ops.reduce_sum(nonzero, axis, keepdims=keepdims), dtype)


def _reduction_arguments(axis, keepdims, reduction_indices, keep_dims, op_name):
    """TF1's spellings: ``reduction_indices`` for ``axis``, ``keep_dims`` for ``keepdims``."""
    if reduction_indices is not None:
        if axis is not None:
            raise ValueError(f"{op_name}: give axis or reduction_indices, not both")
        axis = reduction_indices
    if keep_dims is not None:
        if keepdims is not None:
            raise ValueError(f"{op_name}: give keepdims or keep_dims, not both")
        keepdims = keep_dims
    return axis, bool(keepdims)


def reduce_logsumexp(input_tensor, axis=None, keepdims=None, name=None,
                     reduction_indices=None, keep_dims=None):
    """TF1's ``tf.reduce_logsumexp``: ``log(sum(exp(x)))`` over ``axis``, computed as
    ``log(sum(exp(x - m))) + m`` with ``m`` the largest element (0 where that is not finite,
    and no gradient through it), as TF1: a row of ``-inf`` gives ``-inf``, one holding
    ``+inf`` gives ``inf``, and the gradient is ``softmax(x)`` (NaN on a row of ``-inf``).

    Raises:
        TypeError: for a tensor that is not floating point (TF1's ``Exp``).
    """
    axis, keepdims = _reduction_arguments(axis, keepdims, reduction_indices, keep_dims,
                                          "reduce_logsumexp")
    x = as_tensor(input_tensor)
    check_dtype("reduce_logsumexp", x, FLOATING, "input_tensor")
    with graph_of((x,)).name_scope(name or "ReduceLogSumExp"):
        raw_max = math_ops.reduce_max(x, axis, keepdims=True)
        finite_max = array.stop_gradient(math_ops.where(
            math_ops.is_finite(raw_max), raw_max, sources.zeros_like(raw_max)))
        result = math_ops.log(math_ops.reduce_sum(
            math_ops.exp(math_ops.subtract(x, finite_max)), axis, keepdims=keepdims))
        if not keepdims:
            finite_max = array.reshape(finite_max, array.shape(result))
        return math_ops.add(result, finite_max)


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None):
    """TF1's ``tf.math.reduce_variance``: ``mean((x - mean(x))**2)`` over ``axis`` (the
    population variance; NaN over no elements).

    Raises:
        TypeError: for an integer or bool tensor (TF1: "Input must be either real or
            complex").
    """
    x = as_tensor(input_tensor)
    with graph_of((x,)).name_scope(name or "reduce_variance"):
        return _variance(x, axis, keepdims, "reduce_variance")


def _variance(x, axis, keepdims, op_name):
    if not x.dtype.is_floating:
        raise TypeError(f"{op_name}: input must be either real or complex, got "
                        f"{x.dtype.name}")
    means = math_ops.reduce_mean(x, axis, keepdims=True)
    squared_deviations = math_ops.square(math_ops.subtract(x, means))
    return math_ops.reduce_mean(squared_deviations, axis, keepdims=bool(keepdims))


def reduce_std(input_tensor, axis=None, keepdims=False, name=None):
    """TF1's ``tf.math.reduce_std``: the square root of ``reduce_variance``.

    Raises:
        TypeError: as ``reduce_variance``.
    """
    x = as_tensor(input_tensor)
    with graph_of((x,)).name_scope(name or "reduce_std"):
        return math_ops.sqrt(_variance(x, axis, keepdims, "reduce_std"))


def div_no_nan(x, y, name=None):
    """TF1's ``tf.div_no_nan`` (``tf.math.divide_no_nan``): ``x / y``, but 0 where ``y`` is 0
    (whatever ``x`` is), with TF1's gradients (0 there too, not NaN).

    Raises:
        TypeError: for tensors that are not floating point (TF1's ``DivNoNan``).
    """
    x, y = operands((x, y), "div_no_nan")
    check_dtype("div_no_nan", x, FLOATING, "x")
    with graph_of((x, y)).name_scope(name or "div_no_nan"):
        zero = math_ops.equal(y, sources.zeros_like(y))
        # a denominator of 1 where y is 0: no inf or NaN in the value or the gradient
        safe = math_ops.where(zero, sources.ones_like(y), y)
        quotient = math_ops.divide(x, safe)
        zeros = sources.zeros_like(quotient)
        # ``zero`` broadcast to the quotient's shape (x may be the larger operand)
        everywhere = math_ops.logical_and(zero, math_ops.equal(zeros, zeros))
        return math_ops.where(everywhere, zeros, quotient)


def zero_fraction(value, name=None):
    """TF1's ``tf.math.zero_fraction``: the float32 fraction of ``value``'s elements that are
    zero (NaN for an empty tensor)."""
    x = as_tensor(value)
    with graph_of((x,)).name_scope(name or "zero_fraction"):
        zeros = math_ops.cast(math_ops.equal(x, sources.zeros_like(x)), dtypes.float32)
        return math_ops.reduce_mean(zeros)


def scalar_mul(scalar, x, name=None):
    """TF1's ``tf.scalar_mul``: ``scalar * x`` for a scalar (rank-0) ``scalar``.

    Raises:
        ValueError: if ``scalar`` is not a scalar.
    """
    x = as_tensor(x)
    scalar = as_tensor(scalar, dtype=x.dtype)
    if scalar.shape.ndims not in (None, 0):
        raise ValueError(f"scalar_mul: scalar must be a 0-D tensor, got shape {scalar.shape}")
    with graph_of((scalar, x)).name_scope(name or "scalar_mul"):
        return math_ops.multiply(scalar, x)



def _zero_where_x_is_zero(x, y, combine, name, default_name):
    """``combine(x, y)`` broadcast, and 0 where ``x`` is 0, with values and gradients free of
    the inf and NaN that ``y`` would give there (TF1's ``xlogy``/``xdivy``)."""
    x, y = operands((x, y), default_name)
    check_dtype(default_name, x, FLOATING, "x")
    with graph_of((x, y)).name_scope(name or default_name):
        zeros = sources.zeros_like(math_ops.add(x, y))  # (the broadcast shape)
        x, y = math_ops.add(x, zeros), math_ops.add(y, zeros)
        zero = math_ops.equal(x, zeros)
        safe_y = math_ops.where(zero, sources.ones_like(y), y)
        return math_ops.where(zero, zeros, combine(x, safe_y))


def xlogy(x, y, name=None):
    """TF1's ``tf.math.xlogy``: ``x * log(y)``, 0 where ``x`` is 0, with TF1's gradients."""
    return _zero_where_x_is_zero(
        x, y, lambda a, b: math_ops.multiply(a, math_ops.log(b)), name, "xlogy")


def xdivy(x, y, name=None):
    """TF1's ``tf.math.xdivy``: ``x / y``, 0 where ``x`` is 0, with TF1's gradients."""
    return _zero_where_x_is_zero(x, y, math_ops.divide, name, "xdivy")


def reciprocal_no_nan(x, name=None):
    """TF1's ``tf.math.reciprocal_no_nan``: ``1 / x``, 0 where ``x`` is 0."""
    x = as_tensor(x)
    with graph_of((x,)).name_scope(name or "reciprocal_no_nan"):
        return div_no_nan(sources.ones_like(x), x)


def verify_tensor_all_finite(t=None, msg=None, name=None, x=None, message=None):
    """TF1's ``tf.verify_tensor_all_finite`` (``tf.debugging.assert_all_finite``): ``t`` after
    a ``check_numerics`` of it, which fails the step naming ``msg`` on a NaN or Inf. As TF1's:
    ``x`` and ``message`` are aliases of ``t`` and ``msg`` (a ValueError when both of a pair
    are given) and the message is required (a TypeError without it)."""
    from asyncflow.ops.control import control_dependencies
    if t is not None and x is not None:  # TF1's deprecated_argument_lookup
        raise ValueError("verify_tensor_all_finite: Cannot specify both 't' and 'x'.")
    if msg is not None and message is not None:
        raise ValueError("verify_tensor_all_finite: Cannot specify both 'msg' and 'message'.")
    t, msg = (x if t is None else t), (message if msg is None else msg)
    if t is None:
        raise ValueError("verify_tensor_all_finite: None values not supported.")
    if not isinstance(msg, str):  # TF1: its CheckNumerics op's message attr must be a string
        raise TypeError(f"verify_tensor_all_finite: Expected string for argument 'message' "
                        f"not {type(msg).__name__ if msg is not None else None}.")
    t = as_tensor(t)
    with t.graph.name_scope(name or "VerifyFinite"):
        with t.graph.colocate_with(t.op):
            check = check_numerics(t, msg)
            with control_dependencies([check]):
                return identity(t)


def saturate_cast(value, dtype, name=None):
    """TF1's ``tf.saturate_cast`` (``tf.dtypes.saturate_cast``): ``value`` clamped to the
    range of ``dtype`` (bounds a step inside it where the input dtype cannot hold them
    exactly, as TF1's) and cast, in a scope ``name`` (``saturate_cast``).

    Raises:
        TypeError: for a string or bool dtype on either side (TF1's: no minimum).
    """
    import math

    import numpy as np
    value = as_tensor(value)
    out = dtypes.as_dtype(dtype)
    for d in (value.dtype, out):
        if not d.is_numeric or d.is_bool:
            raise TypeError(f"Cannot find minimum value of {d.name} with type {d.name}.")
    with graph_of((value,)).name_scope(name or "saturate_cast") as scope:
        held = np.dtype(value.dtype.as_numpy_dtype)
        if value.dtype.is_integer:  # (exact in Python ints: float(int64.max) is 2**63)
            low = held.type(max(value.dtype.min, math.ceil(out.min)))
            high = held.type(min(value.dtype.max, math.floor(out.max)))
        else:
            low = held.type(max(value.dtype.min, out.min))
            if float(low) < out.min:  # (float(low) and out.min compared exactly enough here)
                low = np.nextafter(low, held.type(0), dtype=held)
            high = held.type(min(float(value.dtype.max), float(out.max)))
            if _above(high, out.max):
                high = np.nextafter(high, held.type(0), dtype=held)
        clamped = math_ops.maximum(math_ops.minimum(value, as_tensor(high, value.dtype)),
                                   as_tensor(low, value.dtype))
        return math_ops.cast(clamped, out, name=scope)


def _above(value, limit):
    """``value > limit`` exactly (an int64 limit is not a float64)."""
    import fractions
    return fractions.Fraction(value.item()) > fractions.Fraction(limit)


def clip_by_average_norm(t, clip_norm, name=None):
    """TF1's ``tf.clip_by_average_norm``: ``t * clip_norm * min(n / l2norm(t), 1 /
    clip_norm)``, ``n`` its element count, in a scope ``name`` (``clip_by_average_norm``).

    Raises:
        TypeError: if ``t`` is not floating.
    """
    t = as_tensor(t)
    check_dtype("Rsqrt", t, FLOATING, "x")
    with graph_of((t,)).name_scope(name or "clip_by_average_norm") as scope:
        count = math_ops.cast(array.size(t), dtypes.float32)
        inverse = math_ops.rsqrt(math_ops.reduce_sum(math_ops.multiply(t, t)))
        clip_norm = as_tensor(clip_norm, dtype=t.dtype)
        factor = math_ops.minimum(math_ops.multiply(inverse, math_ops.cast(count, t.dtype)),
                                  math_ops.divide(as_tensor(1.0, t.dtype), clip_norm))
        return identity(math_ops.multiply(math_ops.multiply(t, clip_norm), factor), name=scope)
