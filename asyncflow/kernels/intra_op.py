"""Splitting one kernel's work over the device's intra-op threads (TF1's
``intra_op_parallelism_threads``).

A kernel that can cut its work into independent contiguous ranges (images of a batch, rows
of a matrix) calls ``for_batch(ctx, count, work_per_item, fn)``: ``fn(start, stop)`` then runs
once per chunk, on the device's intra-op pool (``exec/intra_op.py``, reached as
``ctx.device.intra_op``) when the work is large enough to repay a hand-off (a pool of one
thread runs it inline as one chunk); inline as one chunk ``(0, count)`` otherwise, and on a
device without a pool (a GPU). Chunks are contiguous and in order, sized to stay in cache
(``CHUNK_BYTES``), taken from one queue by the calling thread and the pool's workers; each
writes only its own rows of an output the kernel allocated before, so where the per-row
computation is exact a split gives the same bits as one thread. Kernels that reduce across chunks (a filter gradient) combine the
chunks' partial results in chunk order, so they are deterministic, and independent of the
thread count whenever the batch is larger than one chunk.

numpy releases the GIL inside its loops and BLAS calls, so the chunks run on separate cores;
the pool keeps BLAS at one thread of its own while a split runs (no oversubscription).
"""
from __future__ import annotations

# Element-operations below which a kernel runs as one chunk on the calling thread: a hand-off
# to another thread and back costs tens of microseconds (about 0.5 ms of elementwise work).
MIN_SPLIT_WORK = 1 << 20
# A GEMM's multiply-adds per element-operation of the work above: BLAS does some 50 G
# multiply-adds a second per core here, numpy's elementwise loops 1-3 G elements, so GEMM
# kernels count their multiply-adds divided by this (split from about 16 M: ~0.3 ms), in
# their split thresholds and their offload scale alike.
MACS_PER_WORK = 16
# Bytes of temporaries (patch matrices, padded buffers) one chunk should stay under, so that
# a chunk's working set stays in cache: measured here, a MaxPoolGrad over a [128, 28, 28, 32]
# batch runs 4x faster in 32-image chunks than in one piece, on one thread.
CHUNK_BYTES = 4 << 20


def for_batch(ctx, count, work_per_item, fn, bytes_per_item=0, atomic=False):
    """Call ``fn(start, stop)`` over contiguous chunks covering ``range(count)``.

    ``work_per_item``: estimated element-operations per item, to leave small kernels inline;
    ``bytes_per_item``: the temporaries one item needs, to size chunks for the cache. Chunks
    depend on the thread count only when the whole batch fits in one chunk's bytes (then one
    chunk per thread). Returns the chunks' ``(start, stop)`` bounds, in order.
    """
    pool = getattr(ctx.device, "intra_op", None)
    if pool is None or count * work_per_item < MIN_SPLIT_WORK:
        fn(0, count)
        return [(0, count)]
    per_chunk = max(1, CHUNK_BYTES // bytes_per_item) if bytes_per_item else count
    # A multiple of the thread count, so the threads get equal shares.
    chunks = -(-count // per_chunk)
    rounds = -(-chunks // pool.threads)
    parts = min(count, rounds * pool.threads)
    bounds = chunk_bounds(count, parts)
    if atomic:
        pool.run(fn, bounds, atomic=True)
    else:  # (as before: a plain split passes nothing more)
        pool.run(fn, bounds)
    return bounds


# GEMMs split from ``MIN_SPLIT_WORK * MACS_PER_WORK`` multiply-adds (``for_gemm``, the
# MatMul kernels; read at each call, as tests and bench/bench_gemm_splits.py change them):
# from ~16.8 M (~0.3 ms on one thread). A lower rate, 6 (~6.3 M: the
# MLP's ``[128, 256] @ [256, 256]`` too), measured 129 us split against 172 whole alone at
# load 4, but in the whole step on a quiet machine (bench/bench_gemm_splits.py, forms
# alternating in one process, four runs) the MLP took 1.00-1.04x the even form's median
# with it against 0.96x without it: the small split's two wake-ups cost more there than its
# half saves (bench/RESULTS.md).

# The caller's chunk of a GEMM split is this many multiply-adds (~30 us) larger than a
# worker's: the worker starts its chunk ~13-25 us after the caller (the wake-up), and a caller
# that finishes first sleeps until the worker's chunk ends and is woken ~25-50 us after it;
# a caller that finishes last finds the worker done and returns at once. Measured on
# ``[128, 784] @ [784, 256]``: 365 us in two even row chunks, 315 with 68/60 rows.
GEMM_LEAD_MACS = 1_600_000
# OpenBLAS computes a GEMM of at most 100^3 multiply-adds (that size included) with its
# small-matrix kernels where the core has them (SkylakeX), and a single row or column as a
# GEMV; both round differently from its large-GEMM path: a chunk stays strictly above both.
BLAS_SMALL_MACS = 1_000_000
# The BLAS cores and dtypes where that is enough for a split GEMM to have the whole product's
# bits (rows and columns cut anywhere, transposed and strided operands, K from 1): OpenBLAS's
# SkylakeX kernels in float32, checked over random shapes (tests/ops/test_gemm_split_bits.py).
# Elsewhere (float64 and complex on SkylakeX, every dtype on the Haswell, Zen and generic
# kernels) the rounding of a row depends on the block it falls in: a split is close to the
# whole product (its bits depend on the shape and thread count only), not equal.
KEEPS_BITS = {("SkylakeX", "float32")}
# A GEMM of lane 0's tail (``pool.joinable()``: lane 1 needs nothing more of lane 0 and ends
# on its own) in this many row chunks, where the chunks keep the whole product's bits: the
# lane thread takes the chunks left once lane 1 has ended (``exec/lanes.py``). By rows each
# chunk packs ``b`` again: the autoencoder's first-layer weight gradient ``[784, 256] @
# [256, 256]`` took 1.03-1.10x its whole time on one thread in 4-8 chunks (bench/RESULTS.md).
# 1: whole, as before.
JOIN_CHUNKS = 8
_blas_core = []  # numpy's BLAS core (threadpoolctl's ``architecture``), found on first use
_dtype_names = {}  # dtype -> its name, for ``split_keeps_bits``


def split_keeps_bits(dtype):
    """Whether a GEMM of ``dtype`` split by ``for_gemm`` has the bits of the whole product
    here (``KEEPS_BITS``); False where the BLAS is not known (no threadpoolctl)."""
    if not _blas_core:
        _blas_core.append(_numpy_blas_core())
    name = _dtype_names.get(dtype)
    if name is None:  # (numpy's ``dtype.name`` is Python code: 2 us hot, ~25 after a GEMM)
        name = _dtype_names[dtype] = getattr(dtype, "name", str(dtype))
    return (_blas_core[0], name) in KEEPS_BITS


def _numpy_blas_core():
    try:
        import threadpoolctl
    except ImportError:
        return None
    cores = {info.get("architecture") for info in threadpoolctl.threadpool_info()
             if info.get("user_api") == "blas" and info.get("internal_api") == "openblas"
             and "numpy" in info.get("filepath", "")}
    return cores.pop() if len(cores) == 1 else None


def for_gemm(ctx, count, macs_per_item, fn, bytes_per_item=0, dtype=None, atomic=False):
    """``for_batch`` for a GEMM split by rows or columns (``count`` of them, each
    ``macs_per_item`` multiply-adds) of ``dtype``: from ``MIN_SPLIT_WORK * MACS_PER_WORK``
    multiply-adds, one chunk per thread (cache-sized ones, evenly, where ``bytes_per_item``
    asks for more), the caller's first chunk ``GEMM_LEAD_MACS`` longer than the others
    (``lead_bounds``). Chunks are at least two items and more than ``BLAS_SMALL_MACS`` each
    (fewer chunks where the GEMM is smaller). The bounds depend on the shape and the thread
    count only, so the result does too. Where the pool runs kernels whole on this thread (a
    pair's GEMM), or every worker is busy, the chunks run here one after the other, packing
    ``b`` once each (3-16% slower than whole for the dense models' GEMMs, bench/RESULTS.md);
    whole instead where that has the same bits (``split_keeps_bits``): both are decided at
    run time, so the bits must not depend on them. In lane 0's tail (``pool.joinable()``)
    such a GEMM runs in ``JOIN_CHUNKS`` row chunks that the lane thread may join. Returns the
    bounds, in order. ``atomic``: as ``for_batch``'s (a product whose chunks also apply it)."""
    pool = getattr(ctx.device, "intra_op", None)
    total = count * macs_per_item
    if pool is None or total < MIN_SPLIT_WORK * MACS_PER_WORK:
        fn(0, count)
        return [(0, count)]
    least = max(2, BLAS_SMALL_MACS // max(1, macs_per_item) + 1)  # items a chunk, at least
    per_chunk = max(least, CHUNK_BYTES // bytes_per_item) if bytes_per_item else count
    if per_chunk * pool.threads < count:  # cache-sized chunks, several a thread: even
        rounds = -(-count // (per_chunk * pool.threads))
        bounds = chunk_bounds(count, min(count // least, rounds * pool.threads))
    elif (pool.alone() or pool.all_busy()) and split_keeps_bits(dtype):
        if not (JOIN_CHUNKS > 1 and pool.alone() and pool.joinable() and count >= 2 * least):
            fn(0, count)  # (the chunks' bits, computed whole: b packed once)
            return [(0, count)]
        bounds = chunk_bounds(count, min(JOIN_CHUNKS, count // least))
    else:
        parts = max(1, min(pool.threads, count // least))
        lead = 0
        if parts > 1:
            lead = max(0, min(round(GEMM_LEAD_MACS / max(1, macs_per_item)),
                              count - parts * least))
        bounds = lead_bounds(count, parts, lead)
    if atomic:
        pool.run(fn, bounds, atomic=True)
    else:
        pool.run(fn, bounds)
    return bounds


def lead_bounds(count, parts, lead):
    """``chunk_bounds(count - lead, parts)`` with the first range ``lead`` longer: the first
    chunk is the calling thread's (it takes the queue first). Every range holds at least one
    item: ``lead`` at most ``count - parts``."""
    if not 0 <= lead <= count - parts or parts < 1:
        raise ValueError(f"lead_bounds: a lead of {lead} in {parts} ranges of {count} items")
    bounds = chunk_bounds(count - lead, parts)
    return [(0, bounds[0][1] + lead)] + [(start + lead, stop + lead)
                                         for start, stop in bounds[1:]]


def chunk_bounds(count, parts):
    """``parts`` contiguous ``(start, stop)`` ranges covering ``range(count)``, sizes within one."""
    base, extra = divmod(count, parts)
    bounds, start = [], 0
    for part in range(parts):
        stop = start + base + (1 if part < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def may_be_large(ctx):
    """A prepare hook (``kernels/registry.py``) for cheap kernels that split when large:
    whether the node's outputs can reach ``MIN_SPLIT_WORK`` elements (a dim unknown or the
    static size that large). Decided once per plan node, so a small node pays one attribute
    test per run, not a size check."""
    for tensor in ctx.op.outputs:
        count = tensor.shape.num_elements()
        if count is None or count >= MIN_SPLIT_WORK:
            return True
    return False


def elementwise(ctx, fn, *inputs, dtype=None):
    """``fn(*inputs)`` for an elementwise ufunc ``fn`` (or any ``fn(*chunks, out=)`` with the
    result ``dtype``), split over the intra-op threads by
    chunks of the flattened arrays when large; None when it does not apply (no pool, small,
    or inputs that are not one shape of C-contiguous arrays, up to 0-d or 1-element operands,
    which broadcast), and then the caller computes it whole. Exact: the same bits."""
    pool = getattr(ctx.device, "intra_op", None)
    if pool is None or pool.threads < 2:
        return None
    shape, arrays = None, []
    for value in inputs:
        size = getattr(value, "size", 1)
        if size == 1:
            arrays.append(value.reshape(()) if hasattr(value, "reshape") else value)
            continue
        if not value.flags.c_contiguous or (shape is not None and value.shape != shape):
            return None
        shape = value.shape
        arrays.append(value.reshape(-1))
    if shape is None or _size(shape) < MIN_SPLIT_WORK:
        return None
    count = _size(shape)
    if dtype is None:
        dtype = fn(*(a[:1] if getattr(a, "ndim", 0) else a for a in arrays)).dtype
    out = ctx.xp.empty(count, dtype=dtype)
    itemsize = out.itemsize

    def chunk(start, stop):
        fn(*(a[start:stop] if getattr(a, "ndim", 0) else a for a in arrays),
           out=out[start:stop])
    for_batch(ctx, count, 1, chunk, itemsize * (len(arrays) + 1))
    return out.reshape(shape)


def _size(shape):
    total = 1
    for dim in shape:
        total *= dim
    return total
