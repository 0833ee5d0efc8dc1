"""Cross: TF1's ``tf.cross`` (``tf.linalg.cross``), the cross product of 3-vectors along the
last axis of two tensors of one shape (no broadcasting, as TF1's kernel).

Theory of operation: one op; its gradient is two cross products (``cross(b, grad)`` for
``a``, ``cross(grad, a)`` for ``b``: TF1's). The kernel (``kernels/cross.py``) computes the
three components from the last axis's slices through ``ctx.xp``.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.ops.construct import check_dtype, make, operands

# TF1's Cross: real numbers (its kernel's list), no bool or string
_TYPES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint8, dtypes.int16,
          dtypes.int8, dtypes.int64, dtypes.bfloat16, dtypes.uint16, dtypes.float16,
          dtypes.uint32, dtypes.uint64)


def _infer_cross(op):
    a, b = op.inputs
    if a.dtype != b.dtype:
        raise TypeError(f"Input 'b' has type {b.dtype.name} that does not match type "
                        f"{a.dtype.name} of argument 'a'")
    shape = a.shape.merge_with(b.shape) if a.shape.is_compatible_with(b.shape) else None
    if shape is None:
        raise ValueError(f"Both inputs must be of same shape, got shapes {a.shape} and "
                         f"{b.shape}")
    if shape.ndims == 0:
        raise ValueError("Shape must be at least rank 1 but is rank 0")
    if shape.ndims is not None and shape.dims[-1] not in (None, 3):
        raise ValueError(f"Dimension must be 3 but is {shape.dims[-1]} (the last dimension "
                         f"of shape {shape})")
    return [(a.dtype, shape)]


register_op("Cross", infer=_infer_cross)


def cross(a, b, name=None):
    """TF1's ``tf.cross``: the cross product of the 3-vectors along the last axis of ``a``
    and ``b`` (one shape, ``[..., 3]``).

    Raises:
        ValueError: for shapes that differ or a last dimension other than 3, where known (a
            fed one fails the run naming the op).
        TypeError: for two dtypes, or a dtype TF1's Cross refuses (bool, string).
    """
    a, b = operands([a, b])
    check_dtype("Cross", a, lambda d: d in _TYPES, "a")
    return make("Cross", (a, b), None, name, "Cross")


@register_gradient("Cross")
def _cross_grad(op, grad):
    a, b = op.inputs
    return [cross(b, grad), cross(grad, a)]
