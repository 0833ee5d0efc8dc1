"""The FFT convolution's transforms by GEMM: planar, batch-last spectra (``nn_conv_fft.py``).

Theory of operation. For small periods (the convnet's 16x16) a DFT is cheaper as a product
by a small DFT matrix than as pocketfft's stacked transforms of [P_h, P_w] planes, once the
data is laid out so that the product is one large GEMM: a transform along one axis is
``matrix [2F, K] @ data [K, columns]`` with every other axis in the columns. So a batch
chunk of ``n`` images ``[n, H, W, C]`` is copied once to ``[W, H, C, n]`` (batch last) and:

- the forward transform (real, zero-padded to the period) along W: ``[2 * half, W] @ [W,
  H*C*n]``, rows (kw, re/im), then along H, complex, per kw: ``[2 P_h, 2H] @ [2H, C*n]``,
  rows (kh, re/im), columns (re/im, h): the spectrum ``[half, P_h, 2C, n]``, each
  frequency's ``[2C, n]`` block its real parts' C rows, then its imaginary parts';
- the per-frequency channel products are real GEMMs by the filter's block matrix
  ``[[Wr, -Wi], [Wi, Wr]]`` (``[2C, 2O]``, ``filter_matrix``: DX = W G for the input
  gradient) or its transpose (``[2O, 2C]``: conj(W)^T X for Conv2D, a transposed operand, no
  copy), the same 4 real multiplies per complex one as before, into ``[half, P_h, 2O, n]``;
- the inverse (``inverse``) is evaluated at the read-out's cells only, ``(y + shift) mod P``
  for the ``count`` cells kept: along H, complex, per kw ``[2 count_h, 2 P_h] @ [2 P_h,
  O*n]``, then along W to real (the half spectrum's inner columns counted twice, irfft2's
  convention) ``[count_w, 2 * half] @ [2 * half, count_h*O*n]``: ``[count_w, count_h, O, n]``,
  copied to the kernel's ``[n, count_h, count_w, O]`` by one compiled pass (``_rows``, with
  the fused BiasAdd [+ Relu] where the forward has them; numpy's copy without numba);
- the filter gradient: per frequency one GEMM over the whole batch, ``[2C, N] @ [N, 2O]``,
  whose quarters give sum_n x conj(g), split by frequency (each GEMM whole: bits
  independent of the thread count, as are the spectra it sums, transformed in blocks of
  the batch fixed by bytes, ``_blocks``), then the inverse at the filter's KH x KW
  cells by one GEMM (``planar_taps_matrix``). The spectra it sums are kept block by block
  (``_block_spectra``: each block's transform GEMM writes its own slab, no copy into a
  batch-last whole) and each group of frequencies' rows packed into a small cache-sized
  buffer before its GEMMs (the same GEMMs: the same bits).

Interleaved (re, im) floats, which the old per-frequency GEMMs took, cannot be a GEMM's
output; the planar layout can, end to end. Multiply-adds for conv2 (128 x [14, 14, 32], 5x5
-> 64): ~1.1 M a image in the transforms (vs pocketfft's ~5 flops a point a pass), each
GEMM with K of 14-36, split over the intra-op threads by batch chunks of up to ~64 images
(``_split``). Used where both periods are at most ``MAX_PERIOD``
(``applies``; the GEMMs grow with the period, pocketfft with its logarithm): pocketfft's
forms in ``nn_conv_fft.py`` stay for larger ones. Results are not pocketfft's bits:
float32 rounding of sums of up to P terms per pass, within the FFT path's tolerances
(tests/ops/test_conv_fft.py, tests/ops/test_dft_gemm.py).

The DFT matrices of both forms are kept between calls (``cached``): per geometry and dtype, at
most ``MATRIX_CACHE_BYTES`` in all, the least recently used dropped first.
"""
from __future__ import annotations

import collections
import threading

import numpy as np

from asyncflow.kernels import intra_op, jit

# The largest period (either dimension) the transforms take by GEMM; 0: pocketfft always.
MAX_PERIOD = 64

# The filter gradient's packed rows (``filter_gradient``, several blocks): about this many
# bytes of both spectra per group of frequencies, kept in a core's cache for its GEMMs.
PACK_BYTES = 1 << 20

# The fused backprop's blocks and its filter gradient's chunks as one queue of the intra-op
# pool (``_blocks_then``); False: the blocks, then the chunks, each split alone (the form
# before, for bench/bench_ab_setting.py's A/B).
ONE_QUEUE = True

# The DFT matrices (all ``*_matrix`` builders here) kept between calls: per geometry and
# dtype, at most this many bytes in all, the least recently used dropped first; one larger
# is built for its call only. A 300x300 input's 11x11 window: 95 MiB each in float64, 0.3-0.45
# s to build (more than their GEMMs up to a few hundred channel pairs); the convnet's: 28 KB.
MATRIX_CACHE_BYTES = 256 << 20
_matrices = collections.OrderedDict()
_matrices_lock = threading.Lock()  # (kernels on several intra-op or inter-op threads)


def cached(build, *key):
    """``build(*key)``, kept in ``_matrices`` within ``MATRIX_CACHE_BYTES``."""
    key = (build.__name__,) + key
    with _matrices_lock:
        if key in _matrices:
            _matrices.move_to_end(key)
            return _matrices[key]
    matrix = build(*key[1:])
    if matrix.nbytes <= MATRIX_CACHE_BYTES:
        with _matrices_lock:
            _matrices[key] = matrix
            while sum(kept.nbytes for kept in _matrices.values()) > MATRIX_CACHE_BYTES:
                _matrices.popitem(last=False)
    return matrix


def _frozen(matrix, dtype):
    matrix = np.ascontiguousarray(matrix, dtype=dtype)
    matrix.flags.writeable = False
    return matrix


def spectrum_matrix(p_h, p_w, kh, kw, dtype):
    """The 2-D DFT of a ``[P_h, P_w]`` period whose cells outside ``[0, kh) x [0, kw)`` are 0,
    at the half spectrum's ``[P_h, P_w // 2 + 1]`` frequencies, as rfft2 computes it: the
    real parts' rows, then the imaginary parts', by the ``kh * kw`` cells (angles reduced mod
    P in integers): ``[2 * freqs, kh * kw]``. Read-only."""
    half = p_w // 2 + 1
    rows = (np.arange(p_h)[:, None] * np.arange(kh)) % p_h / p_h  # [P_h, kh]
    cols = (np.arange(half)[:, None] * np.arange(kw)) % p_w / p_w  # [half, kw]
    angle = 2 * np.pi * (rows[:, None, :, None] + cols[None, :, None, :])  # [P_h, half, kh, kw]
    matrix = np.stack([np.cos(angle), -np.sin(angle)])
    return _frozen(matrix.reshape(2 * p_h * half, kh * kw), dtype)


def taps_matrix(p_h, p_w, kh, kw, top, left, dtype):
    """The real inverse 2-D DFT of a half spectrum (``[P_h, P_w // 2 + 1]``, real parts then
    imaginary ones: ``2 * freqs`` rows) evaluated at the ``kh * kw`` cells ((i - top) mod P_h,
    (j - left) mod P_w): ``[kh * kw, 2 * freqs]``, as irfft2 computes them (the half
    spectrum's inner columns count twice, the first and, for an even P_w, the last once, and
    their imaginary parts not at all; the angles reduced mod P in integers). Read-only."""
    half = p_w // 2 + 1
    rows = ((np.arange(kh) - top)[:, None] * np.arange(p_h)) % p_h / p_h  # [kh, P_h]
    cols = ((np.arange(kw) - left)[:, None] * np.arange(half)) % p_w / p_w  # [kw, half]
    angle = 2 * np.pi * (rows[:, None, :, None] + cols[None, :, None, :])  # [kh, kw, P_h, half]
    scale = _column_weights(p_w) / (p_h * p_w)
    matrix = np.stack([scale * np.cos(angle), -scale * np.sin(angle)], axis=2)
    return _frozen(matrix.reshape(kh * kw, 2 * p_h * half), dtype)


def _column_weights(p_w):
    """irfft's count of each half-spectrum column: 2, the first (and an even P_w's last) 1."""
    weight = np.full(p_w // 2 + 1, 2.0)
    weight[0] = 1.0
    if p_w % 2 == 0:
        weight[-1] = 1.0
    return weight


def planar_taps_matrix(p_h, p_w, kh, kw, top, left, dtype):
    """``taps_matrix`` with its columns in the planar spectra's order (re/im, kw, kh)."""
    half = p_w // 2 + 1
    matrix = taps_matrix(p_h, p_w, kh, kw, top, left, np.float64)
    return _frozen(matrix.reshape(kh * kw, 2, p_h, half).transpose(0, 1, 3, 2)
                   .reshape(kh * kw, 2 * p_h * half), dtype)


def width_matrix(w, p_w, dtype):
    """The real DFT along W of ``w`` data cells in a period ``p_w``: ``[2 * half, w]``, rows
    (kw, re/im)."""
    angle = 2 * np.pi * ((np.arange(p_w // 2 + 1)[:, None] * np.arange(w)) % p_w) / p_w
    return _frozen(np.stack([np.cos(angle), -np.sin(angle)], axis=1).reshape(-1, w), dtype)


def height_matrix(h, p_h, dtype):
    """The complex DFT along H of ``h`` cells in a period ``p_h`` on planar values: ``[2 P_h,
    2h]``, rows (kh, re/im), columns (re/im, h): (c - is)(a + ib) = (ca + sb) + i(cb - sa)."""
    angle = 2 * np.pi * ((np.arange(p_h)[:, None] * np.arange(h)) % p_h) / p_h
    c, s = np.cos(angle), np.sin(angle)
    matrix = np.empty((p_h, 2, 2, h))
    matrix[:, 0, 0], matrix[:, 0, 1], matrix[:, 1, 0], matrix[:, 1, 1] = c, s, -s, c
    return _frozen(matrix.reshape(2 * p_h, 2 * h), dtype)


def inverse_height_matrix(count, p_h, shift, dtype):
    """The complex inverse DFT along H evaluated at cells (y + shift) mod P_h, y < count:
    ``[2 count, 2 P_h]``, rows (re/im, y), columns (kh, re/im)."""
    cells = (np.arange(count) + shift) % p_h
    angle = 2 * np.pi * ((cells[:, None] * np.arange(p_h)) % p_h) / p_h
    c, s = np.cos(angle), np.sin(angle)
    matrix = np.empty((2, count, p_h, 2))
    matrix[0, :, :, 0], matrix[0, :, :, 1], matrix[1, :, :, 0], matrix[1, :, :, 1] = c, -s, s, c
    return _frozen(matrix.reshape(2 * count, 2 * p_h), dtype)


def inverse_width_matrix(count, p_h, p_w, shift, dtype):
    """The real inverse along W of a half spectrum (irfft2's scale 1 / (P_h P_w) with it),
    evaluated at cells (x + shift) mod P_w, x < count: ``[count, 2 * half]``, columns (kw,
    re/im): Re(z e^{i a}) = zr cos a - zi sin a."""
    cells = (np.arange(count) + shift) % p_w
    angle = 2 * np.pi * ((cells[:, None] * np.arange(p_w // 2 + 1)) % p_w) / p_w
    scale = _column_weights(p_w) / (p_h * p_w)
    return _frozen(np.stack([scale * np.cos(angle), -scale * np.sin(angle)], axis=2)
                   .reshape(count, -1), dtype)


def applies(plan):
    """Whether ``plan``'s transforms run here (by GEMM) rather than by pocketfft."""
    return max(plan.p_h, plan.p_w) <= MAX_PERIOD


def transform(block, plan, out=None):
    """The half spectrum of ``block`` (``[n, h, w, C]``, h, w <= the periods) as ``[half,
    P_h, 2C, n]`` (module docstring); ``out``: a C-contiguous array of that shape written by
    the last GEMM itself where it has ``block``'s dtype (the same GEMM, so the same bits)."""
    n, h, w, c = block.shape
    half = plan.p_w // 2 + 1
    across = cached(width_matrix, w, plan.p_w, block.dtype)
    down = cached(height_matrix, h, plan.p_h, block.dtype)
    columns = np.ascontiguousarray(block.transpose(2, 1, 3, 0))  # [w, h, C, n]
    partial = np.matmul(across, columns.reshape(w, h * c * n)).reshape(half, 2 * h, c * n)
    if out is None or out.dtype != block.dtype:
        spectrum = np.matmul(down, partial).reshape(half, plan.p_h, 2 * c, n)
        if out is None:
            return spectrum
        out[...] = spectrum
        return out
    np.matmul(down, partial, out=out.reshape(half, 2 * plan.p_h, c * n))
    return out


def inverse(spectrum, plan, count_h, count_w, shift_h, shift_w):
    """``[half, P_h, 2K, n]`` back to real cells ((y + shift_h) mod P_h, (x + shift_w) mod
    P_w), y < count_h, x < count_w: ``[count_w, count_h, K, n]``."""
    half, p_h, rows, n = spectrum.shape
    real = spectrum.dtype
    down = cached(inverse_height_matrix, count_h, p_h, shift_h % p_h, real)
    across = cached(inverse_width_matrix, count_w, p_h, plan.p_w, shift_w % plan.p_w, real)
    partial = np.matmul(down, spectrum.reshape(half, 2 * p_h, rows // 2 * n))
    planes = np.matmul(across, partial.reshape(2 * half, count_h * rows // 2 * n))
    return planes.reshape(count_w, count_h, rows // 2, n)


def filter_matrix(ctx, filters, plan, out=None):
    """The filter's spectrum as the block matrices ``[half, P_h, 2C, 2O]``, ``[[Wr, -Wi],
    [Wi, Wr]]`` per frequency: its DFT by one GEMM (``spectrum_matrix``, whole), then the four
    parts copied, split over the intra-op threads by kw. ``out``: a C-contiguous array of
    that shape to write it into."""
    kh, kw, c, o = filters.shape
    half = plan.p_w // 2 + 1
    real = np.result_type(filters.dtype, np.float32)
    matrix = np.empty((half, plan.p_h, 2 * c, 2 * o), real) if out is None else out
    dft = cached(spectrum_matrix, plan.p_h, plan.p_w, kh, kw, real)
    parts = np.matmul(dft, filters.reshape(kh * kw, c * o).astype(real, copy=False))
    parts = parts.reshape(2, plan.p_h, half, c, o)
    blocks = matrix.reshape(half, plan.p_h, 2, c, 2, o)

    def chunk(start, stop):
        block = blocks[start:stop]
        re = parts[0, :, start:stop].transpose(1, 0, 2, 3)
        im = parts[1, :, start:stop].transpose(1, 0, 2, 3)
        block[:, :, 0, :, 0] = re
        block[:, :, 1, :, 1] = re
        block[:, :, 1, :, 0] = im
        np.negative(im, out=block[:, :, 0, :, 1])
    intra_op.for_batch(ctx, half, 4 * plan.p_h * c * o, chunk, 32 * plan.p_h * c * o)
    return matrix


def filter_gradient(ctx, images, errors, plan, f_shape, dtype):
    """The filter gradient from the batch's planar spectra, block by block (``images``:
    ``[half, P_h, 2C, n]`` per block of the batch, ``errors`` ``[half, P_h, 2O, n]``, in the
    batch's order, ``_block_spectra``): per frequency ``[2C, N] @ [N, 2O]`` over the whole
    batch, whose quarters give sum_n x conj(g) = (xr gr + xi gi) + i (xi gr - xr gi), split
    over the threads by frequency (every GEMM whole); then the inverse at the KH x KW cells by
    one GEMM, and its ``[KH, KW, O, C]`` transposed. Several blocks: each group of
    frequencies' rows packed into a small whole-batch buffer first (~``PACK_BYTES``, in cache
    for its GEMMs), the same GEMMs, so the same bits as one whole-batch array."""
    chunk, work, item_bytes, finish = _filter_gradient_parts(images, errors, plan, f_shape,
                                                             dtype)
    intra_op.for_batch(ctx, plan.freqs, work, chunk, item_bytes)
    return finish()


def _filter_gradient_parts(images, errors, plan, f_shape, dtype):
    """``filter_gradient`` in pieces: ``(chunk, work, item_bytes, finish)``, ``chunk(start,
    stop)`` the GEMMs of frequencies [start, stop) (any cut: each frequency's GEMM is whole),
    ``work``/``item_bytes`` per frequency for ``for_batch``, and ``finish()`` the taps GEMM
    once every frequency is done, returning the gradient."""
    kh, kw = plan.kernel_hw
    (_, top, _), (_, left, _) = plan.rows, plan.cols
    n = sum(block.shape[3] for block in images)
    c, o = images[0].shape[2] // 2, errors[0].shape[2] // 2
    real = images[0].dtype
    xs = [block.reshape(plan.freqs, 2 * c, block.shape[3]) for block in images]
    gs = [block.reshape(plan.freqs, 2 * o, block.shape[3]) for block in errors]
    parts = np.empty((2, plan.freqs, o, c), dtype=real)
    group = max(1, PACK_BYTES // max(1, 2 * (c + o) * n * real.itemsize))  # (N 0: no 1/0)

    def gemms(start, stop, x, g):  # (G X^T, X's transpose packed: 10% faster than X G^T)
        products = np.matmul(g, x.transpose(0, 2, 1))
        np.add(products[:, :o, :c], products[:, o:, c:], out=parts[0, start:stop])
        np.subtract(products[:, :o, c:], products[:, o:, :c], out=parts[1, start:stop])

    def chunk(start, stop):
        if len(xs) == 1:
            return gemms(start, stop, xs[0][start:stop], gs[0][start:stop])
        x = np.empty((min(group, stop - start), 2 * c, n), dtype=real)
        g = np.empty((len(x), 2 * o, n), dtype=real)
        for first in range(start, stop, group):
            last = min(stop, first + group)
            at = 0
            for x_block, g_block in zip(xs, gs):
                width = x_block.shape[2]
                x[:last - first, :, at:at + width] = x_block[first:last]
                g[:last - first, :, at:at + width] = g_block[first:last]
                at += width
            gemms(first, last, x[:last - first], g[:last - first])

    def finish():
        matrix = cached(planar_taps_matrix, plan.p_h, plan.p_w, kh, kw, top, left, real)
        taps = np.matmul(matrix, parts.reshape(2 * plan.freqs, o * c))
        result = np.empty((kh, kw, c, o), dtype=dtype)
        np.copyto(result, taps.reshape(kh, kw, o, c).transpose(0, 1, 3, 2),
                  casting="same_kind")
        return result.reshape(f_shape)
    return (chunk, c * o * (8 + 4 * n) // intra_op.MACS_PER_WORK, 32 * c * o * real.itemsize,
            finish)


def spectra_shapes(plan, n, c, o):
    """The forward's kept spectra (``conv2d``'s ``kept``, one flat array): the batch's input
    spectra (``[half, P_h, 2C, N]``'s floats, laid out block by block: ``_block_spectra``),
    then the filter's matrix ``[half, P_h, 2C, 2O]``."""
    half = plan.p_w // 2 + 1
    return (half, plan.p_h, 2 * c, n), (half, plan.p_h, 2 * c, 2 * o)


def _block_spectra(flat, blocks, plan, rows):
    """``flat`` (the floats of ``[half, P_h, rows, N]``) as one C-contiguous ``[half, P_h,
    rows, n]`` per block of the batch (``blocks``, in order): each block's transform writes
    its own slab (``transform``'s ``out``), no copy into a batch-last whole."""
    half = plan.p_w // 2 + 1
    views, at = {}, 0
    for first, last in blocks:
        size = half * plan.p_h * rows * (last - first)
        views[first] = flat[at:at + size].reshape(half, plan.p_h, rows, last - first)
        at += size
    return views


def _split(plan, c, o, itemsize):
    """``for_batch``'s work and bytes per image: a quarter of the transforms' and GEMMs'
    temporaries, so a chunk's reach ~4x ``CHUNK_BYTES``: larger chunks measured faster on
    conv2 (64-image chunks against 16: 0.87-0.88x on one thread, 0.86-0.95x on two, with
    glibc's defaults and with a worker's kept freed memory; the GEMMs' N is C or O times the
    images, bench/RESULTS.md)."""
    temporaries = plan.freqs * (c + o) * 2 + plan.in_h * plan.in_w * (c + 2 * o)
    return int(plan.fft_s * 1e9), temporaries * itemsize // 4


def conv2d(ctx, plan, x, filters, out, epilogue, kept, looped):
    """``nn_conv_fft.conv2d`` by GEMM transforms: ``kept`` as there (this module's layout,
    ``spectra_shapes``); ``looped``: ``(bias, floor)`` for ``_rows``, or None; where it is not
    applied, ``epilogue`` (if any) runs on each chunk."""
    n, oh, ow, o = out.shape
    c = x.shape[3]
    (_, top, _), (_, left, _) = plan.rows, plan.cols
    images = matrix = None
    work, item_bytes = _split(plan, c, o, x.itemsize)
    blocks = _blocks(n, item_bytes)
    if kept is not None:
        shapes = spectra_shapes(plan, n, c, o)
        sizes = [int(np.prod(shape)) for shape in shapes]
        buffer = np.empty(sum(sizes), dtype=np.result_type(x.dtype, np.float32))
        images = _block_spectra(buffer[:sizes[0]], blocks, plan, 2 * c)
        matrix = buffer[sizes[0]:].reshape(shapes[1])
        kept.append(buffer)
    same = matrix is not None and matrix.dtype == out.dtype
    weights = filter_matrix(ctx, filters.astype(out.dtype, copy=False), plan,
                            matrix if same else None)
    if matrix is not None and not same:  # (x and the filter of two dtypes: a cast copy)
        matrix[...] = weights
    turned = weights.transpose(0, 1, 3, 2)  # conj(W)^T's blocks: [2O, 2C]

    def chunk(start, stop):
        spectrum = transform(x[start:stop], plan, None if images is None else images[start])
        planes = inverse(np.matmul(turned, spectrum.astype(out.dtype, copy=False)), plan,
                         oh, ow, -top, -left)
        if not write_rows(ctx, planes, out[start:stop], looped) and epilogue is not None:
            epilogue(out[start:stop].reshape(-1, o))
    if images is None:
        intra_op.for_batch(ctx, n, work // max(n, 1), chunk, item_bytes)
    else:  # (the kept spectra feed the filter gradient)
        _for_blocks(ctx, blocks, work, chunk)
    return out


def backprop_input(ctx, plan, filters, grad, out):
    """``nn_conv_fft.backprop_input`` by GEMM transforms."""
    n, h, w, c = out.shape
    (_, top, _), (_, left, _) = plan.rows, plan.cols
    weights = filter_matrix(ctx, filters.astype(out.dtype, copy=False), plan)

    def chunk(start, stop):
        spectrum = transform(grad[start:stop], plan)
        planes = inverse(np.matmul(weights, spectrum), plan, h, w, top, left)
        write_rows(ctx, planes, out[start:stop], None)
    work, item_bytes = _split(plan, c, grad.shape[3], grad.itemsize)
    intra_op.for_batch(ctx, n, work // max(n, 1), chunk, item_bytes)
    return out


def backprop_filter(ctx, plan, x, grad, f_shape, dtype):
    """``nn_conv_fft.backprop_filter`` by GEMM transforms."""
    n, c, o = x.shape[0], x.shape[3], grad.shape[3]
    real = np.result_type(dtype, np.float32)
    work, item_bytes = _split(plan, c, o, x.itemsize)
    blocks = _blocks(n, item_bytes)
    images = _block_spectra(np.empty(plan.freqs * 2 * c * n, real), blocks, plan, 2 * c)
    errors = _block_spectra(np.empty(plan.freqs * 2 * o * n, real), blocks, plan, 2 * o)

    def chunk(start, stop):
        transform(x[start:stop].astype(real, copy=False), plan, images[start])
        transform(grad[start:stop].astype(real, copy=False), plan, errors[start])
    _for_blocks(ctx, blocks, work, chunk)
    return filter_gradient(ctx, list(images.values()), list(errors.values()), plan, f_shape,
                           dtype)


def backprop_both(ctx, plan, x, filters, grad, dx, spectra=None):
    """``nn_conv_fft.backprop_both`` by GEMM transforms: ``spectra`` is this module's
    ``conv2d``'s kept array, used as is (the filter's matrix needs no transposition here)."""
    n, h, w, c = dx.shape
    o = grad.shape[3]
    (_, top, _), (_, left, _) = plan.rows, plan.cols
    real = np.dtype(x.dtype)
    shapes = spectra_shapes(plan, n, c, o)
    sizes = [int(np.prod(shape)) for shape in shapes]
    given = (spectra is not None and spectra.dtype == real and spectra.flags.c_contiguous
             and spectra.shape == (sum(sizes),))
    work, item_bytes = _split(plan, c, o, x.itemsize)
    blocks = _blocks(n, item_bytes)  # (the forward's: the same x, so the same item_bytes)
    if given:
        images = _block_spectra(spectra[:sizes[0]], blocks, plan, 2 * c)
        weights = spectra[sizes[0]:].reshape(shapes[1])
    else:
        images = _block_spectra(np.empty(sizes[0], dtype=real), blocks, plan, 2 * c)
        weights = filter_matrix(ctx, filters, plan)
    errors = _block_spectra(np.empty(plan.freqs * 2 * o * n, dtype=real), blocks, plan, 2 * o)
    gradient, fg_work, fg_bytes, finish = _filter_gradient_parts(
        list(images.values()), list(errors.values()), plan, (*plan.kernel_hw, c, o), real)

    def block(first, last):  # its spectra first: the filter gradient's chunks wait for them
        spectrum = transform(grad[first:last], plan, errors[first])
        if not given:
            transform(x[first:last], plan, images[first])
        yield
        planes = inverse(np.matmul(weights, spectrum), plan, h, w, top, left)
        write_rows(ctx, planes, dx[first:last], None)
    _blocks_then(ctx, blocks, block, 2 * work, gradient, plan.freqs, fg_work, fg_bytes)
    return dx, finish()


def _blocks_then(ctx, blocks, block, work, then, count, then_work, then_bytes):
    """``block(first, last)`` (a generator) for every block of the batch, then ``then(start,
    stop)`` over ``range(count)`` in chunks, as one queue of the intra-op pool: a thread done
    with its block takes ``then``'s chunks while another still computes one (with two blocks
    on two threads, one core idled 1.5-2.5 ms at the blocks' end, bench/RESULTS.md
    2026-12-07, c41conv). Each block's part before its ``yield`` (the spectra ``then``
    reads) is done before any chunk of ``then`` starts: a chunk taken early waits for it
    (every block was taken before it, by a running thread), through the pool (``wait``), so
    that a block failing or interrupted (Ctrl-C) anywhere ends the wait instead of leaving
    the chunk, and the split's caller, waiting forever. The same calls as the blocks,
    then ``then`` over its chunks, in order on one thread: the same bits."""
    pool = getattr(ctx.device, "intra_op", None)
    per_chunk = max(1, intra_op.CHUNK_BYTES // then_bytes) if then_bytes else count
    threads = 1 if pool is None else pool.threads
    parts = min(count, -(-(-(-count // per_chunk)) // threads) * threads)
    chunks = intra_op.chunk_bounds(count, max(1, parts))
    if not ONE_QUEUE:
        _for_blocks(ctx, blocks, work, lambda first, last: [*block(first, last)])
        intra_op.for_batch(ctx, count, then_work, then, then_bytes)
        return
    if pool is None or work + count * then_work < intra_op.MIN_SPLIT_WORK:
        for first, last in blocks:
            for _ in block(first, last):
                pass
        for start, stop in chunks:
            then(start, stop)
        return
    ready = [threading.Event() for _ in blocks]

    def task(index, _):
        if index < len(blocks):
            steps = block(*blocks[index])
            next(steps, None)
            ready[index].set()  # (set only when done: if the block fails or is interrupted
            for _ in steps:     # first, the split stops and the chunks' waits end)
                pass
            return
        for event in ready:
            if not pool.wait(event):  # the split stopped: it raises the error
                return
        then(*chunks[index - len(blocks)])
    pool.run(task, [(index, index + 1) for index in range(len(blocks) + len(chunks))],
             waits=True)


def _blocks(n, item_bytes):
    """The blocks of the batch fixed by ``item_bytes``: equal blocks of at most
    ``intra_op.CHUNK_BYTES // item_bytes`` images, whatever the thread count. For the spectra
    the filter gradient sums over the batch: a transform's GEMM rounds each image by the
    GEMM's shape (OpenBLAS's small-matrix and edge kernels), so ``for_batch``'s chunks, cut by
    the thread count where the batch fits one chunk, would make the filter gradient's bits
    depend on it; for the same reason each block's transform is one GEMM writing its own
    slab (``_block_spectra``): a block's GEMMs split by channels into a batch-last whole
    measured other bits."""
    if n == 0:
        return [(0, 0)]
    return intra_op.chunk_bounds(n, -(-n // max(1, intra_op.CHUNK_BYTES // item_bytes)))


def _for_blocks(ctx, blocks, work, fn):
    """``fn(start, stop)`` over ``blocks`` (``_blocks``); the threads share them."""

    def run(start, stop):
        for first, last in blocks[start:stop]:
            fn(first, last)
    intra_op.for_batch(ctx, len(blocks), work // len(blocks), run)


_NO_BIAS = {}  # dtype -> an empty read-only bias (``_rows``' one signature per dtype)


def write_rows(ctx, planes, out, looped):
    """``out[b, y, x, k] = planes[x, y, k, b]`` (``inverse``'s layout to the kernel's), with
    ``looped``'s bias and floor (``nn_conv_fft._looped_epilogue``) in the same pass where
    given; by ``_rows`` where ``jit.usable``, else numpy's copy. Returns whether ``looped``
    was applied (else the caller's epilogue runs)."""
    if planes.dtype == out.dtype and out.flags.c_contiguous and jit.usable(ctx, planes, out):
        applied = looped is not None
        if looped is None:
            empty = _NO_BIAS.get(out.dtype)
            if empty is None:
                empty = _NO_BIAS.setdefault(out.dtype, jit.readonly(np.empty(0, out.dtype)))
            looped = (empty, out.dtype.type(np.nan))
        _rows(planes, *looped, out)
        return applied
    np.copyto(out, planes.transpose(3, 1, 0, 2), casting="same_kind")
    return False


@jit.loop
def _rows(planes, bias, floor, out):
    """``out[b, y, x, k] = planes[x, y, k, b] (+ bias[k])``, then ``floor`` where the value
    is ``<= floor`` (0: a Relu, as ``nn_conv_fft._read_out_bias``; NaN: none). An empty
    ``bias``: none added (a plain copy)."""
    count_w, count_h, depth, n = planes.shape
    biased = bias.shape[0] > 0
    for y in range(count_h):
        for x in range(count_w):
            for b in range(n):
                for k in range(depth):
                    v = planes[x, y, k, b]
                    if biased:
                        v = v + bias[k]
                    out[b, y, x, k] = floor if v <= floor else v


def warm():
    """Compile (or load from numba's disk cache) ``_rows`` for both dtypes, with the
    argument types ``write_rows`` passes."""
    for dtype in (np.float32, np.float64):
        for bias in (np.zeros(0, dtype), np.zeros(1, dtype)):
            _rows(np.zeros((1, 1, 1, 1), dtype), jit.readonly(bias), dtype(0),
                  np.zeros((1, 1, 1, 1), dtype))
