"""Tiling and padding: tile, pad (constant and mirror modes), one_hot.

Theory of operation: each op builds a larger tensor from a smaller one by repeating (Tile),
surrounding (PadV2, MirrorPad) or spreading values (OneHot). ``multiples``, ``paddings`` and
``depth`` are tensor inputs as in TF1, read at build time when they are Consts. Gradients fold
the copies back: a tile's gradient reshapes to ``[m0, d0, m1, d1, ...]`` and sums the ``m``
axes; a constant pad's gradient slices the interior; a mirror pad's gradient
(``MirrorPadGrad``) adds each mirrored element back onto its source, one axis at a time.

Kernels live in ``asyncflow/kernels/tiling.py``.
"""
from __future__ import annotations

import builtins

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.graph.conversion import contains_tensor
from asyncflow.ops import math as math_ops
from asyncflow.ops.array import reshape
from asyncflow.ops.construct import INTEGER, as_tensor, check_dtype, make, static_value
from asyncflow.ops.layout import stack
from asyncflow.ops.shapes import int_const, shape_of, static_ints


# -- tile --------------------------------------------------------------------------------------
def _infer_tile(op):
    x, multiples_t = op.inputs
    multiples = static_ints(multiples_t)
    ndims = x.shape.ndims
    if multiples is None:
        n = multiples_t.shape[0] if multiples_t.shape.ndims == 1 else ndims
        return [(x.dtype, TensorShape(None if n is None else [None] * n))]
    if ndims is not None and len(multiples) != ndims:
        raise ValueError(f"multiples {multiples} must have one entry per input dimension "
                         f"(rank {ndims})")
    if any(m < 0 for m in multiples):
        raise ValueError(f"multiples must be non-negative, got {multiples}")
    if ndims is None:
        return [(x.dtype, TensorShape([None] * len(multiples)))]
    return [(x.dtype, TensorShape([None if d is None else d * m
                                   for d, m in zip(x.shape.dims, multiples)]))]


register_op("Tile", infer=_infer_tile)


def tile(input, multiples, name=None):  # noqa: A002
    """Repeat ``input`` ``multiples[i]`` times along dim ``i``.

    Raises:
        ValueError: if ``multiples`` does not have one non-negative entry per dim.
    """
    x = as_tensor(input)
    if not hasattr(multiples, "op"):
        multiples = int_const(list(multiples))
    check_dtype("Tile", multiples, INTEGER, "multiples")
    return make("Tile", (x, multiples), None, name, "Tile")


@register_gradient("Tile")
def _tile_grad(op, grad):
    x, multiples = op.inputs
    ndims = x.shape.ndims
    if ndims is None:
        raise ValueError(f"Tile '{op.name}': the gradient needs the input's rank")
    if ndims == 0:
        return [grad, None]
    # grad viewed as [m0, d0, m1, d1, ...]: summing the m axes folds the copies back.
    interleaved = reshape(stack([math_ops.cast(multiples, dtypes.int32), shape_of(x)], axis=1),
                          [-1])
    static = static_ints(multiples)
    if static is not None and x.shape.is_fully_defined():
        interleaved = int_const([v for pair in zip(static, x.shape.dims) for v in pair])
    summed = math_ops.reduce_sum(reshape(grad, interleaved),
                                 axis=list(builtins.range(0, 2 * ndims, 2)))
    return [reshape(summed, shape_of(x)), None]


# -- pad ---------------------------------------------------------------------------------------
_PAD_MODES = ("CONSTANT", "REFLECT", "SYMMETRIC")


def _infer_pad(op):
    x, paddings_t = op.inputs[0], op.inputs[1]
    if op.type == "PadV2" and op.inputs[2].dtype is not x.dtype:
        raise TypeError(f"constant_values has dtype {op.inputs[2].dtype.name}, but the input "
                        f"has {x.dtype.name}")
    paddings = static_value(paddings_t)
    if op.type == "MirrorPadGrad":
        sign = -1
    else:
        sign = 1
    if paddings is None:
        n = paddings_t.shape[0] if paddings_t.shape.ndims == 2 else x.shape.ndims
        return [(x.dtype, TensorShape(None if n is None else [None] * n))]
    paddings = np.asarray(paddings)
    ndims = x.shape.ndims
    if paddings.ndim != 2 or paddings.shape[1] != 2 or (ndims is not None and
                                                        paddings.shape[0] != ndims):
        raise ValueError(f"paddings must have shape [rank, 2] = [{ndims}, 2], got "
                         f"{list(paddings.shape)}")
    if (paddings < 0).any():
        raise ValueError(f"paddings must be non-negative, got {paddings.tolist()}")
    if ndims is None:
        return [(x.dtype, TensorShape([None] * paddings.shape[0]))]
    dims = []
    for d, (before, after) in zip(x.shape.dims, paddings.tolist()):
        if op.type == "MirrorPad" and d is not None:
            _check_mirror(op.get_attr("mode"), d, before, after)
        dims.append(None if d is None else d + sign * (before + after))
    return [(x.dtype, TensorShape(dims))]


def _check_mirror(mode, dim, before, after):
    limit = dim - 1 if mode == "REFLECT" else dim
    if before > limit or after > limit:
        raise ValueError(f"paddings ({before}, {after}) must be at most {limit} for a "
                         f"dimension of size {dim} in {mode} mode")


register_op("PadV2", infer=_infer_pad)
register_op("MirrorPad", infer=_infer_pad)
register_op("MirrorPadGrad", infer=_infer_pad)


def pad(tensor, paddings, mode="CONSTANT", name=None, constant_values=0):
    """Pad ``tensor`` with ``paddings[i] = [before, after]`` elements along dim ``i``.

    Args:
        tensor: the input.
        paddings: an int ``[rank, 2]`` list or tensor.
        mode: ``"CONSTANT"`` (fill with ``constant_values``), ``"REFLECT"`` (mirror without the
            edge; pads must be < the dim) or ``"SYMMETRIC"`` (mirror with the edge; <= the dim).
            Case-insensitive.
        name: op name.
        constant_values: the fill value for CONSTANT mode (takes the tensor's dtype).

    Returns:
        The padded tensor.

    Raises:
        ValueError: on a bad mode, a paddings shape that does not match the rank, negative
            paddings, or mirror pads too large for the dimension.
    """
    x = as_tensor(tensor)
    mode = str(mode).upper()
    if mode not in _PAD_MODES:
        raise ValueError(f"Pad: mode must be one of {_PAD_MODES}, got {mode!r}")
    if isinstance(paddings, (list, tuple)) and contains_tensor(paddings):
        paddings = int_const(list(paddings))  # auto-packed: [[0, n], [0, 0]]
    elif not hasattr(paddings, "op"):
        paddings = int_const(np.asarray(paddings, dtype=np.int64).reshape(-1, 2).tolist()
                             if np.size(paddings) else np.zeros((0, 2), np.int32))
    check_dtype("Pad", paddings, INTEGER, "paddings")
    if mode == "CONSTANT":
        if not hasattr(constant_values, "op") and np.all(np.asarray(constant_values) == 0):
            constant_values = np.zeros((), x.dtype.np)  # TF1's Pad: a 0 fills any dtype, bool too
        fill_value = as_tensor(constant_values, dtype=x.dtype)
        return make("PadV2", (x, paddings, fill_value), None, name, "Pad")
    return make("MirrorPad", (x, paddings), {"mode": mode}, name, "MirrorPad")


def _slice(tensor, begin, size):
    # Slice by its op type: ops/slicing.py, which owns it, builds on this module (Slice's
    # gradient is a pad), so the two gradients meet through the registry, not an import.
    return make("Slice", (tensor, begin, size), None, None, "Slice")


def _unpad(grad, x, paddings):
    static = static_value(paddings)
    begin = int_const(np.asarray(static)[:, 0].tolist()) if static is not None else \
        math_ops.cast(reshape(_slice(paddings, int_const([0, 0]), int_const([-1, 1])), [-1]),
                      dtypes.int32)
    return _slice(grad, begin, shape_of(x))


@register_gradient("PadV2")
def _pad_grad(op, grad):
    x, paddings, _ = op.inputs
    return [_unpad(grad, x, paddings), None, None]


@register_gradient("MirrorPad")
def _mirror_pad_grad(op, grad):
    paddings = op.inputs[1]
    return [make("MirrorPadGrad", (grad, paddings), {"mode": op.get_attr("mode")}, None,
                 "MirrorPadGrad"), None]


@register_gradient("MirrorPadGrad")
def _mirror_pad_grad_grad(op, grad):
    return [pad(grad, op.inputs[1], mode=op.get_attr("mode")), None]


# -- one_hot -----------------------------------------------------------------------------------
def _infer_one_hot(op):
    indices, depth_t, on_value, off_value = op.inputs
    check_dtype(op.type, indices, INTEGER, "indices")
    if on_value.dtype is not off_value.dtype:
        raise TypeError(f"on_value ({on_value.dtype.name}) and off_value "
                        f"({off_value.dtype.name}) must have the same dtype")
    depth = static_ints(depth_t)
    if depth is not None and depth < 0:
        raise ValueError(f"depth must be non-negative, got {depth}")
    if indices.shape.ndims is None:
        return [(on_value.dtype, TensorShape(None))]
    axis = op.get_attr("axis")
    dims = list(indices.shape.dims)
    dims.insert(len(dims) if axis == -1 else axis, depth)
    return [(on_value.dtype, TensorShape(dims))]


register_op("OneHot", infer=_infer_one_hot)
not_differentiable("OneHot")


def _value_dtype(value, dtype):
    """The dtype TF1 gives an on/off ``value`` with ``dtype`` as a hint: a tensor's own, a
    Python or numpy value's ``dtype`` when it converts exactly, else its natural one."""
    if dtype is not None and not (hasattr(value, "op") or hasattr(value, "_as_tensor")):
        dtype = dtypes.as_dtype(dtype)
        given = np.asarray(value)
        kind = "i" if given.dtype.kind == "u" else given.dtype.kind
        target = "i" if dtype.np.kind == "u" else dtype.np.kind
        with np.errstate(all="ignore"):  # the same kind, or an int to a float, when exact
            if (kind == target or (kind, target) == ("i", "f")) and np.array_equal(
                    given.astype(dtype.np), given):
                return dtype
    return as_tensor(value).dtype


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    """A one-hot encoding: ``on_value`` where ``indices == j`` along the new ``axis``.

    Indices outside ``[0, depth)`` give a row of ``off_value`` (TF1).

    Args:
        indices: an int tensor.
        depth: the size of the new dimension (int or int scalar tensor).
        on_value, off_value: the two values (default 1 and 0, in ``dtype``).
        axis: where the new dimension goes: -1 (last, the default) or in ``[0, rank]``.
        dtype: the output dtype; default float32, or the dtype of on/off values if given.
        name: op name.

    Returns:
        A tensor of rank ``rank(indices) + 1``.

    Raises:
        ValueError: if ``axis`` is out of range or depth is negative.
        TypeError: if on/off values and dtype disagree.
    """
    indices = as_tensor(indices)
    # TF1's rule: without a dtype it follows on_value (else off_value), a Python 5 being int32
    # and 5.0 float32; a dtype that a given value cannot take exactly is refused.
    given = [(label, _value_dtype(v, dtype)) for label, v in (("on_value", on_value),
                                                              ("off_value", off_value))
             if v is not None]
    if dtype is None:
        dtype = given[0][1] if given else dtypes.float32
    dtype = dtypes.as_dtype(dtype)
    for label, value_dtype in given:
        if value_dtype is not dtype:
            raise TypeError(f"one_hot: dtype {value_dtype.name} of {label} does not match the "
                            f"dtype {dtype.name}")
    on = as_tensor(1 if on_value is None else on_value, dtype=dtype)
    off = as_tensor(0 if off_value is None else off_value, dtype=dtype)
    axis = -1 if axis is None else int(axis)
    ndims = indices.shape.ndims
    if axis < -1 or (ndims is not None and axis > ndims):
        raise ValueError(f"OneHot: axis {axis} must be -1 or in [0, {ndims}]")
    depth = as_tensor(depth, dtype=dtypes.int32) if not hasattr(depth, "op") else depth
    return make("OneHot", (indices, depth, on, off), {"axis": axis}, name, "one_hot")


def sequence_mask(lengths, maxlen=None, dtype=dtypes.bool, name=None):
    """``mask[..., j] = j < lengths[...]`` with ``maxlen`` columns (default: the largest
    length), as TF1's ``tf.sequence_mask``."""
    lengths = as_tensor(lengths)
    with lengths.graph.name_scope(name or "SequenceMask"):
        if maxlen is None:  # at least 0: the max of no lengths is the dtype's minimum
            maxlen = math_ops.maximum(math_ops.reduce_max(lengths), 0)
        from asyncflow.ops.layout import expand_dims
        from asyncflow.ops.sources import range as _range
        columns = math_ops.cast(_range(0, maxlen, 1), lengths.dtype)
        mask = math_ops.less(columns, expand_dims(lengths, -1))
        dtype = dtypes.as_dtype(dtype)
        return mask if dtype is dtypes.bool else math_ops.cast(mask, dtype)



def broadcast_to(input, shape, name=None):  # noqa: A002 - TF1's argument name
    """TF1's ``tf.broadcast_to``: ``input`` broadcast to ``shape`` (numpy's rules), as
    ``input + zeros(shape)`` (``logical_or`` for bool), so its gradient sums back over the
    broadcast axes.

    Raises:
        ValueError: when the known dims cannot broadcast.
        TypeError: for a string tensor.
    """
    from asyncflow.ops.construct import graph_of
    from asyncflow.ops.sources import zeros
    x = as_tensor(input)
    if x.dtype.is_string:
        raise TypeError("broadcast_to: string tensors are not provided")
    with graph_of((x,)).name_scope(name or "BroadcastTo"):
        background = zeros(shape, dtype=x.dtype)
        if x.dtype.is_bool:
            return math_ops.logical_or(x, background)
        return math_ops.add(x, background)


def meshgrid(*args, **kwargs):
    """TF1's ``tf.meshgrid(*args, indexing='xy', name=None)``: N-D coordinate grids of the
    1-D ``args`` (``'xy'``: Cartesian, the first two axes swapped; ``'ij'``: matrix), written
    as TF1 writes it.

    Raises:
        TypeError: for other keyword arguments.
        ValueError: for an ``indexing`` other than ``'xy'`` or ``'ij'``.
    """
    from asyncflow.ops.array import size
    from asyncflow.ops.construct import graph_of
    from asyncflow.ops.sources import ones
    indexing = kwargs.pop("indexing", "xy")
    name = kwargs.pop("name", "meshgrid")
    if kwargs:
        raise TypeError(f"meshgrid: unexpected keyword argument {sorted(kwargs)[0]!r}")
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    tensors = [as_tensor(x) for x in args]
    with graph_of(tensors).name_scope(name):
        ndim = len(tensors)
        single = (1,) * ndim
        output = [reshape(stack(x) if x.shape.ndims == 0 else x,
                          list(single[:i] + (-1,) + single[i + 1:]))
                  for i, x in enumerate(tensors)]
        # (known sizes as ints: the grids' static shapes are then known, as TF1's)
        sizes = [x.shape.num_elements() if x.shape.is_fully_defined() else size(x)
                 for x in tensors]
        if indexing == "xy" and ndim > 1:
            output[0] = reshape(output[0], [1, -1] + [1] * (ndim - 2))
            output[1] = reshape(output[1], [-1, 1] + [1] * (ndim - 2))
            sizes[0], sizes[1] = sizes[1], sizes[0]
        if not tensors:
            return []
        known = all(isinstance(n, int) for n in sizes)
        factor = ones(sizes if known else stack([as_tensor(n, dtypes.int32) for n in sizes]),
                      tensors[0].dtype)
        return [math_ops.multiply(x, factor) for x in output]
