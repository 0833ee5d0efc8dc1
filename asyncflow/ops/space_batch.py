"""Space and depth, space and batch: TF1's ``tf.space_to_depth``/``depth_to_space`` and
``tf.space_to_batch_nd``/``batch_to_space_nd`` (with ``space_to_batch``/``batch_to_space``,
their 4-D square-block forms).

Theory of operation: each op moves blocks of spatial positions into another dim without
changing a value. ``SpaceToDepth`` puts each ``block_size`` x ``block_size`` block of an image
into the channels (NHWC; NCHW too), ``DepthToSpace`` undoes it. ``SpaceToBatchND`` pads the
``M`` spatial dims after the batch dim by ``paddings``, then puts each block of
``block_shape`` positions into the batch (block offset major, as TF1); ``BatchToSpaceND``
undoes it and crops by ``crops``. Each is its partner's gradient. ``block_shape``,
``paddings`` and ``crops`` are int tensors as TF1's, read at build time when constant (static
shapes, errors named now) and checked again when the step runs (a fed one). The kernels are
reshapes and transposes through ``ctx.xp`` (``kernels/space_batch.py``).
``required_space_to_batch_paddings`` computes the paddings and crops that fit a shape to a
block (TF1's composite: numbers where its arguments are constants, ops otherwise).
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.array import int_operand
from asyncflow.ops.construct import as_tensor, graph_of, make, static_value
from asyncflow.ops.layout import stack
from asyncflow.ops.sources import zeros

_FORMATS = ("NHWC", "NCHW")


# -- space_to_depth / depth_to_space -----------------------------------------------------------
def _infer_depth(op):
    x = op.inputs[0]
    size, layout = op.get_attr("block_size"), op.get_attr("data_format")
    if x.shape.ndims is None:
        return [(x.dtype, TensorShape([None] * 4))]
    if x.shape.ndims != 4:
        raise ValueError(f"Shape must be rank 4 but is rank {x.shape.ndims}")
    b, h, w, c = (x.shape.dims[i] for i in ((0, 1, 2, 3) if layout == "NHWC" else (0, 2, 3, 1)))
    if op.type == "SpaceToDepth":
        for what, d in (("height", h), ("width", w)):
            if d is not None and d % size:
                raise ValueError(f"Dimension size must be evenly divisible by {size} but is "
                                 f"{d} for the {what} of shape {x.shape}")
        h, w, c = (None if h is None else h // size, None if w is None else w // size,
                   None if c is None else c * size * size)
    else:
        if c is not None and c % (size * size):
            raise ValueError(f"Dimension size must be evenly divisible by {size * size} but "
                             f"is {c} for the depth of shape {x.shape}")
        h, w, c = (None if h is None else h * size, None if w is None else w * size,
                   None if c is None else c // (size * size))
    return [(x.dtype, TensorShape([b, h, w, c] if layout == "NHWC" else [b, c, h, w]))]


register_op("SpaceToDepth", infer=_infer_depth)
register_op("DepthToSpace", infer=_infer_depth)


def _depth_op(op_type, input, block_size, name, data_format):  # noqa: A002
    if data_format not in _FORMATS:
        raise ValueError(f"{op_type}: data_format must be 'NHWC' or 'NCHW', got "
                         f"{data_format!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise TypeError(f"{op_type}: block_size must be an int, got {block_size!r}")
    if block_size < 2:
        raise ValueError(f"Attr 'block_size' of '{op_type}' Op passed {block_size} less "
                         f"than minimum 2.")
    return make(op_type, (as_tensor(input),),
                {"block_size": int(block_size), "data_format": data_format}, name, op_type)


def space_to_depth(input, block_size, name=None, data_format="NHWC"):  # noqa: A002
    """TF1's ``tf.space_to_depth``: each ``block_size`` x ``block_size`` block of spatial
    positions moved into the depth, ``[b, h, w, c]`` to ``[b, h/bs, w/bs, bs*bs*c]``.

    Raises:
        ValueError: for a block size under 2, an input not 4-D, or a known height or width
            not divisible by the block size (a fed one fails the run naming the op).
    """
    return _depth_op("SpaceToDepth", input, block_size, name, data_format)


def depth_to_space(input, block_size, name=None, data_format="NHWC"):  # noqa: A002
    """TF1's ``tf.depth_to_space``: ``space_to_depth`` undone, ``[b, h, w, c]`` to
    ``[b, h*bs, w*bs, c/(bs*bs)]``.

    Raises:
        ValueError: for a block size under 2, an input not 4-D, or a known depth not
            divisible by the square of the block size.
    """
    return _depth_op("DepthToSpace", input, block_size, name, data_format)


@register_gradient("SpaceToDepth")
def _space_to_depth_grad(op, grad):
    return [depth_to_space(grad, op.get_attr("block_size"),
                           data_format=op.get_attr("data_format"))]


@register_gradient("DepthToSpace")
def _depth_to_space_grad(op, grad):
    return [space_to_depth(grad, op.get_attr("block_size"),
                           data_format=op.get_attr("data_format"))]


# -- space_to_batch_nd / batch_to_space_nd -----------------------------------------------------
def _infer_space_batch(op):
    x, block_t, pads_t = op.inputs
    to_batch = op.type == "SpaceToBatchND"
    what = "paddings" if to_batch else "crops"
    if block_t.shape.ndims not in (None, 1):
        raise ValueError(f"block_shape must be a vector, got shape {block_t.shape}")
    if pads_t.shape.ndims not in (None, 2) or (pads_t.shape.ndims == 2 and
                                                pads_t.shape.dims[1] not in (None, 2)):
        raise ValueError(f"{what} must have shape [M, 2], got {pads_t.shape}")
    m = block_t.shape.dims[0] if block_t.shape.ndims == 1 else None
    if m is not None and pads_t.shape.ndims == 2 and pads_t.shape.dims[0] not in (None, m):
        raise ValueError(f"block_shape has {m} entries but {what} has shape {pads_t.shape}")
    if m is not None and m < 1:
        raise ValueError(f"block_shape must have at least one entry, got shape "
                         f"{block_t.shape}")
    if x.shape.ndims is None:
        return [(x.dtype, TensorShape(None))]
    if m is not None and x.shape.ndims < m + 1:
        raise ValueError(f"input rank must be at least {m + 1} for a block_shape of {m} "
                         f"entries, got shape {x.shape}")
    block, pads = static_value(block_t), static_value(pads_t)
    if block is None or pads is None:
        if m is None:
            return [(x.dtype, TensorShape([None] * x.shape.ndims))]
        return [(x.dtype, TensorShape([None] * (m + 1) + list(x.shape.dims[m + 1:])))]
    block = [int(b) for b in np.reshape(block, -1)]
    pads = np.asarray(pads, np.int64).reshape(-1, 2).tolist()
    if any(b < 1 for b in block):
        raise ValueError(f"block_shape values must be at least 1, got {block}")
    if any(p < 0 for pair in pads for p in pair):
        raise ValueError(f"{what} cannot be negative, got {pads}")
    dims = list(x.shape.dims)
    count = int(np.prod(block))
    batch = dims[0]
    if to_batch:
        for i, (b, (before, after)) in enumerate(zip(block, pads)):
            d = dims[i + 1]
            if d is not None:
                if (d + before + after) % b:
                    raise ValueError(f"Dimension size must be evenly divisible by {b} but "
                                     f"is {d + before + after} (padded_shape[{i}])")
                dims[i + 1] = (d + before + after) // b
        dims[0] = None if batch is None else batch * count
    else:
        if batch is not None and batch % count:
            raise ValueError(f"Dimension size must be evenly divisible by {count} but is "
                             f"{batch} (the input batch dimension, by the product of block "
                             f"sizes)")
        for i, (b, (before, after)) in enumerate(zip(block, pads)):
            d = dims[i + 1]
            if d is not None:
                if d * b - before - after < 0:
                    raise ValueError(f"Negative dimension size caused by subtracting "
                                     f"{before + after} from {d * b} (crops[{i}])")
                dims[i + 1] = d * b - before - after
        dims[0] = None if batch is None else batch // count
    return [(x.dtype, TensorShape(dims))]


register_op("SpaceToBatchND", infer=_infer_space_batch)
register_op("BatchToSpaceND", infer=_infer_space_batch)


def _space_batch_op(op_type, input, block_shape, pads, what, name):  # noqa: A002
    block = int_operand(block_shape, op_type, "block_shape")
    pads = int_operand(pads, op_type, what)
    return make(op_type, (as_tensor(input), block, pads), None, name, op_type)


def space_to_batch_nd(input, block_shape, paddings, name=None):  # noqa: A002
    """TF1's ``tf.space_to_batch_nd``: the ``M`` dims after the batch dim padded by
    ``paddings`` (``[M, 2]``), then each block of ``block_shape`` positions moved into the
    batch dim.

    Raises:
        ValueError: for shapes, blocks or paddings TF1 refuses while building (a padded dim
            not divisible by its block, a negative padding, ...); fed ones fail the run
            naming the op.
        TypeError: for block_shape or paddings not int32/int64.
    """
    return _space_batch_op("SpaceToBatchND", input, block_shape, paddings, "paddings", name)


def batch_to_space_nd(input, block_shape, crops, name=None):  # noqa: A002
    """TF1's ``tf.batch_to_space_nd``: ``space_to_batch_nd`` undone, then the ``M`` dims
    after the batch dim cropped by ``crops`` (``[M, 2]``).

    Raises:
        ValueError: for a batch not divisible by the blocks' product, negative crops or crops
            larger than a dim, where known now; else the run fails naming the op.
        TypeError: for block_shape or crops not int32/int64.
    """
    return _space_batch_op("BatchToSpaceND", input, block_shape, crops, "crops", name)


def _square_block(op_type, block_size, block_shape):
    if block_shape is not None:  # (TF1's alias of block_size)
        block_size = block_shape
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise TypeError(f"{op_type}: block_size must be an int, got {block_size!r}")
    if block_size < 2:
        raise ValueError(f"Attr 'block_size' of '{op_type}' Op passed {block_size} less "
                         f"than minimum 2.")
    return np.array([block_size, block_size], np.int64 if block_size >= 2 ** 31 else np.int32)


def space_to_batch(input, paddings, block_size=None, name=None, block_shape=None):  # noqa: A002
    """TF1's ``tf.space_to_batch`` (``tf.nn.space_to_batch``): ``space_to_batch_nd`` of a
    4-D input with a square block of ``block_size`` (at least 2).

    Raises:
        ValueError: for an input not 4-D, a block size under 2, or what
            ``space_to_batch_nd`` refuses.
    """
    x, block = _four_d("SpaceToBatchND", "space_to_batch", input, block_size, block_shape)
    return space_to_batch_nd(x, block, paddings, name)


def batch_to_space(input, crops, block_size, name=None, block_shape=None):  # noqa: A002
    """TF1's ``tf.batch_to_space``: ``batch_to_space_nd`` of a 4-D input with a square
    block of ``block_size`` (at least 2).

    Raises:
        ValueError: for an input not 4-D, a block size under 2, or what
            ``batch_to_space_nd`` refuses.
    """
    x, block = _four_d("BatchToSpaceND", "batch_to_space", input, block_size, block_shape)
    return batch_to_space_nd(x, block, crops, name)


def _four_d(op_type, api, input, block_size, block_shape):  # noqa: A002
    """``(x, block)``: ``input`` as a tensor, refused unless 4-D (or of unknown rank), and
    the square block of ``block_size``."""
    block = _square_block(op_type, block_size, block_shape)
    x = as_tensor(input)
    if x.shape.ndims not in (None, 4):
        raise ValueError(f"{api}: input must be 4-D, got shape {x.shape}")
    return x, block


@register_gradient("SpaceToBatchND")
def _space_to_batch_grad(op, grad):
    _, block, pads = op.inputs
    return [make("BatchToSpaceND", (grad, block, pads), None, None, "BatchToSpaceND"),
            None, None]


@register_gradient("BatchToSpaceND")
def _batch_to_space_grad(op, grad):
    _, block, crops = op.inputs
    return [make("SpaceToBatchND", (grad, block, crops), None, None, "SpaceToBatchND"),
            None, None]


def required_space_to_batch_paddings(input_shape, block_shape, base_paddings=None, name=None):
    """TF1's ``tf.required_space_to_batch_paddings``: the ``(paddings, crops)`` (int32, ``[M,
    2]``) that make ``input_shape`` (``[M]``) plus ``base_paddings`` divisible by
    ``block_shape`` (``[M]``, its size known now), padding at the end, in a scope ``name``
    (``required_space_to_batch_paddings``; the results named ``paddings`` and ``crops``).
    Computed now where all three are constants, else by ops, as TF1's.

    Raises:
        ValueError: for a block_shape not a vector of known size, or an input_shape or
            base_paddings of another shape.
    """
    with graph_of([input_shape, block_shape, base_paddings]).name_scope(
            name or "required_space_to_batch_paddings"):
        input_shape = as_tensor(input_shape, dtype=dtypes.int32, name="input_shape")
        block_shape = as_tensor(block_shape, dtype=dtypes.int32, name="block_shape")
        if block_shape.shape.ndims != 1 or not block_shape.shape.is_fully_defined():
            raise ValueError(f"required_space_to_batch_paddings: block_shape must be a vector "
                             f"of known size, got shape {block_shape.shape}")
        m = block_shape.shape.dims[0]
        if m == 0:
            return zeros([0, 2], dtypes.int32), zeros([0, 2], dtypes.int32)
        if not input_shape.shape.is_compatible_with([m]):
            raise ValueError(f"required_space_to_batch_paddings: input_shape must have shape "
                             f"[{m}] (block_shape's), got {input_shape.shape}")
        base = as_tensor(np.zeros([m, 2], np.int32) if base_paddings is None else
                         base_paddings, dtype=dtypes.int32, name="base_paddings")
        if not base.shape.is_compatible_with([m, 2]):
            raise ValueError(f"required_space_to_batch_paddings: base_paddings must have "
                             f"shape [{m}, 2], got {base.shape}")
        known = [static_value(t) for t in (block_shape, input_shape, base)]
        if all(value is not None for value in known):
            block_shape, input_shape, base = (np.asarray(v, np.int32) for v in known)
        pad_start, original_end = base[:, 0], base[:, 1]
        full = input_shape + pad_start + original_end
        extra = (block_shape - full % block_shape) % block_shape
        pad_end = original_end + extra
        return (stack([[pad_start[i], pad_end[i]] for i in range(m)], name="paddings"),
                stack([[0, extra[i]] for i in range(m)], name="crops"))
