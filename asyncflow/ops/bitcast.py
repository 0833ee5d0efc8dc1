"""Bitcast: TF1's ``tf.bitcast``, a tensor's bytes read as another numeric dtype.

Theory of operation: the bytes are not copied or changed. Between dtypes of one size the
shape stays; to a smaller one a last axis of ``in_size / out_size`` is added; to a larger one
the last axis must be ``out_size / in_size`` and is removed (TF1's rule). Not
differentiable, as TF1's. The kernel (``kernels/bitcast.py``) is a view of the contiguous
array through ``ctx.xp``, so the bytes are the host's order, as TF1's.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import register_op
from asyncflow.graph.registry import not_differentiable
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, make

# TF1's Bitcast: the numeric dtypes (no bool or string; asyncflow has no complex or quantized)
_TYPES = (dtypes.bfloat16, dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int64,
          dtypes.int32, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.int8,
          dtypes.int16)


def _infer_bitcast(op):
    x, out = op.inputs[0], op.get_attr("type")
    if x.shape.ndims is None:
        return [(out, TensorShape(None))]
    dims, size_in, size_out = list(x.shape.dims), x.dtype.size, out.size
    if size_in > size_out:
        dims.append(size_in // size_out)
    elif size_in < size_out:
        if not dims:
            raise ValueError(f"Cannot bitcast from {x.dtype.name} to {out.name}: a larger type "
                             "needs a last dimension, got a scalar")
        if dims[-1] is not None and dims[-1] != size_out // size_in:
            raise ValueError(f"Cannot bitcast from {dims[-1]} to {size_out // size_in} due "
                             f"to shape. {dims[-1]} does not match {size_out // size_in} (the "
                             f"last dimension of {x.shape}, {x.dtype.name} to {out.name})")
        dims.pop()
    return [(out, TensorShape(dims))]


register_op("Bitcast", infer=_infer_bitcast)
not_differentiable("Bitcast")


def bitcast(input, type, name=None):  # noqa: A002 - TF1's argument names
    """TF1's ``tf.bitcast``: ``input``'s bytes as dtype ``type`` (see the module docstring
    for the shape rule).

    Raises:
        TypeError: for an input or ``type`` not numeric (bool, string), as TF1.
        ValueError: for a known last dimension that does not hold one ``type`` element (a
            fed one fails the run naming the op).
    """
    x, out = as_tensor(input), dtypes.as_dtype(type)
    for what, dtype in (("input", x.dtype), ("type", out)):
        if dtype not in _TYPES:
            raise TypeError(f"Bitcast: value passed to {what} has dtype {dtype.name}, which "
                            f"is not allowed here (numeric dtypes only)")
    return make("Bitcast", (x,), {"type": out}, name, "Bitcast")
