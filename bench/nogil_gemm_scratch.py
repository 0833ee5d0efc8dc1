"""A GEMM worker that needs no GIL to start (issue 37, step 1's prototype; bench only).

A thread sits in a numba ``nogil`` loop (``serve``): the CPU's ``pause`` and an acquire load
of a bell word in an int64 job array. The caller writes a job (pointers from ``.ctypes.data``,
M/N/K, leading dimensions, transposes, the dtype) and stores the bell (``split``: compiled,
no syscall, no GIL hand-over); the worker reads the job, calls numpy's bundled OpenBLAS
``scipy_cblas_sgemm64_`` / ``scipy_cblas_dgemm64_`` (ILP64) itself, from compiled code, with
the arguments numpy's ``matmul`` passes for the same 2-D views (alpha 1, beta 0, row-major:
``_gemm``, the caller's chunk too), stores a done word and spins for the next job up to a
budget of iterations. The caller waits for the done word in a short ``nogil`` spin (``wait``).
Timestamps are the TSC (``llvm.readcyclecounter``), read on both sides (``tsc``).

Used by ``bench/bench_nogil_split.py`` and ``bench/nogil_split_scratch.py`` only; nothing in
``asyncflow/`` imports it.
"""
from __future__ import annotations

import ctypes

import numba
import numpy as np
import threadpoolctl
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from asyncflow.exec.join_spin_loops import _pause  # (the CPU's pause between reads)

# The job array's words (int64). The bell and the fields share the first cache line; the
# worker's done word and timestamps the second; the caller's spin reads only those.
BELL, TRANS_A, TRANS_B, M, N, K, A, LDA, B, LDB, C, LDC, DTYPE, STOP, EPI = range(15)
DONE, T_START, T_END, T_SEEN, STATE = 16, 17, 18, 19, 20
WORDS = 32
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _cblas():
    for lib in threadpoolctl.ThreadpoolController().lib_controllers:
        if lib.internal_api == "openblas" and "numpy" in lib.filepath:
            dll = ctypes.CDLL(lib.filepath)
            fns = []
            for name, scalar in (("scipy_cblas_sgemm64_", ctypes.c_float),
                                 ("scipy_cblas_dgemm64_", ctypes.c_double)):
                fn = getattr(dll, name)
                i64 = ctypes.c_int64
                # enums are C ints; pointers passed as int64 (the same register, SysV x86-64)
                fn.argtypes = [ctypes.c_int] * 3 + [i64] * 3 + [scalar, i64, i64, i64, i64,
                                                                scalar, i64, i64]
                fn.restype = None
                fns.append(fn)
            return tuple(fns)
    raise SystemExit("numpy's BLAS is not OpenBLAS with scipy_cblas_*gemm64_")


_sgemm, _dgemm = _cblas()


@intrinsic
def _load(typingctx, array, index):
    """``array[index]`` (int64) as an acquire load: made on each call, and no later load is
    moved before it."""
    def codegen(context, builder, signature, args):
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(arr.data, [args[1]])
        return builder.load_atomic(ptr, "acquire", 8)
    return types.int64(array, index), codegen


@intrinsic
def _store(typingctx, array, index, value):
    """``array[index] = value`` (int64) as a seq_cst store (``xchg`` on x86: a full fence, so
    a later load is not made before it)."""
    def codegen(context, builder, signature, args):
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(arr.data, [args[1]])
        builder.store_atomic(args[2], ptr, "seq_cst", 8)
        return context.get_dummy_value()
    return types.none(array, index, value), codegen


@intrinsic
def _rdtsc(typingctx):
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.IntType(64), []), "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.int64(), codegen


@numba.njit(nogil=True)
def tsc():
    return _rdtsc()


@numba.njit(nogil=True, inline="always")
def _gemm(double, ta, tb, m, n, k, a, lda, b, ldb, c, ldc):
    """``C = A @ B`` (row-major, alpha 1, beta 0) by numpy's OpenBLAS: sgemm for float32
    (``double`` 0, the job's ``DTYPE``), dgemm for float64."""
    if double == 0:
        _sgemm(_ROW_MAJOR, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc)
    else:
        _dgemm(_ROW_MAJOR, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc)


@numba.njit(nogil=True)
def serve(job, budget):
    """Run posted jobs until ``STOP`` is posted (returns 1), ``budget`` TSC cycles passed
    without a job (returns 0) or a job with an epilogue (``EPI``) computed its rows (returns 2:
    the thread runs the epilogue in Python, then ``done``). ``STATE`` is 1 while it spins."""
    seen = job[DONE]
    _store(job, STATE, 1)
    deadline = _rdtsc() + budget
    while True:
        seq = _load(job, BELL)
        if seq == seen:
            _pause()
            if _rdtsc() > deadline:
                break
            continue
        job[T_SEEN] = _rdtsc()
        if job[STOP] != 0:
            _store(job, DONE, seq)
            _store(job, STATE, 0)
            return 1
        job[T_START] = _rdtsc()
        _gemm(job[DTYPE], job[TRANS_A], job[TRANS_B], job[M], job[N], job[K], job[A],
              job[LDA], job[B], job[LDB], job[C], job[LDC])
        job[T_END] = _rdtsc()
        if job[EPI] != 0:  # (the caller's Python epilogue of these rows: ``done`` after it)
            return 2
        _store(job, DONE, seq)
        seen = seq
        deadline = _rdtsc() + budget
    _store(job, STATE, 0)
    return 0


@numba.njit(nogil=True)
def done(job, seq):
    _store(job, DONE, seq)


@numba.njit(nogil=True)
def stop(job, seq):
    job[STOP] = 1
    _store(job, BELL, seq)


@numba.njit(nogil=True)
def wait(job, seq, budget):
    """Spin until the done word reaches ``seq`` (True) or ``budget`` iterations (False)."""
    for _ in range(budget):
        if _load(job, DONE) == seq:
            return True
        _pause()
    return _load(job, DONE) == seq


def new_job():
    # 64-byte aligned: the bell line and the done line apart
    raw = np.zeros(WORDS + 8, np.int64)
    offset = (-raw.ctypes.data % 64) // 8
    return raw[offset:offset + WORDS]


T_POSTED, T_OWN = 21, 22


@numba.njit(nogil=True, inline="always")
def _operand(rows, cols, across, down, step):
    """(trans, ld) as numpy's matmul chooses them for a 2-D view; trans 0 where not a BLAS
    operand."""
    if down == step and across % step == 0 and across // step >= cols:
        return _NO_TRANS, max(1, across // step)
    if across == step and down % step == 0 and down // step >= rows:
        return _TRANS, max(1, down // step)
    return 0, 0


@numba.njit(nogil=True)
def split(job, seq, a, b, out, cut, budget, epi=0):
    """``out = a @ b``: rows ``cut:`` posted to the spinning worker, rows ``:cut`` computed
    here by the same cblas call, then a spin (``budget`` iterations) for the worker's done
    word. Returns 1; 0 where the worker was not done within the budget (the caller must then
    wait otherwise); 2 where the worker does not spin (posted, nothing computed here: the
    caller wakes it and computes rows ``:cut`` itself); 3 with ``epi`` (rows ``:cut`` computed,
    no wait: the caller runs its epilogue, then waits); -1 where a view is not a BLAS operand
    (nothing posted)."""
    m, k = a.shape
    n = b.shape[1]
    step = a.itemsize
    ta, lda = _operand(m, k, a.strides[0], a.strides[1], step)
    tb, ldb = _operand(k, n, b.strides[0], b.strides[1], step)
    tc, ldc = _operand(m, n, out.strides[0], out.strides[1], step)
    if ta == 0 or tb == 0 or tc != _NO_TRANS:
        return -1
    pa, pb, pc = a.ctypes.data, b.ctypes.data, out.ctypes.data
    job[TRANS_A] = ta
    job[TRANS_B] = tb
    job[M] = m - cut
    job[N] = n
    job[K] = k
    job[A] = pa + cut * a.strides[0]
    job[LDA] = lda
    job[B] = pb
    job[LDB] = ldb
    job[C] = pc + cut * out.strides[0]
    job[LDC] = ldc
    double = 0 if step == 4 else 1
    job[DTYPE] = double
    job[STOP] = 0
    job[EPI] = epi
    _store(job, BELL, seq)
    job[T_POSTED] = _rdtsc()
    if _load(job, STATE) == 0:  # (after the bell's full fence: asleep, or going to sleep and
        return 2  # then sees the bell): the caller wakes it, then computes its own chunk
    _gemm(double, ta, tb, cut, n, k, pa, lda, pb, ldb, pc, ldc)
    job[T_OWN] = _rdtsc()
    if epi != 0:
        return 3
    for _ in range(budget):
        if _load(job, DONE) == seq:
            return 1
        _pause()
    return 1 if _load(job, DONE) == seq else 0
