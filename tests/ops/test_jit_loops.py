"""kernels/jit.py: compiled loops load numba on first use, match their Python form, and step
aside (``usable`` False) where they must: numba disabled, a GPU array, an unsupported dtype."""
import subprocess
import sys
import types

import numpy as np
import pytest

from asyncflow.kernels import jit


@jit.loop
def _scaled_sum(x, scale, out):
    for i in range(x.shape[0]):
        acc = x.dtype.type(0)
        for j in range(x.shape[1]):
            acc += x[i, j] * scale
        out[i] = acc


def test_import_asyncflow_does_not_load_numba():
    code = ("import sys, asyncflow, asyncflow.kernels.jit; "
            "assert 'numba' not in sys.modules, 'numba loaded at import'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.skipif(not jit.available(), reason="numba is not installed (or ASYNCFLOW_JIT=0)")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_compiled_loop_gives_its_python_form_s_values(dtype):
    x = np.arange(12, dtype=dtype).reshape(3, 4) / 7
    compiled, plain = np.empty(3, dtype), np.empty(3, dtype)
    _scaled_sum(x, dtype(0.5), compiled)
    _scaled_sum.fn(x, dtype(0.5), plain)
    np.testing.assert_array_equal(compiled, plain)


def test_usable_only_on_numpy_arrays_of_supported_dtypes(monkeypatch):
    cpu = types.SimpleNamespace(xp=np)
    monkeypatch.setattr(jit, "available", lambda: True)
    assert jit.usable(cpu, np.zeros(2, np.float32), np.zeros(2, np.float64))
    assert not jit.usable(cpu, np.zeros(2, np.float16))
    assert not jit.usable(cpu, np.zeros(2, np.float32), np.zeros(2, np.int32))
    assert not jit.usable(types.SimpleNamespace(xp=object()), np.zeros(2, np.float32))
    assert not jit.usable(cpu, np.zeros(2, np.float32).view(np.ndarray).tolist())


def test_disabled_means_not_available(monkeypatch):
    monkeypatch.setattr(jit, "ENABLED", False)
    assert not jit.available()
    assert not jit.usable(types.SimpleNamespace(xp=np), np.zeros(2, np.float32))


def test_a_loop_without_numba_says_so(monkeypatch):
    monkeypatch.setattr(jit, "_numba", False)
    fresh = jit.loop(_scaled_sum.fn)
    with pytest.raises(RuntimeError, match="_scaled_sum: numba is not installed"):
        fresh(np.zeros((1, 1)), 1.0, np.zeros(1))


@pytest.mark.skipif(not jit.available(), reason="numba is not installed (or ASYNCFLOW_JIT=0)")
def test_preload_warms_once():
    calls = []

    def warm():
        calls.append(1)
        _scaled_sum(np.zeros((1, 1), np.float32), np.float32(1), np.zeros(1, np.float32))
    first = jit.preload(warm)
    first.load(None)
    first.load(None)
    assert calls == [1] and jit.preload(warm) is None
