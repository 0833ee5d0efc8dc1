"""Kernels of the math family (see ops/math.py) where numpy's answer is not TF1's:
``Round`` of integers, ``FloorDiv`` and ``FloorMod`` (a zero integer divisor, float
semantics), ``Pow`` (a negative integer exponent, numpy's ``sqrt`` shortcut) and float
``ArgMax``/``ArgMin`` (NaN). Each was found by the differential fuzz against TF1
(tests/ops/test_tf1_math_fuzz.py); the regression tests in tests/ops/test_math_tf1_values.py
hold TF1's values. The rest of the family is in kernels/math.py.
"""
from __future__ import annotations

from asyncflow import errors
from asyncflow.kernels import intra_op
from asyncflow.kernels.math import _binary_kernel, _unary_kernel
from asyncflow.kernels.registry import register_kernel, register_prepare

_true_divide = _binary_kernel("true_divide")
_floor_divide = _binary_kernel("floor_divide")
_remainder = _binary_kernel("remainder")
_fmod = _binary_kernel("fmod")
_power = _binary_kernel("power")
_rint = _unary_kernel("rint")


def _check_divisor(ctx, y):
    """TF1 refuses an integer division or modulo by zero (numpy gives 0 and a warning)."""
    if y.dtype.kind in "iu" and y.size and not y.all():
        raise errors.InvalidArgumentError(None, ctx.name, "Integer division by zero")


@register_kernel("Round")
def _round(ctx, x):
    """Half to even (``rint``); integers are their own rounding (TF1 takes them too)."""
    if x.dtype.kind in "iu":
        return (x,)
    return _rint(ctx, x)


@register_kernel("FloorDiv")
def _floor_div(ctx, x, y):
    """Integers floor as Python's ``//`` (a zero divisor refused, as TF1); floats are TF1's
    ``floor(x / y)``, not numpy's ``floor_divide``, which floors the exact quotient: TF1's
    ``2.5 // 0.001`` is 2500 (numpy 2499), ``inf // 2`` inf (numpy NaN) and ``-3 // inf``
    -0 (numpy -1)."""
    if x.dtype.kind not in "f":
        _check_divisor(ctx, y)
        return _floor_divide(ctx, x, y)
    (quotient,) = _true_divide(ctx, x, y)
    if getattr(quotient, "ndim", 0):
        return (ctx.xp.floor(quotient, out=quotient),)
    return (ctx.xp.asarray(ctx.xp.floor(quotient)),)


@register_kernel("FloorMod")
def _floor_mod(ctx, x, y):
    """Integers as Python's ``%`` (a zero divisor refused, as TF1); floats are TF1's
    ``r = fmod(x, y)``, plus ``y`` where ``r`` is nonzero and its sign is not ``y``'s: the
    values of numpy's ``mod``, but a zero result keeps ``x``'s sign (TF1's ``2.0 % -1.0`` is
    0.0, numpy -0.0)."""
    if x.dtype.kind not in "f":
        _check_divisor(ctx, y)
        return _remainder(ctx, x, y)
    xp = ctx.xp
    (rest,) = _fmod(ctx, x, y)
    fix = (rest != 0) & ((y < 0) != (rest < 0))
    return (xp.asarray(xp.where(fix, rest + y, rest)) if fix.any() else xp.asarray(rest),)


@register_kernel("Pow")
def _pow(ctx, x, y):
    """numpy's ``power``, but TF1's (C's ``pow``) where they differ: a negative integer
    exponent is refused with TF1's words, and a scalar float exponent of 0.5 (which numpy
    computes as ``sqrt``) gives ``pow(-inf, 0.5) = inf`` and ``pow(-0.0, 0.5) = 0.0``."""
    if x.dtype.kind in "iu" and y.size and (y < 0).any():
        raise errors.InvalidArgumentError(
            None, ctx.name, "Integers to negative integer powers are not allowed")
    (out,) = _power(ctx, x, y)
    if x.dtype.kind == "f" and y.size == 1 and y.reshape(-1)[0] == 0.5:
        xp = ctx.xp
        out = xp.where(xp.isneginf(x), xp.asarray(xp.inf, out.dtype), out) + out.dtype.type(0)
    return (ctx.xp.asarray(out),)


for _type in ("Round", "FloorDiv", "FloorMod", "Pow"):
    register_prepare(_type)(intra_op.may_be_large)


def _arg(fn_name):
    def kernel(ctx, x):
        axis = ctx.attrs["axis"]
        if x.ndim and x.shape[axis] == 0:
            raise errors.InvalidArgumentError(None, ctx.name, f"{ctx.type}: reduction dimension {axis} is empty")
        if not x.ndim:  # (the builder refuses a scalar of known rank)
            raise errors.InvalidArgumentError(
                None, ctx.name, f"{ctx.type}: expected dimension in the range [0, 0), but got "
                f"{axis}")
        out = getattr(ctx.xp, fn_name)(x, axis=axis)
        if x.dtype.kind == "f":
            out = _tf1_arg(ctx.xp, x, axis, out, fn_name == "argmax")
        return (ctx.xp.asarray(out).astype(ctx.output_dtypes[0]),)
    return kernel


def _tf1_arg(xp, x, axis, index, is_max):
    """TF1's float ``ArgMax``/``ArgMin`` (Eigen's reducer) from numpy's: a running best that
    starts at (index 0, the lowest finite value) and moves only to a strictly better value,
    so a NaN never wins (numpy's picks the first NaN) and where nothing beats the lowest
    finite value (all of -inf, -max and NaN) the index is 0: TF1's ``argmax([nan, 1, 2])``
    is 2 (numpy 0), ``argmax([-inf, -max])`` 0 (numpy 1)."""
    best = xp.take_along_axis(x, xp.expand_dims(index, axis), axis).squeeze(axis)
    if xp.isnan(best).any():
        x = xp.where(xp.isnan(x), x.dtype.type(-xp.inf if is_max else xp.inf), x)
        index = (xp.argmax if is_max else xp.argmin)(x, axis=axis)
        best = xp.take_along_axis(x, xp.expand_dims(index, axis), axis).squeeze(axis)
    info = xp.finfo(x.dtype)
    beaten = best > info.min if is_max else best < info.max
    return index if beaten.all() else xp.where(beaten, index, 0)


register_kernel("ArgMax")(_arg("argmax"))
register_kernel("ArgMin")(_arg("argmin"))
