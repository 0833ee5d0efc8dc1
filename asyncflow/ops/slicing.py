"""Slicing: ``slice``, ``strided_slice`` and the ``t[...]`` they implement, with their gradients.

Theory of operation:
- ``StridedSlice`` carries TF1's encoding of a Python index: three int vectors (begin, end,
  strides) plus five bit masks (begin/end: "use the default bound", ellipsis, new axis, shrink
  axis). ``Tensor.__getitem__`` (installed here) turns a key of ints, slices, ``...``, ``None``
  and scalar int tensors into that encoding; the kernel turns it back into a numpy index, so
  clamping, negative steps and shrinking follow numpy exactly. When some indices are tensors,
  begin/end/strides are ``Pack`` ops whose constant elements shape inference still reads.
- ``Slice``'s gradient pads the incoming gradient back to the input's shape;
  ``StridedSlice``'s scatters it into zeros (``StridedSliceGrad``, whose own gradient is the
  same strided slice).

Kernels live in ``asyncflow/kernels/slicing.py``. Gather and the segment sums are in
``ops/indexing.py``.
"""
from __future__ import annotations

import builtins

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op, register_tensor_operators
from asyncflow.graph.shape import TensorShape
from asyncflow.graph.conversion import contains_tensor
from asyncflow.ops import math as math_ops
from asyncflow.ops.construct import INTEGER, as_tensor, check_dtype, make, static_value
from asyncflow.ops.layout import stack
from asyncflow.ops.shapes import int_const, shape_of
from asyncflow.ops.tiling import pad

def _elements(tensor):
    """Per-element static values of a 1-D int tensor (None where computed), or None."""
    value = static_value(tensor)
    if value is not None:
        return [int(v) for v in np.asarray(value).reshape(-1)]
    if tensor.op.type == "Pack":
        values = [static_value(t) for t in tensor.op.inputs]
        return [None if v is None else int(v) for v in values]
    n = tensor.shape[0] if tensor.shape.ndims == 1 else None
    return None if n is None else [None] * n


def _int_vector(values, what, op_name):
    """A list or int tensor as a 1-D int tensor."""
    if hasattr(values, "op") or hasattr(values, "_as_tensor"):
        tensor = as_tensor(values)
        check_dtype(op_name, tensor, INTEGER, what)
        return tensor
    if contains_tensor(values):
        return int_const(list(values))  # auto-packed: [0, i]
    return int_const([int(v) for v in values])


# -- slice -------------------------------------------------------------------------------------
def _infer_slice(op):
    x, begin_t, size_t = op.inputs
    if begin_t.dtype is not size_t.dtype:
        raise TypeError(f"begin ({begin_t.dtype.name}) and size ({size_t.dtype.name}) must "
                        "have the same dtype")
    begin, size = _elements(begin_t), _elements(size_t)
    ndims = x.shape.ndims
    n = ndims if ndims is not None else (len(begin) if begin else (len(size) if size else None))
    if n is None:
        return [(x.dtype, TensorShape(None))]
    for what, values in (("begin", begin), ("size", size)):
        if values is not None and len(values) != n:
            raise ValueError(f"{what} has {len(values)} entries but the input has rank {n}")
    dims = []
    for i in builtins.range(n):
        b = begin[i] if begin else None
        s = size[i] if size else None
        d = x.shape.dims[i] if ndims is not None else None
        if s is not None and s < -1:
            raise ValueError(f"size[{i}] = {s} must be >= -1")
        if b is not None and (b < 0 or (d is not None and b > d)):
            raise ValueError(f"begin[{i}] = {b} is out of range [0, {d}]")
        if s == -1:
            dims.append(None if b is None or d is None else d - b)
            continue
        if s is not None and b is not None and d is not None and b + s > d:
            raise ValueError(f"begin[{i}] + size[{i}] = {b + s} exceeds dimension {i} of size {d}")
        dims.append(s)
    return [(x.dtype, TensorShape(dims))]


register_op("Slice", infer=_infer_slice)


def slice(input_, begin, size, name=None):  # noqa: A001 - TF1 spelling
    """The block of ``input_`` starting at ``begin`` with extent ``size`` (-1: to the end).

    Raises:
        ValueError: if the block is statically out of range or the lengths differ from the rank.
    """
    x = as_tensor(input_)
    begin = _int_vector(begin, "begin", "Slice")
    size = _int_vector(size, "size", "Slice")
    if begin.dtype is not size.dtype:
        begin, size = math_ops.cast(begin, dtypes.int64), math_ops.cast(size, dtypes.int64)
    return make("Slice", (x, begin, size), None, name, "Slice")


@register_gradient("Slice")
def _slice_grad(op, grad):
    x, begin = op.inputs[0], op.inputs[1]
    begin = math_ops.cast(begin, dtypes.int32)
    after = math_ops.subtract(math_ops.subtract(shape_of(x), begin), shape_of(op.outputs[0]))
    if static_value(begin) is not None and x.shape.is_fully_defined() and \
            op.outputs[0].shape.is_fully_defined():
        before = np.asarray(static_value(begin), np.int64)
        after = np.asarray(x.shape.dims, np.int64) - before - \
            np.asarray(op.outputs[0].shape.dims, np.int64)
        paddings = int_const(np.stack([before, after], axis=1).reshape(-1, 2))
    else:
        paddings = stack([begin, after], axis=1)
    return [pad(grad, paddings), None, None]


# -- strided slice -----------------------------------------------------------------------------
_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _infer_strided_slice(op):
    x, begin_t, end_t, strides_t = op.inputs[:4]
    if not begin_t.dtype is end_t.dtype is strides_t.dtype:
        raise TypeError("begin, end and strides must have the same dtype")
    begin, end, strides = _elements(begin_t), _elements(end_t), _elements(strides_t)
    if begin is None or end is None or strides is None or x.shape.ndims is None:
        return [(x.dtype, TensorShape(None))]
    if not len(begin) == len(end) == len(strides):
        raise ValueError(f"begin, end and strides must have the same length, got "
                         f"{len(begin)}, {len(end)} and {len(strides)}")
    return [(x.dtype, _strided_shape(op, x.shape.dims, begin, end, strides))]


def _strided_shape(op, dims, begin, end, strides):
    masks = {m: op.get_attr(m) for m in _MASKS}
    n = len(begin)
    real = [not (masks["ellipsis_mask"] >> i) & 1 and not (masks["new_axis_mask"] >> i) & 1
            for i in builtins.range(n)]
    out, pos, seen_ellipsis = [], 0, False
    for i in builtins.range(n):
        bit = 1 << i
        if masks["ellipsis_mask"] & bit:
            if seen_ellipsis:
                raise ValueError("an index can only have a single ellipsis ('...')")
            seen_ellipsis = True
            count = len(dims) - pos - builtins.sum(real[i + 1:])
            out.extend(dims[pos:pos + builtins.max(count, 0)])
            pos += builtins.max(count, 0)
            continue
        if masks["new_axis_mask"] & bit:
            out.append(1)
            continue
        if pos >= len(dims):
            raise ValueError(f"too many indices ({builtins.sum(real)}) for a tensor of rank "
                             f"{len(dims)}")
        dim, b, e, s = dims[pos], begin[i], end[i], strides[i]
        pos += 1
        if s == 0:
            raise ValueError(f"strides[{i}] must be non-zero")
        if masks["shrink_axis_mask"] & bit:
            if s is not None and s < 0:
                raise ValueError(f"only stride 1 allowed on non-range indexing (strides[{i}] = "
                                 f"{s} with shrink_axis_mask)")
            if b is not None and dim is not None and not -dim <= b < dim:
                raise ValueError(f"index {b} is out of bounds for dimension {pos - 1} of size "
                                 f"{dim}")
            continue
        b = None if masks["begin_mask"] & bit else b
        e = None if masks["end_mask"] & bit else e
        known = dim is not None and s is not None and (b is not None or masks["begin_mask"] & bit) \
            and (e is not None or masks["end_mask"] & bit)
        out.append(len(builtins.range(*builtins.slice(b, e, s).indices(dim))) if known else None)
    out.extend(dims[pos:])
    return TensorShape(out)


register_op("StridedSlice", infer=_infer_strided_slice)


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0,
                  new_axis_mask=0, shrink_axis_mask=0, name=None):
    """TF1's ``strided_slice``: numpy basic indexing in the begin/end/strides/masks encoding.

    Args:
        input_: the tensor to index.
        begin, end, strides: int lists or 1-D int tensors of one length (strides default 1).
        begin_mask, end_mask: bit ``i`` set ignores ``begin[i]``/``end[i]`` (full range).
        ellipsis_mask: bit ``i`` set makes entry ``i`` an ellipsis.
        new_axis_mask: bit ``i`` set inserts a dimension of size 1.
        shrink_axis_mask: bit ``i`` set takes the single index ``begin[i]`` (dim removed).
        name: op name.

    Returns:
        The sliced tensor.

    Raises:
        ValueError: if the spec is statically invalid (zero stride, index out of bounds, too
            many indices, two ellipses).
    """
    x = as_tensor(input_)
    begin = _int_vector(begin, "begin", "StridedSlice")
    end = _int_vector(end, "end", "StridedSlice")
    strides = _int_vector([1] * _length(begin) if strides is None else strides, "strides",
                          "StridedSlice")
    attrs = {"begin_mask": int(begin_mask), "end_mask": int(end_mask),
             "ellipsis_mask": int(ellipsis_mask), "new_axis_mask": int(new_axis_mask),
             "shrink_axis_mask": int(shrink_axis_mask)}
    return make("StridedSlice", (x, begin, end, strides), attrs, name, "strided_slice")


def _length(vector):
    if vector.shape.ndims != 1 or vector.shape[0] is None:
        raise ValueError("StridedSlice: strides are needed when begin has an unknown length")
    return vector.shape[0]


def _index_entry(entry, position):
    """One key entry as (begin, end, stride, mask bits)."""
    bit = 1 << position
    if entry is Ellipsis:
        return 0, 0, 1, {"ellipsis_mask": bit}
    if entry is None:
        return 0, 0, 1, {"new_axis_mask": bit}
    if isinstance(entry, builtins.slice):
        bits = {}
        start, stop, step = entry.start, entry.stop, entry.step
        if start is None:
            start, bits["begin_mask"] = 0, bit
        if stop is None:
            stop, bits["end_mask"] = 0, bit
        return _scalar_index(start), _scalar_index(stop), _scalar_index(
            1 if step is None else step), bits
    index = _scalar_index(entry)
    end = index + 1 if isinstance(index, int) else math_ops.add(index, 1)
    return index, end, 1, {"shrink_axis_mask": bit}


def _scalar_index(value):
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("bool indices are not supported; use af.where or af.gather")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if hasattr(value, "op") or hasattr(value, "_as_tensor"):
        tensor = as_tensor(value)
        if not tensor.dtype.is_integer or tensor.shape.ndims not in (0, None):
            raise TypeError(f"a tensor index must be a scalar int32/int64 tensor, got "
                            f"{tensor.dtype.name} with shape {tensor.shape}; use af.gather for "
                            "tensors of indices")
        return tensor
    raise TypeError(f"only ints, slices (`:`), ellipsis (`...`), None (newaxis) and scalar int "
                    f"tensors are valid indices, got {value!r}; use af.gather to pick several "
                    "rows")


def _pack_indices(values, dtype):
    if not any(hasattr(v, "op") for v in values):
        return as_tensor(np.asarray(values, dtype=dtype.np), dtype=dtype)
    return stack([math_ops.cast(v, dtype) if hasattr(v, "op") else as_tensor(v, dtype=dtype)
                  for v in values])


def _getitem(tensor, key):
    """``tensor[key]``: numpy basic indexing (see the module docstring)."""
    if not isinstance(key, tuple):
        key = (key,)
    if builtins.sum(k is Ellipsis for k in key) > 1:
        raise ValueError("an index can only have a single ellipsis ('...')")
    begin, end, strides = [], [], []
    masks = dict.fromkeys(_MASKS, 0)
    for position, entry in enumerate(key):
        b, e, s, bits = _index_entry(entry, position)
        begin.append(b)
        end.append(e)
        strides.append(s)
        for mask, bit in bits.items():
            masks[mask] |= bit
    entries = begin + end + strides
    dtype = dtypes.int64 if any(getattr(v, "dtype", None) is dtypes.int64 for v in entries) \
        else dtypes.int32
    packed = [_pack_indices(v, dtype) for v in (begin, end, strides)]
    return strided_slice(tensor, *packed, name="strided_slice", **masks)


register_tensor_operators({"__getitem__": _getitem})


def _infer_strided_slice_grad(op):
    shape_t, dy = op.inputs[0], op.inputs[4]
    dims = _elements(shape_t)
    return [(dy.dtype, TensorShape(dims))]


register_op("StridedSliceGrad", infer=_infer_strided_slice_grad)


@register_gradient("StridedSlice")
def _strided_slice_grad(op, grad):
    x, begin, end, strides = op.inputs
    attrs = {m: op.get_attr(m) for m in _MASKS}
    shape_vector = math_ops.cast(shape_of(x), begin.dtype)
    out = make("StridedSliceGrad", (shape_vector, begin, end, strides, grad), attrs, None,
               "StridedSliceGrad")
    return [out, None, None, None]


@register_gradient("StridedSliceGrad")
def _strided_slice_grad_grad(op, grad):
    _, begin, end, strides, _ = op.inputs
    attrs = {m: op.get_attr(m) for m in _MASKS}
    return [None, None, None, None, strided_slice(grad, begin, end, strides, **attrs)]
