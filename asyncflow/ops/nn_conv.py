"""Convolution and pooling ops (NHWC or NCHW), re-exported by ``af.nn``.

Theory of operation:
- ``Conv2D(input, filter)``, ``MaxPool(value)`` and ``AvgPool(value)`` carry ``strides``,
  ``ksize`` and ``dilations`` as 4-tuples in the data's layout (``(1, h, w, 1)`` for NHWC,
  ``(1, 1, h, w)`` for ``data_format="NCHW"``, as TF) and ``padding`` ``"SAME"``/``"VALID"``.
  Filters are ``[h, w, in, out]`` in both layouts. The kernels compute NCHW by transposing
  to NHWC and back (kernels/nn_conv.py ``_layout``).
- Their gradients are ops of their own, as in TF: ``Conv2DBackpropInput(input_sizes, filter,
  out_backprop)``, ``Conv2DBackpropFilter(input, filter_sizes, out_backprop)``,
  ``MaxPoolGrad(orig_input, orig_output, grad)`` and ``AvgPoolGrad(orig_input_shape, grad)``.
  Size inputs are int32 vectors: a Const when the shape is static, else a ``Shape`` op, and
  shape inference reads either back so gradients keep static shapes.
- Output sizes follow TF: VALID ``ceil((size - effective_kernel + 1) / stride)``, SAME
  ``ceil(size / stride)``; the kernels (kernels/nn_conv.py) compute the same geometry.
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import array as _array
from asyncflow.ops import math as _math
from asyncflow.ops.construct import (
    FLOATING, NUMERIC, as_tensor, check_dtype, graph_of, make, operands, static_value,
)
from asyncflow.ops.slicing import slice as _slice
from asyncflow.ops.layout import expand_dims
from asyncflow.ops.sources import constant
from asyncflow.ops.tiling import pad

_PADDINGS = ("SAME", "VALID")


def _four(value, what, op_name, data_format="NHWC"):
    """An int, 2-list or 4-list as a 4-tuple in the layout: ``(1, h, w, 1)`` for NHWC,
    ``(1, 1, h, w)`` for NCHW.

    Raises:
        ValueError: for another length or batch/depth entries other than 1.
    """
    nchw = data_format == "NCHW"
    if isinstance(value, (int, np.integer)):
        value = [int(value)] * 2
    value = [int(v) for v in value]
    if len(value) == 1:
        value = value * 2
    if len(value) == 2:
        out = (1, 1, value[0], value[1]) if nchw else (1, value[0], value[1], 1)
    elif len(value) == 4:
        out = tuple(value)
    else:
        raise ValueError(f"{op_name}: {what} must be an int or a list of 1, 2 or 4 ints, "
                         f"got {value}")
    if out[0] != 1 or out[1 if nchw else 3] != 1:
        raise ValueError(f"{op_name}: {what} in the batch and depth dimensions must be 1, "
                         f"got {list(out)} ({data_format or 'NHWC'})")
    if min(out) < 1:
        raise ValueError(f"{op_name}: {what} must be positive, got {list(out)}")
    return out


def _check_format(padding, data_format, op_name):
    if data_format not in (None, "NHWC", "NCHW"):
        raise ValueError(f"{op_name}: data_format {data_format!r} is not supported; use NHWC "
                         "or NCHW")
    padding = padding.upper() if isinstance(padding, str) else padding
    if padding not in _PADDINGS:
        raise ValueError(f"{op_name}: padding must be 'SAME' or 'VALID', got {padding!r}")
    return padding


def _explicit_paddings(padding, data_format, op_name):
    """TF1's explicit padding, ``[[0, 0], [top, bottom], [left, right], [0, 0]]`` in the data's
    layout (NCHW: the last two pairs), as the 4 pairs ``pad`` takes.

    Raises:
        ValueError: not 4 pairs of ints, a negative one, or padding of the batch or depth.
    """
    pairs = []
    for index, pair in enumerate(padding):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"{op_name}: when padding is a list, each element must be a "
                             f"list/tuple of size 2, got {pair!r} at index {index}")
        pairs.append([int(pair[0]), int(pair[1])])
    if len(pairs) != 4:
        raise ValueError(f"{op_name}: when padding is a list, it must be of size 4, got "
                         f"{len(pairs)} pairs")
    if min(min(pair) for pair in pairs) < 0:
        raise ValueError(f"{op_name}: all explicit paddings must be non-negative, got {pairs}")
    depth = 1 if data_format == "NCHW" else 3
    if pairs[0] != [0, 0] or pairs[depth] != [0, 0]:
        raise ValueError(f"{op_name}: nonzero explicit padding in the batch or depth "
                         f"dimensions is not supported, got {pairs} ({data_format or 'NHWC'})")
    return pairs


def _hw(attrs):
    """The positions of height, width and depth in the op's layout."""
    return (2, 3, 1) if attrs.get("data_format") == "NCHW" else (1, 2, 3)


def output_size(size, kernel, stride, dilation, padding):
    """One spatial output size (None when unknown), as TF computes it.

    Raises:
        ValueError: for VALID padding with a window larger than the input.
    """
    if size is None or kernel is None:
        return None
    effective = (kernel - 1) * dilation + 1
    if padding == "VALID":
        if size < effective:
            raise ValueError(f"Negative dimension size caused by subtracting {effective} from "
                             f"{size} (VALID padding)")
        return (size - effective) // stride + 1
    return -(-size // stride)


def _spatial_shape(x_shape, kernel_hw, attrs, depth):
    x_shape = x_shape.with_rank(4)
    dilations = attrs.get("dilations", (1, 1, 1, 1))
    h, w, c = _hw(attrs)
    dims = [output_size(x_shape[axis], kernel_hw[d], attrs["strides"][axis], dilations[axis],
                        attrs["padding"]) for d, axis in enumerate((h, w))]
    out = [x_shape[0], None, None, None]
    out[h], out[w], out[c] = dims[0], dims[1], depth
    return TensorShape(out)


def _sizes_shape(tensor):
    """The static shape named by a sizes input (a Const or a Shape op), else rank 4 unknown."""
    value = static_value(tensor)
    if value is not None:
        return TensorShape([int(d) for d in np.reshape(value, -1)])
    if tensor.op.type == "Shape":
        return tensor.op.inputs[0].shape.with_rank(4)
    return TensorShape([None] * 4)


def _sizes_of(tensor):
    """An int32 size vector for ``tensor``'s shape: a Const when static, else a Shape op."""
    if tensor.shape.is_fully_defined():
        return constant(np.asarray(tensor.shape.as_list(), dtype=np.int32))
    return _array.shape(tensor)


def _check_pair(op, x, filters):
    if x.dtype is not filters.dtype:
        raise TypeError(f"input ({x.dtype.name}) and filter ({filters.dtype.name}) must have "
                        "the same dtype")
    check_dtype(op.type, x, FLOATING, "input")
    filter_shape = filters.shape.with_rank(4)
    x_shape = x.shape.with_rank(4)
    depth = x_shape[_hw(op.attrs)[2]]
    if None not in (depth, filter_shape[2]) and depth != filter_shape[2]:
        raise ValueError(f"input depth {depth} does not match the filter's input depth "
                         f"{filter_shape[2]} (input {x.shape}, filter {filters.shape})")
    return x_shape, filter_shape


# -- Conv2D -----------------------------------------------------------------------------------
def _infer_conv2d(op):
    x, filters = op.inputs
    _, filter_shape = _check_pair(op, x, filters)
    return [(x.dtype, _spatial_shape(x.shape, filter_shape[:2], op.attrs, filter_shape[3]))]


def _infer_fused_conv2d(op):
    """``_FusedConv2D(x, filter, bias)``: Conv2D, then ``fused_ops`` (BiasAdd [, Relu]); made
    only by the fusion pass (compile/optimize.py), never by users."""
    x, filters, _bias = op.inputs
    _, filter_shape = _check_pair(op, x, filters)
    return [(x.dtype, _spatial_shape(x.shape, filter_shape[:2], op.attrs, filter_shape[3]))]


def _infer_backprop_input(op):
    sizes, filters, grad = op.inputs
    shape = _sizes_shape(sizes).with_rank(4)
    filter_shape = filters.shape.with_rank(4)
    depth = shape[_hw(op.attrs)[2]]
    if None not in (depth, filter_shape[2]) and depth != filter_shape[2]:
        raise ValueError(f"input depth {depth} does not match the filter's input depth "
                         f"{filter_shape[2]}")
    expected = _spatial_shape(shape, filter_shape[:2], op.attrs, filter_shape[3])
    if not expected.is_compatible_with(grad.shape):
        raise ValueError(f"out_backprop has shape {grad.shape}, expected {expected}")
    return [(grad.dtype, shape)]


def _infer_backprop_filter(op):
    x, sizes, grad = op.inputs
    shape = _sizes_shape(sizes).with_rank(4)
    expected = _spatial_shape(x.shape, shape[:2], op.attrs, shape[3])
    if not expected.is_compatible_with(grad.shape):
        raise ValueError(f"out_backprop has shape {grad.shape}, expected {expected}")
    return [(grad.dtype, shape)]


def _product(dims):
    total = 1
    for dim in dims:
        total *= dim
    return total


def _conv_cost(shapes, op):
    """Multiply-adds of Conv2D (and _FusedConv2D): ``N*OH*OW * KH*KW*C * O``, the output's
    size estimated as the input's over the strides; the same unit as MatMul's cost
    (placement's cost model and the offload threshold; the kernels' ``offload_scale``).
    Called on the hot path with the actual shapes, so it stays cheap."""
    x, filters = shapes[0], shapes[1]
    if len(x) != 4 or len(filters) != 4:
        return _product(x) + _product(filters)
    h, w, _ = _hw(op.attrs)
    strides = op.attrs["strides"]
    cells = x[0] * -(-x[h] // strides[h]) * -(-x[w] // strides[w])
    return cells * _product(filters)


def _backprop_input_cost(shapes, op):
    """``grad`` elements times a filter's ``KH*KW*C``: the forward's multiply-adds."""
    filters, grad = shapes[1], shapes[2]
    if len(filters) != 4:
        return _product(grad) + _product(filters)
    return _product(grad) * filters[0] * filters[1] * filters[2]


def _backprop_filter_cost(shapes, op):
    """``grad`` elements times ``KH*KW*C`` (the filter's shape from its static output shape;
    a 3x3 window when unknown)."""
    x, grad = shapes[0], shapes[2]
    dims = op.outputs[0].shape.dims if op.outputs else None
    taps = dims[0] * dims[1] if dims and len(dims) == 4 and None not in dims[:2] else 9
    depth = x[_hw(op.attrs)[2]] if len(x) == 4 else 1
    return _product(grad) * taps * depth


def _infer_fused_backprop(op):
    """``_FusedConv2DBackprop(input_sizes, filter, grad, x, filter_sizes)``: the two outputs
    of Conv2DBackpropInput and Conv2DBackpropFilter on one ``grad``; made only by the fusion
    pass (compile/optimize.py), never by users. ``_FusedConv2DBackpropWithSpectra`` takes the
    forward's spectra as a sixth input and gives the same outputs."""
    input_sizes, filters, grad, x, filter_sizes = op.inputs[:5]
    return [(grad.dtype, _sizes_shape(input_sizes).with_rank(4)),
            (x.dtype, _sizes_shape(filter_sizes).with_rank(4))]


def _fused_backprop_cost(shapes, op):
    """Both gradients' multiply-adds: twice the forward's."""
    filters, grad = shapes[1], shapes[2]
    if len(filters) != 4:
        return _product(grad) + _product(filters)
    return 2 * _product(grad) * filters[0] * filters[1] * filters[2]


def _infer_conv_with_spectra(op):
    """``_FusedConv2DWithSpectra(x, filter, bias)``: ``_FusedConv2D``'s output and, where the
    FFT algorithm ran, the batch's input spectra and the filter's as one flat array of real
    floats (``[freqs, N, 2C]`` then ``[freqs, 2C, 2O]``; empty where the direct kernel ran),
    which ``_FusedConv2DBackpropWithSpectra(input_sizes, filter, grad, x, filter_sizes,
    spectra)`` uses instead of transforming ``x`` and the filter again. Made only by
    compile/conv_spectra.py, never by users."""
    return _infer_fused_conv2d(op) + [(op.inputs[0].dtype, TensorShape(None))]


register_op("_FusedConv2D", infer=_infer_fused_conv2d, cost=_conv_cost)
register_op("_FusedConv2DWithSpectra", infer=_infer_conv_with_spectra, cost=_conv_cost,
            differentiable=False)
register_op("_FusedConv2DBackpropWithSpectra", infer=_infer_fused_backprop,
            cost=_fused_backprop_cost, differentiable=False)
register_op("_FusedConv2DBackprop", infer=_infer_fused_backprop, cost=_fused_backprop_cost,
            differentiable=False)
register_op("Conv2D", infer=_infer_conv2d, cost=_conv_cost)
register_op("Conv2DBackpropInput", infer=_infer_backprop_input, cost=_backprop_input_cost)
register_op("Conv2DBackpropFilter", infer=_infer_backprop_filter, cost=_backprop_filter_cost)


def _conv_attrs(strides, padding, dilations, data_format, op_name):
    if strides is None or padding is None:
        raise ValueError(f"{op_name}: strides and padding must be given")
    padding = _check_format(padding, data_format, op_name)
    return {"strides": _four(strides, "strides", op_name, data_format),
            "padding": padding,
            "dilations": _four(dilations if dilations is not None else 1, "dilations", op_name,
                               data_format),
            "data_format": data_format or "NHWC"}


def conv2d(input, filter=None, strides=None, padding=None, use_cudnn_on_gpu=True,  # noqa: A002
           data_format="NHWC", dilations=None, name=None, filters=None):
    """2-D convolution (cross-correlation, as TF) of ``input`` with ``filter``.

    Args:
        input: ``[batch, height, width, in_channels]`` (``data_format="NHWC"``) or
            ``[batch, in_channels, height, width]`` (``"NCHW"``), floating.
        filter: ``[filter_height, filter_width, in_channels, out_channels]`` (alias ``filters``).
        strides: an int, ``[h, w]``, or 4 ints in the data's layout (``[1, h, w, 1]`` NHWC,
            ``[1, 1, h, w]`` NCHW).
        padding: ``"SAME"`` or ``"VALID"``, or TF1's explicit padding: 4 pairs in the data's
            layout, ``[[0, 0], [top, bottom], [left, right], [0, 0]]`` (NCHW ``[[0, 0], [0,
            0], [top, bottom], [left, right]]``), built as a zero ``pad`` and a VALID Conv2D.
        dilations: like ``strides``; default 1.

    Returns:
        ``[batch, out_height, out_width, out_channels]`` (NCHW: channels second).

    Raises:
        ValueError: bad strides/padding/format, depth mismatch, or a VALID window larger
            than the input.
        TypeError: non-floating or mismatched dtypes.
    """
    filters = filter if filter is not None else filters
    if filters is None:
        raise ValueError("conv2d: filter must be given")
    x, filters = operands((input, filters), "Conv2D")
    if isinstance(padding, (list, tuple)):
        pairs = _explicit_paddings(padding, data_format, "conv2d")
        attrs = _conv_attrs(strides, "VALID", dilations, data_format, "conv2d")
        return make("Conv2D", (pad(x, pairs), filters), attrs, name, "Conv2D")
    attrs = _conv_attrs(strides, padding, dilations, data_format, "conv2d")
    return make("Conv2D", (x, filters), attrs, name, "Conv2D")


def conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding,  # noqa: A002
                          data_format="NHWC", dilations=None, name=None):
    """The gradient of conv2d with respect to its input (of shape ``input_sizes``).

    ``padding`` may be TF1's explicit padding (as ``conv2d``'s): the gradient of a zero
    ``pad`` and a VALID convolution, that is a VALID Conv2DBackpropInput to the padded sizes
    sliced back to ``input_sizes``."""
    return _backprop_input(input_sizes, filter, out_backprop, strides, padding, data_format,
                           dilations, name, "conv2d_backprop_input")


def _backprop_input(input_sizes, filter, out_backprop, strides, padding,  # noqa: A002
                    data_format, dilations, name, builder):
    """``conv2d_backprop_input`` for it and ``conv2d_transpose``, its errors naming
    ``builder``, the one called."""
    filters, grad = operands((filter, out_backprop), "Conv2DBackpropInput")
    sizes = as_tensor(input_sizes, dtype=dtypes.int32)
    if isinstance(padding, (list, tuple)):
        pairs = _explicit_paddings(padding, data_format, builder)
        attrs = _conv_attrs(strides, "VALID", dilations, data_format, builder)
        known = static_value(sizes)
        if known is None:
            padded = _math.add(sizes, constant([a + b for a, b in pairs], dtype=dtypes.int32))
        else:  # constants: the static shapes of the result and of its gradients
            padded = constant([int(d) + a + b for d, (a, b) in zip(known, pairs)],
                              dtype=dtypes.int32)
        # (the padded backprop named apart: the result takes TF1's name, and its shape)
        full = make("Conv2DBackpropInput", (padded, filters, grad), attrs, None,
                    "Conv2DBackpropInput_padded")
        out = _slice(full, constant([a for a, _ in pairs], dtype=dtypes.int32), sizes,
                     name=name or "Conv2DBackpropInput")
        out.set_shape(_sizes_shape(sizes))
        return out
    attrs = _conv_attrs(strides, padding, dilations, data_format, builder)
    return make("Conv2DBackpropInput", (sizes, filters, grad), attrs, name,
                "Conv2DBackpropInput")


def conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding,  # noqa: A002
                           data_format="NHWC", dilations=None, name=None):
    """The gradient of conv2d with respect to its filter (of shape ``filter_sizes``);
    ``padding`` may be TF1's explicit padding (the input padded with zeros, then VALID)."""
    x, grad = operands((input, out_backprop), "Conv2DBackpropFilter")
    sizes = as_tensor(filter_sizes, dtype=dtypes.int32)
    if isinstance(padding, (list, tuple)):
        x = pad(x, _explicit_paddings(padding, data_format, "conv2d_backprop_filter"))
        padding = "VALID"
    attrs = _conv_attrs(strides, padding, dilations, data_format, "conv2d_backprop_filter")
    return make("Conv2DBackpropFilter", (x, sizes, grad), attrs, name, "Conv2DBackpropFilter")


def conv2d_transpose(value, filter, output_shape, strides, padding="SAME",  # noqa: A002
                     data_format="NHWC", name=None):
    """The transpose of conv2d (its input gradient); ``filter`` is ``[h, w, out, in]``."""
    return _backprop_input(output_shape, filter, value, strides, padding, data_format, None,
                           name or "conv2d_transpose", "conv2d_transpose")


def _attrs_of(op, *names):
    return {name: op.get_attr(name) for name in names}


_CONV_ATTRS = ("strides", "padding", "dilations", "data_format")


@register_gradient("Conv2D")
def _conv2d_grad(op, grad):
    x, filters = op.inputs
    attrs = _attrs_of(op, *_CONV_ATTRS)
    return [make("Conv2DBackpropInput", (_sizes_of(x), filters, grad), attrs),
            make("Conv2DBackpropFilter", (x, _sizes_of(filters), grad), attrs)]


@register_gradient("Conv2DBackpropInput")
def _conv2d_backprop_input_grad(op, grad):
    _, filters, out_backprop = op.inputs
    attrs = _attrs_of(op, *_CONV_ATTRS)
    return [None,
            make("Conv2DBackpropFilter", (grad, _sizes_of(filters), out_backprop), attrs),
            make("Conv2D", (grad, filters), attrs)]


@register_gradient("Conv2DBackpropFilter")
def _conv2d_backprop_filter_grad(op, grad):
    x, _, out_backprop = op.inputs
    attrs = _attrs_of(op, *_CONV_ATTRS)
    return [make("Conv2DBackpropInput", (_sizes_of(x), grad, out_backprop), attrs),
            None,
            make("Conv2D", (x, grad), attrs)]


# -- pooling --------------------------------------------------------------------------------
def _infer_pool(op):
    x = op.inputs[0]
    check_dtype(op.type, x, FLOATING if op.type == "AvgPool" else NUMERIC, "value")
    ksize = op.get_attr("ksize")
    h, w, c = _hw(op.attrs)
    return [(x.dtype, _spatial_shape(x.shape, (ksize[h], ksize[w]), op.attrs,
                                     x.shape.with_rank(4)[c]))]


def _infer_max_pool_grad(op):
    x, _, grad = op.inputs
    return [(grad.dtype, x.shape)]


def _infer_avg_pool_grad(op):
    sizes, grad = op.inputs
    return [(grad.dtype, _sizes_shape(sizes))]


def _infer_pool_with_taps(op):
    """``_MaxPoolWithTaps(value)``: MaxPool's output and, per output cell, the uint8 tap
    (row-major in the window) its gradient goes to, plus 128 where that is a NaN first cell
    of a window of at most 128 taps (kernels/nn_pool_taps.py); ``_MaxPoolGradByTaps(orig_input, taps,
    grad)`` routes by it, ``_MaxPoolReluGradByTaps(orig_input, taps, grad, orig_output)``
    also applies ReluGrad where ``orig_input`` is a Relu's output. Made only by
    compile/pool_taps.py, never by users."""
    ((dtype, shape),) = _infer_pool(op)
    return [(dtype, shape), (dtypes.uint8, shape)]


register_op("_MaxPoolWithTaps", infer=_infer_pool_with_taps, differentiable=False)
register_op("_MaxPoolGradByTaps", infer=_infer_max_pool_grad, differentiable=False)
register_op("_MaxPoolReluGradByTaps", infer=_infer_max_pool_grad, differentiable=False)
register_op("MaxPool", infer=_infer_pool)
register_op("AvgPool", infer=_infer_pool)
register_op("MaxPoolGrad", infer=_infer_max_pool_grad)
register_op("AvgPoolGrad", infer=_infer_avg_pool_grad)


def _pool(op_type, value, ksize, strides, padding, data_format, name, builder):
    if ksize is None or strides is None or padding is None:
        raise ValueError(f"{builder}: ksize, strides and padding must be given")
    padding = _check_format(padding, data_format, builder)
    attrs = {"ksize": _four(ksize, "ksize", builder, data_format),
             "strides": _four(strides, "strides", builder, data_format),
             "padding": padding, "data_format": data_format or "NHWC"}
    return make(op_type, (as_tensor(value),), attrs, name, op_type)


def max_pool(value=None, ksize=None, strides=None, padding=None, data_format="NHWC", name=None,
             input=None):  # noqa: A002
    """Max over ``ksize`` windows of ``value`` (NHWC, or NCHW with ``data_format="NCHW"``;
    ``ksize``/``strides`` then ``[1, 1, h, w]``); padded cells never win.

    ``padding`` may be TF1's explicit padding (as ``conv2d``'s, each pad smaller than the
    window): the value padded with its dtype's lowest finite number, as TF1's kernel pads,
    then a VALID MaxPool. (A window of only padding and -inf is that lowest number, as TF1's;
    its gradient goes into the padding, where TF1's goes to the window's first cell.)

    Raises:
        ValueError: bad ksize/strides/padding, or a VALID window larger than the input.
    """
    value = value if value is not None else input
    if isinstance(padding, (list, tuple)) and ksize is not None:
        value = as_tensor(value)
        pairs = _explicit_paddings(padding, data_format, "max_pool")
        for pair, size in zip(pairs, _four(ksize, "ksize", "max_pool", data_format)):
            if max(pair) >= size:
                raise ValueError(f"max_pool: explicit padding {pairs} must be smaller than the "
                                 f"window size {size} in each dimension")
        check_dtype("MaxPool", value, NUMERIC, "value")  # before asking for its lowest
        value, padding = pad(value, pairs, constant_values=value.dtype.min), "VALID"
    return _pool("MaxPool", value, ksize, strides, padding, data_format, name, "max_pool")


def avg_pool(value=None, ksize=None, strides=None, padding=None, data_format="NHWC", name=None,
             input=None):  # noqa: A002
    """Mean over ``ksize`` windows; with SAME padding, padded cells are not counted (as TF).

    Raises:
        ValueError: bad ksize/strides/padding, or a VALID window larger than the input.
    """
    return _pool("AvgPool", value if value is not None else input, ksize, strides, padding,
                 data_format, name, "avg_pool")


_POOL_ATTRS = ("ksize", "strides", "padding", "data_format")


@register_gradient("MaxPool")
def _max_pool_grad(op, grad):
    attrs = _attrs_of(op, *_POOL_ATTRS)
    return [make("MaxPoolGrad", (op.inputs[0], op.outputs[0], grad), attrs)]


@register_gradient("AvgPool")
def _avg_pool_grad(op, grad):
    attrs = _attrs_of(op, *_POOL_ATTRS)
    return [make("AvgPoolGrad", (_sizes_of(op.inputs[0]), grad), attrs)]


@register_gradient("AvgPoolGrad")
def _avg_pool_grad_grad(op, grad):
    # AvgPoolGrad is linear in its gradient input: its adjoint is AvgPool itself.
    attrs = _attrs_of(op, *_POOL_ATTRS)
    return [None, make("AvgPool", (grad,), attrs)]


# -- TF1's composites over Conv2D (issue 36) -------------------------------------------------
def atrous_conv2d(value, filters, rate, padding, name=None):
    """TF1's ``tf.nn.atrous_conv2d``: a stride-1 NHWC convolution with ``dilations=rate``."""
    if int(rate) < 1:
        raise ValueError(f"atrous_conv2d: rate must be at least 1, got {rate}")
    return conv2d(value, filters, [1, 1, 1, 1], padding, dilations=[1, int(rate), int(rate), 1],
                  name=name or "atrous_conv2d")


def _block_diagonal(filters, what):
    """``[fh, fw, C, M]`` depthwise filters as a ``[fh, fw, C, C * M]`` Conv2D filter whose
    output channel ``c * M + m`` sees only input channel ``c`` (differentiable: a product
    with the identity and a reshape)."""
    dims = filters.shape.as_list() if filters.shape.ndims is not None else None
    if dims is None or len(dims) != 4 or None in dims:
        raise ValueError(f"{what}: filter must be 4-D [height, width, in_channels, "
                         f"channel_multiplier] with a known shape, got {filters.shape}")
    height, width, channels, multiplier = dims
    eye = constant(np.eye(channels, dtype=filters.dtype.as_numpy_dtype)[:, :, None])
    spread = _math.multiply(expand_dims(filters, 3), eye)  # [fh, fw, C, C, M]
    return _array.reshape(spread, [height, width, channels, channels * multiplier])


def depthwise_conv2d(input, filter, strides, padding, rate=None, name=None,  # noqa: A002
                     data_format=None, dilations=None):
    """TF1's ``tf.nn.depthwise_conv2d``: each input channel convolved with its own
    ``channel_multiplier`` filters; output channel ``c * M + m`` (as TF1 orders them).

    Built as one Conv2D with a block-diagonal filter, so it shares Conv2D's kernels and
    gradients (at ``in_channels`` times Conv2D's arithmetic).
    """
    x, filters = operands((input, filter), "depthwise_conv2d")
    if x.shape.ndims is not None and x.shape.ndims != 4:
        raise ValueError(f"depthwise_conv2d: input must be 4-D, got shape {x.shape}")
    if dilations is None and rate is not None:
        rate = list(rate) if isinstance(rate, (list, tuple)) else [rate, rate]
        dilations = rate
    layout = data_format or "NHWC"
    channel = 3 if layout == "NHWC" else 1
    dims = x.shape.as_list() if x.shape.ndims is not None else None
    fdims = filters.shape.as_list() if filters.shape.ndims == 4 else None
    if dims and fdims and dims[channel] is not None and fdims[2] != dims[channel]:
        raise ValueError(f"depthwise_conv2d: filter in_channels {fdims[2]} does not match the "
                         f"input's {dims[channel]} channels")
    with graph_of((x, filters)).name_scope(name or "depthwise"):
        return conv2d(x, _block_diagonal(filters, "depthwise_conv2d"), strides, padding,
                      data_format=layout, dilations=dilations)


def separable_conv2d(input, depthwise_filter, pointwise_filter, strides, padding,  # noqa: A002
                     rate=None, name=None, data_format=None, dilations=None):
    """TF1's ``tf.nn.separable_conv2d``: ``depthwise_conv2d`` then a 1x1 Conv2D with
    ``pointwise_filter`` ``[1, 1, in_channels * multiplier, out_channels]``."""
    pointwise = as_tensor(pointwise_filter)
    dims = pointwise.shape.as_list() if pointwise.shape.ndims == 4 else None
    if dims is None or dims[:2] != [1, 1]:
        raise ValueError(f"separable_conv2d: pointwise_filter must be [1, 1, in, out], got "
                         f"shape {pointwise.shape}")
    with graph_of((input, depthwise_filter, pointwise)).name_scope(name or "separable_conv2d"):
        depthwise = depthwise_conv2d(input, depthwise_filter, strides, padding, rate=rate,
                                     data_format=data_format, dilations=dilations)
        return conv2d(depthwise, pointwise, [1, 1, 1, 1], "VALID",
                      data_format=data_format or "NHWC")
