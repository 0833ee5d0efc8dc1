"""Learning-rate schedules of TF1 (``tf.train.exponential_decay`` ...), built from ops.

Each returns a float tensor computed from ``global_step`` (a Variable or tensor of any
integer or float dtype), so fetching it, or an optimizer that uses it, follows the step.
Formulas, defaults and dtypes follow TF1: the rate's dtype is the learning rate's (float32
for Python numbers) and the step is cast to it.
"""
from __future__ import annotations

import math

import numpy as np

from asyncflow import dtypes
from asyncflow.graph.graph import get_default_graph
from asyncflow.ops import math as _math
from asyncflow.ops.construct import as_tensor, make_op, static_value
from asyncflow.ops.sources import random_normal


def _float_args(learning_rate, *values):
    """The learning rate as a tensor (float32 for a Python number) and ``values`` in its dtype.
    As in TF1 (``math_ops.cast`` of a Python number) a Python float becomes float32 first, so
    with a float64 rate ``decay_steps=7.3`` is 7.30000019073..."""
    rate = as_tensor(learning_rate, dtype=dtypes.float32) \
        if not hasattr(learning_rate, "dtype") else as_tensor(learning_rate)
    dtype = rate.dtype
    out = []
    for value in values:
        if hasattr(value, "dtype"):
            tensor = as_tensor(value)
        else:
            if type(value) is float:
                value = np.float32(value)
            tensor = as_tensor(np.asarray(value).astype(dtype.np), dtype=dtype)
        out.append(tensor if tensor.dtype is dtype else _math.cast(tensor, dtype))
    return [rate] + out


def _check_step(global_step, fn):
    if global_step is None:
        raise ValueError(f"global_step is required for {fn}.")


def exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                      name=None):
    """``learning_rate * decay_rate ** (global_step / decay_steps)`` (floored when
    ``staircase``)."""
    _check_step(global_step, "exponential_decay")
    with get_default_graph().name_scope(name or "ExponentialDecay") as scope:
        rate, step, steps, decay = _float_args(learning_rate, global_step, decay_steps, decay_rate)
        power = _math.divide(step, steps)
        if staircase:
            power = _math.floor(power)
        return _math.multiply(rate, _math.pow(decay, power), name=scope)


def inverse_time_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                       name=None):
    """``learning_rate / (1 + decay_rate * global_step / decay_steps)`` (floored ratio when
    ``staircase``)."""
    _check_step(global_step, "inverse_time_decay")
    with get_default_graph().name_scope(name or "InverseTimeDecay") as scope:
        rate, step, steps, decay = _float_args(learning_rate, global_step, decay_steps, decay_rate)
        ratio = _math.divide(step, steps)
        if staircase:
            ratio = _math.floor(ratio)
        return _math.divide(rate, _math.add(1.0, _math.multiply(decay, ratio)), name=scope)


def polynomial_decay(learning_rate, global_step, decay_steps, end_learning_rate=0.0001,
                     power=1.0, cycle=False, name=None):
    """``(lr - end) * (1 - step / decay_steps) ** power + end``; the step stops at
    ``decay_steps`` unless ``cycle``, which stretches ``decay_steps`` to the next multiple."""
    _check_step(global_step, "polynomial_decay")
    with get_default_graph().name_scope(name or "PolynomialDecay") as scope:
        rate, step, steps, end, exponent = _float_args(learning_rate, global_step, decay_steps,
                                                       end_learning_rate, power)
        if cycle:
            multiplier = _math.where(_math.equal(step, 0.0), as_tensor(1.0, dtype=rate.dtype),
                                     _math.ceil(_math.divide(step, steps)))
            steps = _math.multiply(steps, multiplier)
        else:
            step = _math.minimum(step, steps)
        fraction = _math.subtract(1.0, _math.divide(step, steps))
        return _math.add(_math.multiply(_math.subtract(rate, end), _math.pow(fraction, exponent)),
                         end, name=scope)


def cosine_decay(learning_rate, global_step, decay_steps, alpha=0.0, name=None):
    """``learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * step / decay_steps)) + alpha)``,
    the step stopping at ``decay_steps``."""
    _check_step(global_step, "cosine_decay")
    with get_default_graph().name_scope(name or "CosineDecay") as scope:
        rate, step, steps, floor = _float_args(learning_rate, global_step, decay_steps, alpha)
        step = _math.minimum(step, steps)
        cosine = _math.multiply(0.5, _math.add(1.0, _math.cos(
            _math.multiply(math.pi, _math.divide(step, steps)))))
        decayed = _math.add(_math.multiply(_math.subtract(1.0, floor), cosine), floor)
        # TF1's last op keeps math_ops.multiply's default name: "Mul", after three "mul"s
        # in the scope (names are unique ignoring case), so "CosineDecay/Mul_3".
        return _math.multiply(rate, decayed, name="Mul")


def natural_exp_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                      name=None):
    """``learning_rate * exp(-decay_rate * global_step / decay_steps)`` (floored ratio when
    ``staircase``): TF1's ``exponential_decay`` with the rate ``exp(-decay_rate)``, which TF1
    computes in ``decay_rate``'s dtype (float32 for a Python number) in the caller's scope, the
    schedule named as ``exponential_decay``'s (``ExponentialDecay`` unless ``name``)."""
    _check_step(global_step, "natural_exp_decay")
    decay = decay_rate if hasattr(decay_rate, "dtype") else as_tensor(
        np.float32(decay_rate) if type(decay_rate) is float else decay_rate)
    return exponential_decay(learning_rate, global_step, decay_steps,
                             _math.exp(_math.negative(decay)), staircase=staircase, name=name)


def linear_cosine_decay(learning_rate, global_step, decay_steps, num_periods=0.5, alpha=0.0,
                        beta=0.001, name=None):
    """``learning_rate * ((alpha + linear) * cosine + beta)`` with ``linear = (decay_steps -
    step) / decay_steps`` and ``cosine = 0.5 (1 + cos(2 pi num_periods step / decay_steps))``,
    the step stopping at ``decay_steps`` (TF1's, Bello et al. 2017)."""
    _check_step(global_step, "linear_cosine_decay")
    with get_default_graph().name_scope(name or "LinearCosineDecay") as scope:
        rate, step, steps, periods, floor, offset = _float_args(
            learning_rate, global_step, decay_steps, num_periods, alpha, beta)
        step = _math.minimum(step, steps)
        linear = _math.divide(_math.subtract(steps, step), steps)
        fraction = _math.multiply(_math.multiply(2.0, periods), _math.divide(step, steps))
        cosine = _math.multiply(0.5, _math.add(1.0, _math.cos(_math.multiply(math.pi, fraction))))
        decayed = _math.add(_math.multiply(_math.add(floor, linear), cosine), offset)
        return _math.multiply(rate, decayed, name=scope)


def noisy_linear_cosine_decay(learning_rate, global_step, decay_steps, initial_variance=1.0,
                              variance_decay=0.55, num_periods=0.5, alpha=0.0, beta=0.001,
                              name=None):
    """``linear_cosine_decay`` with Gaussian noise on its linear part (TF1's, Bello et al.
    2017): ``learning_rate * ((alpha + linear + eps) * cosine + beta)``, ``eps`` a fresh normal
    draw every run with variance ``initial_variance / (1 + step)^variance_decay`` (the step
    stopping at ``decay_steps``). The draws are not TF1's numbers for the same seed (no
    asyncflow random op's are); with ``initial_variance=0`` the rate is linear cosine decay's.
    """
    _check_step(global_step, "noisy_linear_cosine_decay")
    with get_default_graph().name_scope(name or "NoisyLinearCosineDecay") as scope:
        rate, step, steps, variance0, variance_decay, periods, floor, offset = _float_args(
            learning_rate, global_step, decay_steps, initial_variance, variance_decay,
            num_periods, alpha, beta)
        step = _math.minimum(step, steps)
        linear = _math.divide(_math.subtract(steps, step), steps)
        variance = _math.divide(variance0, _math.pow(_math.add(1.0, step), variance_decay))
        # TF1 draws in float32 (a float64 rate is refused there; here the draw takes the
        # rate's dtype, as the other cosine schedules take a float64 rate: docs/porting.md).
        noise = random_normal([], stddev=_math.sqrt(variance), dtype=rate.dtype)
        noisy = _math.add(linear, noise)
        fraction = _math.multiply(_math.multiply(2.0, periods), _math.divide(step, steps))
        cosine = _math.multiply(0.5, _math.add(1.0, _math.cos(_math.multiply(math.pi, fraction))))
        decayed = _math.add(_math.multiply(_math.add(floor, noisy), cosine), offset)
        return _math.multiply(rate, decayed, name=scope)


def cosine_decay_restarts(learning_rate, global_step, first_decay_steps, t_mul=2.0, m_mul=1.0,
                          alpha=0.0, name=None):
    """Cosine decay with warm restarts (SGDR, Loshchilov and Hutter 2016) as TF1's: period
    ``i`` lasts ``first_decay_steps * t_mul^i`` steps and starts at ``learning_rate *
    m_mul^i``; within it ``(1 - alpha) * 0.5 (1 + cos(pi * fraction)) + alpha``."""
    _check_step(global_step, "cosine_decay_restarts")
    with get_default_graph().name_scope(name or "SGDRDecay") as scope:
        rate, step, steps, floor, t, m = _float_args(learning_rate, global_step,
                                                     first_decay_steps, alpha, t_mul, m_mul)
        completed = _math.divide(step, steps)

        def flat():  # periods of equal length (t_mul == 1): the floor of the fraction
            restart = _math.floor(completed)
            return restart, _math.subtract(completed, restart)

        def growing():  # the geometric series gives the restart and the fraction within it
            restart = _math.floor(_math.divide(_math.log(_math.subtract(
                1.0, _math.multiply(completed, _math.subtract(1.0, t)))), _math.log(t)))
            done = _math.divide(_math.subtract(1.0, _math.pow(t, restart)),
                                _math.subtract(1.0, t))
            return restart, _math.divide(_math.subtract(completed, done), _math.pow(t, restart))
        if not hasattr(t_mul, "dtype"):  # a number: one form (the other divides 0 by 0)
            restart, fraction = flat() if t_mul == 1 else growing()
        else:
            is_flat = _math.equal(t, 1.0)
            (flat_restart, flat_fraction), (restart, fraction) = flat(), growing()
            restart = _math.where(is_flat, flat_restart, restart)
            fraction = _math.where(is_flat, flat_fraction, fraction)
        cosine = _math.multiply(_math.multiply(0.5, _math.pow(m, restart)), _math.add(
            1.0, _math.cos(_math.multiply(math.pi, fraction))))
        decayed = _math.add(_math.multiply(_math.subtract(1.0, floor), cosine), floor)
        return _math.multiply(rate, decayed, name=scope)


def piecewise_constant(x, boundaries, values, name=None):
    """``values[0]`` while ``x <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < x <= boundaries[i]``, ``values[-1]`` after the last boundary.

    Raises:
        ValueError: unless ``len(values) == len(boundaries) + 1``.
    """
    if len(values) != len(boundaries) + 1:
        raise ValueError("The length of boundaries should be 1 less than the length of values")
    with get_default_graph().name_scope(name or "PiecewiseConstant"):
        x = as_tensor(x)
        values = [as_tensor(v) if hasattr(v, "dtype") else
                  as_tensor(v, dtype=dtypes.float32 if isinstance(v, float) else None)
                  for v in values]
        bounds = [as_tensor(b) if hasattr(b, "dtype") else as_tensor(b, dtype=x.dtype)
                  for b in boundaries]
        bounds = [b if b.dtype is x.dtype else _math.cast(b, x.dtype) for b in bounds]
        # TF1 picks with tf.case among exclusive predicates, x <= b0, b0 < x <= b1, ..., x >
        # b_last, with the default values[0] (so a NaN, which passes none, gets values[0]).
        # The same picks here are a chain of Selects, values[i + 1] where x > b_i: a cond
        # costs every run this executor's Switch/Merge machinery (about 20x the Selects), and
        # the rate is read every step. The last is named as TF1's case output,
        # "PiecewiseConstant/case/cond/Merge"; x must be a scalar, as TF1's cond's predicate.
        if x.shape.ndims not in (None, 0):
            raise ValueError(f"piecewise_constant: x must be a scalar, got shape {x.shape}")
        graph = get_default_graph()
        result, check = values[0], _exclusive_check(x, bounds)
        with graph.name_scope("case"), graph.name_scope("cond"):
            for index, bound in enumerate(bounds):
                last = index == len(bounds) - 1
                with graph.control_dependencies([check] if last and check else []):
                    result = _math.where(_math.greater(x, bound), values[index + 1], result,
                                         name="Merge" if last else None)
        return result


def _exclusive_check(x, bounds):
    """TF1's ``exclusive=True`` check of its case's predicates, where they may overlap: the
    bounds are not constants in increasing order (``[5, 2]``: x = 3 passes x <= 5 and x > 2,
    which fails TF1's run). None for increasing constants, whose predicates cannot overlap."""
    known = [static_value(b) for b in bounds]
    if None not in known and all(np.all(a <= b) for a, b in zip(known, known[1:])):
        return None
    preds = [_math.less_equal(x, bounds[0])] + [
        _math.logical_and(_math.greater(x, low), _math.less_equal(x, high))
        for low, high in zip(bounds, bounds[1:])] + [_math.greater(x, bounds[-1])]
    return make_op("CaseExclusive", preds, None, None, "exclusive")


piecewise_constant_decay = piecewise_constant  # TF1's other name

__all__ = ["cosine_decay", "cosine_decay_restarts", "exponential_decay", "inverse_time_decay",
           "linear_cosine_decay", "natural_exp_decay", "piecewise_constant",
           "piecewise_constant_decay", "polynomial_decay"]
