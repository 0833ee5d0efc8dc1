"""The dtype table: asyncflow's element types and their numpy twins.

A ``DType`` is an interned, immutable value (``af.float32 is af.as_dtype("float32")``). Numbers
follow TF1 rather than numpy: two tensors of different dtypes never combine implicitly; a
Python scalar takes the dtype of the tensor it meets. ``bfloat16`` comes from ``ml_dtypes``;
``string`` tensors are numpy object arrays of ``bytes``.

``ml_dtypes`` is imported when bfloat16's numpy twin is first asked for (``.np``,
``.as_numpy_dtype``, ``.size``, ``.min``, ``.max``), not with asyncflow: its import costs about
0.6 s of CPU (bench/RESULTS.md, 2026-12-05), which every worker process would pay. The
``DType`` itself (``af.bfloat16``, its name and kind) exists from the start; a numpy bfloat16
array can only exist once ``ml_dtypes`` is loaded, so ``as_dtype`` of one finds it then.
"""
from __future__ import annotations

import builtins
import sys

import numpy as np


class DType:
    """An element type. Compare with ``is`` or ``==``; build with :func:`as_dtype`."""

    __slots__ = ("name", "_np", "is_floating", "is_integer", "is_unsigned", "is_bool",
                 "is_string", "is_complex")

    def __init__(self, name, np_dtype, kind):
        self.name = name
        if np_dtype is not None:  # None: loaded on first use (``_LATE``)
            self._np = np.dtype(np_dtype)
        self.is_floating = kind == "f"
        self.is_integer = kind in ("i", "u")
        self.is_unsigned = kind == "u"
        self.is_bool = kind == "b"
        self.is_string = kind == "s"
        self.is_complex = False

    def __getattr__(self, name):
        # Reached only for a slot never set: ``_np`` of a dtype whose numpy twin comes from a
        # module imported on first use (bfloat16). The import lock serializes the import and
        # every thread stores the same dtype object.
        if name != "_np" or self.name not in _LATE:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        npd = np.dtype(_LATE[self.name]())
        self._np = npd
        _BY_NP[npd] = self
        return npd

    @property
    def as_numpy_dtype(self):
        """The numpy scalar type (``np.float32``), as in TF1."""
        return self._np.type

    @property
    def np(self):
        """The numpy ``dtype`` object."""
        return self._np

    @property
    def is_numeric(self):
        return self.is_floating or self.is_integer

    @property
    def base_dtype(self):
        return self

    @property
    def size(self):
        return self._np.itemsize

    @property
    def min(self):
        if self.is_floating:
            return float(_finfo(self).min)
        if self.is_integer:
            return int(np.iinfo(self._np).min)
        raise TypeError(f"dtype {self.name} has no min")

    @property
    def max(self):
        if self.is_floating:
            return float(_finfo(self).max)
        if self.is_integer:
            return int(np.iinfo(self._np).max)
        raise TypeError(f"dtype {self.name} has no max")

    def __repr__(self):
        return f"af.{self.name}"

    def __reduce__(self):
        return (as_dtype, (self.name,))


def _ml_dtypes():
    import ml_dtypes
    return ml_dtypes


def _finfo(dtype):
    return _ml_dtypes().finfo(dtype.np) if dtype is bfloat16 else np.finfo(dtype.np)


# name -> loader of the numpy type, for the dtypes whose module is imported on first use
_LATE = {"bfloat16": lambda: _ml_dtypes().bfloat16}

float16 = DType("float16", np.float16, "f")
bfloat16 = DType("bfloat16", None, "f")
float32 = DType("float32", np.float32, "f")
float64 = DType("float64", np.float64, "f")
int8 = DType("int8", np.int8, "i")
int16 = DType("int16", np.int16, "i")
int32 = DType("int32", np.int32, "i")
int64 = DType("int64", np.int64, "i")
uint8 = DType("uint8", np.uint8, "u")
uint16 = DType("uint16", np.uint16, "u")
uint32 = DType("uint32", np.uint32, "u")
uint64 = DType("uint64", np.uint64, "u")
bool = DType("bool", np.bool_, "b")  # noqa: A001 - TF1 spelling: af.bool
string = DType("string", object, "s")
half = float16
double = float64

ALL = (float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32,
       uint64, bool, string)
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update(half=float16, double=float64, bool_=bool, str=string, bytes=string)
# TF1 reads "float" as float32 (numpy reads it as float64: a silent difference), and refuses
# numpy's other spellings ("int", "f4", "<f8"), whose width is not what a TF1 reader expects.
_BY_NAME["float"] = float32
_BY_NP = {d.np: d for d in ALL if not d.is_string and d.name not in _LATE}
_BY_PY = {float: float32, int: int32, builtins.bool: bool,
          bytes: string, str: string}


def as_dtype(value):
    """Convert a DType, name, numpy dtype or Python type into a ``DType``.

    Names are TF1's: ``"float"`` is float32 and ``"double"`` float64; a name TF1 refuses
    (``"int"``, numpy's ``"f4"``) is refused.

    Raises:
        TypeError: when ``value`` names no supported dtype.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        found = _BY_NAME.get(value)
        if found is not None:
            return found
        raise TypeError(f"Cannot convert value {value!r} to a dtype: a dtype string is one of "
                        f"{', '.join(sorted(_BY_NAME))} (TF1's names: 'float' is float32)")
    if isinstance(value, type) and value in _BY_PY:
        return _BY_PY[value]
    try:
        npd = np.dtype(value)
    except TypeError:
        npd = None
    if npd is not None:
        if npd.kind in ("O", "S", "U"):
            return string
        npd = npd.newbyteorder("=") if npd.byteorder not in ("=", "|") else npd
        found = _BY_NP.get(npd)
        if found is None and "ml_dtypes" in sys.modules:  # its dtypes may be met now
            for late in _LATE:
                _BY_NAME[late].np  # noqa: B018 - loads it into _BY_NP
            found = _BY_NP.get(npd)
        if found is not None:
            return found
    raise TypeError(f"Cannot convert {value!r} to an asyncflow dtype; supported: "
                    f"{', '.join(d.name for d in ALL)}")


def result_type_for_scalar(value):
    """The dtype a Python/numpy value has when it meets no other tensor (TF1's defaults)."""
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return as_dtype(value.dtype)
    if isinstance(value, builtins.bool):
        return bool
    if isinstance(value, int):
        return int32
    if isinstance(value, float):
        return float32
    if isinstance(value, (bytes, str)):
        return string
    arr = np.asarray(value)
    if arr.dtype.kind in ("O", "S", "U"):
        return string
    if arr.dtype == np.float64:
        return float32
    if arr.dtype == np.int64:
        return int32
    return as_dtype(arr.dtype)
