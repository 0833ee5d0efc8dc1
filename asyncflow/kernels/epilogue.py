"""The steps after a fused product or convolution, in place on its output's rows: the bias
added, then an activation (``fused_epilogue``: ``_FusedMatMul``, ``_FusedConv2D``), with the
bits of the separate BiasAdd and activation kernels; and the sigmoid's in-place forms
(``sigmoid_into``) that the Sigmoid kernel (``kernels/math.py``) and they share.

On CPU, for float32/float64, ``_FusedMatMul``'s bias and sigmoid take two compiled passes
(``kernels/jit.py``) around numpy's ``exp``, with the numpy form's bits (``_sigmoid_loops``),
and its bias and Relu one compiled pass (``_bias_relu``, the same bits but a NaN plus a NaN
bias's payload); its prepare hook's ``preload`` compiles them off the event loop. The numpy
form stays for every other case (a column block, other dtypes, a GPU, a convolution's
epilogue, numba missing or ``ASYNCFLOW_JIT=0``) and is the reference
(``tests/ops/test_epilogue_loops.py``)."""
from __future__ import annotations

import numpy as np

from asyncflow.kernels import jit
from asyncflow.kernels.registry import Preload

# Whether ``fused_epilogue`` given a ``ctx`` takes the compiled passes for a bias and a sigmoid
# or a Relu (read at each call: bench/bench_ab_setting.py switches it).
COMPILED = True

# Per float dtype: the least x of that dtype whose ``exp(-x)`` is finite (``_overflow_bound``).
_EXP_OVERFLOW = {}


def _overflow_bound(dtype):
    """The least ``x`` of ``dtype`` (a scalar of it) whose ``exp(-x)`` does not overflow: about
    ``-log(max)`` (-88.7 in float32), rounded to ``dtype`` towards 0 where the rounded value's
    ``exp(-x)`` overflows (float32's -88.72284, float16's -11.09: their sigmoid is not 0).
    Compared as a scalar of the array's dtype, so numpy 1 and 2 compare it alike."""
    bound = _EXP_OVERFLOW.get(dtype)
    if bound is None:
        dtype = np.dtype(dtype)
        bound = dtype.type(-np.log(np.finfo(dtype).max))
        with np.errstate(over="ignore"):
            while not np.isfinite(np.exp(-bound)):
                bound = np.nextafter(bound, dtype.type(0))
        _EXP_OVERFLOW[dtype] = bound
    return bound


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
        bound = _overflow_bound(x.dtype)
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


def fused_epilogue(xp, fused_ops, bias, ctx=None):
    """``apply(rows)``: the steps after a fused product (``fused_ops``: "BiasAdd" and maybe an
    activation), in place on a chunk of its output rows ``[r, C]``: the same operations, in
    the same order, as the separate BiasAdd/Add and activation kernels, so the same bits.
    Given the kernel's ``ctx`` (``_FusedMatMul``), a bias and a sigmoid on contiguous rows
    take two compiled passes around numpy's ``exp`` where ``jit.usable`` (``_sigmoid_loops``),
    a bias and a Relu one (``_bias_relu``)."""
    activation = fused_ops[1] if len(fused_ops) > 1 else None
    if activation == "Sigmoid" and type(bias) is np.ndarray and bias.dtype.kind == "f":
        negated = np.negative(bias)
        loops = ctx is not None and COMPILED and jit.usable(ctx, bias)

        def apply(rows, start=0, stop=None):
            if type(rows) is not np.ndarray or rows.dtype != bias.dtype:
                rows += bias if stop is None else bias[start:stop]
                sigmoid_into(xp, rows, rows)
                return
            if loops and stop is None and rows.flags.c_contiguous:
                _sigmoid_loops(negated, rows)
                return
            # ``-(rows + bias)`` in one pass, as ``(-bias) - rows``: the same bits (rounding
            # to nearest is symmetric) up to the sign of an exact zero, which ``exp`` does
            # not see: the sigmoid's negation pass saved (one of five).
            np.subtract(negated if stop is None else negated[start:stop], rows, out=rows)
            _sigmoid_of_negated_into(rows)
        return apply

    tiled = []  # the bias tiled (``_add_bias``), made at the first large block
    relu_loop = (activation == "Relu" and ctx is not None and COMPILED
                 and type(bias) is np.ndarray and bias.ndim == 1 and bias.flags.c_contiguous
                 and jit.usable(ctx, bias))  # (a strided bias: another signature, compiled here)
    if relu_loop:
        bias_in, zero = jit.readonly(bias), bias.dtype.type(0)

    def apply(rows, start=0, stop=None):  # (a block of columns: their share of the bias)
        if relu_loop and stop is None and type(rows) is np.ndarray and rows.ndim == 2 \
                and rows.dtype == bias.dtype and rows.shape[1] == bias.size \
                and rows.flags.c_contiguous:
            _bias_relu(bias_in, rows, zero)
            return
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
    bound = _overflow_bound(negated.dtype)
    if negated.size and negated.max() <= -bound:  # False with a NaN
        np.exp(negated, out=negated)
        negated += negated.dtype.type(1)
        np.divide(negated.dtype.type(1), negated, out=negated)
        return
    np.negative(negated, out=negated)
    sigmoid_into(np, negated, negated)


def _sigmoid_loops(negated, rows):
    """``sigmoid(rows - negated)`` in place on C-contiguous rows, with the numpy form's bits
    (``fused_epilogue``): its subtraction and overflow check in one compiled pass, numpy's
    ``exp`` (numba's differs in bits), then ``1 / (x + 1)`` in one pass. Measured alone
    (bench/RESULTS.md, c42ae): on ``[256, 784]`` float32 the two passes 40 and 61 us against
    numpy's 65 and 79."""
    dtype = rows.dtype
    if _subtract_from(negated, rows, -_overflow_bound(dtype)) and rows.size:
        np.exp(rows, out=rows)
        _reciprocal_of_one_plus(rows, dtype.type(1))
        return
    np.negative(rows, out=rows)  # (an exp overflows, or a NaN: numpy's masked form)
    sigmoid_into(np, rows, rows)


@jit.loop
def _subtract_from(negated, rows, limit):
    """``rows = negated - rows`` row by row; whether every result is at most ``limit`` (False
    with a NaN, as numpy's ``max`` then ``<=``)."""
    below = True
    for i in range(rows.shape[0]):
        row = rows[i]
        for j in range(row.shape[0]):
            value = negated[j] - row[j]
            row[j] = value
            below &= value <= limit
    return below


@jit.loop
def _reciprocal_of_one_plus(rows, one):
    for i in range(rows.shape[0]):
        row = rows[i]
        for j in range(row.shape[0]):
            row[j] = one / (row[j] + one)


@jit.loop
def _bias_relu(bias, rows, zero):
    """``rows = maximum(rows + bias, 0)`` row by row in one pass: numpy's add, then its
    ``maximum``'s choice (``a > b or a is NaN ? a : b``: a NaN kept with its payload, -0
    becomes +0), so the bits of the separate ``BiasAdd`` and ``Relu`` kernels, but for a NaN
    row value plus a NaN bias: a NaN either way, whose payload and sign numpy's add takes from
    the row in its vector loop's body and from the bias in some other columns (which varies
    with the shape, the dtype and the row: bench/RESULTS.md, r48mlp), so no one loop has its
    bits there. On ``[128, 256]`` float32 ~4 us against numpy's ~21 (the tiled add 5.5,
    ``maximum`` 13: c48mlp)."""
    for i in range(rows.shape[0]):
        row = rows[i]
        for j in range(row.shape[0]):
            value = row[j] + bias[j]
            row[j] = value if value > zero or value != value else zero


def _warm():
    for dtype in jit.SUPPORTED:
        rows, one = np.zeros((2, 2), dtype), dtype.type(1)
        _subtract_from(np.zeros(2, dtype), rows, one)
        _reciprocal_of_one_plus(rows, one)


def _warm_relu():
    for dtype in jit.SUPPORTED:
        _bias_relu(jit.readonly(np.zeros(2, dtype)), np.zeros((2, 2), dtype), dtype.type(0))


def preload(ctx, other=None):
    """``_FusedMatMul``'s prepare hook's part: for a bias and a sigmoid of a dtype the loops
    take, on numpy, ``jit.preload`` of their warm-up (numba compiled or loaded from its disk
    cache on a worker thread before the first step), with ``other`` (the node's other
    ``Preload``, or None) run first; ``other`` alone elsewhere, or where they are warm."""
    ops = ctx.attrs["fused_ops"]
    if (len(ops) < 2 or ops[1] not in ("Sigmoid", "Relu") or getattr(ctx, "xp", np) is not np
            or np.dtype(ctx.output_dtypes[0]) not in jit.SUPPORTED):
        return other
    return Preload.chained(other, jit.preload(_warm if ops[1] == "Sigmoid" else _warm_relu))
