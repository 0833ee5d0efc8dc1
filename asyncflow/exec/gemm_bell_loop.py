"""The compiled side of ``exec/gemm_bell.py`` (imported only where numba is already imported):
a split worker that waits for, and computes, a GEMM chunk without the GIL.

Every function here is numba ``nogil`` and works on one int64 control array (``ctl``, laid
out by the offsets below, each word on its own cache line). The words are read and written
atomically (``_load``/``_store``/``_cas``: acquire loads, release stores), so the threads
need no lock: the GIL is released for the whole wait and the whole chunk.

A job is 14 words from ``JOB``: ``kind`` (0: float32 BLAS with 64-bit ints, 1: float64 with
64-bit ints, 2 and 3 the same with 32-bit ints; -1: no work), the ``cblas_?gemm`` function's
address, then its arguments as the C call takes them (order, transa, transb, M, N, K, A,
lda, B, ldb, C, ldc; alpha 1 and beta 0). ``EPILOGUE``: nonzero where the worker, after the
GEMM, returns to Python to run the chunk's epilogue before it reports the chunk done.
"""
from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

STATE, BELL, DONE, NUDGE, EPILOGUE, WAITING, SYSCALL, JOB = 0, 8, 16, 24, 32, 40, 48, 56
WORDS = JOB + 16
# STATE's values: the worker is not in ``serve`` / serves, spinning / a caller claimed it /
# serves, asleep on STATE's futex.
OUT, IDLE, CLAIMED, ASLEEP = 0, 1, 2, 3
_FUTEX, _WAIT, _WAKE = 202, 128, 129  # Linux x86-64: SYS_futex, FUTEX_{WAIT,WAKE}_PRIVATE


def _word(context, builder, array_type, array, index):
    data = context.make_array(array_type)(context, builder, array).data
    return builder.gep(data, [index])


@intrinsic
def _load(typingctx, ctl, index):
    """``ctl[index]``, read atomically (acquire) after the CPU's ``pause``: made again at every
    call (a spin loop's load is never hoisted out of it)."""
    def codegen(context, builder, signature, args):
        pause = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        builder.call(pause, [])
        pointer = _word(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(pointer, "acquire", 8)
    return types.int64(ctl, index), codegen


@intrinsic
def _store(typingctx, ctl, index, value):
    """``ctl[index] = value``, atomically (release: the stores before it are seen first)."""
    def codegen(context, builder, signature, args):
        pointer = _word(context, builder, signature.args[0], args[0], args[1])
        builder.store_atomic(args[2], pointer, "release", 8)
        return context.get_dummy_value()
    return types.void(ctl, index, value), codegen


@intrinsic
def _cas(typingctx, ctl, index, expected, value):
    """Set ``ctl[index]`` to ``value`` where it is ``expected`` (one atomic step): whether it
    did."""
    def codegen(context, builder, signature, args):
        pointer = _word(context, builder, signature.args[0], args[0], args[1])
        pair = builder.cmpxchg(pointer, args[2], args[3], "acq_rel", "acquire")
        return builder.zext(builder.extract_value(pair, 1), ir.IntType(64))
    return types.int64(ctl, index, expected, value), codegen


@intrinsic
def _swap(typingctx, ctl, index, value):
    """``ctl[index] = value``, then a read (``_seq_load``) ordered after it (seq_cst)."""
    def codegen(context, builder, signature, args):
        pointer = _word(context, builder, signature.args[0], args[0], args[1])
        return builder.atomic_rmw("xchg", pointer, args[2], "seq_cst")
    return types.int64(ctl, index, value), codegen


@intrinsic
def _seq_load(typingctx, ctl, index):
    """``ctl[index]``, read atomically (seq_cst)."""
    def codegen(context, builder, signature, args):
        pointer = _word(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(pointer, "seq_cst", 8)
    return types.int64(ctl, index), codegen


@intrinsic
def _futex(typingctx, ctl, index, op, value):
    """``syscall(SYS_futex, &ctl[index] (its low 32 bits), op, value, NULL)`` through libc's
    ``syscall`` (its address in ``ctl[SYSCALL]``): a wait while the word is ``value``, or a
    wake of ``value`` waiters."""
    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        pointer = _word(context, builder, signature.args[0], args[0], args[1])
        address = builder.ptrtoint(pointer, i64)
        entry = builder.load(_word(context, builder, signature.args[0], args[0],
                                   ir.Constant(i64, SYSCALL)))
        fnty = ir.FunctionType(i64, [i64], var_arg=True)
        fn = builder.inttoptr(entry, fnty.as_pointer())
        return builder.call(fn, [ir.Constant(i64, _FUTEX), address, builder.trunc(args[2], i32),
                                 builder.trunc(args[3], i32), ir.Constant(i64, 0)])
    return types.int64(ctl, index, op, value), codegen


def _gemm_call(int_bits, double):
    """An intrinsic calling the ``cblas_?gemm`` whose address is the job's word 1."""
    @intrinsic
    def call(typingctx, ctl, base):
        def codegen(context, builder, signature, args):
            def word(offset):
                index = builder.add(args[1], ir.Constant(ir.IntType(64), offset))
                return builder.load(_word(context, builder, signature.args[0], args[0], index))
            i32, integer = ir.IntType(32), ir.IntType(int_bits)
            real = ir.DoubleType() if double else ir.FloatType()
            pointer = ir.IntType(8).as_pointer()
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, integer, integer, integer,
                                                   real, pointer, integer, pointer, integer,
                                                   real, pointer, integer])

            def number(offset):
                value = word(offset)
                return builder.trunc(value, integer) if int_bits < 64 else value
            fn = builder.inttoptr(word(1), fnty.as_pointer())
            builder.call(fn, [
                builder.trunc(word(2), i32), builder.trunc(word(3), i32),
                builder.trunc(word(4), i32), number(5), number(6), number(7),
                ir.Constant(real, 1.0), builder.inttoptr(word(8), pointer), number(9),
                builder.inttoptr(word(10), pointer), number(11), ir.Constant(real, 0.0),
                builder.inttoptr(word(12), pointer), number(13)])
            return context.get_dummy_value()
        return types.void(ctl, base), codegen
    return call


_sgemm64, _dgemm64 = _gemm_call(64, False), _gemm_call(64, True)
_sgemm32, _dgemm32 = _gemm_call(32, False), _gemm_call(32, True)


@numba.njit(nogil=True, cache=True)
def gemm(ctl, base):
    """The job at ``ctl[base:]``, computed here (the GIL released)."""
    kind = ctl[base]
    if kind == 0:
        _sgemm64(ctl, base)
    elif kind == 1:
        _dgemm64(ctl, base)
    elif kind == 2:
        _sgemm32(ctl, base)
    elif kind == 3:
        _dgemm32(ctl, base)


@numba.njit(nogil=True, cache=True)
def serve(ctl, seen, iterations):
    """The worker's wait: IDLE, spinning on ``BELL`` (``pause`` between reads) for up to
    ``iterations`` reads, then ASLEEP on STATE's futex until a caller claims it or a nudge;
    each job rung is computed at once, then reported (``DONE``) or, with ``EPILOGUE``, handed
    back to Python (returns 2, STATE left CLAIMED until ``finish``). Returns 1 when ``NUDGE``
    asks for the Python queue (STATE then OUT)."""
    _cas(ctl, STATE, OUT, IDLE)  # (a caller may have claimed it since ``finish``)
    count = 0
    while True:
        bell = _load(ctl, BELL)
        if bell != seen:
            seen = bell
            gemm(ctl, JOB)
            if ctl[EPILOGUE] != 0:
                return 2
            _store(ctl, STATE, IDLE)  # (first: the caller may claim it again at once)
            report(ctl, seen)
            count = 0
        elif _load(ctl, NUDGE) != 0:
            if _cas(ctl, STATE, IDLE, OUT):
                return 1
        elif count < iterations:
            count += 1
        elif _cas(ctl, STATE, IDLE, ASLEEP):
            while _load(ctl, STATE) == ASLEEP:
                _futex(ctl, STATE, _WAIT, ASLEEP)
            count = 0


@numba.njit(nogil=True, cache=True)
def report(ctl, seq):
    """Job ``seq`` done: ``DONE``, and the caller woken where it sleeps (``wait_done``)."""
    _swap(ctl, DONE, seq)
    if _seq_load(ctl, WAITING) != 0:
        _store(ctl, WAITING, 0)
        _futex(ctl, DONE, _WAKE, 1)


@numba.njit(nogil=True, cache=True)
def claim(ctl):
    """Take the worker for one job where it waits in ``serve``: 1 (spinning), 2 (asleep: the
    ``ring`` wakes it), 0 where it is elsewhere."""
    if _cas(ctl, STATE, IDLE, CLAIMED):
        return 1
    if _cas(ctl, STATE, ASLEEP, CLAIMED):
        return 2
    return 0


@numba.njit(nogil=True, cache=True)
def ring(ctl, wake):
    """Post the job written at ``JOB`` to the claimed worker (woken with ``wake``); returns
    the job's number."""
    seq = ctl[BELL] + 1
    _store(ctl, BELL, seq)
    if wake:
        _futex(ctl, STATE, _WAKE, 1)
    return seq


@numba.njit(nogil=True, cache=True)
def nudge(ctl):
    """Ask the worker back to the Python queue (woken where it sleeps)."""
    _store(ctl, NUDGE, 1)
    if _cas(ctl, STATE, ASLEEP, IDLE):
        _futex(ctl, STATE, _WAKE, 1)


@numba.njit(nogil=True, cache=True)
def wait_done(ctl, seq, iterations):
    """Wait until job ``seq`` is reported done: spinning for up to ``iterations`` reads, then
    asleep on DONE's futex (``report`` wakes it)."""
    count = 0
    while _load(ctl, DONE) < seq:
        count += 1
        if count > iterations:
            _swap(ctl, WAITING, 1)
            done = _seq_load(ctl, DONE)
            if done >= seq:
                break
            _futex(ctl, DONE, _WAIT, done & 0xFFFFFFFF)
    return count


@numba.njit(nogil=True, cache=True)
def leave(ctl):
    """Whether the worker may go to the Python queue now (OUT, or IDLE made OUT); 0 where a
    caller claimed it (its job comes first)."""
    return 1 if ctl[STATE] == OUT else _cas(ctl, STATE, IDLE, OUT)


@numba.njit(nogil=True, cache=True)
def finish(ctl, seq):
    """Report job ``seq`` done (after its epilogue): IDLE again, so that the next split can
    claim it while it returns to ``serve``."""
    _store(ctl, STATE, IDLE)
    report(ctl, seq)


@numba.njit(nogil=True, cache=True)
def spin(ctl, iterations):
    """``iterations`` reads of ``BELL`` (the calibration of ``serve``'s reads a second)."""
    total = 0
    for _ in range(iterations):
        total += _load(ctl, BELL)
    return total


@numba.njit(nogil=True, cache=True)
def _blasable(across, down, cols, itemsize):
    return down == itemsize and across % itemsize == 0 and across // itemsize >= cols


@numba.njit(nogil=True, cache=True)
def post_job(ctl, a, b, out, sgemm, dgemm, bits, epilogue):
    """``out = a @ b`` handed to the worker as numpy's matmul would call its library (``sgemm``
    and ``dgemm``: the addresses, ``bits``: its ints): ``kernels/blas.py``'s ``cblas_job``,
    compiled, then ``claim`` and ``ring`` (``epilogue``: the EPILOGUE word). Returns the job's
    number; 0 where the worker is not waiting, -1 where the product is not one plain call.
    Without ``cblas_job``'s aliasing checks: for a split's fresh output only."""
    m, k = a.shape
    n = b.shape[1]
    size = a.itemsize
    if (b.shape[0] != k or out.shape[0] != m or out.shape[1] != n or m < 2 or n < 2 or k < 2
            or max(m, max(n, k)) > (2147483647 if bits == 32 else 4611686018427387904)):
        return -1
    if _blasable(a.strides[0], a.strides[1], k, size):
        ta, lda = 111, a.strides[0] // size
    elif _blasable(a.strides[1], a.strides[0], m, size):
        ta, lda = 112, a.strides[1] // size
    else:
        return -1
    if _blasable(b.strides[0], b.strides[1], n, size):
        tb, ldb = 111, b.strides[0] // size
    elif _blasable(b.strides[1], b.strides[0], k, size):
        tb, ldb = 112, b.strides[1] // size
    else:
        return -1
    if not _blasable(out.strides[0], out.strides[1], n, size):
        return -1
    pa, pb = a.ctypes.data, b.ctypes.data
    if pa == pb or pa % size or pb % size:
        return -1
    claimed = claim(ctl)
    if claimed == 0:
        return 0
    ctl[EPILOGUE] = epilogue
    wide = 0 if bits == 64 else 2
    ctl[JOB] = wide + (1 if size == 8 else 0)
    ctl[JOB + 1] = dgemm if size == 8 else sgemm
    ctl[JOB + 2] = 101
    ctl[JOB + 3] = ta
    ctl[JOB + 4] = tb
    ctl[JOB + 5] = m
    ctl[JOB + 6] = n
    ctl[JOB + 7] = k
    ctl[JOB + 8] = pa
    ctl[JOB + 9] = lda
    ctl[JOB + 10] = pb
    ctl[JOB + 11] = ldb
    ctl[JOB + 12] = out.ctypes.data
    ctl[JOB + 13] = out.strides[0] // size
    return ring(ctl, claimed == 2)
