"""Compiled CPU loops (numba) for kernels whose numpy form makes several passes over memory.

A numpy kernel pays one pass over its arrays per call (a max pool's taps, a gradient's
masks, an optimizer's terms); a loop compiled by numba makes one pass and keeps its values in
registers. Kernels use this where it measured faster (bench/RESULTS.md), and only on CPU
(``ctx.xp is numpy``) for the dtypes numba knows (``SUPPORTED``); everything else, and every
kernel when numba is missing or ``ASYNCFLOW_JIT=0`` is set in the environment (or
``ENABLED = False`` before a kernel first runs), takes the kernel's numpy form, which stays
the reference the compiled form is tested against.

``loop(fn)`` wraps a plain Python function written in numba's subset; it is compiled on its
first call (numba's import, ~0.3 s, and the compile happen then, never at ``import
asyncflow``), cached on disk next to its module (``cache=True``), and releases the GIL
(``nogil=True``), so the intra-op pool's threads run its chunks on separate cores
(``kernels/intra_op.py``). A first call that compiles (or loads the disk cache) must not
block the event loop: a kernel with compiled loops registers a prepare hook returning
``preload(warm)``, where ``warm()`` calls its loops on tiny arrays of each dtype the node may
take, with the argument types the kernel passes (numba compiles again for any other: a
read-only array, an ``A`` layout; ``readonly`` gives inputs one type); the plan runs it on a
worker thread before the node's first step, as it imports scipy.fft (``registry.Preload``).
``error_model="numpy"``: a division by zero gives inf/NaN as in numpy, with no check per
element (the default Python model's checks stop vectorization).
numba's first compile imports scipy's BLAS bindings, an OpenBLAS of scipy's own: ``_load``
imports them with numba, and ``usable``/``preload`` have the device's intra-op pool extend its
BLAS hold to them (``exec/intra_op.py``), as the FFT path does for ``scipy.fft``.
Two more things stop LLVM vectorizing a loop: indices numba cannot prove non-negative (a loop
over ``range(start, stop)`` pays a wraparound test per access; slice the chunk and index it
from 0), and outputs that may alias inputs at other positions in more pairs than LLVM checks
at run time (update arrays in place, or keep few separate outputs): kernels/training.py.

``loop(fn, slp=True)``: numba leaves LLVM's SLP vectorizer off (numba issue #8705, a
miscompile), so a loop body that updates a block of scalar accumulators (a register-blocked
convolution, ``kernels/nn_conv_loops.py``) compiles to scalar FMAs, 3-6x slower; such a loop
asks for it, and only its own compiles run with ``numba.config.SLP_VECTORIZE`` set (under
numba's compiler lock, one signature at a time): other loops keep numba's default. Tests
compare every such loop with its numpy form.
"""
from __future__ import annotations

import importlib
import os
import threading

import numpy as np

from asyncflow.kernels.registry import Preload

ENABLED = os.environ.get("ASYNCFLOW_JIT", "1") != "0"

# dtypes a compiled loop takes; float16 and bfloat16 stay on numpy's forms.
SUPPORTED = frozenset(np.dtype(t) for t in (np.float32, np.float64))

_numba = None  # the module once imported; False where it is missing
_lock = threading.Lock()
_warmed = set()  # the warm functions preload has run
_blas_held = False  # whether a device's intra-op pool has extended its BLAS hold since _load


def _load():
    global _numba
    if _numba is None:
        with _lock:
            if _numba is None:
                try:
                    import numba
                except ImportError:  # an optional speed-up: numpy's forms run instead
                    numba = False
                if numba:
                    _load_numba_blas()
                _numba = numba
    return _numba


def _load_numba_blas():
    """numba's first compile imports scipy's BLAS bindings (its ``np.linalg`` support), which
    load an OpenBLAS of scipy's own: imported here, with numba, so that ``usable`` can have
    the intra-op pool hold it at one thread as it holds numpy's (``exec/intra_op.py``)."""
    try:
        importlib.import_module("scipy.linalg.cython_blas")
    except ImportError:  # (numba then compiles without it)
        pass


def _hold_blas(ctx):
    """Extend the device's BLAS hold to the libraries numba brought (once a process)."""
    global _blas_held
    pool = getattr(getattr(ctx, "device", None), "intra_op", None)
    if pool is not None:
        pool.hold_blas_loaded_since()
        _blas_held = True


def available():
    """True where compiled loops run: enabled, and numba imports."""
    return ENABLED and bool(_load())


def usable(ctx, *arrays):
    """True where a kernel should take its compiled loop for these arrays: on CPU, every
    array a numpy array of a ``SUPPORTED`` dtype, and ``available()``."""
    if not (ctx.xp is np and all(type(a) is np.ndarray and a.dtype in SUPPORTED for a in arrays)
            and available()):
        return False
    if not _blas_held:
        _hold_blas(ctx)
    return True


class _Loop:
    """A function compiled by numba on first call (see the module docstring)."""

    def __init__(self, fn, options, slp=False):
        self.fn = fn
        self.options = options
        self.slp = slp
        self._signatures = set()  # (slp loops) the argument types compiled with SLP
        self._compiled = None
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args):
        compiled = self._compiled
        if compiled is None:
            numba = _load()
            if not numba:
                raise RuntimeError(f"{self.__name__}: numba is not installed; check "
                                   "jit.available() before calling a compiled loop")
            with _lock:
                if self._compiled is None:
                    self._compiled = numba.njit(
                        nogil=True, cache=True, error_model="numpy", **self.options)(self.fn)
                compiled = self._compiled
        if self.slp:
            _compile_with_slp(compiled, self._signatures, args)
        return compiled(*args)


def _compile_with_slp(dispatcher, done, args):
    """Compile (or load from the disk cache) ``dispatcher`` for ``args``' types with LLVM's
    SLP vectorizer on, once per signature; numba's compiler lock keeps other compiles out
    while the flag is set."""
    numba = _numba
    signature = tuple(numba.typeof(a) for a in args)
    if signature in done:
        return
    from numba.core import config
    from numba.core.compiler_lock import global_compiler_lock
    with global_compiler_lock:
        previous = config.SLP_VECTORIZE
        config.SLP_VECTORIZE = 1
        try:
            dispatcher.compile(signature)
        finally:
            config.SLP_VECTORIZE = previous
    done.add(signature)


def readonly(array):
    """``array`` as a read-only view (itself where it is one already): numba types a read-only
    array apart from a writable one, so a loop's inputs go in read-only, whatever the caller's
    flags (a variable's stored value is read-only, a fresh array is not), and its warm-up
    compiles the one signature a dtype the kernel calls (as ``kernels/training.py``'s gradient)."""
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


def loop(fn=None, slp=False, **options):
    """Decorator: ``fn`` compiled by numba on its first call (extra numba ``options``, such
    as ``fastmath``, pass through; ``slp``: see the module docstring). ``fn`` stays callable
    as plain Python as ``.fn``."""
    if fn is None:
        return lambda f: _Loop(f, options, slp)
    return _Loop(fn, options, slp)


def preload(warm):
    """A prepare hook's value (``registry.Preload``) that imports numba and runs ``warm()``
    (which calls a kernel's loops on tiny arrays, so that they compile or load from the disk
    cache) on a worker thread before the plan's first step; None where there is nothing to
    do (compiled loops unavailable, or ``warm`` already ran)."""
    if warm in _warmed or not ENABLED or _numba is False:
        return None

    def load(ctx):
        if warm not in _warmed and available():
            if not _blas_held:
                _hold_blas(ctx)
            warm()
            _warmed.add(warm)
    return Preload(load)
