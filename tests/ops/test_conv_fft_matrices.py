"""kernels/dft_gemm.py's DFT matrices (the filter's spectrum by one GEMM, the filter
gradient's inverse at its cells): kept between calls within ``MATRIX_CACHE_BYTES`` in all, so
a large geometry's are not held for the life of the process."""
import gc
import tracemalloc

import numpy as np

from asyncflow.kernels import dft_gemm, nn_conv, nn_conv_fft

from test_conv_kernels import KernelContext, conv_attrs  # same folder


def test_a_large_geometrys_dft_matrices_are_not_kept_after_the_call(monkeypatch):
    """An 11x11 window on a 300x300 input (periods 320x320): each matrix 95 MiB in float64,
    over a bound of 64 MiB. After the filter's spectrum and the filter gradient's inverse,
    what the calls left allocated is below the bound (the matrices were held by a cache of
    64 geometries each, whatever their bytes: 190 MiB here)."""
    monkeypatch.setattr(dft_gemm, "MATRIX_CACHE_BYTES", 64 << 20)
    ctx = KernelContext(conv_attrs(1, 1, 1, 1, "SAME"), 1)
    x_shape, f_shape = (1, 300, 300, 1), (11, 11, 1, 1)
    rows, cols = nn_conv._spatial(ctx, x_shape, f_shape[:2])
    plan = nn_conv_fft.Plan(x_shape, f_shape, rows, cols)
    assert 2 * plan.freqs * 121 * 8 > dft_gemm.MATRIX_CACHE_BYTES
    images = np.ones((plan.freqs, 1, 1), np.complex128)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        spectrum = nn_conv_fft._filter_spectrum(ctx, np.ones(f_shape), plan, True, False)
        grad = nn_conv_fft._filter_from_spectra(ctx, images, images, plan, f_shape,
                                                np.dtype(np.float64))
        del spectrum, grad
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < dft_gemm.MATRIX_CACHE_BYTES, f"{kept / 2 ** 20:.0f} MiB kept"


def test_the_kept_matrices_stay_within_the_bound_and_are_reused(monkeypatch):
    """Many small geometries: the least recently used dropped once the bytes pass the bound;
    a kept one is returned again (the same read-only array), as built."""
    monkeypatch.setattr(dft_gemm, "_matrices", type(dft_gemm._matrices)())
    monkeypatch.setattr(dft_gemm, "MATRIX_CACHE_BYTES", 100_000)
    real = np.dtype(np.float32)
    first = dft_gemm.cached(dft_gemm.spectrum_matrix, 16, 16, 5, 5, real)
    assert dft_gemm.cached(dft_gemm.spectrum_matrix, 16, 16, 5, 5, real) is first
    assert not first.flags.writeable
    assert np.array_equal(first, dft_gemm.spectrum_matrix(16, 16, 5, 5, real))
    for period in range(17, 40):
        dft_gemm.cached(dft_gemm.taps_matrix, period, period, 5, 5, 2, 2, real)
        assert sum(m.nbytes for m in dft_gemm._matrices.values()) <= 100_000
    assert ("spectrum_matrix", 16, 16, 5, 5, real) not in dft_gemm._matrices
