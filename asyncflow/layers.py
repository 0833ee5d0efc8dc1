"""``af.layers``: TF1's functional layers (``tf.layers.dense`` ...), built on ``get_variable``.

Each call opens a variable scope named ``name`` or, when ``name`` is None, the layer's
default (``dense``, ``dense_1``, ... unique under the current scope, as in TF1), and creates
its variables there with TF1's names and defaults: ``kernel`` (glorot_uniform) and ``bias``
(zeros); batch normalization's ``gamma``, ``beta``, ``moving_mean``, ``moving_variance``.
``reuse=True`` (or an enclosing ``variable_scope(..., reuse=True)``) shares them.

``batch_normalization(training=True)`` normalizes with the batch's moments and adds the
moving-average updates to ``GraphKeys.UPDATE_OPS`` (run them with the train op, as in TF1);
``training`` may be a bool tensor. For 4-D inputs TF1 takes its fused kernel, whose moving
variance uses the unbiased batch variance (``n / (n - 1)``); this follows it.
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes
from asyncflow.graph.graph import GraphKeys
from asyncflow.ops import array as _array
from asyncflow.ops import indexing as _indexing
from asyncflow.ops import layout as _layout
from asyncflow.ops import linalg as _linalg
from asyncflow.ops import math as _math
from asyncflow.ops import nn as _nn
from asyncflow.ops import nn_conv as _nn_conv
from asyncflow.ops import nn_conv1d as _nn_conv1d
from asyncflow.ops import slicing as _slicing
from asyncflow.ops.construct import as_tensor, graph_of
from asyncflow.ops.control_flow import cond
from asyncflow.ops.init_ops import Ones, Zeros
from asyncflow.ops.variable_scope import get_variable, variable_scope


def _scope(name, default, reuse):
    return variable_scope(name, default_name=default, reuse=True if reuse else None)


def _get(name, shape, dtype, initializer, regularizer=None, trainable=True, collections=None):
    return get_variable(name, shape=shape, dtype=dtype, initializer=initializer,
                        regularizer=regularizer, trainable=trainable, collections=collections)


def _channel_dim(inputs, layer):
    dims = inputs.shape.as_list() if inputs.shape.ndims is not None else None
    if not dims or len(dims) < 2 or dims[1] is None:
        raise ValueError(f"The channel dimension (1, channels_first) of the inputs to "
                         f"`{layer}` should be defined. Found `None` (shape {inputs.shape}).")
    return dims[1]


def _last_dim(inputs, layer):
    dims = inputs.shape.as_list() if inputs.shape.ndims is not None else None
    if not dims or dims[-1] is None:
        raise ValueError(f"The last dimension of the inputs to `{layer}` should be defined. "
                         f"Found `None` (shape {inputs.shape}).")
    return dims[-1]


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=None, kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
          trainable=True, name=None, reuse=None):
    """``activation(inputs @ kernel + bias)`` over the last axis (TF1 ``tf.layers.dense``)."""
    inputs = as_tensor(inputs)
    depth = _last_dim(inputs, "Dense")
    with _scope(name, "dense", reuse):
        kernel = _get("kernel", [depth, units], inputs.dtype, kernel_initializer,
                      kernel_regularizer, trainable)
        if inputs.shape.ndims > 2:
            outputs = _linalg.tensordot(inputs, kernel, [[inputs.shape.ndims - 1], [0]])
        else:
            outputs = _math.matmul(inputs, kernel)
        if use_bias:
            bias = _get("bias", [units], inputs.dtype, bias_initializer or Zeros(),
                        bias_regularizer, trainable)
            outputs = _nn.bias_add(outputs, bias)
        return activation(outputs) if activation is not None else outputs


def _pair(value, what):
    if isinstance(value, (int, np.integer)):
        return [int(value), int(value)]
    value = [int(v) for v in value]
    if len(value) != 2:
        raise ValueError(f"The `{what}` argument must be a tuple of 2 integers. Received: {value}")
    return value


def _padding(padding):
    upper = str(padding).upper()
    if upper not in ("SAME", "VALID"):
        raise ValueError(f"padding must be 'valid' or 'same', got {padding!r}")
    return upper


def _data_layout(data_format, layer):
    """``"NHWC"`` for channels_last, ``"NCHW"`` for channels_first."""
    if data_format in ("channels_last", "NHWC", None):
        return "NHWC"
    if data_format in ("channels_first", "NCHW"):
        return "NCHW"
    raise ValueError(f"{layer}: data_format must be 'channels_last' or 'channels_first', got "
                     f"{data_format!r}")


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid",
           data_format="channels_last", dilation_rate=(1, 1), activation=None, use_bias=True,
           kernel_initializer=None, bias_initializer=None, kernel_regularizer=None,
           bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
           bias_constraint=None, trainable=True, name=None, reuse=None):
    """2-D convolution layer (TF1 ``tf.layers.conv2d``) on NHWC inputs, or NCHW ones with
    ``data_format="channels_first"``; the kernel is ``[kh, kw, in, out]`` either way."""
    inputs = as_tensor(inputs)
    layout = _data_layout(data_format, "conv2d")
    if _pair(dilation_rate, "dilation_rate") != [1, 1]:
        raise NotImplementedError("conv2d: dilation_rate other than 1 is not supported")
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(strides, "strides")
    depth = (_last_dim(inputs, "Conv2D") if layout == "NHWC"
             else _channel_dim(inputs, "Conv2D"))
    with _scope(name, "conv2d", reuse):
        kernel = _get("kernel", [kh, kw, depth, filters], inputs.dtype, kernel_initializer,
                      kernel_regularizer, trainable)
        outputs = _nn_conv.conv2d(inputs, kernel, [sh, sw], _padding(padding),
                                  data_format=layout)
        if use_bias:
            bias = _get("bias", [filters], inputs.dtype, bias_initializer or Zeros(),
                        bias_regularizer, trainable)
            outputs = _nn.bias_add(outputs, bias, data_format=layout)
        return activation(outputs) if activation is not None else outputs


def _single(value, what):
    if isinstance(value, (int, np.integer)):
        return int(value)
    value = [int(v) for v in value]
    if len(value) != 1:
        raise ValueError(f"The `{what}` argument must be a tuple of 1 integer. Received: {value}")
    return value[0]


def _layout_1d(data_format, layer):
    """``"NWC"`` for channels_last, ``"NCW"`` for channels_first."""
    return "NWC" if _data_layout(data_format, layer) == "NHWC" else "NCW"


def conv1d(inputs, filters, kernel_size, strides=1, padding="valid", data_format="channels_last",
           dilation_rate=1, activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=None, kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
           trainable=True, name=None, reuse=None):
    """1-D convolution layer (TF1 ``tf.layers.conv1d``) on ``[batch, width, channels]`` inputs
    (channels_first: ``[batch, channels, width]``); the kernel is ``[k, in, out]``."""
    inputs = as_tensor(inputs)
    layout = _layout_1d(data_format, "conv1d")
    if _single(dilation_rate, "dilation_rate") != 1:
        raise NotImplementedError("conv1d: dilation_rate other than 1 is not supported")
    if str(padding).lower() == "causal":
        raise NotImplementedError("conv1d: padding='causal' is not supported (pad the input "
                                  "on the left and use 'valid')")
    width = _single(kernel_size, "kernel_size")
    depth = _last_dim(inputs, "Conv1D") if layout == "NWC" else _channel_dim(inputs, "Conv1D")
    with _scope(name, "conv1d", reuse):
        kernel = _get("kernel", [width, depth, filters], inputs.dtype, kernel_initializer,
                      kernel_regularizer, trainable)
        outputs = _nn_conv1d.conv1d(inputs, kernel, _single(strides, "strides"),
                                    _padding(padding), data_format=layout)
        if use_bias:
            bias = _get("bias", [filters], inputs.dtype, bias_initializer or Zeros(),
                        bias_regularizer, trainable)
            outputs = _nn.bias_add(outputs, bias,
                                   data_format="NCHW" if layout == "NCW" else "NHWC")
        return activation(outputs) if activation is not None else outputs


def _pool_1d(pool, inputs, pool_size, strides, padding, data_format, name, default):
    layout = _layout_1d(data_format, default)
    inputs = as_tensor(inputs)
    with graph_of([inputs]).name_scope(name or default):
        return pool(inputs, _single(pool_size, "pool_size"), _single(strides, "strides"),
                    _padding(padding), data_format=layout)


def max_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None):
    """Max pooling along the width of ``[batch, width, channels]`` inputs (channels_first:
    ``[batch, channels, width]``) (TF1 ``tf.layers.max_pooling1d``)."""
    return _pool_1d(_nn_conv1d.max_pool1d, inputs, pool_size, strides, padding, data_format,
                    name, "max_pooling1d")


def average_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None):
    """Average pooling along the width (TF1 ``tf.layers.average_pooling1d``)."""
    return _pool_1d(_nn_conv1d.avg_pool1d, inputs, pool_size, strides, padding, data_format,
                    name, "average_pooling1d")


def _pool(pool, inputs, pool_size, strides, padding, data_format, name, default):
    layout = _data_layout(data_format, default)
    ph, pw = _pair(pool_size, "pool_size")
    sh, sw = _pair(strides, "strides")
    inputs = as_tensor(inputs)
    with graph_of([inputs]).name_scope(name or default):
        return pool(inputs, ksize=[ph, pw], strides=[sh, sw], padding=_padding(padding),
                    data_format=layout)


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None):
    """Max pooling on NHWC (or channels_first: NCHW) inputs (TF1 ``tf.layers.max_pooling2d``)."""
    return _pool(_nn_conv.max_pool, inputs, pool_size, strides, padding, data_format, name,
                 "max_pooling2d")


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                      name=None):
    """Average pooling on NHWC (or NCHW) inputs (TF1 ``tf.layers.average_pooling2d``)."""
    return _pool(_nn_conv.avg_pool, inputs, pool_size, strides, padding, data_format, name,
                 "average_pooling2d")


def _by_training(training, when_training, otherwise):
    if isinstance(training, (bool, np.bool_)):
        return when_training() if training else otherwise()
    return cond(as_tensor(training), when_training, otherwise)


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    """Dropout with drop probability ``rate`` when ``training`` (a bool or bool tensor),
    identity otherwise (TF1 ``tf.layers.dropout``)."""
    inputs = as_tensor(inputs)
    with graph_of([inputs]).name_scope(name or "dropout"):
        return _by_training(training,
                            lambda: _nn.dropout(inputs, rate=rate, noise_shape=noise_shape,
                                                seed=seed),
                            lambda: _array.identity(inputs))


def flatten(inputs, name=None, data_format="channels_last"):
    """``[batch, ...]`` reshaped to ``[batch, everything else]`` (TF1 ``tf.layers.flatten``);
    channels_first inputs are first moved to channels last, as TF's Flatten does, so the
    features come in the same order in both layouts."""
    inputs = as_tensor(inputs)
    with graph_of([inputs]).name_scope(name or "flatten"):
        rank = inputs.shape.ndims
        if _data_layout(data_format, "flatten") == "NCHW" and rank is not None and rank >= 3:
            inputs = _layout.transpose(inputs, [0] + list(range(2, rank)) + [1])
        dims = inputs.shape.as_list() if inputs.shape.ndims is not None else None
        if dims is not None and all(d is not None for d in dims[1:]):
            return _array.reshape(inputs, [-1, int(np.prod(dims[1:], dtype=np.int64))])
        batch = _slicing.strided_slice(_array.shape(inputs), [0], [1])
        return _array.reshape(inputs, _layout.concat([batch, as_tensor([-1])], 0))


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                        beta_initializer=None, gamma_initializer=None,
                        moving_mean_initializer=None, moving_variance_initializer=None,
                        beta_regularizer=None, gamma_regularizer=None, beta_constraint=None,
                        gamma_constraint=None, training=False, trainable=True, name=None,
                        reuse=None, renorm=False, renorm_clipping=None, renorm_momentum=0.99,
                        fused=None, virtual_batch_size=None, adjustment=None):
    """Batch normalization over ``axis`` (TF1 ``tf.layers.batch_normalization``).

    Raises:
        NotImplementedError: for renorm, virtual batches or adjustment.
    """
    if renorm or virtual_batch_size is not None or adjustment is not None:
        raise NotImplementedError("batch_normalization: renorm, virtual_batch_size and "
                                  "adjustment are not supported")
    inputs = as_tensor(inputs)
    rank = inputs.shape.ndims
    if rank is None:
        raise ValueError("batch_normalization: the inputs' rank must be known")
    axis = axis % rank
    depth = inputs.shape.as_list()[axis]
    if depth is None:
        raise ValueError(f"batch_normalization: axis {axis} of the inputs has no known size")
    if fused is None:
        fused = rank == 4 and axis == 3
    reduce_axes = [k for k in range(rank) if k != axis]
    dtype = inputs.dtype
    param_dtype = dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype
    local = [GraphKeys.GLOBAL_VARIABLES, "moving_average_variables"]
    with _scope(name, "batch_normalization", reuse):
        gamma = _get("gamma", [depth], param_dtype, gamma_initializer or Ones(),
                     gamma_regularizer, trainable) if scale else None
        beta = _get("beta", [depth], param_dtype, beta_initializer or Zeros(),
                    beta_regularizer, trainable) if center else None
        moving_mean = _get("moving_mean", [depth], param_dtype,
                           moving_mean_initializer or Zeros(), trainable=False, collections=local)
        moving_variance = _get("moving_variance", [depth], param_dtype,
                               moving_variance_initializer or Ones(), trainable=False,
                               collections=local)
        shape = [1] * rank
        shape[axis] = depth

        def broadcast(value):
            return value if value is None or rank == 2 and axis == 1 else \
                _array.reshape(value, shape)

        def normalize(mean, variance):
            return _nn.batch_normalization(inputs, broadcast(mean), broadcast(variance),
                                           broadcast(beta), broadcast(gamma), epsilon)

        def in_training():
            mean, variance = _nn.moments(inputs, reduce_axes)
            return normalize(mean, variance), mean, variance

        if isinstance(training, (bool, np.bool_)) and not training:
            return normalize(moving_mean, moving_variance)
        outputs, mean, variance = in_training() if isinstance(training, (bool, np.bool_)) else \
            _training_cond(training, in_training, normalize, moving_mean, moving_variance)
        if fused:  # TF1's fused kernel feeds the moving variance the unbiased variance
            count = _count(inputs, reduce_axes)
            variance = _math.multiply(variance, _math.divide(count, _math.maximum(
                _math.subtract(count, 1.0), 1.0)))
        decay = as_tensor(1.0 - momentum, dtype=param_dtype)
        update_mean = moving_mean.assign_sub(
            _math.multiply(_math.subtract(moving_mean, mean), decay))
        update_variance = moving_variance.assign_sub(
            _math.multiply(_math.subtract(moving_variance, variance), decay))
        if not isinstance(training, (bool, np.bool_)):  # updates only when training
            keep = as_tensor(training)
            update_mean = cond(keep, lambda: update_mean, lambda: moving_mean.read_value())
            update_variance = cond(keep, lambda: update_variance,
                                   lambda: moving_variance.read_value())
        graph = graph_of([inputs])
        graph.add_to_collection(GraphKeys.UPDATE_OPS, update_mean)
        graph.add_to_collection(GraphKeys.UPDATE_OPS, update_variance)
        return outputs


def _training_cond(training, in_training, normalize, moving_mean, moving_variance):
    """Outputs, mean and variance chosen by a bool tensor (batch statistics when true)."""
    def when_training():
        return list(in_training())

    def otherwise():
        return [normalize(moving_mean, moving_variance), moving_mean.read_value(),
                moving_variance.read_value()]
    outputs, mean, variance = cond(as_tensor(training), when_training, otherwise)
    return outputs, mean, variance


def _count(inputs, axes):
    dims = inputs.shape.as_list()
    if all(dims[k] is not None for k in axes):
        return as_tensor(float(np.prod([dims[k] for k in axes])), dtype=inputs.dtype)
    shape = _math.cast(_array.shape(inputs), inputs.dtype)
    return _math.reduce_prod(_indexing.gather(shape, axes))


__all__ = ["average_pooling1d", "average_pooling2d", "batch_normalization", "conv1d", "conv2d",
           "dense", "dropout", "flatten", "max_pooling1d", "max_pooling2d"]
