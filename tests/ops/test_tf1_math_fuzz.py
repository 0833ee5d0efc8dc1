"""Differential fuzz of the math families against TF1 (``tf.compat.v1``): elementwise unary and
binary ops (special values, broadcasting with size-0 and rank-0 shapes, every real dtype),
Python-scalar operands, integer division and modulo, ``pow``, comparisons, casts,
``clip_by_value``, ``add_n``, ``where``, reductions, ``argmax``/``argmin`` and scans.

Each draw is one case (tf1_math_cases.py); all of them run in ONE TF1 subprocess (it skips
without TensorFlow: ``ASYNCFLOW_TF_PYTHON``) and in one asyncflow session. Where TF1 gives a
value asyncflow must give the same dtype, shape and value (integers and bools exactly, floats
to a tolerance of their dtype, NaN where TF1 has NaN); where TF1 refuses (a build or a run
error), asyncflow must refuse too. The default run draws a short form; ``--runslow`` draws
many more.
"""
from __future__ import annotations

import numpy as np
import pytest

from tf1_math_cases import SNIPPET, math_cases, pack
from tf1_reference import compat_run, tf1_run

# rtol per dtype; transcendental functions (numpy's against Eigen's) get more
_RTOL = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13, "complex64": 2e-6,
         "complex128": 1e-13}
_LOOSE = ("tf.erf", "tf.lgamma", "tf.digamma", "tf.exp", "tf.log", "tf.tanh", "tf.sigmoid",
          "tf.sin", "tf.cos", "tf.pow", "**", "tf.rsqrt", "reduce_", "tf.cum", "tf.add_n",
          "/ a")


def _tolerance(expr, dtype):
    rtol = _RTOL.get(dtype.name, 0.0)
    if rtol and any(token in expr for token in _LOOSE):
        rtol = max(rtol * 8, 4e-6 if dtype.itemsize >= 8 and dtype.kind == "f" else rtol * 8)
        if dtype == np.float64 or dtype == np.complex128:
            rtol = 1e-11
    return rtol


def _close(ours, theirs, rtol, reduction):
    """Equal to within ``rtol`` (exactly for rtol 0), NaN where the other has NaN, infinities
    equal. Reductions also get an absolute slack of ``rtol`` (cancellation)."""
    if rtol == 0:
        return np.array_equal(ours, theirs)
    nan_ours, nan_theirs = np.isnan(ours), np.isnan(theirs)
    if not np.array_equal(nan_ours, nan_theirs):
        return False
    ok = ~nan_ours
    a, b = ours[ok].astype(np.complex128 if ours.dtype.kind == "c" else np.float64), \
        theirs[ok].astype(np.complex128 if ours.dtype.kind == "c" else np.float64)
    inf = np.isinf(a) | np.isinf(b)
    if not np.array_equal(a[inf], b[inf]):
        return False
    a, b = a[~inf], b[~inf]
    if not reduction and not np.array_equal(np.signbit(a[a == 0]), np.signbit(b[a == 0])):
        return False  # the sign of a zero (1 / x tells them apart)
    slack = rtol * np.maximum(np.abs(a), np.abs(b)) + (rtol if reduction else 0.0)
    tiny = np.finfo(ours.dtype).tiny * 4  # subnormal results: flushed or not
    return bool(np.all(np.abs(a - b) <= slack + tiny))


def compare(cases, ours, theirs):
    """Mismatches of asyncflow's outputs against TF1's, one line each."""
    problems = []
    for key, expr, arrays in cases:
        shapes = {n: (v.dtype.name, list(v.shape)) for n, v in arrays.items()}
        where = f"{key} {expr} {shapes}"
        their_error, our_error = theirs.get(key + "!"), ours.get(key + "!")
        if our_error is not None and "UnknownError" in str(our_error):
            problems.append(f"{where}: a kernel's own exception, not an error naming the op: "
                            f"{our_error}")
            continue
        if their_error is not None:
            if our_error is None:
                problems.append(f"{where}: TF1 refuses ({their_error}) but asyncflow gives "
                                f"{ours[key]!r}")
            continue
        if our_error is not None:
            problems.append(f"{where}: TF1 gives {theirs[key]!r} but asyncflow refuses "
                            f"({our_error})")
            continue
        mine, want = np.asarray(ours[key]), np.asarray(theirs[key])
        if mine.dtype != want.dtype or mine.shape != want.shape:
            problems.append(f"{where}: dtype/shape {mine.dtype}{list(mine.shape)}, TF1 "
                            f"{want.dtype}{list(want.shape)}")
            continue
        rtol = _tolerance(expr, want.dtype) if want.dtype.kind in "fc" else 0.0
        if not _close(mine, want, rtol, "reduce_" in expr or "add_n" in expr or "cum" in expr):
            problems.append(f"{where}: values differ\n  inputs {arrays}\n  asyncflow {mine!r}"
                            f"\n  TF1       {want!r}")
    return problems


def _run_both(tmp_path, seed, rounds):
    cases = math_cases(seed, rounds)
    inputs = pack(cases)
    theirs = tf1_run(SNIPPET, tmp_path, **inputs)
    ours = compat_run(SNIPPET, inputs)
    return cases, ours, theirs


def test_math_ops_agree_with_tf1(tmp_path):
    cases, ours, theirs = _run_both(tmp_path, seed=20261205, rounds=1)
    problems = compare(cases, ours, theirs)
    assert not problems, f"{len(problems)} of {len(cases)} cases differ from TF1:\n" + \
        "\n".join(problems[:40])


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_math_ops_agree_with_tf1_long(tmp_path, seed):
    cases, ours, theirs = _run_both(tmp_path, seed=seed, rounds=12)
    problems = compare(cases, ours, theirs)
    assert not problems, f"{len(problems)} of {len(cases)} cases differ from TF1:\n" + \
        "\n".join(problems[:40])
