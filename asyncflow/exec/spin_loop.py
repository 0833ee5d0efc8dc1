"""The compiled spin of ``exec/spin.py`` (imported only where numba is already imported)."""
from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def _pause_load(typingctx, bell):
    """The CPU's ``pause`` (a spin-wait hint), then ``bell[0]`` read atomically (int64): the
    load is made again on every iteration (LLVM may not hoist it out of the loop) and sees
    another thread's store."""
    def codegen(context, builder, signature, args):
        pause = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        builder.call(pause, [])
        array = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.load_atomic(array.data, "monotonic", 8)
    return types.int64(bell), codegen


@numba.njit(nogil=True, cache=True)
def spin(bell, seen, iterations):
    """Spin (the GIL released) until ``bell[0] != seen`` or ``iterations`` passed: the
    iterations it took, or -1."""
    count = 0
    while count < iterations:
        if _pause_load(bell) != seen:
            return count
        count += 1
    return -1
