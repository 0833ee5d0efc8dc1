"""The compiled halves of ``exec/join_spin.py``: a split worker's idle spin on its pool's bell
(storing a split's done word first), a caller's bounded spin on that word, numba ``nogil``
functions (the GIL released for the call), x86-64 only (the CPU's ``pause``). Imported only by ``join_spin``'s loading thread: importing this
module imports numba and compiles (or loads from numba's disk cache) the functions."""
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
def spin(flag, ticks):
    """Wait until ``flag[0]`` is not 0 (True) or ``ticks`` of the cycle counter passed (False
    where it is still 0 then)."""
    deadline = _cycles() + ticks
    while _load(flag) == 0:
        _pause()
        if _cycles() > deadline:
            return _load(flag) != 0
    return True


@numba.njit(nogil=True, cache=True)
def clock():
    """The cycle counter (the TSC on x86-64)."""
    return _cycles()


@numba.njit(nogil=True, cache=True)
def idle(word, bell, seen, lanes, ticks, grace):
    """A split worker between hand-offs: store 1 into ``word`` (a split's done word, or a
    scratch one), then wait until ``bell[0]`` differs from ``seen`` (a hand-off was posted),
    ``ticks`` passed or ``lanes[0]`` is not 0 (the lane thread runs: the core is its); once
    the bell rang, wait ``grace`` ticks more (the poster's Python up to its own chunk's BLAS
    call, which frees the GIL). True where the bell rang."""
    _store_one(word)
    deadline = _cycles() + ticks
    while _load(bell) == seen:
        _pause()
        if _cycles() > deadline or _load(lanes) != 0:
            return False
    deadline = _cycles() + grace
    while _cycles() < deadline:
        _pause()
    return True
