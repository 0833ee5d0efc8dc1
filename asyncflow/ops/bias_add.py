"""``bias_add``: the BiasAdd op and its gradient BiasAddGrad (TF1's ``tf.nn.bias_add``).

Moved out of ops/nn.py (which re-exports ``bias_add``) to keep that module under the size
limit. Kernels: kernels/nn.py.
"""
from __future__ import annotations

from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import math as _math
from asyncflow.ops.construct import NUMERIC, as_tensor, check_dtype, make


def _channel_axis(op, ndims):
    """The bias's axis: 1 for NCHW values of rank 3 or more (TF's rule), else the last."""
    nchw = op.attrs.get("data_format") == "NCHW"
    return 1 if nchw and ndims is not None and ndims >= 3 else -1


def _infer_bias_add(op):
    value, bias = op.inputs
    check_dtype(op.type, value, NUMERIC, "value")
    if value.dtype is not bias.dtype:
        raise TypeError(f"value ({value.dtype.name}) and bias ({bias.dtype.name}) must have "
                        "the same dtype")
    if value.shape.ndims is not None and value.shape.ndims < 2:
        raise ValueError(f"value must be at least 2-D, got shape {value.shape}")
    if (op.attrs.get("data_format") == "NCHW" and value.shape.ndims is not None
            and value.shape.ndims < 3):
        # TF1's shape function; its kernel, fed a matrix of unknown static shape, adds along
        # the last axis, as asyncflow's does
        raise ValueError(f"BiasAdd '{op.name}': data_format NCHW needs a value of rank at "
                         f"least 3, got shape {value.shape}")
    if bias.shape.ndims not in (None, 1):
        raise ValueError(f"bias must be 1-D, got shape {bias.shape}")
    axis = _channel_axis(op, value.shape.ndims)
    channels = value.shape[axis] if value.shape.ndims else None
    if channels is not None and bias.shape.ndims and bias.shape[0] not in (None, channels):
        where = "dimension 1" if axis == 1 else "last dimension"
        raise ValueError(f"bias has {bias.shape[0]} elements but the {where} of value "
                         f"is {channels} (shapes {value.shape} and {bias.shape})")
    if value.shape.ndims and bias.shape.ndims and bias.shape[0] is not None:
        # the channel dim is the bias's size (TF1's shape function merges them)
        dims = list(value.shape.dims)
        dims[axis] = bias.shape[0]
        return [(value.dtype, TensorShape(dims))]
    return [(value.dtype, value.shape)]


def _infer_bias_add_grad(op):
    grad = op.inputs[0]
    if not grad.shape.ndims:
        return [(grad.dtype, TensorShape([None]))]
    return [(grad.dtype, TensorShape([grad.shape[_channel_axis(op, grad.shape.ndims)]]))]


register_op("BiasAdd", infer=_infer_bias_add)
register_op("BiasAddGrad", infer=_infer_bias_add_grad)


def bias_add(value, bias, data_format=None, name=None):
    """Add the 1-D ``bias`` along the channel dimension of ``value``: the last one (NHWC,
    ``N...C``), or dimension 1 with ``data_format="NCHW"`` (``NC...``) for values of rank 3 or
    more, as TF.

    Raises:
        ValueError: for another data_format, or mismatched sizes.
    """
    # TF1's rule: any "NC..." is channels-first, any other "N...C" channels-last
    if data_format is not None and not (data_format.startswith("N") and (
            data_format.startswith("NC") or data_format.endswith("C"))):
        raise ValueError(f"bias_add: data_format must be of the form N...C or NC..., got "
                         f"{data_format!r}")
    value = as_tensor(value)
    bias = as_tensor(bias, dtype=value.dtype)
    layout = "NCHW" if data_format is not None and data_format.startswith("NC") else "NHWC"
    return make("BiasAdd", (value, bias), {"data_format": layout}, name, "BiasAdd")


@register_gradient("BiasAdd")
def _bias_add_grad(op, grad):
    return [grad, make("BiasAddGrad", (grad,), {"data_format": op.get_attr("data_format")})]
