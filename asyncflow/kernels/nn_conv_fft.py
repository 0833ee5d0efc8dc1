"""FFT convolution: Conv2D and its two gradients with fewer multiplies (see kernels/nn_conv.py).

Theory of operation (NHWC, stride 1, no dilation; the kernels in ``nn_conv.py`` call
``choose`` and hand over the shapes where it picks ``"fft"``):
- Along one spatial dimension of size H, kernel K, padding ``top`` and output OH, every sum of
  a convolution and its gradients is a *circular* correlation or convolution of period P,
  computed exactly by the DFT, once P is large enough that no term wraps onto a real cell:
  P >= max(H + top, OH + K - 1 - top) (``_period``; 16 for the convnet's 14x14 5x5 SAME). The
  data sits at [0, H) of a zero-filled period (the transform pads), so the padding costs
  nothing, and output y is read at index (y - top) mod P.
- Conv2D: ``out[y] = sum_i x[y - top + i] w[i]``, so OUT = conj(W) * X per frequency, summed
  over the input channels: one complex GEMM ``[n, C] @ [C, O]`` per frequency.
- Conv2DBackpropInput: ``dx[a] = sum_y g[y] w[a + top - y]``, a full convolution: DX = G * W,
  ``[n, O] @ [O, C]`` per frequency, read at (a + top) mod P.
- Conv2DBackpropFilter: ``dw[i] = sum_y g[y] x[y - top + i]``: DW = conj(G) * X summed over
  the batch, ``[C, n] @ [n, O]`` per frequency, read at (i - top) mod P: the inverse
  transform evaluated at those K cells only, one GEMM (``dft_gemm.taps_matrix``).
- Periods up to ``dft_gemm.MAX_PERIOD`` (the convnet's 16x16) take ``kernels/dft_gemm.py``:
  the transforms as small real GEMMs on planar, batch-last spectra, end to end (its
  docstring); each kernel here hands such a plan over on its first line. Larger ones:
- The transforms are scipy's pocketfft (``scipy.fft``, real-to-complex over the two spatial
  axes of a ``[H, W, n, C]`` view, so each frequency's ``[n, C]`` block is contiguous for the
  GEMMs); the GEMMs are numpy's stacked complex matmul, which calls BLAS's cgemm per frequency.
  The filter's KH x KW cells are transformed by one GEMM with a DFT matrix instead
  (``dft_gemm.spectrum_matrix``), and the filter gradient's inverse evaluated at its KH x KW cells
  only (``dft_gemm.taps_matrix``): few cells of each period, where a transform computes all.
  Multiply-adds for the convnet's second layer ([128, 14, 14, 32], 5x5 -> 64): 1,280 M real
  against 151 M (144 frequencies x 128 x 32 x 64 complex, 4 real each), plus the transforms.
- Each kernel splits its batch over the intra-op threads like the direct ones; the filter
  gradient then makes one GEMM over the whole batch per frequency, split by output channels,
  so its bits do not depend on the thread count. The forward's and the input gradient's
  can, as a split MatMul's do: each chunk's per-frequency GEMM gets the chunk's images as
  rows, and BLAS rounds a one-row product (gemv) or a small one otherwise than a large one
  (measured: a 5-image batch on three threads, a 33-image one on three). Results are not the direct kernel's bits: float32 rounding of a transform of
  P*P points, measured ~1e-6 of the output's scale (tests/ops/test_conv_fft.py), as cuDNN's
  FFT algorithms differ from its GEMM ones.

The choice (``choose``) is a cost model, not a timed trial: a trial per shape (TF's autotune,
cuDNN's ``cudnnFind``) would make a step's bits depend on the machine's load at the first run.
The model's rates were fitted to shapes timed on the project's 2-core x86_64 machine
(bench/RESULTS.md, 2026-12-05): the direct kernels do ~45 G multiply-adds a second plus their
patch copies; the FFT path costs per transformed point, per plane and per complex
multiply-add (constants below). Where the two are close it picks direct. Shapes with strides or dilations, 1x1 (and Kx1) kernels,
dtypes other than float32/float64, arrays that are not numpy's, or no scipy stay direct.
``scipy.fft`` is imported when the model first picks the FFT path (``_load_fft``), not with
asyncflow: 0.15-0.3 s of CPU that every process would pay (bench/RESULTS.md, 2026-12-05).
Never on the event loop's thread: a plan node whose static shapes (or ``FORCE``) may take the
FFT path gets a ``preload`` from its prepare hook (``nn_conv.py``), which the step's runner
runs on a worker thread before the first step (``exec/step.py``, ``preload``). A dimension
unknown at plan time counts at every size it may take (``candidate_shapes``): the model picks
the FFT path for some tiny shapes (1x11x11x1 by an 11x11 window: ~3 us), which run inline.
Constant folding leaves such a node to the plan (``exec/compiled_run.py``).
"""
from __future__ import annotations

import numpy as np

from asyncflow.kernels import dft_gemm, intra_op, jit
from asyncflow.kernels.registry import Preload

_fft = None  # scipy.fft once _load_fft found it; False where scipy is missing

# "direct" or "fft" forces that algorithm wherever the FFT one applies (benchmarks, tests);
# None: the cost model decides.
FORCE = None

# The cost model's rates, fitted to eight shapes timed on one thread here (bench/RESULTS.md,
# 2026-12-05), in nanoseconds: the direct kernels per multiply-add (sgemm) and per patch cell
# copied; the FFT path per transformed point (in and out, with its copies), per plane (a
# transform's fixed cost) and per complex multiply-add of its GEMMs. Not refitted to the GEMM
# transforms (periods up to dft_gemm.MAX_PERIOD): on 14 shapes timed against them
# (bench/bench_conv_choose.py, bench/RESULTS.md 2026-12-06, c40cost) it picks the measured
# winner wherever one wins clearly (the convnet's conv1 by FFT: 2.5-5.4x slower); it
# overprices the FFT at small periods (7x7x64 and 14x14x32 3x3: predicted 1.3-1.8x direct,
# measured 0.94-1.07 on two threads, 0.76-1.03 on one), near-ties it leaves to direct.
_DIRECT_NS_PER_MAC = 1 / 45
_DIRECT_NS_PER_PATCH_CELL = 0.2
_FFT_NS_PER_POINT = 2.8
_FFT_NS_PER_PLANE = 250
_FFT_NS_PER_COMPLEX_MAC = 0.085
_FAST_SIZES = sorted({2 ** a * 3 ** b * 5 ** c for a in range(12) for b in range(7)
                      for c in range(5)})


def _fast_size(n):
    """The smallest 5-smooth size >= n (pocketfft's fast lengths)."""
    for size in _FAST_SIZES:
        if size >= n:
            return size
    return n


def _period(size, kernel, out, top):
    """The DFT length along one dimension with no wrapped term (module docstring)."""
    return _fast_size(max(size + top, out + kernel - 1 - top, kernel))


class Plan:
    """One shape's FFT geometry: periods, the read-out indices, the model's costs."""

    __slots__ = ("p_h", "p_w", "freqs", "rows", "cols", "in_h", "in_w", "kernel_hw",
                 "direct_s", "fft_s")

    def __init__(self, x_shape, f_shape, rows, cols):
        n, h, w, c = x_shape
        kh, kw, _, o = f_shape
        (oh, top, _), (ow, left, _) = rows, cols
        self.p_h, self.p_w = _period(h, kh, oh, top), _period(w, kw, ow, left)
        self.freqs = self.p_h * (self.p_w // 2 + 1)
        self.rows, self.cols, self.in_h, self.in_w = rows, cols, h, w
        self.kernel_hw = (kh, kw)
        planes = n * c + n * o + c * o
        self.fft_s = 1e-9 * (planes * self.p_h * self.p_w * _FFT_NS_PER_POINT
                             + planes * _FFT_NS_PER_PLANE
                             + self.freqs * n * c * o * _FFT_NS_PER_COMPLEX_MAC)
        patch_cells = n * oh * ow * kh * kw * c
        self.direct_s = 1e-9 * (patch_cells * o * _DIRECT_NS_PER_MAC
                                + patch_cells * _DIRECT_NS_PER_PATCH_CELL)

    def read_out(self, planes, shift_h, shift_w, target):
        """Copy ``planes`` (``[P_h, P_w, ...]``) read at (index + shift) mod P into ``target``
        (``[count_h, count_w, ...]``, a view of the kernel's output), block by block: each
        dimension's cells are at most two runs of the period (one wrap), so two to four plain
        slice copies, where an ``np.ix_`` index copied the cells once more before the
        transposed store (0.49 against 0.28 ms for a 64-image chunk of the convnet's conv2)."""
        for out_h, in_h in _runs(shift_h, target.shape[0], self.p_h):
            for out_w, in_w in _runs(shift_w, target.shape[1], self.p_w):
                target[out_h, out_w] = planes[in_h, in_w]


def _runs(shift, count, period):
    """``(target slice, plane slice)`` pairs covering cells (i + shift) mod ``period`` for i in
    [0, count), count <= period: at most two runs."""
    first = shift % period
    head = min(count, period - first)
    runs = [(slice(0, head), slice(first, first + head))]
    if head < count:
        runs.append((slice(head, count), slice(0, count - head)))
    return runs


def choose(ctx, arrays, x_shape, f_shape, rows, cols, dtype):
    """``Plan`` when the FFT algorithm applies to the op's ``arrays`` (its data inputs) and is
    predicted (or forced) faster; else None, and the direct kernel runs."""
    if _fft is False or FORCE == "direct" or any(type(a) is not np.ndarray for a in arrays):
        return None
    plan = _static_plan(ctx, x_shape, f_shape, rows, cols, dtype)
    if plan is None or not all(_tame(ctx, a) for a in arrays) or not _load_fft(ctx):
        return None
    return plan


def _static_plan(ctx, x_shape, f_shape, rows, cols, dtype):
    """``choose`` by the attrs and shapes alone (no arrays, no import)."""
    strides = ctx.attrs["strides"]
    dilations = ctx.attrs.get("dilations", (1, 1, 1, 1))
    if (tuple(strides[1:3]) != (1, 1) or tuple(dilations[1:3]) != (1, 1)
            or np.dtype(dtype) not in (np.float32, np.float64)
            or f_shape[0] < 2 or f_shape[1] < 2 or 0 in x_shape or 0 in f_shape):
        return None
    plan = Plan(x_shape, f_shape, rows, cols)
    if FORCE != "fft" and plan.fft_s >= plan.direct_s:
        return None
    return plan


# The sizes a dimension unknown at plan time is tried at (``candidate_shapes``). The batch and
# channel counts take their extremes: the model's ratio of the two paths' costs is monotonic
# in each (a quotient of two affine functions of it). The spatial sizes take every size to 64,
# then a few larger ones, both spatial dimensions together (their costs are nearly products
# of one factor per dimension, each largest at the same sizes).
UNKNOWN_COUNTS = (1, 1 << 12)
UNKNOWN_SIZES = tuple(range(1, 65)) + (80, 96, 128, 160, 192, 256, 384, 512, 1024, 2048, 4096)


def may_preload(ctx):
    """False where no ``preload`` is needed whatever the shapes: scipy.fft is loaded (or
    missing) and the read-out loop warm (or not used), the direct kernels are forced, the
    device's arrays are not numpy's."""
    return (FORCE != "direct" and ctx.xp is np
            and (_fft is None or (_fft is not False and jit.preload(_warm_read_out) is not None)))


def candidate_shapes(x_shape, f_shape):
    """``(x_shape, f_shape)`` pairs (NHWC, HWIO) for static shapes with None where unknown:
    each unknown count at ``UNKNOWN_COUNTS``, unknown spatial sizes at ``UNKNOWN_SIZES``."""
    n, h, w, _ = x_shape
    counts = [UNKNOWN_COUNTS if d is None else (d,) for d in (n, x_shape[3], f_shape[3])]
    if h is None and w is None:
        spatial = [(s, s) for s in UNKNOWN_SIZES]
    else:
        spatial = [(a, b) for a in ((h,) if h is not None else UNKNOWN_SIZES)
                   for b in ((w,) if w is not None else UNKNOWN_SIZES)]
    for batch in counts[0]:
        for channels in counts[1]:
            for out in counts[2]:
                for rows, cols in spatial:
                    yield ((batch, rows, cols, channels),
                           (f_shape[0], f_shape[1], channels, out))


def preload(ctx, geometries, dtype, unknown_window=False):
    """A prepare hook's value (``registry.Preload``) that imports scipy.fft, for a plan node
    that may run the FFT algorithm on the event loop's thread, where the first import would
    block the loop for 0.2-0.5 s (bench/RESULTS.md, 2026-12-05): the plan's runner runs it on
    a worker thread before the node's first step. None where ``may_preload`` says so, or
    where every one of ``geometries`` (``(x_shape, f_shape, rows, cols)``: the shapes the
    node may run, ``candidate_shapes``) leaves the node on the direct kernels by its attrs and
    the cost model. ``unknown_window``: the filter's window is unknown here; then the attrs
    alone decide."""
    if not may_preload(ctx):
        return None
    if unknown_window:
        strides = ctx.attrs["strides"]
        dilations = ctx.attrs.get("dilations", (1, 1, 1, 1))
        wanted = (tuple(strides[1:3]) == (1, 1) and tuple(dilations[1:3]) == (1, 1)
                  and np.dtype(dtype) in (np.float32, np.float64))
    else:
        wanted = any(_static_plan(ctx, x_shape, f_shape, rows, cols, dtype) is not None
                     for x_shape, f_shape, rows, cols in geometries)
    if not wanted:
        return None
    loop = jit.preload(_warm_read_out)
    if loop is None:
        return Preload(_load_fft)

    def load(node):
        if _load_fft(node):
            loop.load(node)
    return Preload(load)


def _load_fft(ctx):
    """Import scipy.fft (once; the import lock serializes threads); False without scipy.
    scipy loads an OpenBLAS of its own, which the device's pool then holds at one thread as
    it holds numpy's (``exec/intra_op.py``)."""
    global _fft
    if _fft is None:
        try:  # scipy's pocketfft is 3-5x faster than numpy's on these stacked small planes
            import scipy.fft as found
        except ImportError:  # pragma: no cover - then every shape runs the direct kernels
            found = False
        pool = getattr(ctx.device, "intra_op", None)
        if found is not False and pool is not None:
            pool.hold_blas_loaded_since()
        _fft = found
    return _fft


def _tame(ctx, array):
    """Whether every value is finite and far from overflow: a transform spreads one NaN or inf
    over its whole plane (and a huge value's products may overflow where the direct sums do
    not), so such inputs take the direct kernel, whose NaN and inf stay in the windows that
    read them. On CPU float32/64 one compiled pass counting the values within the limit,
    split over the intra-op threads (``_count_tame``); else two numpy passes (max and min
    propagate NaN), ~0.1 ms a million floats each. The same answer either way."""
    limit = 1e15 if array.dtype == np.float32 else 1e150
    if array.size and array.flags.c_contiguous and jit.usable(ctx, array):
        flat = jit.readonly(array.reshape(-1))
        counts = []

        def chunk(start, stop):
            counts.append(_count_tame(flat[start:stop], limit))
        intra_op.for_batch(ctx, flat.size, 1, chunk)
        return sum(counts) == flat.size
    return bool(abs(float(array.max())) < limit and abs(float(array.min())) < limit)


@jit.loop
def _count_tame(values, limit):
    """How many of ``values`` (1-d) have ``abs(v) < limit`` (a float64: the comparison numpy's
    form makes on the max and min as Python floats; NaN is never counted). One pass,
    vectorized, the GIL released: 0.13-0.15 against numpy's 0.24 ms for 800 K float32 on one
    thread (bench/RESULTS.md, 2026-12-07, c41conv)."""
    count = 0
    for i in range(values.shape[0]):
        if abs(values[i]) < limit:
            count += 1
    return count


def _rfft2(planes, plan):
    """The real 2-D DFT over axes 0 and 1 of ``[h, w, ...]`` (h, w <= the periods, zero padded):
    the real pass over the h rows that hold data, then the complex pass over the period (scipy's
    rfft2 with ``s=`` pads first and transforms the zero rows too: 0.9 against 1.4 ms for a
    5x5 filter bank here)."""
    half = _fft.rfft(planes, n=plan.p_w, axis=1)
    return _fft.fft(half, n=plan.p_h, axis=0, overwrite_x=True)


def _forward(array, plan):
    """rfft2 of a ``[n, H, W, C]`` batch over H and W, as ``[freqs, n, C]``."""
    spectrum = _rfft2(array.transpose(1, 2, 0, 3), plan)
    return spectrum.reshape(plan.freqs, array.shape[0], array.shape[3])


def _inverse(spectrum, plan, last):
    """irfft2 of ``[freqs, n, last]`` back to ``[P_h, P_w, n, last]`` real planes."""
    planes = spectrum.reshape(plan.p_h, plan.p_w // 2 + 1, -1, last)
    return _fft.irfft2(planes, s=(plan.p_h, plan.p_w), axes=(0, 1))


def _filter_spectrum(ctx, filters, plan, conjugate, transpose, out=None):
    """The filter's spectrum ``[freqs, C, O]`` (``[freqs, O, C]`` transposed) as the real
    ``[freqs, 2C, 2O]`` matrices that multiply interleaved complex rows (``_complex_gemm``):
    row 2c holds (re, im) of w[c, o], row 2c+1 those of i*w[c, o] = (-im, re). The transform
    is one GEMM, ``dft_gemm.spectrum_matrix`` (the DFT of a period holding KH x KW cells, real parts
    then imaginary ones) by the ``[KH*KW, C*O]`` filter, whole (a GEMM split by columns may
    round by its width): 14.7 M multiply-adds for conv2's 5x5x32x64 filter, where pocketfft's
    transforms of 2048 zero-padded 16x16 periods and the complex assembly took 1.8-2.6 ms on
    one thread; then the four parts written by strided copies, split over the intra-op threads
    by frequency. ``out``: a real C-contiguous
    ``[freqs, 2C, 2O]`` (``[freqs, 2O, 2C]``) array to write it into."""
    kh, kw, c, o = filters.shape
    rows, cols = (o, c) if transpose else (c, o)
    real = np.result_type(filters.dtype, np.float32)
    matrix = (np.empty((plan.freqs, 2 * rows, 2 * cols), dtype=real) if out is None else out)
    dft = dft_gemm.cached(dft_gemm.spectrum_matrix, plan.p_h, plan.p_w, kh, kw, real)
    parts = np.matmul(dft, filters.reshape(kh * kw, c * o).astype(real, copy=False))
    parts = parts.reshape(2, plan.freqs, c, o)
    if transpose:
        parts = parts.transpose(0, 1, 3, 2)
    blocks = matrix.reshape(plan.freqs, rows, 2, cols, 2)

    def chunk(start, stop):
        block, re, im = blocks[start:stop], parts[0, start:stop], parts[1, start:stop]
        block[:, :, 0, :, 0] = re
        block[:, :, 1, :, 1] = re
        if conjugate:  # (re, -im) and i * that = (im, re)
            np.negative(im, out=block[:, :, 0, :, 1])
            block[:, :, 1, :, 0] = im
        else:  # (re, im) and (-im, re)
            block[:, :, 0, :, 1] = im
            np.negative(im, out=block[:, :, 1, :, 0])
    intra_op.for_batch(ctx, plan.freqs, 4 * c * o, chunk, 32 * c * o)
    return matrix


def _transposed(ctx, matrices):
    """``matrices [freqs, r, s]`` transposed into a new C-contiguous ``[freqs, s, r]``, split
    over the intra-op threads by frequency: the forward's filter matrix is the backprop's
    transposed (the 2x2 real block of conj(w) is the transpose of w's), a copy 3x cheaper
    than transforming the filter again (0.6 against 1.8 ms on one thread for conv2's)."""
    freqs, r, s = matrices.shape
    result = np.empty((freqs, s, r), dtype=matrices.dtype)

    def chunk(start, stop):
        result[start:stop] = matrices[start:stop].transpose(0, 2, 1)
    intra_op.for_batch(ctx, freqs, r * s, chunk, r * s * matrices.itemsize * 2)
    return result


def spectra_sizes(plan, n, c, o):
    """The floats of the forward's kept spectra (``conv2d``'s ``kept``): the batch's input
    spectra ``[freqs, N, 2C]``, then the filter's matrix ``[freqs, 2C, 2O]``."""
    return plan.freqs * n * 2 * c, plan.freqs * 2 * c * 2 * o


def _complex_gemm(spectrum, matrix):
    """``spectrum [freqs, n, C] @ W [freqs, C, O]`` as one real sgemm per frequency on the
    interleaved (re, im) floats: ``[n, 2C] @ [2C, 2O]``, the same 4 real multiplies per
    complex one as cgemm, measured 25% faster than numpy's complex matmul here."""
    return np.matmul(spectrum.view(spectrum.real.dtype), matrix).view(spectrum.dtype)


def _item_bytes(plan, c, o, itemsize):
    return plan.freqs * (c + o) * 2 * itemsize + plan.p_h * plan.p_w * max(c, o) * itemsize


def _work(plan, n):
    return int(plan.fft_s * 1e9) // max(n, 1)  # ~1 element-operation a nanosecond


def conv2d(ctx, plan, x, filters, out, epilogue=None, kept=None, fused=None):
    """Conv2D of ``x`` into ``out`` (``[N, OH, OW, O]``, preallocated) by FFT; with ``kept``
    (a list), one flat real array is appended to it: the batch's input spectra and the
    filter's matrix (``spectra_sizes``), which ``backprop_both`` takes instead of computing
    them again. ``fused``: the fused ops and bias ``epilogue`` applies, or None: a BiasAdd
    [+ Relu] on CPU float32/64 then runs with the read-out as one compiled pass
    (``_read_out_bias``), the same bits."""
    if dft_gemm.applies(plan):
        return dft_gemm.conv2d(ctx, plan, x, filters, out, epilogue, kept,
                               _looped_epilogue(ctx, fused, out))
    n, c, o = x.shape[0], x.shape[3], filters.shape[3]
    (_, top, _), (_, left, _) = plan.rows, plan.cols
    images = matrix = None
    if kept is not None:
        complex_type = np.result_type(x.dtype, np.complex64)
        sizes = spectra_sizes(plan, n, c, o)
        buffer = np.empty(sum(sizes), dtype=np.empty(0, complex_type).real.dtype)
        images = buffer[:sizes[0]].view(complex_type).reshape(plan.freqs, n, c)
        matrix = buffer[sizes[0]:].reshape(plan.freqs, 2 * c, 2 * o)
        kept.append(buffer)
    same = matrix is not None and matrix.dtype == out.dtype
    weights = _filter_spectrum(ctx, filters.astype(out.dtype, copy=False), plan, True, False,
                               matrix if same else None)
    if matrix is not None and not same:  # (x and the filter of two dtypes: a cast copy)
        matrix[...] = weights
    looped = _looped_epilogue(ctx, fused, out)

    def chunk(start, stop):
        image = _forward(x[start:stop], plan)
        if images is not None:
            images[:, start:stop] = image
        spectrum = _complex_gemm(image, weights)
        planes = _inverse(spectrum, plan, o)
        result = out[start:stop]
        if looped is not None and planes.dtype == out.dtype:
            _read_out_bias(jit.readonly(planes), int(-top % plan.p_h), int(-left % plan.p_w),
                           *looped, result)
            return
        plan.read_out(planes, -top, -left, result.transpose(1, 2, 0, 3))
        if epilogue is not None:
            epilogue(result.reshape(-1, o))
    intra_op.for_batch(ctx, n, _work(plan, n), chunk, _item_bytes(plan, c, o, x.itemsize))
    return out


def _looped_epilogue(ctx, fused, out):
    """``(bias, floor)`` for ``_read_out_bias`` where the fused ops are a BiasAdd, maybe with
    a Relu, on CPU arrays of a dtype the loops take (``jit.usable``); else None."""
    if fused is None or not fused[0] or fused[0][0] != "BiasAdd":
        return None
    activation = fused[0][1] if len(fused[0]) > 1 else None
    bias = fused[1]
    if (activation not in (None, "Relu") or bias.dtype != out.dtype or bias.ndim != 1
            or not out.flags.c_contiguous or not jit.usable(ctx, out, bias)):
        return None
    return (jit.readonly(np.ascontiguousarray(bias)),  # one signature (the warm-up's)
            out.dtype.type(0 if activation == "Relu" else np.nan))


@jit.loop
def _read_out_bias(planes, shift_h, shift_w, bias, floor, out):
    """``out[b, y, x] = planes[(y + shift_h) % P_h, (x + shift_w) % P_w, b] + bias`` then the
    Relu (``floor`` 0: a sum ``<= 0`` gives +0, as numpy's ``maximum(v, 0)``, NaN kept; NaN:
    no Relu, no comparison holds), one pass: ``read_out`` and the epilogue's two passes
    (``epilogue.fused_epilogue``) in one, the same adds. ``shift_h``, ``shift_w`` >= 0."""
    p_h, p_w = planes.shape[0], planes.shape[1]
    n, oh, ow, depth = out.shape
    for b in range(n):
        for y in range(oh):
            row = (y + shift_h) % p_h
            for x in range(ow):
                col = (x + shift_w) % p_w
                for k in range(depth):
                    v = planes[row, col, b, k] + bias[k]
                    out[b, y, x, k] = floor if v <= floor else v


def _warm_read_out():
    """Compile (or load from numba's disk cache) ``_read_out_bias``, ``_count_tame`` and the
    GEMM transforms' ``dft_gemm.warm`` for both dtypes."""
    dft_gemm.warm()
    for dtype in (np.float32, np.float64):
        _count_tame(jit.readonly(np.zeros(2, dtype)), 1e15)
        _read_out_bias(jit.readonly(np.zeros((2, 2, 1, 1), dtype)), 1, 1,
                       jit.readonly(np.zeros(1, dtype)), dtype(0), np.zeros((1, 2, 2, 1), dtype))


def backprop_input(ctx, plan, filters, grad, out):
    """Conv2DBackpropInput into ``out`` (``[N, H, W, C]``, preallocated) by FFT."""
    if dft_gemm.applies(plan):
        return dft_gemm.backprop_input(ctx, plan, filters, grad, out)
    n, c, o = out.shape[0], filters.shape[2], filters.shape[3]
    weights = _filter_spectrum(ctx, filters.astype(out.dtype, copy=False), plan, False,
                               True)
    (_, top, _), (_, left, _) = plan.rows, plan.cols

    def chunk(start, stop):
        spectrum = _complex_gemm(_forward(grad[start:stop], plan), weights)
        planes = _inverse(spectrum, plan, c)
        plan.read_out(planes, top, left, out[start:stop].transpose(1, 2, 0, 3))
    intra_op.for_batch(ctx, n, _work(plan, n), chunk, _item_bytes(plan, c, o, grad.itemsize))
    return out


def backprop_filter(ctx, plan, x, grad, f_shape, dtype):
    """Conv2DBackpropFilter by FFT: the ``f_shape`` filter gradient."""
    if dft_gemm.applies(plan):
        return dft_gemm.backprop_filter(ctx, plan, x, grad, f_shape, dtype)
    n, c, o = x.shape[0], x.shape[3], grad.shape[3]
    complex_type = np.result_type(dtype, np.complex64)
    images = np.empty((plan.freqs, n, c), dtype=complex_type)
    errors = np.empty((plan.freqs, n, o), dtype=complex_type)

    def chunk(start, stop):
        images[:, start:stop] = _forward(x[start:stop].astype(dtype, copy=False), plan)
        errors[:, start:stop] = _forward(grad[start:stop].astype(dtype, copy=False), plan)
    intra_op.for_batch(ctx, n, _work(plan, n), chunk, _item_bytes(plan, c, o, x.itemsize))
    return _filter_from_spectra(ctx, images, errors, plan, f_shape, dtype)


def _filter_from_spectra(ctx, images, errors, plan, f_shape, dtype):
    """The filter gradient from the whole batch's spectra (``images [freqs, N, C]``,
    ``errors [freqs, N, O]``): per frequency one real GEMM over the batch on the interleaved
    floats, ``[2C, N] @ [N, 2O]``, which holds every product of the (re, im) parts;
    ``sum_n x * conj(g) = (xr gr + xi gi) + i (xi gr - xr gi)`` is assembled from its four
    quarters (real parts, then imaginary ones). Split over the threads by output channels:
    each column's GEMM and sums are independent, so they do not depend on how the batch was
    chunked nor on the thread count (the batch's chunks once summed their own products: the
    split decided the bits, and the two chunks of the convnet's batch left one thread
    computing alone at their end). Then, once for every channel (a small GEMM split by
    columns rounds by its width), the inverse transform evaluated at the KH x KW cells it
    keeps, (i - top) mod P, only: one GEMM by ``dft_gemm.taps_matrix`` (25 of the convnet's 256 cells
    a period: 14.7 M multiply-adds, ~0.3 ms, where inverse transforms of whole periods and
    their read-out took 0.7 ms a chunk of 16 channels, four chunks)."""
    kh, kw = plan.kernel_hw
    (_, top, _), (_, left, _) = plan.rows, plan.cols
    _, n, c = images.shape
    o = errors.shape[2]
    result = np.empty((kh, kw, c, o), dtype=dtype)
    real = images.real.dtype
    left_side = images.view(real).transpose(0, 2, 1)  # [freqs, 2C, N]
    right_side = errors.view(real)                    # [freqs, N, 2O]
    matrix = dft_gemm.cached(dft_gemm.taps_matrix, plan.p_h, plan.p_w, kh, kw, top, left, real)

    parts = np.empty((2, plan.freqs, c, o), dtype=real)

    def chunk(start, stop):
        products = np.matmul(left_side, right_side[:, :, 2 * start:2 * stop])
        np.add(products[:, 0::2, 0::2], products[:, 1::2, 1::2], out=parts[0, ..., start:stop])
        np.subtract(products[:, 1::2, 0::2], products[:, 0::2, 1::2],
                    out=parts[1, ..., start:stop])
    intra_op.for_batch(ctx, o, c * plan.freqs * (8 + 4 * n), chunk, c * plan.freqs * 32)
    np.matmul(matrix, parts.reshape(2 * plan.freqs, c * o), out=result.reshape(kh * kw, c * o))
    return result.reshape(f_shape)


def backprop_both(ctx, plan, x, filters, grad, dx, spectra=None):
    """Conv2DBackpropInput into ``dx`` and Conv2DBackpropFilter together, each chunk's
    ``grad`` transformed once for both (``_FusedConv2DBackprop``): returns ``(dx, dw)``.
    ``spectra``: the forward's spectra of ``x`` and its filter's matrix as one flat real array
    (``conv2d``'s ``kept``, handed over by ``_FusedConv2DWithSpectra``), used when they fit
    this plan instead of transforming ``x`` and the filter again: the same transforms, and
    the filter's matrix transposed (``_transposed``) holds the values this kernel's own
    ``_filter_spectrum`` computes (equal, a zero's sign aside: the gradients' bits the same,
    tests/ops/test_conv_fft.py)."""
    if dft_gemm.applies(plan):
        return dft_gemm.backprop_both(ctx, plan, x, filters, grad, dx, spectra)
    n, c, o = x.shape[0], x.shape[3], grad.shape[3]
    kh, kw = plan.kernel_hw
    (_, top, _), (_, left, _) = plan.rows, plan.cols
    real = np.dtype(x.dtype)
    complex_type = np.result_type(real, np.complex64)
    sizes = spectra_sizes(plan, n, c, o)
    given = (spectra is not None and spectra.dtype == real and spectra.flags.c_contiguous
             and spectra.shape == (sum(sizes),))
    if given:
        images = spectra[:sizes[0]].view(complex_type).reshape(plan.freqs, n, c)
        weights = _transposed(ctx, spectra[sizes[0]:].reshape(plan.freqs, 2 * c, 2 * o))
    else:
        images = np.empty((plan.freqs, n, c), dtype=complex_type)
        weights = _filter_spectrum(ctx, filters, plan, False, True)
    errors = np.empty((plan.freqs, n, o), dtype=complex_type)

    def chunk(start, stop):
        spectrum = errors[:, start:stop]
        spectrum[...] = _forward(grad[start:stop], plan)
        planes = _inverse(_complex_gemm(spectrum, weights), plan, c)
        plan.read_out(planes, top, left, dx[start:stop].transpose(1, 2, 0, 3))
        if not given:
            images[:, start:stop] = _forward(x[start:stop], plan)
    intra_op.for_batch(ctx, n, 2 * _work(plan, n), chunk,
                       _item_bytes(plan, c, o, x.itemsize))
    return dx, _filter_from_spectra(ctx, images, errors, plan, (kh, kw, c, o), real)
