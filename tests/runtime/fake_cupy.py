"""A numpy-backed stand-in for CuPy, strict where CuPy is strict, for running GPU code paths
(``runtime/gpu.py``, kernels with ``ctx.xp = cupy``, ``bench/gpu_check.py``) without a GPU.

What it imitates:
- ``cuda.Device(i)`` (context manager, ``.id``, ``.synchronize()``), ``cuda.Stream(
  non_blocking=True)`` (context manager; ``launch_host_func(cb, arg)`` calls ``cb`` back from
  a separate thread, as CUDA's callback thread does; ``.done``, ``.synchronize()``),
  ``cuda.runtime.getDeviceCount()``, ``cuda.get_current_stream()``.
- ``FakeArray``: a device array wrapping a numpy array. Like ``cupy.ndarray`` it refuses
  implicit conversion to numpy (``np.asarray(a)`` raises TypeError: use ``.get()``), refuses to
  mix with numpy arrays in arithmetic and array functions ("Unsupported type"), has ``flags``
  without ``writeable``, returns 0-d arrays (not scalars) from reductions, and has
  ``.device.id`` and ``.get(stream=None)``. ``bool``/``int``/``float``/``item``/``tolist``
  work (they synchronize on a real GPU).
- Array functions (``fake.sum``, ``fake.where``, ...) delegate to numpy after the same input
  checks; numpy's ufuncs and array functions applied to FakeArrays dispatch here, as they do
  to CuPy (``__array_ufunc__``/``__array_function__``). ``ufunc.at`` is not supported (older
  CuPy has none): kernels use ``cupyx.scatter_add``, which ``FakeCupyX`` provides.

What it cannot show: real kernels, real asynchrony (work here is done at launch, so a
stream is always finished), memory limits, dtype support of CUDA kernels, timings.

``install(monkeypatch)`` puts the fake in ``sys.modules`` as ``cupy`` and ``cupyx``, so
``import cupy`` anywhere (``runtime/device.cuda_device_count``, ``GpuDevice``, gpu_check)
finds it.
"""
from __future__ import annotations

import numbers
import sys
import threading
import types

import numpy as np


class FakeStream:
    """A CUDA stream. ``manual=True``: host functions wait for ``finish()`` (tests that
    check nothing wakes early); otherwise each runs at once on a new thread."""

    def __init__(self, non_blocking=False, manual=False):
        self.pending = []
        self.entered = 0
        self.manual = manual
        self.launched = 0

    def launch_host_func(self, callback, arg):
        self.launched += 1
        if self.manual:
            self.pending.append((callback, arg))
            return
        threading.Thread(target=callback, args=(arg,), daemon=True).start()

    def finish(self):
        pending, self.pending = self.pending, []
        thread = threading.Thread(target=lambda: [cb(arg) for cb, arg in pending])
        thread.start()
        thread.join()

    @property
    def done(self):
        return not self.pending

    def synchronize(self):
        self.finish()

    def __enter__(self):
        self.entered += 1
        _CURRENT.stream.append(self)
        return self

    def __exit__(self, *exc):
        self.entered -= 1
        _CURRENT.stream.pop()


class _Current(threading.local):
    def __init__(self):
        self.stream = []
        self.device = [0]


_CURRENT = _Current()
NULL_STREAM = FakeStream()


class FakeCudaDevice:
    def __init__(self, index=None):
        self.id = _CURRENT.device[-1] if index is None else index

    def __enter__(self):
        _CURRENT.device.append(self.id)
        return self

    def __exit__(self, *exc):
        _CURRENT.device.pop()

    def synchronize(self):
        pass

    def __eq__(self, other):
        return isinstance(other, FakeCudaDevice) and other.id == self.id

    def __hash__(self):
        return hash(self.id)


class FakeFlags:
    """``cupy.ndarray.flags``: contiguity and ownership only (no ``writeable``)."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, flags):
        self.c_contiguous = flags.c_contiguous
        self.f_contiguous = flags.f_contiguous
        self.owndata = flags.owndata


_IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
             "construct a NumPy array explicitly.")


def _check(value):
    """Raise, as CuPy does, for a host numpy array given where a device array is needed."""
    if isinstance(value, np.ndarray):
        raise TypeError(f"Unsupported type {type(value)}")


def _unwrap(value, strict=True):
    """Numpy values of the arguments: FakeArrays unwrapped, lists/tuples walked."""
    if isinstance(value, FakeArray):
        return value._a
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, strict) for v in value)
    if strict:
        _check(value)
    return value


def _wrap(value, device=0):
    if isinstance(value, np.ndarray):
        return FakeArray(value, device)
    if isinstance(value, np.generic):  # CuPy returns 0-d arrays, never numpy scalars
        return FakeArray(np.asarray(value), device)
    if isinstance(value, tuple):
        return tuple(_wrap(v, device) for v in value)
    if isinstance(value, list):
        return [_wrap(v, device) for v in value]
    return value


def _ufunc(fn, *inputs, out=None, **kwargs):
    args = tuple(_unwrap(x) for x in inputs)
    if out is not None:
        kwargs["out"] = _unwrap(out)
    result = fn(*args, **kwargs)
    if out is not None:
        return out
    return _wrap(result)


class FakeArray:
    """A device array (see the module docstring)."""

    __array_priority__ = 100

    def __init__(self, value, device=None):
        self._a = value if isinstance(value, np.ndarray) else np.asarray(value)
        self.device = FakeCudaDevice(device)

    # -- what CuPy refuses or changes ----------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError(_IMPLICIT)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__":
            return NotImplemented   # e.g. np.add.at: use cupyx.scatter_add
        out = kwargs.pop("out", None)
        if isinstance(out, tuple):
            out = out[0] if len(out) == 1 else out
        return _ufunc(ufunc, *inputs, out=out, **kwargs)

    def __array_function__(self, func, types_, args, kwargs):
        mine = getattr(MODULE, func.__name__, None)
        if mine is None:
            return NotImplemented
        return mine(*args, **kwargs)

    @property
    def flags(self):
        return FakeFlags(self._a.flags)

    def get(self, stream=None, out=None):
        return self._a.copy()

    def set(self, array, stream=None):
        self._a[...] = array

    # -- numpy-like surface --------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    dtype = property(lambda self: self._a.dtype)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    T = property(lambda self: FakeArray(self._a.T, self.device.id))

    def __getattr__(self, name):
        if name.startswith("__"):  # never numpy's __array_interface__ / __array_struct__
            raise AttributeError(name)
        attr = getattr(self._a, name)
        if not callable(attr):
            return attr

        def method(*args, **kwargs):
            args = tuple(_unwrap(a) for a in args)
            kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
            if name in ("tolist", "item", "tobytes"):
                return attr(*args, **kwargs)
            return _wrap(attr(*args, **kwargs), self.device.id)
        return method

    def __getitem__(self, key):
        return _wrap(self._a[_unwrap(key, strict=False)], self.device.id)

    def __setitem__(self, key, value):
        self._a[_unwrap(key, strict=False)] = _unwrap(value)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return iter(_wrap(list(self._a), self.device.id))

    def __bool__(self):
        return bool(self._a)

    def __int__(self):
        return int(self._a)

    def __float__(self):
        return float(self._a)

    def __repr__(self):
        return f"fake_cupy.array({self._a!r})"

    __hash__ = None


def _operators():
    binary = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
              "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power,
              "matmul": np.matmul, "and": np.bitwise_and, "or": np.bitwise_or,
              "xor": np.bitwise_xor, "lshift": np.left_shift, "rshift": np.right_shift}
    for name, fn in binary.items():
        setattr(FakeArray, f"__{name}__", lambda self, other, fn=fn: _ufunc(fn, self, other))
        setattr(FakeArray, f"__r{name}__", lambda self, other, fn=fn: _ufunc(fn, other, self))
        setattr(FakeArray, f"__i{name}__",
                lambda self, other, fn=fn: _ufunc(fn, self, other, out=self))
    compare = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
               "eq": np.equal, "ne": np.not_equal}
    for name, fn in compare.items():
        setattr(FakeArray, f"__{name}__", lambda self, other, fn=fn: _ufunc(fn, self, other))
    unary = {"neg": np.negative, "pos": np.positive, "abs": np.absolute, "invert": np.invert}
    for name, fn in unary.items():
        setattr(FakeArray, f"__{name}__", lambda self, fn=fn: _ufunc(fn, self))


_operators()


# -- the module --------------------------------------------------------------------------------
_CONVERTERS = ("asarray", "array", "ascontiguousarray", "asanyarray")


class FakeCupy(types.ModuleType):
    """The ``cupy`` module: array functions delegate to numpy with CuPy's input rules."""

    ndarray = FakeArray

    def __init__(self, device_count=1):
        super().__init__("cupy")
        runtime = types.SimpleNamespace(getDeviceCount=lambda: device_count)
        self.cuda = types.SimpleNamespace(
            Device=FakeCudaDevice, Stream=FakeStream, runtime=runtime,
            get_current_stream=lambda: (_CURRENT.stream or [NULL_STREAM])[-1])
        self.random = types.SimpleNamespace(standard_normal=self._standard_normal)

    @staticmethod
    def _standard_normal(size=None, dtype=np.float64):
        return FakeArray(np.random.default_rng(0).standard_normal(size).astype(dtype))

    def asarray(self, value, dtype=None, order=None):
        if isinstance(value, FakeArray):
            out = value._a if dtype is None else value._a.astype(dtype, copy=False)
            return value if out is value._a else FakeArray(out)
        return FakeArray(np.array(value, dtype=dtype, order=order, copy=True))

    def array(self, value, dtype=None, copy=True, order="K", ndmin=0):
        host = value._a if isinstance(value, FakeArray) else value
        return FakeArray(np.array(host, dtype=dtype, copy=copy, order=order, ndmin=ndmin))

    def ascontiguousarray(self, value, dtype=None):
        _check(value)
        return FakeArray(np.ascontiguousarray(_unwrap(value), dtype=dtype))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        target = getattr(np, name)
        if isinstance(target, (type, numbers.Number, np.dtype)) or not callable(target):
            return target            # dtypes (cupy.float32 is numpy's), constants

        def function(*args, **kwargs):
            args = tuple(_unwrap(a) for a in args)
            out = kwargs.get("out")
            kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
            result = target(*args, **kwargs)
            return out if out is not None else _wrap(result)
        function.__name__ = name
        return function


class FakeCupyX(types.ModuleType):
    """``cupyx``: ``scatter_add`` (numpy's ``add.at``)."""

    def __init__(self):
        super().__init__("cupyx")

    @staticmethod
    def scatter_add(a, slices, value):
        np.add.at(a._a, _unwrap(slices, strict=False), _unwrap(value))


MODULE = FakeCupy()
CUPYX = FakeCupyX()


def fake_cupy(device_count=1, manual_streams=False):
    """A fresh fake ``cupy`` module (``manual_streams``: streams wait for ``finish()``)."""
    module = FakeCupy(device_count)
    if manual_streams:
        cuda = module.cuda
        module.cuda = types.SimpleNamespace(
            **{**vars(cuda), "Stream": lambda non_blocking=False: FakeStream(non_blocking, True)})
    return module


def install(monkeypatch, device_count=1):
    """Make ``import cupy``/``import cupyx`` find the fakes for the rest of the test."""
    module = fake_cupy(device_count)
    monkeypatch.setitem(sys.modules, "cupy", module)
    monkeypatch.setitem(sys.modules, "cupyx", CUPYX)
    return module
