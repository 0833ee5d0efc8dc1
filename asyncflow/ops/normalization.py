"""Normalization ops of ``tf.nn`` (issue 36): ``lrn`` and ``fused_batch_norm``.

Theory of operation:
- ``LRN`` (local response normalization, AlexNet's) is a primitive: over the last axis of a
  4-D NHWC tensor, ``sqr_sum[..., d] = sum(x[..., d - r : d + r + 1] ** 2)`` and
  ``y = x / (bias + alpha * sqr_sum) ** beta``. Its gradient is TF's ``LRNGrad(dy, x, y)``
  (kernels/normalization.py); both kernels add the ``2r + 1`` shifted slices rather than
  differencing a cumulative sum, so large channels do not cancel small ones.
- ``fused_batch_norm`` is TF1's API over composed ops (``moments`` and ``batch_normalization``),
  differentiable through them: in training it normalizes with the batch's biased variance and
  returns the batch mean and the Bessel-corrected variance (``n / (n - 1)``), as TF's
  FusedBatchNorm does; in inference it uses the given mean and variance and returns them.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import math as _math
from asyncflow.ops.array import reshape, shape, size
from asyncflow.ops.construct import FLOATING, as_tensor, check_dtype, graph_of, make
from asyncflow.ops.nn import batch_normalization, moments

_LRN_DTYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)


def _infer_lrn(op):
    x = op.inputs[0]
    if x.dtype not in _LRN_DTYPES:
        raise TypeError(f"input must be float16, bfloat16, float32 or float64, got "
                        f"{x.dtype.name}")
    if x.shape.ndims is not None and x.shape.ndims != 4:
        raise ValueError(f"input must be 4-D [batch, height, width, depth], got shape {x.shape}")
    return [(x.dtype, x.shape)]


def _infer_lrn_grad(op):
    grad, x, y = op.inputs
    return [(x.dtype, grad.shape.merge_with(x.shape).merge_with(y.shape))]


register_op("LRN", infer=_infer_lrn)
register_op("LRNGrad", infer=_infer_lrn_grad)


def local_response_normalization(input, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5,  # noqa: A002
                                 name=None):
    """TF1's ``tf.nn.lrn``: ``input / (bias + alpha * sqr_sum) ** beta``, where ``sqr_sum``
    sums the squares of the ``2 * depth_radius + 1`` channels around each one (last axis)."""
    if int(depth_radius) < 0:
        raise ValueError(f"LRN: depth_radius must be non-negative, got {depth_radius}")
    attrs = {"depth_radius": int(depth_radius), "bias": float(bias), "alpha": float(alpha),
             "beta": float(beta)}
    return make("LRN", (as_tensor(input),), attrs, name, "LRN")


lrn = local_response_normalization


@register_gradient("LRN")
def _lrn_grad(op, grad):
    attrs = {k: op.get_attr(k) for k in ("depth_radius", "bias", "alpha", "beta")}
    return [make("LRNGrad", (grad, op.inputs[0], op.outputs[0]), attrs)]


def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon=0.001,
                     data_format="NHWC", is_training=True, name=None,
                     exponential_avg_factor=1.0):
    """TF1's ``tf.nn.fused_batch_norm`` on a 4-D ``x`` (NHWC or NCHW).

    Returns:
        ``(y, batch_mean, batch_variance)`` in training (the variance Bessel-corrected;
        with ``exponential_avg_factor`` < 1 both are blended into the given ``mean`` and
        ``variance``), ``(y, mean, variance)`` in inference.

    Raises:
        ValueError: ``x`` not 4-D, an unknown data_format, or no mean/variance in inference.
    """
    x = as_tensor(x)
    check_dtype("fused_batch_norm", x, FLOATING)
    if x.shape.ndims is not None and x.shape.ndims != 4:
        raise ValueError(f"fused_batch_norm: x must be 4-D, got shape {x.shape}")
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"fused_batch_norm: data_format must be 'NHWC' or 'NCHW', got "
                         f"{data_format!r}")
    epsilon = max(float(epsilon), 1.001e-5)  # TF1 raises smaller epsilons to cuDNN's minimum
    axes, channel = ([0, 1, 2], 3) if data_format == "NHWC" else ([0, 2, 3], 1)
    with graph_of((x, scale, offset)).name_scope(name or "FusedBatchNorm"):
        # TF1: half-precision x with float32 scale, offset and statistics; y in x's dtype.
        given = x.dtype
        if given in (dtypes.float16, dtypes.bfloat16):
            x = _math.cast(x, dtypes.float32)
        scale, offset = as_tensor(scale, dtype=x.dtype), as_tensor(offset, dtype=x.dtype)
        for what, tensor in (("scale", scale), ("offset", offset)):
            if tensor.shape.ndims is not None and tensor.shape.ndims != 1:
                raise ValueError(f"fused_batch_norm: {what} must be 1-D, got shape "
                                 f"{tensor.shape}")

        def per_channel(t):
            return t if data_format == "NHWC" else reshape(t, [-1, 1, 1])

        if is_training:
            batch_mean, batch_var = moments(x, axes)
            y = batch_normalization(x, per_channel(batch_mean), per_channel(batch_var),
                                    per_channel(offset), per_channel(scale), epsilon)
            count = _math.cast(_math.divide(size(x), shape(x)[channel]), x.dtype)
            corrected = _math.multiply(batch_var, _math.divide(
                count, _math.maximum(_math.subtract(count, 1.0), 1.0)))
            factor = float(exponential_avg_factor)
            if factor != 1.0:
                if mean is None or variance is None:
                    raise ValueError("fused_batch_norm: exponential_avg_factor needs the "
                                     "running mean and variance")
                batch_mean = _math.add(_math.multiply(as_tensor(mean, dtype=x.dtype),
                                                      1.0 - factor),
                                       _math.multiply(batch_mean, factor))
                corrected = _math.add(_math.multiply(as_tensor(variance, dtype=x.dtype),
                                                     1.0 - factor),
                                      _math.multiply(corrected, factor))
            return _known(_math.cast(y, given), x, channel, scale, offset), \
                _known(batch_mean, None, 0, scale, offset), _known(corrected, None, 0, scale, offset)
        if mean is None or variance is None:
            raise ValueError("fused_batch_norm: mean and variance are required when "
                             "is_training=False")
        mean, variance = as_tensor(mean, dtype=x.dtype), as_tensor(variance, dtype=x.dtype)
        y = batch_normalization(x, per_channel(mean), per_channel(variance),
                                per_channel(offset), per_channel(scale), epsilon)
        return _known(_math.cast(y, given), x, channel, scale, offset, mean, variance), mean, \
            variance


def _known(result, x, channel, *vectors):
    """``result`` knowing what TF1's FusedBatchNorm shape function knows: x's dims, with the
    channel dim also read from the per-channel vectors (scale, offset, statistics)."""
    dims = list(x.shape.dims) if x is not None and x.shape.ndims is not None else None
    size = dims[channel] if dims is not None else None
    for vector in vectors:
        if vector.shape.ndims == 1 and vector.shape[0] is not None:
            size = vector.shape[0] if size is None else size
    if dims is None and x is not None:
        return result
    if dims is None:
        dims = [None]
    dims[channel] = size
    result.set_shape(TensorShape(dims))
    return result
