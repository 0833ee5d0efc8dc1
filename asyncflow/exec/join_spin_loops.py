"""The compiled halves of ``exec/join_spin.py``: a split worker's idle spin on its pool's bell
(storing a split's done word first), a caller's bounded spin on that word, numba ``nogil``
functions (the GIL released for the call), x86-64 only (the CPU's ``pause``). In the package
imported only by ``join_spin``'s loading thread (bench/nogil_gemm_scratch.py takes its
``_pause``): importing this module imports numba and compiles (or loads from numba's disk
cache) the functions."""
from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def _pause(typingctx):
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.none(), codegen


@intrinsic
def _load(typingctx, array):
    """``array[0]`` (int64), read afresh on each call (an acquire load)."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.load_atomic(data, "acquire", 8)
    return types.int64(array), codegen


@intrinsic
def _store_one(typingctx, array):
    """``array[0] = 1`` (int64) as a release store."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        builder.store_atomic(ir.Constant(ir.IntType(64), 1), data, "release", 8)
        return context.get_dummy_value()
    return types.none(array), codegen


@intrinsic
def _cycles(typingctx):
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.IntType(64), []), "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.int64(), codegen


@numba.njit(nogil=True, cache=True)
def store(flag):
    """``flag[0] = 1``."""
    _store_one(flag)


@numba.njit(nogil=True, cache=True)
def spin(flag, ticks, gap):
    """Wait until ``flag[0]`` is not 0 (1), ``ticks`` of the cycle counter passed (0 where it
    is still 0 then) or two reads of the counter lie more than ``gap`` apart (2: the thread
    lost its CPU while it spun, the machine has more running threads than cores)."""
    last = _cycles()
    deadline = last + ticks
    while _load(flag) == 0:
        _pause()
        now = _cycles()
        if now - last > gap:
            return 1 if _load(flag) != 0 else 2
        if now > deadline:
            return 1 if _load(flag) != 0 else 0
        last = now
    return 1


@numba.njit(nogil=True, cache=True)
def clock():
    """The cycle counter (the TSC on x86-64)."""
    return _cycles()


@numba.njit(nogil=True, cache=True)
def idle(word, bell, seen, lanes, ticks, grace, gap):
    """A split worker between hand-offs: store 1 into ``word`` (a split's done word, or a
    scratch one), then wait until ``bell[0]`` differs from ``seen`` (a hand-off was posted:
    1), ``ticks`` passed or ``lanes[0]`` is not 0 (the lane thread runs: the core is its; 0),
    or two reads of the cycle counter lie more than ``gap`` apart (2: the thread lost its CPU
    while it spun); once the bell rang, wait ``grace`` ticks more (the poster's Python up to
    its own chunk's BLAS call, which frees the GIL)."""
    _store_one(word)
    last = _cycles()
    deadline = last + ticks
    while _load(bell) == seen:
        _pause()
        now = _cycles()
        if now - last > gap:
            return 2
        if now > deadline or _load(lanes) != 0:
            return 0
        last = now
    deadline = _cycles() + grace
    while _cycles() < deadline:
        _pause()
    return 1
