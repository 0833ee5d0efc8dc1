"""Array layout: transpose, concat, stack/unstack, split, expand_dims, squeeze.

Theory of operation:
- Every op here rearranges or replicates elements without arithmetic, so each has a static
  shape function that is exact whenever the inputs' shapes and the op's integer arguments are
  known, and partial (``None`` dims, or unknown rank) otherwise.
- Arguments TF1 passes as tensors and that may be computed in the graph (``perm``) stay
  tensor inputs; a Const input is read at build
  time (``static_value``) for shape inference. Axes that TF1 code always writes as literals
  (concat/stack/split/expand_dims/squeeze) are attrs; a negative axis is normalised as soon as
  the rank is known, else kept and normalised by the kernel (numpy style).
- Gradients are built from forward ops of this family (a concat's gradient splits or slices,
  a stack's unstacks), so gradients of gradients work. Shape arithmetic in gradients
  goes through ``ops/shapes.py``: a Const when the shape is static, ops otherwise.

Kernels live in ``asyncflow/kernels/layout.py``.
"""
from __future__ import annotations

import builtins

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.conversion import contains_tensor, register_pack_builder
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import math as math_ops
from asyncflow.ops import sources
from asyncflow.ops.array import identity, rank, reshape
from asyncflow.ops.construct import INTEGER, as_tensor, check_dtype, make, make_op, static_value
from asyncflow.ops.shapes import int_const, normalize_axis, shape_of, static_ints


def _axis_value(axis, op_name):
    if hasattr(axis, "op"):
        value = static_value(axis)
        if value is None:
            raise ValueError(f"{op_name}: axis must be a constant, got the computed tensor "
                             f"{axis.name}")
        return int(value)
    return int(axis)


# -- transpose ---------------------------------------------------------------------------------
def _infer_transpose(op):
    x, perm_t = op.inputs
    perm = static_ints(perm_t)
    if perm is None:
        n = perm_t.shape[0] if perm_t.shape.ndims == 1 else x.shape.ndims
        return [(x.dtype, TensorShape(None if n is None else [None] * n))]
    ndims = x.shape.ndims
    if ndims is not None and len(perm) != ndims:
        raise ValueError(f"perm {perm} has {len(perm)} entries but the input has rank {ndims}")
    if sorted(perm) != list(builtins.range(len(perm))):
        raise ValueError(f"perm {perm} is not a permutation of 0..{len(perm) - 1}")
    if ndims is None:
        return [(x.dtype, TensorShape([None] * len(perm)))]
    return [(x.dtype, TensorShape([x.shape.dims[p] for p in perm]))]


register_op("Transpose", infer=_infer_transpose)


def transpose(a, perm=None, name="transpose"):
    """Permute the dimensions of ``a``: output dim ``i`` is input dim ``perm[i]``.

    Args:
        a: a tensor.
        perm: a permutation of ``range(rank(a))`` (list or int tensor); None reverses the dims.
        name: op name.

    Returns:
        The transposed tensor.

    Raises:
        ValueError: if ``perm`` is statically not a permutation of the input's dims.
    """
    a = as_tensor(a)
    if perm is None:
        if a.shape.ndims is not None:
            perm = int_const(list(builtins.range(a.shape.ndims - 1, -1, -1)))
        else:
            perm = sources.range(math_ops.subtract(rank(a), 1), -1, -1)
    elif not hasattr(perm, "op"):
        perm = int_const(list(perm))
    check_dtype("Transpose", perm, INTEGER, "perm")
    return make("Transpose", (a, perm), None, name, "transpose")


def _infer_invert_permutation(op):
    x = op.inputs[0]
    check_dtype(op.type, x, INTEGER)
    return [(x.dtype, x.shape.with_rank(1) if x.shape.ndims is not None else TensorShape([None]))]


register_op("InvertPermutation", infer=_infer_invert_permutation)
not_differentiable("InvertPermutation")


def invert_permutation(x, name=None):
    """The inverse permutation: ``y[x[i]] = i``."""
    return make("InvertPermutation", (as_tensor(x),), None, name, "InvertPermutation")


@register_gradient("Transpose")
def _transpose_grad(op, grad):
    perm = static_ints(op.inputs[1])
    inverse = int_const(np.argsort(perm).tolist()) if perm is not None else \
        invert_permutation(op.inputs[1])
    return [transpose(grad, inverse), None]


# -- concat ------------------------------------------------------------------------------------
def _merge_dtypes(op, tensors):
    dtype = tensors[0].dtype
    for i, tensor in enumerate(tensors):
        if tensor.dtype is not dtype:
            raise TypeError(f"input {i} has dtype {tensor.dtype.name}, but input 0 has "
                            f"{dtype.name}")
    return dtype


def _known_rank(tensors):
    ranks = {t.shape.ndims for t in tensors if t.shape.ndims is not None}
    if len(ranks) > 1:
        raise ValueError(f"inputs must have the same rank, got shapes "
                         f"{[str(t.shape) for t in tensors]}")
    return ranks.pop() if ranks else None


def _infer_concat(op):
    values = op.inputs
    dtype = _merge_dtypes(op, values)
    ndims = _known_rank(values)
    if ndims is None:
        return [(dtype, TensorShape(None))]
    if ndims == 0:
        raise ValueError("can't concatenate scalars (use af.stack instead)")
    axis = normalize_axis(op.get_attr("axis"), ndims, op.type)
    dims = list(next(t for t in values if t.shape.ndims is not None).shape.dims)
    total = 0
    for tensor in values:
        if tensor.shape.ndims is None:  # unknown rank: its size along the axis is unknown
            total = None
            continue
        for i, d in enumerate(tensor.shape.dims):
            if i == axis:
                total = None if total is None or d is None else total + d
            elif dims[i] is None:
                dims[i] = d
            elif d is not None and d != dims[i]:
                raise ValueError(f"dimension {i} of the inputs must match outside the concat "
                                 f"axis {axis}: shapes {[str(t.shape) for t in values]}")
    dims[axis] = total
    return [(dtype, TensorShape(dims))]


register_op("ConcatV2", infer=_infer_concat)


def concat(values, axis, name="concat"):
    """Join tensors along ``axis``; the others dims must agree.

    Args:
        values: a non-empty list of tensors of one dtype and rank (at least 1).
        axis: the axis to join along (negative counts from the end); an int or a Const.
        name: op name.

    Returns:
        The joined tensor (``identity`` of the input when there is only one, as in TF1).

    Raises:
        ValueError: on an empty list, an axis out of range, or mismatched dims.
        TypeError: when the inputs' dtypes differ.
    """
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError("concat: values must be a non-empty list of tensors")
    tensors = _stack_operands(values)
    axis = _axis_value(axis, "ConcatV2")
    if len(tensors) == 1:
        ndims = tensors[0].shape.ndims
        normalize_axis(axis, ndims if ndims else None, "ConcatV2")
        return identity(tensors[0], name=name)
    ndims = _known_rank(tensors)
    if ndims:
        axis = normalize_axis(axis, ndims, "ConcatV2")
    return make("ConcatV2", tuple(tensors), {"axis": axis}, name, "concat")


def _axis_one_hot(axis, x):
    """An int32 vector of rank(x) zeros with a one at ``axis`` (computed if rank is unknown)."""
    ndims = x.shape.ndims
    if ndims is not None:
        return int_const([1 if i == axis % ndims else 0 for i in builtins.range(ndims)])
    position = math_ops.floormod(int_const(axis), rank(x))
    return math_ops.cast(math_ops.equal(sources.range(rank(x)), position), dtypes.int32)


@register_gradient("ConcatV2")
def _concat_grad(op, grad):
    axis = op.get_attr("axis")
    sizes = [t.shape[axis] if t.shape.ndims is not None else None for t in op.inputs]
    if all(s is not None for s in sizes):
        return split(grad, sizes, axis=axis)
    unit = _axis_one_hot(axis, op.inputs[0])
    offset = int_const(0)
    out = []
    for tensor in op.inputs:
        size_vector = shape_of(tensor)
        # Slice by its op type: ops/slicing.py, which owns it, builds on this module.
        begin = math_ops.multiply(unit, offset)
        out.append(make("Slice", (grad, begin, size_vector), None, None, "Slice"))
        along = math_ops.reduce_sum(math_ops.multiply(size_vector, unit))
        offset = math_ops.add(offset, along)
    return out


# -- stack / unstack ---------------------------------------------------------------------------
def _infer_pack(op):
    values = op.inputs
    dtype = _merge_dtypes(op, values)
    merged = TensorShape(None)
    for tensor in values:
        try:
            merged = merged.merge_with(tensor.shape)
        except ValueError:
            raise ValueError(f"shapes of all inputs must match: "
                             f"{[str(t.shape) for t in values]}") from None
    if merged.ndims is None:
        return [(dtype, TensorShape(None))]
    axis = normalize_axis(op.get_attr("axis"), merged.ndims, op.type, extra=1)
    dims = list(merged.dims)
    dims.insert(axis, len(values))
    return [(dtype, TensorShape(dims))]


register_op("Pack", infer=_infer_pack)


def stack(values, axis=0, name="stack"):
    """Stack same-shape tensors into one of rank ``R + 1`` along a new ``axis``.

    Args:
        values: a non-empty list of tensors (or Python values) of one shape and dtype.
        axis: where the new dimension goes, in ``[-(R + 1), R + 1)``.
        name: op name.

    Returns:
        The stacked tensor.

    Raises:
        ValueError: on an empty list, mismatched shapes, or an axis out of range.
        TypeError: when the dtypes differ.
    """
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError("stack: values must be a non-empty list")
    tensors = _stack_operands(values)
    axis = _axis_value(axis, "Pack")
    ndims = _known_rank(tensors)
    if ndims is not None:
        axis = normalize_axis(axis, ndims, "Pack", extra=1)
    return make("Pack", tuple(tensors), {"axis": axis, "N": len(tensors)}, name, "stack")


def _stack_operands(values):
    """Python values in a list with tensors take the tensors' dtype (TF1's auto-packing)."""
    first = next((v for v in values if hasattr(v, "op") or hasattr(v, "_as_tensor")), None)
    if first is None:
        return [as_tensor(v) for v in values]
    dtype = as_tensor(first).dtype
    return [as_tensor(v) if hasattr(v, "op") or hasattr(v, "_as_tensor")
            else as_tensor(v, dtype=dtype) for v in values]


def _autopack(values, dtype=None, name="packed"):
    """TF1's auto-packing: a (nested) list holding tensors converts to a stacked tensor."""
    if dtype is not None:
        dtype = dtypes.as_dtype(dtype)
    elements = [_autopack(v, dtype) if isinstance(v, (list, tuple)) and contains_tensor(v)
                else v for v in values]
    if dtype is not None:
        elements = [as_tensor(v, dtype=dtype) for v in elements]
    return stack(elements, name=name)


register_pack_builder(_autopack)


def _infer_unpack(op):
    x = op.inputs[0]
    num = op.get_attr("num")
    if x.shape.ndims is None:
        return [(x.dtype, TensorShape(None))] * num
    axis = normalize_axis(op.get_attr("axis"), x.shape.ndims, op.type)
    dims = list(x.shape.dims)
    if dims[axis] is not None and dims[axis] != num:
        raise ValueError(f"dimension {axis} has size {dims[axis]}, but num={num}")
    del dims[axis]
    return [(x.dtype, TensorShape(dims))] * num


register_op("Unpack", infer=_infer_unpack)


def unstack(value, num=None, axis=0, name="unstack"):
    """Split ``value`` along ``axis`` into a list of rank ``R - 1`` tensors.

    Args:
        value: a tensor of rank at least 1.
        num: the number of pieces; inferred from the static shape when None.
        axis: the axis to unstack along (negative counts from the end).
        name: op name.

    Returns:
        A list of ``num`` tensors.

    Raises:
        ValueError: if ``num`` is None and the dimension is unknown, or on a bad axis.
    """
    value = as_tensor(value)
    axis = _axis_value(axis, "Unpack")
    ndims = value.shape.ndims
    if ndims == 0:
        raise ValueError("Unpack: input must be at least rank 1, got a scalar")
    if ndims is not None:
        axis = normalize_axis(axis, ndims, "Unpack")
    if num is None:
        num = value.shape[axis] if ndims is not None else None
        if num is None:
            raise ValueError(f"Unpack: cannot infer num from shape {value.shape}; pass num=")
    op = make_op("Unpack", (value,), {"num": int(num), "axis": axis}, name, "unstack")
    return list(op.outputs)


def _zero_filled(op, grads):
    return [g if g is not None else sources.zeros_like(out) for g, out in zip(grads, op.outputs)]


@register_gradient("Pack")
def _pack_grad(op, grad):
    return unstack(grad, num=op.get_attr("N"), axis=op.get_attr("axis"))


@register_gradient("Unpack")
def _unpack_grad(op, *grads):
    return [stack(_zero_filled(op, grads), axis=op.get_attr("axis"))]


# -- split -------------------------------------------------------------------------------------
def _resolve_sizes(sizes, dim):
    """Sizes with the one ``-1`` resolved against ``dim`` (left as None if dim is unknown)."""
    if sizes.count(-1) > 1:
        raise ValueError(f"at most one size may be -1, got {sizes}")
    if any(s < -1 for s in sizes):
        raise ValueError(f"sizes must be non-negative (or one -1), got {sizes}")
    if dim is None:
        return [None if s == -1 else s for s in sizes]
    known = builtins.sum(s for s in sizes if s != -1)
    if -1 in sizes:
        if known > dim:
            raise ValueError(f"sizes {sizes} add up to more than the dimension's {dim}")
        return [dim - known if s == -1 else s for s in sizes]
    if known != dim:
        raise ValueError(f"sizes {sizes} must add up to the dimension's size {dim}")
    return list(sizes)


def _infer_split(op):
    x = op.inputs[0]
    if op.type == "Split":
        count = op.get_attr("num_split")
    else:
        count = len(op.get_attr("size_splits"))
    if x.shape.ndims is None:
        return [(x.dtype, TensorShape(None))] * count
    axis = normalize_axis(op.get_attr("axis"), x.shape.ndims, op.type)
    dim = x.shape[axis]
    if op.type == "Split":
        if dim is not None and dim % count:
            raise ValueError(f"dimension {axis} of size {dim} is not divisible by {count}")
        sizes = [None if dim is None else dim // count] * count
    else:
        sizes = _resolve_sizes(list(op.get_attr("size_splits")), dim)
    out = []
    for size in sizes:
        dims = list(x.shape.dims)
        dims[axis] = size
        out.append((x.dtype, TensorShape(dims)))
    return out


register_op("Split", infer=_infer_split)
register_op("SplitV", infer=_infer_split)


def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    """Split ``value`` along ``axis`` into equal pieces or pieces of given sizes.

    Args:
        value: a tensor of rank at least 1.
        num_or_size_splits: an int (equal pieces; must divide the dimension) or a list of sizes
            adding up to the dimension, one of which may be -1 (the rest).
        axis: the axis to split (negative counts from the end).
        num: unused (TF1 compatibility: the number of outputs follows from the sizes).
        name: op name.

    Returns:
        A list of tensors.

    Raises:
        ValueError: on sizes that do not fit the dimension, or a bad axis.
    """
    del num
    value = as_tensor(value)
    axis = _axis_value(axis, "Split")
    ndims = value.shape.ndims
    if ndims == 0:
        raise ValueError("Split: input must be at least rank 1, got a scalar")
    if ndims is not None:
        axis = normalize_axis(axis, ndims, "Split")
    if hasattr(num_or_size_splits, "op"):
        value_static = static_ints(num_or_size_splits)
        if value_static is None:
            raise ValueError("Split: num_or_size_splits must be a constant")
        num_or_size_splits = value_static
    if isinstance(num_or_size_splits, (int, np.integer)):
        count = int(num_or_size_splits)
        if count < 1:
            raise ValueError(f"Split: num_split must be >= 1, got {count}")
        op = make_op("Split", (value,), {"num_split": count, "axis": axis}, name, "split")
    else:
        sizes = [int(s) for s in num_or_size_splits]
        if not sizes:
            raise ValueError("Split: size_splits must not be empty")
        op = make_op("SplitV", (value,), {"size_splits": tuple(sizes), "axis": axis}, name,
                     "split")
    return list(op.outputs)


@register_gradient("Split")
def _split_grad(op, *grads):
    return [concat(_zero_filled(op, grads), op.get_attr("axis"))]


register_gradient("SplitV")(_split_grad)


# -- expand_dims / squeeze ---------------------------------------------------------------------
def _infer_expand_dims(op):
    x = op.inputs[0]
    if x.shape.ndims is None:
        return [(x.dtype, TensorShape(None))]
    axis = normalize_axis(op.get_attr("axis"), x.shape.ndims, op.type, extra=1)
    dims = list(x.shape.dims)
    dims.insert(axis, 1)
    return [(x.dtype, TensorShape(dims))]


register_op("ExpandDims", infer=_infer_expand_dims)


def expand_dims(input, axis=None, name=None, dim=None):  # noqa: A002 - TF1 spelling
    """Insert a dimension of size 1 at ``axis`` (in ``[-(R + 1), R]``).

    Raises:
        ValueError: if the axis is missing or out of range.
    """
    if axis is None:
        axis = dim
    if axis is None:
        raise ValueError("ExpandDims: axis is required")
    x = as_tensor(input)
    if isinstance(axis, (list, tuple)) and len(axis) == 1:  # TF1 takes a one-element list
        axis = axis[0]
    axis = normalize_axis(_axis_value(axis, "ExpandDims"), x.shape.ndims, "ExpandDims", extra=1)
    return make("ExpandDims", (x,), {"axis": axis}, name, "ExpandDims")


def _infer_squeeze(op):
    x = op.inputs[0]
    axes = op.get_attr("squeeze_dims")
    if x.shape.ndims is None:
        return [(x.dtype, TensorShape(None))]
    dims = x.shape.dims
    if not axes:
        if any(d is None for d in dims):
            return [(x.dtype, TensorShape(None))]
        return [(x.dtype, TensorShape([d for d in dims if d != 1]))]
    axes = {normalize_axis(a, len(dims), op.type) for a in axes}
    for a in sorted(axes):
        if dims[a] is not None and dims[a] != 1:
            raise ValueError(f"can not squeeze dim[{a}], expected a dimension of 1, got {dims[a]}")
    return [(x.dtype, TensorShape([d for i, d in enumerate(dims) if i not in axes]))]


register_op("Squeeze", infer=_infer_squeeze)


def squeeze(input, axis=None, name=None, squeeze_dims=None):  # noqa: A002
    """Remove dimensions of size 1 (all of them, or those listed in ``axis``).

    Raises:
        ValueError: if a listed dimension is statically not 1 or out of range.
    """
    if axis is None:
        axis = squeeze_dims
    x = as_tensor(input)
    axes = () if axis is None else ((axis,) if isinstance(axis, (int, np.integer)) else tuple(axis))
    ndims = x.shape.ndims
    axes = tuple(sorted({normalize_axis(a, ndims, "Squeeze") for a in axes}))
    return make("Squeeze", (x,), {"squeeze_dims": axes}, name, "Squeeze")


def _reshape_like_input_grad(op, grad):
    return [reshape(grad, shape_of(op.inputs[0]))]


register_gradient("ExpandDims")(_reshape_like_input_grad)
register_gradient("Squeeze")(_reshape_like_input_grad)


# -- reverse (issue 36) ------------------------------------------------------------------------
def _infer_reverse(op):
    x = op.inputs[0]
    if x.shape.ndims == 0 and op.get_attr("axis"):
        raise ValueError(f"ReverseV2 '{op.name}': a scalar has no axis to reverse")
    return [(x.dtype, x.shape)]


register_op("ReverseV2", infer=_infer_reverse)


def reverse(tensor, axis, name=None):
    """TF1's ``tf.reverse`` (``tf.reverse_v2``): ``tensor`` with the listed axes reversed.

    Raises:
        ValueError: for an axis out of range or listed twice.
        TypeError: for an axis that is not a list of integers.
    """
    x = as_tensor(tensor)
    if hasattr(axis, "op"):
        axis = static_value(axis)
        if axis is None:
            raise ValueError("reverse: axis must be a constant")
    values = np.asarray(axis).reshape(-1).tolist()
    if not all(isinstance(a, int) and not isinstance(a, bool) for a in values):
        raise TypeError(f"reverse: axis must be a list of integers, got {axis!r}")
    axes = [normalize_axis(a, x.shape.ndims, "ReverseV2") for a in values]
    if len(set(axes)) != len(axes):
        raise ValueError(f"ReverseV2: axis {values} lists an axis twice")
    return make("ReverseV2", (x,), {"axis": tuple(axes)}, name, "ReverseV2")


@register_gradient("ReverseV2")
def _reverse_grad(op, grad):
    return [reverse(grad, list(op.get_attr("axis")))]
