"""Kernels of the dropout family (ops/dropout.py): ``_FusedDropout`` and its gradient, the
nodes ``compile/fuse_dropout.py`` makes of ``dropout``'s ops.

``_FusedDropout`` draws its uniforms from the op's seeded generator (``ctx.random_generator``,
numpy's ``PCG64``) as ``Generator.random`` does, then computes ``mask = floor(u + keep)`` and
``(x / keep) * mask``. numpy's draw costs ~4 ns a float32 on this project's machine (the
generator's 128-bit LCG step is one serial chain per draw, called through a function pointer
per value): 0.13 of the MLP's 0.16-0.20 ms a dropout, on the forward's one thread. On CPU,
for float32 and float64 (``jit.usable``), a compiled loop (``kernels/jit.py``) computes the
same draws itself, the generator's state read and written back under its lock, and applies
the mask in the same pass:

- PCG64 (numpy's ``pcg64.h``, the XSL-RR output): ``state = state * M + inc`` mod 2^128, each
  draw the 64-bit ``rotr(hi ^ lo, hi >> 58)`` of the new state. A float32 takes 32 bits
  (``next_uint32``: a draw's low half, its high half kept for the next value: the state's
  ``has_uint32``/``uinteger``), ``(bits >> 8) * 2^-24``; a float64 takes a whole draw,
  ``(bits >> 11) * 2^-53``, and leaves ``has_uint32`` as it is. The same integers, the same
  float operations in the same order: the same bits as ``rng.random`` then the numpy form,
  and the same state after (tests/ops/test_dropout_loops.py).
- The loop keeps ``LANE_COUNT`` (16) draws in flight: lane ``j`` holds the state of draw
  ``16k + j`` and steps by 16 draws at once (``state * M^16 + inc * (M^15 + ... + M + 1)``),
  the 128-bit products in 32-bit halves. The lanes are two uint64 arrays and the loop over
  them has no branch and no dependence between iterations, so LLVM vectorizes it (AVX-512's
  64-bit multiplies, its variable rotate, the float conversion, floor and division several
  lanes wide). [128, 256] float32, draws and mask in one pass: 24.7 us a call against 46.6
  for the four scalar chains in registers this loop replaced and 71 for ``rng.random`` then
  numpy's passes (bench/RESULTS.md, c43mlp).

numpy promises no stream compatibility for ``Generator`` across versions: before a dtype's
loop first runs (at preload, or at the kernel's first call), ``loop_matches_numpy`` runs it
against ``rng.random`` then the numpy form on a few small draws, with ``keep`` set at a drawn
value's threshold (so one bit of that ``u`` decides its mask) and the generator states
compared after each call; a difference, or a loop that fails to compile, leaves that dtype on
the numpy form for the process, with a warning.

Everything else (other dtypes, a GPU, other generators, a mask not of ``x``'s shape, numba
missing, ``ASYNCFLOW_JIT=0``) takes the numpy form, the reference the loop is tested against.
"""
from __future__ import annotations

import threading
import warnings

import numpy as np

from asyncflow import errors
from asyncflow.kernels import intra_op, jit
from asyncflow.kernels.math import _sum_to_shape
from asyncflow.kernels.registry import host_memory, register_kernel, register_prepare

_DRAWN = (np.dtype(np.float32), np.dtype(np.float64))  # what Generator.random draws directly

# numpy's PCG64: the 128-bit LCG multiplier (PCG_DEFAULT_MULTIPLIER_128); states are
# Python ints in the generator's state dict and (hi, lo) uint64 pairs in the loops.
PCG_MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645
_MOD = 1 << 128
_LOW = (1 << 64) - 1
LANE_COUNT = 16  # draws in flight in a loop (see the module docstring; 8 and 32: slower)
# Whether ``_FusedDropout`` may take its compiled loop (read at each call: bench/bench_dropout.py
# alternates the two forms in one process; ``jit.ENABLED`` turns off every loop).
COMPILED = True


# -- compiled loops (kernels/jit.py) ----------------------------------------------------------
# ``state``: uint64[2], (lo, hi) of the generator's state before the call's first draw;
# ``consts``: uint64[8], (lo, hi) of the multiplier, the increment, ``M^16`` and the
# increment's 16-step sum (``_pcg_consts``); ``last``: uint64[3], set to (lo, hi) of the state
# after the call's last draw and that draw's bits. Lane ``j`` of ``lane_lo``/``lane_hi`` holds
# the state of draw ``LANE_COUNT * block + j``. Each 128-bit product mod 2^128 is lo*lo's 128
# bits (its high half from 32-bit halves) plus the two cross products' low halves. The loop
# over the lanes has no branch and no dependence between iterations: LLVM vectorizes it
# (loop alone, [128, 256] float32: 16.8 us against 37.6 for four scalar chains in registers).
@jit.loop
def _dropout_f32_loop(state, consts, last, x, keep, out, mask):
    n = x.shape[0]
    draws = (n + 1) // 2
    low32, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    lane_lo = np.empty(LANE_COUNT, dtype=np.uint64)  # the states of draws 0..LANE_COUNT-1
    lane_hi = np.empty(LANE_COUNT, dtype=np.uint64)
    m_lo, m_hi, i_lo, i_hi = consts[0], consts[1], consts[2], consts[3]
    b0, b1 = m_lo & low32, m_lo >> s32
    lo, h = state[0], state[1]
    for j in range(LANE_COUNT):
        p0, p1 = lo & low32, lo >> s32
        q00, q01, q10 = p0 * b0, p0 * b1, p1 * b0
        mid = (q00 >> s32) + (q01 & low32) + (q10 & low32)
        hi = p1 * b1 + (q01 >> s32) + (q10 >> s32) + (mid >> s32) + lo * m_hi + h * m_lo
        prod = lo * m_lo
        lo = prod + i_lo
        h = hi + i_hi + np.uint64(lo < prod)
        lane_lo[j], lane_hi[j] = lo, h
    a_lo, a_hi, c_lo, c_hi = consts[4], consts[5], consts[6], consts[7]
    b0, b1 = a_lo & low32, a_lo >> s32
    scale = np.float32(1.0 / 16777216.0)
    blocks = (draws - 1) // LANE_COUNT  # whole blocks; the last 1..LANE_COUNT draws after
    for block in range(blocks):
        xs = x[2 * LANE_COUNT * block:2 * LANE_COUNT * (block + 1)]
        outs = out[2 * LANE_COUNT * block:2 * LANE_COUNT * (block + 1)]
        masks = mask[2 * LANE_COUNT * block:2 * LANE_COUNT * (block + 1)]
        for j in range(LANE_COUNT):
            lo, h = lane_lo[j], lane_hi[j]
            v = h ^ lo
            rot = h >> np.uint64(58)
            bits = (v >> rot) | (v << ((np.uint64(64) - rot) & np.uint64(63)))
            m = np.floor(np.float32((bits & low32) >> np.uint64(8)) * scale + keep)
            masks[2 * j] = m
            outs[2 * j] = (xs[2 * j] / keep) * m
            m = np.floor(np.float32(bits >> np.uint64(40)) * scale + keep)
            masks[2 * j + 1] = m
            outs[2 * j + 1] = (xs[2 * j + 1] / keep) * m
            p0, p1 = lo & low32, lo >> s32
            q00, q01, q10 = p0 * b0, p0 * b1, p1 * b0
            mid = (q00 >> s32) + (q01 & low32) + (q10 & low32)
            hi = p1 * b1 + (q01 >> s32) + (q10 >> s32) + (mid >> s32) + lo * a_hi + h * a_lo
            prod = lo * a_lo
            nlo = prod + c_lo
            nhi = hi + c_hi + np.uint64(nlo < prod)
            lane_lo[j], lane_hi[j] = nlo, nhi
    for j in range(draws - LANE_COUNT * blocks):  # the last draws: lanes 0.. as they stand
        lo, h = lane_lo[j], lane_hi[j]
        v = h ^ lo
        rot = h >> np.uint64(58)
        bits = (v >> rot) | (v << ((np.uint64(64) - rot) & np.uint64(63)))
        e = 2 * LANE_COUNT * blocks + 2 * j
        m = np.floor(np.float32((bits & low32) >> np.uint64(8)) * scale + keep)
        mask[e] = m
        out[e] = (x[e] / keep) * m
        if e + 1 < n:
            m = np.floor(np.float32(bits >> np.uint64(40)) * scale + keep)
            mask[e + 1] = m
            out[e + 1] = (x[e + 1] / keep) * m
        last[0], last[1], last[2] = lo, h, bits


@jit.loop
def _dropout_f64_loop(state, consts, last, x, keep, out, mask):
    n = x.shape[0]
    low32, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    lane_lo = np.empty(LANE_COUNT, dtype=np.uint64)  # the states of draws 0..LANE_COUNT-1
    lane_hi = np.empty(LANE_COUNT, dtype=np.uint64)
    m_lo, m_hi, i_lo, i_hi = consts[0], consts[1], consts[2], consts[3]
    b0, b1 = m_lo & low32, m_lo >> s32
    lo, h = state[0], state[1]
    for j in range(LANE_COUNT):
        p0, p1 = lo & low32, lo >> s32
        q00, q01, q10 = p0 * b0, p0 * b1, p1 * b0
        mid = (q00 >> s32) + (q01 & low32) + (q10 & low32)
        hi = p1 * b1 + (q01 >> s32) + (q10 >> s32) + (mid >> s32) + lo * m_hi + h * m_lo
        prod = lo * m_lo
        lo = prod + i_lo
        h = hi + i_hi + np.uint64(lo < prod)
        lane_lo[j], lane_hi[j] = lo, h
    a_lo, a_hi, c_lo, c_hi = consts[4], consts[5], consts[6], consts[7]
    b0, b1 = a_lo & low32, a_lo >> s32
    scale = 1.0 / 9007199254740992.0
    blocks = (n - 1) // LANE_COUNT  # whole blocks; the last 1..LANE_COUNT draws after
    for block in range(blocks):
        xs = x[LANE_COUNT * block:LANE_COUNT * (block + 1)]
        outs = out[LANE_COUNT * block:LANE_COUNT * (block + 1)]
        masks = mask[LANE_COUNT * block:LANE_COUNT * (block + 1)]
        for j in range(LANE_COUNT):
            lo, h = lane_lo[j], lane_hi[j]
            v = h ^ lo
            rot = h >> np.uint64(58)
            bits = (v >> rot) | (v << ((np.uint64(64) - rot) & np.uint64(63)))
            m = np.floor(np.float64(bits >> np.uint64(11)) * scale + keep)
            masks[j] = m
            outs[j] = (xs[j] / keep) * m
            p0, p1 = lo & low32, lo >> s32
            q00, q01, q10 = p0 * b0, p0 * b1, p1 * b0
            mid = (q00 >> s32) + (q01 & low32) + (q10 & low32)
            hi = p1 * b1 + (q01 >> s32) + (q10 >> s32) + (mid >> s32) + lo * a_hi + h * a_lo
            prod = lo * a_lo
            nlo = prod + c_lo
            nhi = hi + c_hi + np.uint64(nlo < prod)
            lane_lo[j], lane_hi[j] = nlo, nhi
    for j in range(n - LANE_COUNT * blocks):  # the last draws: lanes 0.. as they stand
        lo, h = lane_lo[j], lane_hi[j]
        v = h ^ lo
        rot = h >> np.uint64(58)
        bits = (v >> rot) | (v << ((np.uint64(64) - rot) & np.uint64(63)))
        e = LANE_COUNT * blocks + j
        m = np.floor(np.float64(bits >> np.uint64(11)) * scale + keep)
        mask[e] = m
        out[e] = (x[e] / keep) * m
        last[0], last[1], last[2] = lo, h, bits


_LOOPS = {np.dtype(np.float32): _dropout_f32_loop, np.dtype(np.float64): _dropout_f64_loop}


_W_POWER = pow(PCG_MULTIPLIER, LANE_COUNT, _MOD)
_W_SUM = sum(pow(PCG_MULTIPLIER, k, _MOD) for k in range(LANE_COUNT)) % _MOD
_consts = {}  # a generator's increment -> the lane-array loops' ``consts``


def _pcg_consts(inc):
    """The lane-array loops' ``consts`` for a generator's increment (which never changes)."""
    consts = _consts.get(inc)
    if consts is None:
        if len(_consts) >= 64:  # (sessions seeded from entropy: one increment each)
            _consts.clear()
        step = inc * _W_SUM % _MOD
        consts = _consts[inc] = np.array(
            [PCG_MULTIPLIER & _LOW, PCG_MULTIPLIER >> 64, inc & _LOW, inc >> 64,
             _W_POWER & _LOW, _W_POWER >> 64, step & _LOW, step >> 64], dtype=np.uint64)
    return consts


def compiled_dropout(rng, x, keep, dtype):
    """``(output, mask)`` as the numpy form computes them, by the dtype's compiled loop, the
    generator ``rng`` (a ``PCG64``) advanced as ``rng.random(x.shape, dtype)`` advances it.
    ``x`` C-contiguous of ``dtype``, ``keep`` a 0-d array of ``dtype``."""
    dtype = np.dtype(dtype)
    out = np.empty(x.shape, dtype=dtype)
    mask = np.empty(x.shape, dtype=dtype)
    flat_x, flat_out, flat_mask = x.reshape(-1), out.reshape(-1), mask.reshape(-1)
    keep = keep[()]
    generator = rng.bit_generator
    with generator.lock:
        state = generator.state
        pcg, has32, buffered = state["state"], state["has_uint32"], state["uinteger"]
        start = 0
        if dtype == np.float32 and has32 and flat_x.size:  # the kept high half first
            u = np.float32(buffered >> 8) * np.float32(1.0 / 16777216.0)
            flat_mask[0] = m = np.floor(u + keep)
            flat_out[0] = (flat_x[0] / keep) * m
            start, has32 = 1, 0
        count = flat_x.size - start
        if count:
            value = pcg["state"]
            last = np.empty(3, dtype=np.uint64)
            _LOOPS[dtype](np.array((value & _LOW, value >> 64), dtype=np.uint64),
                          _pcg_consts(pcg["inc"]), last, flat_x[start:], keep,
                          flat_out[start:], flat_mask[start:])
            pcg = {"state": int.from_bytes(last[:2].tobytes(), "little"), "inc": pcg["inc"]}
            if dtype == np.float32:
                has32, buffered = count % 2, int(last[2]) >> 32
        generator.state = {"bit_generator": state["bit_generator"], "state": pcg,
                           "has_uint32": has32, "uinteger": buffered}
    return out, mask


def _numpy_form(rng, x, keep, dtype):
    """The reference: ``rng.random`` then the fused kernel's numpy operations."""
    mask = rng.random(x.shape, dtype=dtype)
    np.add(mask, keep, out=mask)
    np.floor(mask, out=mask)
    out = np.true_divide(x, keep)
    np.multiply(out, mask, out=out)
    return out, mask


# Odd sizes leave a float32 half-draw kept; 67 (34 float32 draws) reaches the loops' whole
# blocks of LANE_COUNT draws, not only their last 1..LANE_COUNT draws, for both dtypes.
_CHECK_SIZES = (21, 1, 2, 9, 67, 3, 8, 5)
_verdicts = {}  # dtype -> whether its loop reproduced the running numpy (loop_matches_numpy)
_verdict_lock = threading.Lock()


def _first_mismatch(dtype, run=compiled_dropout, calls=16):
    """Where ``run`` (the compiled path) first differs from ``_numpy_form`` on a sequence of
    small draws from one seed, or None. Each call's ``keep`` is ``1 - u`` (or one ulp less)
    for a value ``u >= 0.5`` the reference is about to draw, so that ``u``'s last bit decides
    its mask: a conversion one bit off shows, as a stream off shows in the states."""
    dtype = np.dtype(dtype)
    want_rng, got_rng = np.random.default_rng([37, 1]), np.random.default_rng([37, 1])
    data = np.random.default_rng(7)
    for call in range(calls):
        size = _CHECK_SIZES[call % len(_CHECK_SIZES)]
        x = data.standard_normal(size).astype(dtype)
        peek = np.random.Generator(np.random.PCG64())
        peek.bit_generator.state = want_rng.bit_generator.state
        u = peek.random(size, dtype=dtype)
        high = np.flatnonzero(u >= 0.5)
        keep = dtype.type(0.5)
        if high.size:
            value = u[high[call % high.size]]
            keep = (1 - value) - (np.spacing(value) if call % 2 else dtype.type(0))
        keep = np.asarray(keep if keep > 0 else 0.5, dtype=dtype)
        want = _numpy_form(want_rng, x, keep, dtype)
        got = run(got_rng, x, keep, dtype)
        for name, a, b in zip(("output", "mask"), got, want):
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                return f"call {call} ({size} values, keep {keep}): the {name} differs"
        if got_rng.bit_generator.state != want_rng.bit_generator.state:
            return f"call {call} ({size} values): the generator's state after differs"
    return None


def loop_matches_numpy(dtype):
    """Whether ``dtype``'s compiled loop gives the running numpy's bits and generator state
    (``_first_mismatch``, run once a process and dtype, compiling the loop); where not, a
    warning, and ``_FusedDropout`` keeps that dtype on the numpy form."""
    dtype = np.dtype(dtype)
    verdict = _verdicts.get(dtype)
    if verdict is None:
        with _verdict_lock:
            verdict = _verdicts.get(dtype)
            if verdict is None:
                try:
                    mismatch = _first_mismatch(dtype)
                except Exception as exc:  # (a numba that cannot compile it: numpy's form)
                    mismatch = f"the loop failed: {type(exc).__name__}: {exc}"
                if mismatch is not None:
                    warnings.warn(
                        f"_FusedDropout: the compiled PCG64 loop does not reproduce numpy "
                        f"{np.__version__}'s Generator.random for {dtype} ({mismatch}); "
                        f"dropout takes the numpy form", RuntimeWarning, stacklevel=2)
                verdict = _verdicts[dtype] = mismatch is None
    return verdict


def _compiles(ctx, rng, x, keep, dtype, shape):
    """Whether ``_FusedDropout`` takes its compiled loop: the fused form's case (a scalar
    ``keep`` and ``x`` of the mask's shape, C-contiguous, all of ``dtype``), a PCG64
    generator, compiled loops usable for the arrays (``jit.usable``: CPU, float32/float64)
    and checked against this numpy (``loop_matches_numpy``)."""
    return (COMPILED and type(rng.bit_generator) is np.random.PCG64 and x.shape == shape and x.ndim
            and x.dtype == dtype and keep.dtype == dtype and keep.ndim == 0
            and x.flags.c_contiguous and jit.usable(ctx, x, keep) and loop_matches_numpy(dtype))


@register_kernel("_FusedDropout", offload=True)
def _fused_dropout(ctx, x, dims, keep):
    """``dropout``'s five ops in one (compile/fuse_dropout.py): the same draws as its
    RandomUniform (same seeds, same generator), then ``mask = floor(u + keep)`` in the draws'
    own array and ``(x / keep) * mask`` in one new one: the same operations in the same order
    as the unfused ops, so the same bits, with two arrays instead of five and one op instead
    of five (or one compiled pass, see the module docstring). Returns ``(output, mask)``: the
    gradient multiplies by the mask."""
    xp = ctx.xp
    dtype = ctx.output_dtypes[1]
    shape = tuple(int(d) for d in dims.reshape(-1).tolist())
    if any(d < 0 for d in shape):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"dropout: shape {list(shape)} has a negative dimension")
    rng = ctx.random_generator()
    if _compiles(ctx, rng, x, keep, dtype, shape):
        return compiled_dropout(rng, x, keep, dtype)
    mask = rng.random(shape, dtype=dtype) if dtype in _DRAWN else \
        rng.random(shape).astype(dtype)
    mask = ctx.to_device(mask)
    if mask.ndim == 0 or keep.ndim != 0 or mask.shape != x.shape:  # not the fused form's case
        mask = xp.asarray(xp.floor(mask + keep))
        return (xp.asarray(xp.true_divide(x, keep) * mask), mask)
    xp.add(mask, keep, out=mask)
    xp.floor(mask, out=mask)
    out = xp.true_divide(x, keep)
    xp.multiply(out, mask, out=out)
    return (out, mask)


def _warm_dropout(dtype):
    """Compile the loop (checking it against numpy) for ``x`` writable and read-only (a
    variable's or constant's value: numba compiles each its own signature)."""
    if loop_matches_numpy(dtype):
        x = np.ones(3, dtype)
        x.flags.writeable = False
        compiled_dropout(np.random.default_rng(0), x, np.asarray(0.5, dtype=dtype), dtype)


_warms = {}  # dtype -> the warm function jit.preload keeps track of


def _preload(ctx):
    """Prepare hook: compile (or load from numba's disk cache) the loop of this node's dtype
    on a worker thread before the first step (``jit.preload``); None for a dtype no loop
    takes and on a GPU."""
    dtype = np.dtype(ctx.output_dtypes[1])
    if getattr(ctx, "xp", np) is not np or dtype not in _LOOPS:
        return None
    warm = _warms.get(dtype)
    if warm is None:
        warm = _warms.setdefault(dtype, lambda: _warm_dropout(dtype))
    return jit.preload(warm)


@register_kernel("_FusedDropoutGrad")
def _fused_dropout_grad(ctx, grad, mask, keep):
    """The dropout's gradient (compile/fuse_dropout.py): what its ``Mul`` (``grad * mask``),
    ``SumToShape`` (to the output's shape, the mask's) and ``RealDiv`` (``/ keep``) compute,
    in that order, the division in the product's own new array: the same bits. Large, it
    splits over the intra-op threads as the unfused ``Mul`` and ``RealDiv`` did (each value's
    two operations in one chunk: the same bits)."""
    xp = ctx.xp
    if ctx.prepared and grad.shape == mask.shape:  # the node may be large (may_be_large)
        def product_over_keep(g, m, k, out):
            xp.multiply(g, m, out=out)
            xp.true_divide(out, k, out=out)
        split = intra_op.elementwise(ctx, product_over_keep, grad, mask, keep, dtype=mask.dtype)
        if split is not None:
            return (split,)
    out = xp.multiply(grad, mask)
    if out.shape != mask.shape:
        out = _sum_to_shape(ctx, out, np.asarray(mask.shape))[0]  # (a new array)
    return (xp.true_divide(out, keep, out=out),)


# Whether ``_FusedDropoutReluGrad`` may take its compiled loop (read at each call, as COMPILED).
RELU_GRAD_COMPILED = True


@jit.loop
def _dropout_relu_grad_loop(grad, mask, keep, features, zero, one, out):
    """``out = ((grad * mask) / keep) * (features > 0)`` by element, the bool as ``one`` or
    ``zero`` of the dtype, as numpy's multiply by a bool array casts it: the same bits."""
    for i in range(out.shape[0]):
        value = (grad[i] * mask[i]) / keep
        out[i] = value * (one if features[i] > zero else zero)


def _relu_grad_loop_on(g, m, k, f, out):
    """The loop on flat chunks (``intra_op.elementwise``'s ``fn(*chunks, out=)``)."""
    dtype = out.dtype.type
    _dropout_relu_grad_loop(jit.readonly(g), jit.readonly(m), dtype(k), jit.readonly(f),
                            dtype(0), dtype(1), out)


def _relu_grad_numpy_on(g, m, k, f, out):
    """The reference: ``_FusedDropoutGrad``'s then ``ReluGrad``'s numpy operations."""
    np.multiply(g, m, out=out)
    np.true_divide(out, k, out=out)
    np.multiply(out, f > 0, out=out)


def _warm_relu_grad():
    for dtype in _DRAWN:
        one = np.ones(3, dtype)
        _relu_grad_loop_on(one, one, np.asarray(0.5, dtype), one, np.empty(3, dtype))


@register_kernel("_FusedDropoutReluGrad")
def _fused_dropout_relu_grad(ctx, grad, mask, keep, features):
    """A Relu's gradient through the dropout that follows it (compile/fuse_dropout.py):
    ``ReluGrad(_FusedDropoutGrad(grad, mask, keep), features)``, i.e. ``((grad * mask) /
    keep) * (features > 0)`` in that order in one new array: the same bits as the two
    kernels. On CPU for float32/float64 one compiled pass (the numpy form's three passes
    and a bool array: [128, 256] float32 9 us against 38); large, split over the intra-op
    threads by flat ranges as the two kernels were (exact: the same bits)."""
    same = (grad.shape == mask.shape == features.shape and keep.ndim == 0
            and grad.dtype == mask.dtype == features.dtype == keep.dtype)
    if not same:  # not the fused case: the two kernels' forms, as they broadcast
        (product,) = _fused_dropout_grad(ctx, grad, mask, keep)
        return (product * (features > 0),)
    compiled = (RELU_GRAD_COMPILED and jit.usable(ctx, grad, mask, features, keep)
                and grad.flags.c_contiguous and mask.flags.c_contiguous
                and features.flags.c_contiguous)
    form = _relu_grad_loop_on if compiled else _relu_grad_numpy_on
    if ctx.prepared:
        split = intra_op.elementwise(ctx, form, grad, mask, keep, features, dtype=mask.dtype)
        if split is not None:
            return (split,)
    xp = ctx.xp
    if not compiled:
        out = xp.multiply(grad, mask)
        xp.true_divide(out, keep, out=out)
        return (xp.multiply(out, features > 0, out=out),)
    out = np.empty(grad.shape, dtype=grad.dtype)
    form(grad.reshape(-1), mask.reshape(-1), keep, features.reshape(-1), out.reshape(-1))
    return (out,)


def _preload_relu_grad(ctx):
    """Prepare hook: the loop compiled (or loaded from numba's cache) on a worker thread
    before the first step where one may run (a ``Preload``: true, so the kernel tries a split,
    which checks the size itself); else ``may_be_large``'s answer."""
    if getattr(ctx, "xp", np) is np and np.dtype(ctx.output_dtypes[0]) in _LOOPS:
        loading = jit.preload(_warm_relu_grad)
        if loading is not None:
            return loading
    return intra_op.may_be_large(ctx)


host_memory("_FusedDropout", inputs=(1,))
register_prepare("_FusedDropout")(_preload)
register_prepare("_FusedDropoutGrad")(intra_op.may_be_large)
register_prepare("_FusedDropoutReluGrad")(_preload_relu_grad)
