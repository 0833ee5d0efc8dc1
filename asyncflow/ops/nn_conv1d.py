"""TF1's 1-D convolution and pools, composed of the 2-D ops over a height of 1 (as TF1
builds them).

``conv1d``, ``max_pool1d`` and ``avg_pool1d`` expand their ``[batch, width, channels]`` (NWC)
or ``[batch, channels, width]`` (NCW) input to a height of 1, run ``Conv2D``, ``MaxPool`` or
``AvgPool`` (ops/nn_conv.py), and squeeze the height back out; their gradients are the 2-D
ops'.
"""
from __future__ import annotations

from asyncflow.ops.construct import as_tensor, graph_of, operands
from asyncflow.ops.layout import expand_dims, squeeze
from asyncflow.ops.nn_conv import avg_pool, conv2d, max_pool


def conv1d(value=None, filters=None, stride=None, padding=None, use_cudnn_on_gpu=None,
           data_format=None, name=None, input=None, dilations=None):  # noqa: A002
    """TF1's ``tf.nn.conv1d``: a Conv2D over a height of 1, as TF1 builds it.

    ``value`` is ``[batch, width, in_channels]`` (``data_format="NWC"``, the default) or
    ``[batch, in_channels, width]`` (``"NCW"``); ``filters`` ``[width, in, out]``; ``stride``
    and ``dilations`` an int (or a 1- or 3-list in the data's layout).
    """
    value = input if value is None else value
    if value is None or filters is None:
        raise ValueError("conv1d: value and filters must be given")
    value, filters = operands((value, filters), "conv1d")
    if data_format in (None, "NWC", "NHWC"):
        axis, layout = 1, "NHWC"
    elif data_format in ("NCW", "NCHW"):
        axis, layout = 2, "NCHW"
    else:
        raise ValueError(f"conv1d: data_format must be 'NWC' or 'NCW', got {data_format!r}")
    for what, tensor, rank in (("value", value, 3), ("filters", filters, 3)):
        if tensor.shape.ndims is not None and tensor.shape.ndims != rank:
            raise ValueError(f"conv1d: {what} must have rank {rank}, got shape {tensor.shape}")

    def spatial(number, what):
        if number is None:
            return 1
        items = list(number) if isinstance(number, (list, tuple)) else [number]
        if len(items) == 3:
            items = [items[1 if layout == "NHWC" else 2]]
        if len(items) != 1:
            raise ValueError(f"conv1d: {what} must be an int or a list of 1 or 3, got {number}")
        return int(items[0])

    step, rate = spatial(stride, "stride"), spatial(dilations, "dilations")
    ones = [1, 1, 1, 1]
    strides, dilation = list(ones), list(ones)
    strides[axis + 1], dilation[axis + 1] = step, rate
    with graph_of((value, filters)).name_scope(name or "conv1d"):
        out = conv2d(expand_dims(value, axis), expand_dims(filters, 0), strides, padding,
                     data_format=layout, dilations=dilation)
        return squeeze(out, [axis])


def _pool1d(pool, value, ksize, strides, padding, data_format, name, builder, scope):
    if data_format in (None, "NWC"):
        axis, layout = 1, "NHWC"
    elif data_format == "NCW":
        axis, layout = 2, "NCHW"
    else:
        raise ValueError(f"{builder}: data_format must be 'NWC' or 'NCW', got {data_format!r}")
    value = as_tensor(value)
    if value.shape.ndims is not None and value.shape.ndims != 3:
        raise ValueError(f"{builder}: input must have rank 3, got shape {value.shape}")

    def four(number, what):
        """TF1's ``_get_sequence``: an int or 1 int, or 3 in the data's layout."""
        items = list(number) if isinstance(number, (list, tuple)) else [number]
        if len(items) == 3:
            items = [items[1 if layout == "NHWC" else 2]]
        if len(items) != 1:
            raise ValueError(f"{builder}: {what} must be an int or a list of 1 or 3, got "
                             f"{number}")
        out = [1, 1, 1, 1]
        out[axis + 1] = int(items[0])
        return out

    with graph_of((value,)).name_scope(name or scope):
        out = pool(expand_dims(value, axis), four(ksize, "ksize"), four(strides, "strides"),
                   padding, data_format=layout)
        return squeeze(out, [axis])


def max_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):  # noqa: A002
    """TF1's ``tf.nn.max_pool1d``: max over windows of ``ksize`` along the width of an NWC
    (or NCW) input; ``ksize``/``strides`` an int or a list of 1 or 3."""
    return _pool1d(max_pool, input, ksize, strides, padding, data_format, name, "max_pool1d",
                   "MaxPool1d")


def avg_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):  # noqa: A002
    """TF1's ``tf.nn.avg_pool1d``: the mean over windows along the width (SAME: padded cells
    not counted)."""
    return _pool1d(avg_pool, input, ksize, strides, padding, data_format, name, "avg_pool1d",
                   "AvgPool1D")
