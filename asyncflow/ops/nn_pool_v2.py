"""TF1's other spellings of the pools: ``tf.nn.max_pool2d``/``avg_pool2d`` (the 2-D pools
with TF1's argument names) and ``tf.nn.max_pool_v2``/``avg_pool_v2`` (the pool of the
input's rank: 1-D for rank 3, 2-D for rank 4; 3-D pools are not provided). Each builds the
same ops as ``max_pool``/``avg_pool``/``max_pool1d``/``avg_pool1d`` (their gradients too)."""
from __future__ import annotations

from asyncflow.ops.construct import as_tensor
from asyncflow.ops.nn_conv import avg_pool, max_pool
from asyncflow.ops.nn_conv1d import avg_pool1d, max_pool1d


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):  # noqa: A002
    """TF1's ``tf.nn.max_pool2d``: ``max_pool`` of a 4-D input (the op named ``MaxPool2d``
    by default, as TF1's)."""
    return max_pool(input, ksize, strides, padding, data_format, name or "MaxPool2d")


def avg_pool2d(value, ksize, strides, padding, data_format="NHWC", name=None, input=None):  # noqa: A002
    """TF1's ``tf.nn.avg_pool2d`` (``tf.compat.v1``'s is ``avg_pool``, ``input`` its newer
    name for ``value``)."""
    return avg_pool(value, ksize, strides, padding, data_format, name, input=input)


def _pool_v2(builder, pools, input, ksize, strides, padding, data_format, name):  # noqa: A002
    x = as_tensor(input)
    if x.shape.ndims is not None:
        n = x.shape.ndims - 2
    elif data_format is not None:
        n = len(data_format) - 2
    else:
        raise ValueError(f"{builder}: `input` must have a static shape or a data format. "
                         f"Received: input.shape={x.shape} and data_format={data_format}")
    if not 1 <= n <= 3:
        raise ValueError(f"{builder}: `input.shape.rank` must be 3, 4 or 5. Received: "
                         f"input.shape={x.shape} of rank {n + 2}")
    if n == 3:
        raise NotImplementedError(f"{builder}: a 5-D input's 3-D pool (TF1's MaxPool3D/"
                                  "AvgPool3D) is not provided")
    default = "NWC" if n == 1 else "NHWC"
    return pools[n - 1](x, ksize, strides, padding, data_format or default, name)


def max_pool_v2(input, ksize, strides, padding, data_format=None, name=None):  # noqa: A002
    """TF1's ``tf.nn.max_pool_v2``: ``max_pool1d`` for a rank-3 input, ``max_pool2d`` for
    rank 4 (``data_format`` defaults to NWC/NHWC).

    Raises:
        ValueError: a rank other than 3-5, or none known with no ``data_format``.
        NotImplementedError: a rank-5 input (3-D pools are not provided).
    """
    return _pool_v2("max_pool_v2", (max_pool1d, max_pool2d), input, ksize, strides, padding,
                    data_format, name)


def avg_pool_v2(input, ksize, strides, padding, data_format=None, name=None):  # noqa: A002
    """TF1's ``tf.nn.avg_pool_v2``: ``avg_pool1d`` for a rank-3 input, ``avg_pool`` for
    rank 4 (SAME: padded cells not counted)."""
    return _pool_v2("avg_pool_v2", (avg_pool1d, avg_pool), input, ksize, strides, padding,
                    data_format, name)
