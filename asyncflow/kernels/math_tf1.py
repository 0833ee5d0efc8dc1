"""Kernels of the math family (see ops/math.py) where numpy's answer is not TF1's:
``Round`` of integers, ``FloorDiv`` and ``FloorMod`` (a zero integer divisor, float
semantics), ``Pow`` (a negative integer exponent, numpy's ``sqrt`` shortcut) and float
``ArgMax``/``ArgMin`` (NaN). Each was found by the differential fuzz against TF1
(tests/ops/test_tf1_math_fuzz.py); the regression tests in tests/ops/test_math_tf1_values.py
hold TF1's values. Also here: TF1 names added since, ``SelectV2`` (``tf.where_v2``: numpy's
``where``, which broadcasts the condition too, where ``Select`` reads a vector condition as
rows), ``TruncateDiv`` and ``TruncateMod`` (C's division and remainder). The rest of the family is in kernels/math.py.
"""
from __future__ import annotations

import numpy as np

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
    if not getattr(rest, "ndim", 0):
        fix = (rest != 0) & ((y < 0) != (rest < 0))
        return (xp.asarray(rest + y if fix else rest),)
    if y.size == 1:  # (the common ``x % c``: arithmetic, no branchy ``where`` on every value)
        divisor = y.reshape(-1)[0]
        if -xp.inf < divisor < xp.inf and divisor != 0:
            rest += ((rest > 0) if divisor < 0 else (rest < 0)) * divisor
            zero = rest == 0  # (adding +0.0 lost a -0.0: a zero takes x's sign, as fmod's)
            if zero.any():
                rest = (np.copysign(rest, x, out=rest, where=zero) if xp is np
                        else xp.where(zero, xp.copysign(rest, x), rest))
            return (rest,)
    fix = (rest != 0) & ((y < 0) != (rest < 0))
    return (xp.where(fix, rest + y, rest),)


@register_kernel("Pow")
def _pow(ctx, x, y):
    """numpy's ``power``, but TF1's (C's ``pow``) where they differ: a negative integer
    exponent is refused with TF1's words, and a scalar float exponent of 0.5 (which numpy
    computes as ``sqrt``) gives ``pow(-inf, 0.5) = inf`` and ``pow(-0.0, 0.5) = 0.0``."""
    if x.dtype.kind in "iu" and y.size and (y < 0).any():
        raise errors.InvalidArgumentError(
            None, ctx.name, "Integers to negative integer powers are not allowed")
    (out,) = _power(ctx, x, y)
    if (_float_bounds(x.dtype) is not None and y.size == 1 and y.reshape(-1)[0] == 0.5
            and out.size and not x.min() > 0):
        # (only then: -inf, -0.0 or NaN among the values; a positive base is numpy's answer)
        xp = ctx.xp
        out = xp.where(xp.isneginf(x), xp.asarray(xp.inf, out.dtype), out) + out.dtype.type(0)
    return (ctx.xp.asarray(out),)


@register_kernel("TruncateDiv")
def _truncate_div(ctx, x, y):
    """C's division: the quotient rounded toward zero (integers: a zero divisor refused, as
    TF1; floats: ``trunc(x / y)``)."""
    xp = ctx.xp
    if x.dtype.kind == "f":
        (quotient,) = _true_divide(ctx, x, y)
        return (xp.asarray(xp.trunc(quotient)),)
    _check_divisor(ctx, y)
    (floor,) = _floor_divide(ctx, x, y)
    if x.dtype.kind == "u":
        return (floor,)
    inexact = (floor * y != x) & ((x < 0) != (y < 0))  # floored below zero: one up
    return (xp.asarray(floor + inexact.astype(floor.dtype)),)


@register_kernel("TruncateMod")
def _truncate_mod(ctx, x, y):
    """C's ``%`` and ``fmod``: the remainder takes ``x``'s sign (integers: a zero divisor
    refused, as TF1)."""
    if x.dtype.kind != "f":
        _check_divisor(ctx, y)
    return _fmod(ctx, x, y)


for _type in ("Round", "FloorDiv", "FloorMod", "Pow", "TruncateDiv", "TruncateMod"):
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
        bounds = _float_bounds(x.dtype)
        if bounds is not None and out.size and _maybe_special(ctx.xp, x, axis, out, fn_name == "argmax", bounds):
            out = _tf1_arg(ctx.xp, x, axis, out, fn_name == "argmax", bounds)
        return (ctx.xp.asarray(out).astype(ctx.output_dtypes[0]),)
    return kernel


_BOUNDS = {}


def _float_bounds(dtype):
    """``(lowest, highest)`` finite values of a float dtype (bfloat16 included, whose numpy
    kind is "V"), or None for any other dtype."""
    try:
        return _BOUNDS[dtype]
    except KeyError:
        pass
    if dtype.kind == "f":
        info = np.finfo(dtype)
    elif dtype.name == "bfloat16":
        import ml_dtypes  # (already imported: the array is one)
        info = ml_dtypes.finfo(dtype)
    else:
        info = None
    bounds = _BOUNDS[dtype] = None if info is None else (float(info.min), float(info.max))
    return bounds


def _maybe_special(xp, x, axis, index, is_max, bounds):
    """Whether numpy's pick may not be TF1's: a NaN among the values picked, or a value no
    better than the lowest finite one (one cheap test, so the common case pays little). A
    small input is tested whole (one call), a large one by its picked values only."""
    if x.size <= 1 << 14:
        edge = x.min() if is_max else x.max()
    else:
        if axis == x.ndim - 1 and x.flags.c_contiguous:  # (rows: a flat gather is cheapest)
            step = x.shape[-1]
            picked = x.reshape(-1)[index.reshape(-1) + xp.arange(0, x.size, step)]
        else:
            picked = xp.take_along_axis(x, xp.expand_dims(index, axis), axis)
        edge = picked.min() if is_max else picked.max()
    return not (edge > bounds[0] if is_max else edge < bounds[1])  # (NaN: not)


def _tf1_arg(xp, x, axis, index, is_max, bounds):
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
    beaten = best > bounds[0] if is_max else best < bounds[1]
    return index if beaten.all() else xp.where(beaten, index, 0)


register_kernel("ArgMax")(_arg("argmax"))
register_kernel("ArgMin")(_arg("argmin"))


@register_kernel("SelectV2")
def _select_v2(ctx, cond, x, y):
    try:
        return (ctx.xp.where(cond, x, y),)
    except ValueError:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"condition, then and else of shapes {list(cond.shape)}, "
            f"{list(x.shape)} and {list(y.shape)} do not broadcast") from None
