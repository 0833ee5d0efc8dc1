"""The CPU GEMMs of the MatMul family and the convolutions' patch products: numpy's matmul (its
OpenBLAS), or Intel MKL's ``cblas_sgemm``/``cblas_dgemm`` where the optional ``mkl`` wheel is
installed (the ``[mkl]`` extra) and the product is one it measured faster on (``prefers``).

``ASYNCFLOW_BLAS`` chooses: ``numpy`` (never MKL), ``mkl`` (MKL wherever it applies; a warning
and numpy's form where it cannot be loaded), unset or ``auto`` (MKL where the wheel is
installed, for the products it measured faster on in the models' steps: ``prefers``, measured
in float32, float64 taking the same rule, on an Intel CPU: on other vendors' ``auto`` gives MKL
nothing, ``MKL_VENDORS``). ``CHOICE`` holds it, read at each call (tests change it).

MKL runs on its sequential threading layer (``MKL_Set_Threading_Layer``, set before any other
MKL call): one GEMM call is one thread, the calling one, so the device's intra-op pool keeps
splitting products by rows or columns (``kernels/intra_op.py``) with no threads of MKL's own
beside it (no oversubscription; the pool's threadpoolctl hold of numpy's BLAS is unchanged).
ctypes releases the GIL for the call, as numpy does around its BLAS calls.

The library loads on first use, never at ``import asyncflow``: MatMul's prepare hook
(``preload``) has it loaded on a worker thread before a plan's first step.

``gemm(ctx, a, b)`` gives the function ``mm(a, b, out)`` a kernel calls on ``a``, ``b`` and
the output (or on chunks of them): MKL's, or numpy's ``matmul(a, b, out=out)``; decided once
per product, so every chunk of a split product goes through the same library. MKL's form takes
2-D views as they are, transposed and strided ones included (a view with one unit stride is a
BLAS operand: the other stride is its leading dimension, and a transposed view is passed with
``CblasTrans``, never copied); a view with no unit stride, overlapping memory, or sizes past
32-bit ints goes to numpy's form for that call. numpy's form stays the reference: MKL's results
are close to it (another summation order: tests/ops/test_blas.py states the tolerance).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import threading
import warnings

import numpy as np

from asyncflow.kernels.registry import Preload

CHOICE = os.environ.get("ASYNCFLOW_BLAS", "auto")
CHOICES = ("auto", "numpy", "mkl")

# The products ``auto`` gives MKL (``prefers``), measured (bench/bench_blas.py, one thread, each
# alternating with numpy's in one process, bench/RESULTS.md 2026-12-06): from ``MKL_FROM_MACS``
# multiply-adds (below, the ctypes call costs more than MKL saves: 1.5-3.2x numpy's time), those
# with a side of at most ``MKL_THIN`` (the convolutions' patch GEMMs, K or M 25: 0.58-0.60x;
# the logits' 10: 0.79x) or of ``MKL_LARGE_MACS`` and more (the convnet's dense layer,
# 411 M: 0.79-0.87x). The dense models' products (sides 128-784, 8-51 M) measured 0.85-1.01x
# alone but 1.01x (the autoencoder) and 1.05x (the MLP) in their steps (bench_blas.py
# --models): numpy's.
MKL_FROM_MACS = 1_000_000
MKL_THIN = 32
MKL_LARGE_MACS = 100_000_000
# The CPU vendors (``vendor_id``) whose cores ``prefers`` was measured on, an Intel Xeon's. On an
# AMD EPYC (Zen 4, AVX-512) MKL 2026.2's sgemm measured 0.93-1.21x numpy's OpenBLAS (SkylakeX
# kernels) on one thread on the dense models' products, 1.00-1.38x on the convnet's that
# ``prefers`` gives it but two (its dense layer's input gradient 0.91-1.04x, the logits'
# 0.69-0.89x) and 2.8x on the logits' forward and weight gradient (bench/bench_blas.py), and
# the convnet's step ran 4-9% faster with numpy's GEMMs (bench/bench_ab_setting.py,
# bench/RESULTS.md 2026-12-07 c45gemm, r45gemm): ``auto`` gives MKL nothing
# on other vendors' CPUs (nor loads it). A CPU whose vendor cannot be read keeps the table.
MKL_VENDORS = ("GenuineIntel",)
DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64))

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_INT_MAX = 2**31 - 1
_lock = threading.Lock()
_mkl = []  # [library's two GEMMs as (sgemm, dgemm)] once loaded, [None] where it cannot be
_path = []  # [the library's path or None] once looked up (``_installed``)
_vendor = []  # [the CPU's vendor id or None] once read (``cpu_vendor``)


def mkl_library_path():
    """The path of the ``mkl`` wheel's ``libmkl_rt`` (its files sit in the environment's lib
    folder, outside the site-packages), else one on the system's library path; None."""
    try:
        from importlib import metadata
        dist = metadata.distribution("mkl")
        for name in dist.files or ():
            if os.path.basename(str(name)).startswith("libmkl_rt.so"):
                path = str(dist.locate_file(name))
                if os.path.exists(path):
                    return path
    except Exception:  # no such distribution, or metadata without a RECORD
        pass
    return ctypes.util.find_library("mkl_rt")


def wheel_library_path():
    """The ``mkl`` wheel's ``libmkl_rt`` where pip puts it (``lib`` under the environment's
    prefix, the user base, the prefix of any other ``site-packages`` on ``sys.path`` -- a
    venv made with ``--system-site-packages`` or one that adds another environment's
    packages by a ``.pth`` --, or Debian's ``/usr/local``), else None: a few ``stat`` calls,
    no import of importlib.metadata or sysconfig's data and no ``ldconfig``
    (``find_library``), 60-100 ms on the event loop under load."""
    import site
    prefixes = [sys.prefix, site.getuserbase()]
    for entry in sys.path:  # <prefix>/lib/pythonX.Y/site-packages
        if os.path.basename(entry) in ("site-packages", "dist-packages"):
            prefixes.append(os.path.dirname(os.path.dirname(os.path.dirname(entry))))
    prefixes.append("/usr/local")
    for prefix in dict.fromkeys(prefixes):
        found = sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
        if found:
            return found[0]
    return None


def _installed():
    """Whether an MKL library is there to load, looked up once: ``auto`` takes the wheel's
    (``wheel_library_path``: cheap enough for a prepare hook on the event loop), ``mkl`` any
    (``mkl_library_path``, run by the Preload on a worker thread)."""
    if not _path:
        _path.append(wheel_library_path() if CHOICE == "auto" else mkl_library_path())
    return _path[0] is not None


def _load():
    if not _mkl:
        with _lock:
            if not _mkl:
                if not _installed() and CHOICE == "mkl":
                    warnings.warn("asyncflow: ASYNCFLOW_BLAS=mkl but MKL is not installed "
                                  "(pip install 'asyncflow-dataflow[mkl]'); GEMMs use numpy's "
                                  "BLAS", RuntimeWarning, stacklevel=3)
                _mkl.append(_open(_path[0]) if _installed() else None)
    return _mkl[0]


def _open(path):
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        interface = lib.MKL_Set_Interface_Layer(0)  # LP64: 32-bit ints, as the argtypes below
        layer = lib.MKL_Set_Threading_Layer(1)  # 1: sequential (before any other MKL call)
    except (OSError, AttributeError) as error:
        warnings.warn(f"asyncflow: MKL at {path} cannot be loaded ({error}); GEMMs use numpy's "
                      "BLAS", RuntimeWarning, stacklevel=3)
        return None
    if interface < 0 or interface & 1:  # set before (ILP64, bit 1): 64-bit ints, not c_int's
        warnings.warn(f"asyncflow: MKL at {path} already runs its ILP64 interface ({interface}); "
                      "GEMMs use numpy's BLAS", RuntimeWarning, stacklevel=3)
        return None
    if layer != 1:  # MKL was loaded before, on a threading layer of its own: not ours to change
        warnings.warn(f"asyncflow: MKL at {path} already runs a threaded layer ({layer}); GEMMs "
                      "use numpy's BLAS", RuntimeWarning, stacklevel=3)
        return None
    pointer, integer = ctypes.c_void_p, ctypes.c_int
    functions = []
    for name, scalar in (("cblas_sgemm", ctypes.c_float), ("cblas_dgemm", ctypes.c_double)):
        fn = getattr(lib, name)
        fn.argtypes = [integer] * 6 + [scalar, pointer, integer, pointer, integer, scalar,
                                       pointer, integer]
        fn.restype = None
        functions.append(fn)
    return tuple(functions)


def preload(ctx, other=None):
    """A prepare hook (MatMul, _FusedMatMul; the convolutions' through theirs, ``other`` being
    their own ``Preload`` or None, run first): where MKL may run this node's GEMMs and is not
    loaded yet, a ``registry.Preload`` that loads it and makes its first call (~35 ms here:
    the library, then MKL's dispatch to its AVX-512 kernels) on a worker thread before the
    plan's first step, never on the event loop; ``other`` elsewhere (where MKL is not
    installed too, and under ``auto`` on a CPU outside ``MKL_VENDORS``: such a plan has no
    Preload of MKL's to run)."""
    dtypes = ctx.output_dtypes
    if (_mkl or CHOICE == "numpy" or getattr(ctx, "xp", np) is not np or not dtypes
            or (CHOICE == "auto" and not vendor_measured())
            or np.dtype(dtypes[0]) not in DTYPES
            or ((_path or CHOICE != "mkl") and not _installed())):  # (mkl's: the Preload's)
        return other
    return Preload.chained(other, Preload(_warm))


def _warm(ctx):
    if available():
        for dtype in DTYPES:
            one = np.ones((1, 1), dtype)
            mkl_matmul(one, one, np.empty((1, 1), dtype))


def available():
    """Whether MKL's GEMMs can run: not switched off (``CHOICE`` numpy) and loadable."""
    if CHOICE == "numpy":
        return False
    if CHOICE not in CHOICES:
        raise ValueError(f"ASYNCFLOW_BLAS={CHOICE!r}: expected one of {', '.join(CHOICES)}")
    return _load() is not None


def name():
    """Which library runs the CPU GEMMs of float32/float64 products: ``mkl`` or ``numpy``
    (``numpy`` under ``auto`` on a CPU outside ``MKL_VENDORS``, where MKL runs none and is
    not loaded)."""
    if CHOICE == "auto" and not vendor_measured():
        return "numpy"
    return "mkl" if available() else "numpy"


def prefers(m, k, n):
    """Whether ``auto`` takes MKL for an ``[m, k] @ [k, n]`` product (see ``MKL_THIN``), on a
    CPU of ``MKL_VENDORS``."""
    macs = m * k * n
    return (macs >= MKL_FROM_MACS and (min(m, k, n) <= MKL_THIN or macs >= MKL_LARGE_MACS)
            and vendor_measured())


def vendor_measured():
    """Whether this CPU's vendor is one ``prefers`` was measured on (``MKL_VENDORS``), or
    cannot be read."""
    vendor = cpu_vendor()
    return vendor is None or vendor in MKL_VENDORS


def cpu_vendor(path="/proc/cpuinfo"):
    """The CPU's ``vendor_id`` (``GenuineIntel``, ``AuthenticAMD``), read once from the first
    kilobyte of ``path`` (its second line; ~20 us on the AMD EPYC, the kernel formatting the first
    core's entry); None where there is none."""
    if not _vendor:
        _vendor.append(vendor_of(path))
    return _vendor[0]


def vendor_of(path):
    """``vendor_id`` of a cpuinfo file at ``path``, or None (no such file or line)."""
    try:
        with open(path, "rb") as cpuinfo:
            head = cpuinfo.read(1024).decode("ascii", "replace")
    except OSError:
        return None
    for line in head.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip() or None
    return None


def gemm(ctx, a, b, whole=None):
    """The function ``mm(a, b, out)`` writing ``a @ b`` into ``out`` for this product (and its
    chunks): MKL's where it applies (CPU, 2-D numpy arrays of one ``DTYPES`` dtype, MKL
    available, chosen for the shape), else numpy's ``matmul``. ``whole``: ``(m, k, n)`` of
    the whole product where ``a @ b`` is one chunk of it (a convolution's batch chunk), so
    that every chunk goes through the library chosen for the whole (a chunk's own shape may
    fall on the other side of ``prefers``)."""
    xp = ctx.xp
    m, k, n = whole if whole is not None else (a.shape[0], a.shape[1], b.shape[1])
    if (xp is np and type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == b.ndim == 2
            and a.dtype == b.dtype and a.dtype in DTYPES
            and (prefers(m, k, n) if CHOICE == "auto" else CHOICE != "numpy")
            and available() and not gram(a, b)):  # (auto: loaded only where it may run)
        return mkl_matmul
    return lambda x, y, out: xp.matmul(x, y, out=out)


def gram(a, b):
    """Whether ``a @ b`` is ``x @ x.T`` (one buffer, the strides swapped): numpy computes it
    with BLAS's SYRK (half the multiply-adds, one triangle mirrored: an exactly symmetric
    result), which rounds otherwise than GEMMs of its rows would: such a product is neither
    split (kernels/math.py) nor given to MKL (numpy's arrays only)."""
    return (type(a) is np.ndarray and a.shape[0] == b.shape[1] and a.strides == b.strides[::-1]
            and a.ctypes.data == b.ctypes.data)


def matmul(ctx, a, b, whole=None):
    """``a @ b`` as a new array, through ``gemm``'s choice (``whole``: as there)."""
    mm = gemm(ctx, a, b, whole)
    if mm is not mkl_matmul:
        return a @ b
    out = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
    return mm(a, b, out)


def mkl_matmul(a, b, out):
    """``out[...] = a @ b`` by MKL's GEMM for 2-D float32/float64 arrays of one dtype (numpy's
    matmul for a call whose views BLAS cannot take as they are). Returns ``out``."""
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k or out.shape != (m, n) or not a.dtype == b.dtype == out.dtype:
        raise ValueError(f"mkl_matmul: {a.dtype}{list(a.shape)} @ {b.dtype}{list(b.shape)} "
                         f"into {out.dtype}{list(out.shape)}")
    if m == 0 or n == 0:
        return out
    if k == 0:
        out[...] = 0
        return out
    left, right, result = _operand(a), _operand(b), _operand(out)
    if (left is None or right is None or result is None or result[0] != _NO_TRANS
            or max(m, n, k, left[1], right[1], result[1]) > _INT_MAX
            or not out.flags.writeable
            or np.may_share_memory(out, a) or np.may_share_memory(out, b)):
        return np.matmul(a, b, out=out)
    fn = _load()[a.dtype.itemsize == 8]
    fn(_ROW_MAJOR, left[0], right[0], m, n, k, 1.0, a.ctypes.data, left[1], b.ctypes.data,
       right[1], 0.0, out.ctypes.data, result[1])
    return out


def _operand(x):
    """``(CblasNoTrans or CblasTrans, leading dimension)`` of a 2-D view for a row-major BLAS
    call, or None where neither stride is the item size (a dimension of one takes any)."""
    rows, cols = x.shape
    step = x.itemsize
    across, down = x.strides
    if not x.flags.aligned:
        return None
    if (cols == 1 or down == step) and (rows == 1 or (across % step == 0
                                                      and across // step >= cols)):
        return _NO_TRANS, max(1, cols, across // step if rows > 1 else 0)
    if (rows == 1 or across == step) and (cols == 1 or (down % step == 0
                                                        and down // step >= rows)):
        return _TRANS, max(1, rows, down // step if cols > 1 else 0)
    return None
