"""The steps after a fused product or convolution, in place on its output's rows: the bias
added, then an activation (``fused_epilogue``: ``_FusedMatMul``, ``_FusedConv2D``), with the
bits of the separate BiasAdd and activation kernels; and the sigmoid's in-place forms
(``sigmoid_into``) that the Sigmoid kernel (``kernels/math.py``) and they share."""
from __future__ import annotations

import numpy as np


# Per float dtype: the x below which ``exp(-x)`` overflows (``-log(max)``: -88.7 in float32).
_EXP_OVERFLOW = {}


def sigmoid_into(xp, x, result):
    """Write ``sigmoid(x)`` into ``result`` (which may be ``x`` itself); returns it.

    A numpy array none of whose values overflows ``exp(-x)`` (the usual case) takes
    ``1 / (1 + exp(-x))`` in place: four passes, no temporaries, 1.8x faster than the form
    below on [256, 784] float32 (0.16 against 0.28 ms), within 2 ulps as well (its relative
    precision holds for tiny results too: ``1 + exp(30)`` is ``exp(30)`` to the last bit).
    Where some value does (``x`` below -88.7 in float32), the result there is subnormal or 0,
    which the naive form would flush to 0, so those values (and NaNs) take the masked form
    (the check: one ``min`` pass, 0.015 ms there). Each value's form depends on that value
    alone, so a fused epilogue applied block by block (``fused_epilogue``) gives the bits of
    this kernel on the whole array."""
    if type(x) is np.ndarray and x.dtype.kind == "f" and x.size:
        bound = _EXP_OVERFLOW.get(x.dtype)
        if bound is None:
            bound = _EXP_OVERFLOW[x.dtype] = -float(np.log(np.finfo(x.dtype).max))
        if x.min() >= bound:  # False with a NaN: then the masked form (NaN stays NaN)
            return _sigmoid_fast(xp, x, result)
        low = ~(x >= bound)  # exp(-x) overflows there, or x is NaN
        masked = _sigmoid_masked(xp, x[low])
        with np.errstate(over="ignore"):
            _sigmoid_fast(xp, x, result)
        result[low] = masked
        return result
    return _sigmoid_masked(xp, x, result)


def _sigmoid_fast(xp, x, result):
    xp.negative(x, out=result)
    xp.exp(result, out=result)
    result += x.dtype.type(1)
    # ``1 / r`` as a division: the same bits as numpy's reciprocal, whose loop is not
    # vectorized (200k float32: 23 us against 43).
    return xp.divide(x.dtype.type(1), result, out=result)


def _sigmoid_masked(xp, x, result=None):
    """``sigmoid(x)`` that never overflows (``sigmoid_into``): into ``result``, else new."""
    one = x.dtype.type(1)
    e = xp.abs(x)
    xp.negative(e, out=e)
    xp.exp(e, out=e)
    factor = xp.subtract(one, e)            # e + (1 - e) * [x >= 0]: 1 or e
    factor *= x >= 0
    factor += e
    result = xp.add(e, one, out=result)
    xp.divide(one, result, out=result)      # 1 / (1 + e)
    result *= factor
    return result


def fused_epilogue(xp, fused_ops, bias):
    """``apply(rows)``: the steps after a fused product (``fused_ops``: "BiasAdd" and maybe an
    activation), in place on a chunk of its output rows ``[r, C]``: the same operations, in
    the same order, as the separate BiasAdd/Add and activation kernels, so the same bits."""
    activation = fused_ops[1] if len(fused_ops) > 1 else None
    if activation == "Sigmoid" and type(bias) is np.ndarray and bias.dtype.kind == "f":
        negated = np.negative(bias)

        def apply(rows, start=0, stop=None):
            if type(rows) is not np.ndarray or rows.dtype != bias.dtype:
                rows += bias if stop is None else bias[start:stop]
                sigmoid_into(xp, rows, rows)
                return
            # ``-(rows + bias)`` in one pass, as ``(-bias) - rows``: the same bits (rounding
            # to nearest is symmetric) up to the sign of an exact zero, which ``exp`` does
            # not see: the sigmoid's negation pass saved (one of five).
            np.subtract(negated if stop is None else negated[start:stop], rows, out=rows)
            _sigmoid_of_negated_into(rows)
        return apply

    tiled = []  # the bias tiled (``_add_bias``), made at the first large block

    def apply(rows, start=0, stop=None):  # (a block of columns: their share of the bias)
        if stop is not None:
            rows += bias[start:stop]
        elif not _add_bias(rows, bias, tiled):
            rows += bias
        if activation == "Relu":
            xp.maximum(rows, rows.dtype.type(0), out=rows)
        elif activation == "Sigmoid":
            sigmoid_into(xp, rows, rows)
        elif activation == "Tanh":
            xp.tanh(rows, out=rows)
    return apply


def _add_bias(rows, bias, tiled):
    """``rows += bias`` for large contiguous numpy ``[r, C]`` rows with C <= 256 (else False,
    nothing done): numpy's broadcast add runs its inner loop C values at a time; the same adds
    over ``[r / k, k C]`` views by the bias tiled k times (cached in the list ``tiled``) give
    the same bits 1.3x faster (conv1's 64-image chunk, [50176, 32] float32: 0.43 against 0.58
    ms; bench/RESULTS.md 2026-12-06, rconvfwd). One column stays broadcast: numpy runs that
    add as one pass by a scalar, 1.6-2.9x faster than the tiled views, and where both values
    are NaN it keeps the bias's NaN (sign, payload) where the views keep the row's."""
    if (type(rows) is not np.ndarray or type(bias) is not np.ndarray or rows.ndim != 2
            or rows.shape[1] != bias.size or not 1 < bias.size <= 256 or rows.size < 16384
            or rows.dtype != bias.dtype or not rows.flags.c_contiguous):
        return False
    if not tiled:
        tiled.append(np.tile(bias, 1024 // bias.size))
    per = tiled[0].size // bias.size
    whole = rows.shape[0] // per * per
    view = rows[:whole].reshape(-1, tiled[0].size)
    view += tiled[0]
    rows[whole:] += bias
    return True


def _sigmoid_of_negated_into(negated):
    """``sigmoid(-negated)`` in place, with ``sigmoid_into``'s bits: its fast form where no
    ``exp`` overflows, else ``negated`` negated back (exactly) and ``sigmoid_into``."""
    bound = _EXP_OVERFLOW.get(negated.dtype)
    if bound is None:
        bound = _EXP_OVERFLOW[negated.dtype] = -float(np.log(np.finfo(negated.dtype).max))
    if negated.size and negated.max() <= -bound:  # False with a NaN
        np.exp(negated, out=negated)
        negated += negated.dtype.type(1)
        np.divide(negated.dtype.type(1), negated, out=negated)
        return
    np.negative(negated, out=negated)
    sigmoid_into(np, negated, negated)
