"""A numpy-backed stand-in for CuPy, strict where CuPy is strict, for running GPU code paths
(``exec/gpu.py``, kernels with ``ctx.xp = cupy``, ``bench/gpu_check.py``) without a GPU.

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

- What the H200 refused where an earlier fake let it pass: a string or object array handed to
  ``asarray``/``array`` (``ValueError: Unsupported dtype object``), and a device array where
  CuPy needs host values (``pad``'s ``pad_width``, ``tile``'s ``reps``, ``reshape``'s shape,
  ``arange``'s bounds, ``axis``/``axes``/``shape`` arguments: ``TypeError: Implicit
  conversion to a NumPy array is not allowed``); TF keeps those in host memory.
- ``memory_limit`` (bytes, per fake module): an array larger than that raises
  ``cupy.cuda.memory.OutOfMemoryError`` as CuPy's pool does.

What it cannot show: real kernels, real asynchrony (work here is done at launch, so a
stream is always finished), dtype support of CUDA kernels, timings.

``install(monkeypatch)`` puts the fake in ``sys.modules`` as ``cupy`` and ``cupyx``, so
``import cupy`` anywhere (``exec/devices.cuda_device_count``, ``GpuDevice``, gpu_check)
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


class OutOfMemoryError(MemoryError):
    """``cupy.cuda.memory.OutOfMemoryError``: ``(size, total, limit=0)``."""

    def __init__(self, size, total, limit=0):
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: "
                         f"{total:,} bytes, limit set to: {limit:,} bytes).")
        self.size, self.total, self.limit = size, total, limit


# CuPy's parameters that must be host values: (function or method name) -> positions and
# keywords. A device array there makes CuPy convert it to numpy, which it refuses.
_HOST_KEYWORDS = frozenset({"axis", "axes", "shape", "newshape", "reps", "pad_width",
                            "constant_values",
                            "repeats", "indices_or_sections", "source", "destination"})
_HOST_POSITIONS = {"pad": (1,), "tile": (1,), "reshape": (1,), "broadcast_to": (1,),
                   "transpose": (1,), "expand_dims": (1,), "squeeze": (1,), "split": (1,),
                   "array_split": (1,), "moveaxis": (1, 2), "zeros": (0,), "ones": (0,),
                   "empty": (0,), "full": (0,), "arange": (0, 1, 2), "sum": (1,), "mean": (1,),
                   "max": (1,), "min": (1,), "prod": (1,), "amax": (1,), "amin": (1,),
                   "any": (1,), "all": (1,), "argmax": (1,), "argmin": (1,), "flip": (1,),
                   "roll": (1, 2), "cumsum": (1,), "cumprod": (1,)}
# Methods (``a.reshape(...)``): every argument of these is a host value.
_HOST_METHODS = frozenset({"reshape", "transpose", "sum", "mean", "max", "min", "prod",
                           "any", "all", "argmax", "argmin", "squeeze", "cumsum", "cumprod",
                           "repeat", "swapaxes"})


def _has_device_array(value):
    if isinstance(value, FakeArray):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_device_array(v) for v in value)
    return False


def _check_host_args(name, args, kwargs, positions=None):
    """Raise, as CuPy does, for a device array where ``name`` needs a host value."""
    positions = _HOST_POSITIONS.get(name, ()) if positions is None else positions
    for position in positions:
        if position < len(args) and _has_device_array(args[position]):
            raise TypeError(_IMPLICIT)
    for key, value in kwargs.items():
        if key in _HOST_KEYWORDS and _has_device_array(value):
            raise TypeError(_IMPLICIT)


def _check_dtype(value, dtype=None):
    """Raise, as CuPy does, for strings and objects: CUDA has no such arrays."""
    kind = np.dtype(dtype).kind if dtype is not None else None
    if kind is None:
        if isinstance(value, np.ndarray):
            kind = value.dtype.kind
        elif isinstance(value, (str, bytes)) or (
                isinstance(value, (list, tuple)) and value and isinstance(value[0], (str, bytes))):
            kind = "O"
    if kind in ("O", "S", "U", "V"):
        shown = value.dtype if isinstance(value, np.ndarray) and dtype is None else "object"
        raise ValueError(f"Unsupported dtype {shown}")


_MEMORY = {"limit": None}


def _check_memory(array):
    limit = _MEMORY["limit"]
    if limit is not None and array.nbytes > limit:
        raise OutOfMemoryError(array.nbytes, 0, limit)


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
        _check_memory(value)
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
            host = name in _HOST_METHODS
            if host:
                _check_host_args(name, args, kwargs, positions=range(len(args)))
            args = tuple(_unwrap(a, strict=not host) for a in args)
            kwargs = {k: _unwrap(v, strict=not host) for k, v in kwargs.items()}
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
        memory = types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError)
        self.cuda = types.SimpleNamespace(
            Device=FakeCudaDevice, Stream=FakeStream, runtime=runtime, memory=memory,
            get_current_stream=lambda: (_CURRENT.stream or [NULL_STREAM])[-1])
        self.random = types.SimpleNamespace(standard_normal=self._standard_normal)

    @staticmethod
    def _standard_normal(size=None, dtype=np.float64):
        return FakeArray(np.random.default_rng(0).standard_normal(size).astype(dtype))

    def asarray(self, value, dtype=None, order=None):
        if isinstance(value, FakeArray):
            out = value._a if dtype is None else value._a.astype(dtype, copy=False)
            return value if out is value._a else FakeArray(out)
        _check_dtype(value, dtype)
        host = np.array(value, dtype=dtype, order=order, copy=True)
        _check_dtype(host)
        return _wrap(host)

    def array(self, value, dtype=None, copy=True, order="K", ndmin=0):
        host = value._a if isinstance(value, FakeArray) else value
        _check_dtype(host, dtype)
        host = np.array(host, dtype=dtype, copy=copy, order=order, ndmin=ndmin)
        _check_dtype(host)
        return _wrap(host)

    def ascontiguousarray(self, value, dtype=None):
        _check(value)
        return _wrap(np.ascontiguousarray(_unwrap(value), dtype=dtype))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        target = getattr(np, name)
        if isinstance(target, (type, numbers.Number, np.dtype)) or not callable(target):
            return target            # dtypes (cupy.float32 is numpy's), constants

        def function(*args, **kwargs):
            _check_host_args(name, args, kwargs)
            host = _HOST_POSITIONS.get(name, ())
            args = tuple(_unwrap(a, strict=i not in host) for i, a in enumerate(args))
            out = kwargs.get("out")
            kwargs = {k: _unwrap(v, strict=k not in _HOST_KEYWORDS) for k, v in kwargs.items()}
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


def set_memory_limit(limit):
    """Arrays larger than ``limit`` bytes raise OutOfMemoryError (None: no limit)."""
    _MEMORY["limit"] = limit


def install(monkeypatch, device_count=1):
    """Make ``import cupy``/``import cupyx`` find the fakes for the rest of the test."""
    module = fake_cupy(device_count)
    monkeypatch.setitem(sys.modules, "cupy", module)
    monkeypatch.setitem(sys.modules, "cupyx", CUPYX)
    return module
