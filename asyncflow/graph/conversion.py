"""Turning Python values, Variables and lists of tensors into Tensors (``convert_to_tensor``).

The graph layer cannot import the ops that make constants or stack tensors, so those ops
register their builders here when they are imported (``ops.sources``: Const; ``ops.layout``:
Pack, for TF1's auto-packing of lists that hold tensors).
"""
from asyncflow import dtypes as _dtypes
from asyncflow.graph.graph import Operation, Tensor

_CONVERSION = {"constant": None, "pack": None}


def register_constant_builder(fn):
    """ops.sources installs its Const builder here so the graph can convert Python values."""
    _CONVERSION["constant"] = fn


def register_pack_builder(fn):
    """ops.layout installs TF1's auto-packing (a list holding tensors becomes a Pack)."""
    _CONVERSION["pack"] = fn


def contains_tensor(value):
    """Whether a (nested) list or tuple holds a Tensor or Variable (TF1 auto-packs it)."""
    if isinstance(value, (list, tuple)):
        return any(contains_tensor(v) for v in value)
    return isinstance(value, Tensor) or hasattr(value, "_as_tensor")


def convert_to_tensor(value, dtype=None, name=None, graph=None):
    """Turn a Tensor, Variable or numpy-convertible value into a Tensor.

    Python scalars and lists become Const ops with TF1's default dtypes (float32, int32), or
    with ``dtype`` when given; a list holding tensors (``[batch, 37]``) is stacked (TF1's
    auto-packing).

    Raises:
        TypeError: if ``value`` is a Tensor of another dtype than ``dtype``.
    """
    if hasattr(value, "_as_tensor"):
        value = value._as_tensor()
    if isinstance(value, Tensor):
        if dtype is not None and _dtypes.as_dtype(dtype) is not value.dtype:
            raise TypeError(f"Tensor {value.name} has dtype {value.dtype.name}, but "
                            f"{_dtypes.as_dtype(dtype).name} was requested")
        return value
    if isinstance(value, Operation):
        raise TypeError(f"Can't convert Operation '{value.name}' to a Tensor")
    if isinstance(value, (list, tuple)) and contains_tensor(value):
        return _CONVERSION["pack"](value, dtype=dtype, name=name or "packed")
    return _CONVERSION["constant"](value, dtype=dtype, name=name or "Const")
