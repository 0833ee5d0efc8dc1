"""Running sums and products along an axis: ``cumsum`` and ``cumprod`` (TF1's ``tf.cumsum``,
``tf.cumprod``, ``tf.math.cumsum``, ``tf.math.cumprod``).

``Cumsum``/``Cumprod`` keep their input's dtype and shape. ``exclusive`` leaves each entry out
of its own result (the first result is 0 for a sum, 1 for a product); ``reverse`` runs from the
end of the axis. The axis is an attribute (TF1 takes a tensor: a constant one is accepted).
The gradients: a sum's is the running sum of the gradient in the other direction (TF1's); a
product's is TF1's ``cumsum(cumprod(x) * grad, reverse=not reverse) / x`` where no zero comes
at or before an entry, the running sum of ``grad`` times the products with the zero taken out
at the first zero of a scan, and 0 after it: the derivative wherever x has zeros, where TF1
divides by zero (NaN, inf) and TF 2's ``div_no_nan`` gives 0.
"""
from __future__ import annotations

import numbers

from asyncflow.graph import register_gradient, register_op
from asyncflow.ops.construct import NUMERIC, as_tensor, check_dtype, make, static_value


def _infer_cumulative(op):
    x = op.inputs[0]
    check_dtype(op.type, x, NUMERIC)
    if x.dtype.is_bool:
        raise TypeError(f"{op.type}: value passed to x has dtype bool, which is not allowed here")
    axis, ndims = op.get_attr("axis"), x.shape.ndims
    if ndims is not None:
        if ndims == 0:
            raise ValueError(f"{op.type} '{op.name}': input must have at least 1 dimension, "
                             f"got shape {x.shape}")
        if not -ndims <= axis < ndims:
            raise ValueError(f"{op.type} '{op.name}': axis {axis} is out of range for a tensor "
                             f"of rank {ndims}")
    return [(x.dtype, x.shape)]


register_op("Cumsum", infer=_infer_cumulative)
register_op("Cumprod", infer=_infer_cumulative)


def _axis_value(axis, builder_name):
    if hasattr(axis, "op"):
        value = static_value(axis)
        if value is None:
            raise ValueError(f"{builder_name}: axis must be a constant")
        axis = value
    if hasattr(axis, "ndim") and axis.ndim == 0:
        axis = axis.item()
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{builder_name}: axis must be a scalar integer, got {axis!r}")
    return int(axis)


def _cumulative(op_type, builder_name, x, axis, exclusive, reverse, name):
    attrs = {"axis": _axis_value(axis, builder_name), "exclusive": bool(exclusive),
             "reverse": bool(reverse)}
    return make(op_type, (as_tensor(x),), attrs, name, op_type)


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """The running sum of ``x`` along ``axis`` (TF1's ``tf.cumsum``).

    Raises:
        TypeError: for a non-numeric ``x`` or a non-integer ``axis``.
        ValueError: for a scalar ``x`` or an axis out of range.
    """
    return _cumulative("Cumsum", "cumsum", x, axis, exclusive, reverse, name)


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """The running product of ``x`` along ``axis`` (TF1's ``tf.cumprod``).

    Raises:
        TypeError: for a non-numeric ``x`` or a non-integer ``axis``.
        ValueError: for a scalar ``x`` or an axis out of range.
    """
    return _cumulative("Cumprod", "cumprod", x, axis, exclusive, reverse, name)


@register_gradient("Cumsum")
def _cumsum_grad(op, grad):
    return [cumsum(grad, op.get_attr("axis"), op.get_attr("exclusive"),
                   not op.get_attr("reverse"))]


@register_gradient("Cumprod")
def _cumprod_grad(op, grad):
    from asyncflow.ops import math as m
    x = op.inputs[0]
    axis, exclusive, reverse = (op.get_attr(a) for a in ("axis", "exclusive", "reverse"))

    def back(product):  # sum over the later results j of grad_j * product_j
        return cumsum(m.multiply(product, grad), axis, exclusive, not reverse)

    zero, one = m.cast(0, x.dtype), m.cast(1, x.dtype)  # scalars: where broadcasts them
    nonzero = m.not_equal(x, zero)
    # 1 where no zero comes before the entry in the scan's direction
    clean = m.greater(cumprod(m.cast(nonzero, x.dtype), axis, True, reverse), m.cast(0.5, x.dtype))
    first_zero = m.logical_and(clean, m.logical_not(nonzero))
    # Every product past an entry at or after the scan's first zero holds that zero, so this
    # is already 0 there (the derivative) and TF1's value elsewhere; only the first zero needs
    # the products with it taken out.
    regular = m.divide(back(op.outputs[0]), m.where(nonzero, x, one))
    at_first_zero = back(cumprod(m.where(first_zero, one, x), axis, exclusive, reverse))
    return [m.where(first_zero, at_first_zero, regular)]
