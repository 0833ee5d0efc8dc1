"""Kernels of the special-function family (see ops/special.py), on the host in float64.

- ``Erf``: float64 results use the C library's ``erf`` (one Python call per element);
  narrower dtypes use, in float64, the Taylor series below |x| = 1 (exact to float64) and
  ``1 - erfc(|x|)`` above, with Numerical Recipes' Chebyshev erfc (relative error below
  1.2e-7, so the float64 result is within 3e-8 of erf there: under one float32 ulp).
- ``Erfc``: the C library's ``erfc`` per element, in float64, rounded once to the dtype.
- ``Lgamma``: the C library's ``lgamma`` per element.
- ``Igamma``/``Igammac``: scipy.special's ``gammainc``/``gammaincc`` (Cephes) in float64,
  NaN outside TF1's domain (a <= 0 or x < 0).
- ``Digamma``: the recurrence ``psi(x) = psi(x + 1) - 1/x`` up to x >= 12, then the
  asymptotic series to x^-14 (relative error near 1e-15); the reflection formula below 0.
"""
from __future__ import annotations

import math

import numpy as np

from asyncflow.kernels.registry import Preload, register_kernel, register_prepare

_erf_exact = np.frompyfunc(math.erf, 1, 1)
_erfc_exact = np.frompyfunc(math.erfc, 1, 1)
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def _lgamma_one(value):
    try:
        return math.lgamma(value)
    except (ValueError, OverflowError):  # a pole (0, -1, -2, ...) or |x| > ~2.5e305: inf
        return math.inf


_lgamma_exact = np.frompyfunc(_lgamma_one, 1, 1)


def _erf_fast(x):
    a = np.abs(x)
    out = np.empty_like(a)
    small = a < 1.0
    z = a[small]
    term, total, z2 = z.copy(), z.copy(), z * z
    for n in range(1, 22):  # sum (-1)^n z^(2n+1) / (n! (2n+1)); the 22nd term is below 1e-21
        term *= -z2 / n
        total += term / (2 * n + 1)
    out[small] = total * _TWO_OVER_SQRT_PI
    big = a[~small]
    t = 1.0 / (1.0 + 0.5 * big)
    poly = 0.17087277
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
              0.37409196, 1.00002368, -1.26551223):
        poly = poly * t + c
    out[~small] = 1.0 - t * np.exp(poly - big * big)
    return np.copysign(out, x)


@register_kernel("Erf", "CPU")
def _erf(ctx, x):
    wide = np.asarray(x, dtype=np.float64)
    if x.dtype == np.float64:
        return (np.asarray(_erf_exact(wide), dtype=np.float64),)
    return (np.asarray(_erf_fast(wide), dtype=x.dtype),)


@register_kernel("Erfc", "CPU")
def _erfc(ctx, x):
    return (np.asarray(_erfc_exact(np.asarray(x, dtype=np.float64)), dtype=x.dtype),)


@register_kernel("Lgamma", "CPU")
def _lgamma(ctx, x):
    return (np.asarray(_lgamma_exact(np.asarray(x, dtype=np.float64)), dtype=x.dtype),)


# Bernoulli-number coefficients of psi(x) ~ ln x - 1/(2x) - sum B_2k / (2k x^2k).
_PSI_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)


def _digamma_positive(x):
    shift = np.zeros_like(x)
    for _ in range(12):  # psi(x) = psi(x + 1) - 1/x until x >= 12
        low = x < 12
        if not low.any():
            break
        shift[low] -= 1.0 / x[low]
        x = np.where(low, x + 1.0, x)
    inv2 = 1.0 / (x * x)
    series = 0.0
    for c in reversed(_PSI_SERIES):
        series = (series + c) * inv2
    return shift + np.log(x) - 0.5 / x - series


@register_kernel("Digamma", "CPU")
def _digamma(ctx, x):
    wide = np.asarray(x, dtype=np.float64)
    out = np.full(wide.shape, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        positive = wide > 0
        out[positive] = _digamma_positive(wide[positive])
        negative = (wide <= 0) & (wide != np.floor(wide))  # poles at 0, -1, ... stay NaN
        z = wide[negative]  # psi(x) = psi(1 - x) - pi / tan(pi x)
        out[negative] = _digamma_positive(1.0 - z) - np.pi / np.tan(np.pi * z)
    return (out.astype(x.dtype),)


# -- Igamma / Igammac: scipy.special (a dependency), imported off the event loop --------------
_special = None


def _load_special(ctx=None):
    """Import scipy.special once (0.1-0.3 s: a prepare hook's preload runs it on a worker
    thread before the first step; the kernel imports it itself if no hook ran)."""
    global _special
    if _special is None:
        import scipy.special as found
        pool = getattr(getattr(ctx, "device", None), "intra_op", None)
        if pool is not None:  # (scipy's own OpenBLAS, held at one thread as numpy's)
            pool.hold_blas_loaded_since()
        _special = found
    return _special


def _igamma_of(ctx, a, x, upper):
    special = _special or _load_special(ctx)
    wide_a, wide_x = np.asarray(a, np.float64), np.asarray(x, np.float64)
    out = (special.gammaincc if upper else special.gammainc)(wide_a, wide_x)
    # TF1's domain: NaN where a <= 0 (scipy answers P(0, x) = 1) or x < 0
    out = np.where((wide_a <= 0) | (wide_x < 0), np.nan, out)
    return (np.asarray(out, dtype=a.dtype),)


@register_kernel("Igamma", "CPU")
def _igamma(ctx, a, x):
    return _igamma_of(ctx, a, x, upper=False)


@register_kernel("Igammac", "CPU")
def _igammac(ctx, a, x):
    return _igamma_of(ctx, a, x, upper=True)


def _igamma_preload(ctx):
    return None if _special is not None else Preload(_load_special)


register_prepare("Igamma", "CPU")(_igamma_preload)
register_prepare("Igammac", "CPU")(_igamma_preload)
