"""Sources: constants, placeholders, fills, ranges and random tensors.

Shapes passed as Python lists become int32 Const inputs, and shape inference reads them back
(``static_value``) so outputs keep static shapes.
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import (
    not_differentiable, register_constant_builder, register_gradient, register_op,
)
from asyncflow.graph.conversion import contains_tensor
from asyncflow.graph.shape import TensorShape, as_shape
from asyncflow.ops import math as _math
from asyncflow.ops.array import identity
from asyncflow.ops.construct import as_tensor, make, seeds, static_value


def _to_numpy(value, dtype):
    """Convert a Python/numpy value to an array of ``dtype`` (a DType or None)."""
    if dtype is None:
        dtype = dtypes.result_type_for_scalar(value)
    if dtype.is_string:
        arr = np.asarray(value, dtype=object)
        flat = [v.encode() if isinstance(v, str) else bytes(v) for v in arr.reshape(-1)]
        out = np.empty(arr.shape, dtype=object)
        out.reshape(-1)[:] = flat if flat else []
        return out
    raw = np.asarray(value)
    if raw.dtype.kind in ("U", "S", "O") and raw.size:
        raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {dtype.name}")
    # TF1 refuses Python numbers for bool ("Expected bool, got 1") but casts numpy values
    if (dtype.is_bool and raw.size and raw.dtype.kind != "b"
            and not isinstance(value, (np.ndarray, np.generic))):
        raise TypeError(f"Cannot convert {value!r} to a tensor of dtype bool: expected bools")
    # TF1 refuses Python numbers with a fractional part for an integer dtype but casts numpy
    # values (truncating toward zero, as numpy's astype)
    if (dtype.is_integer and raw.dtype.kind == "f"
            and not isinstance(value, (np.ndarray, np.generic))):
        if not np.all(np.equal(np.mod(raw, 1), 0)):
            raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {dtype.name}: "
                            "it has a fractional part")
    if dtype.is_integer and raw.size and raw.dtype.kind in "iuf":
        info = np.iinfo(dtype.np)
        if raw.min() < info.min or raw.max() > info.max:
            raise TypeError(f"Value {value!r} is out of range for dtype {dtype.name}")
    return raw.astype(dtype.np)


def _infer_const(op):
    value = op.get_attr("value")
    return [(op.get_attr("dtype"), TensorShape(value.shape))]


register_op("Const", infer=_infer_const)


def constant(value, dtype=None, shape=None, name="Const"):
    """A constant tensor (TF1 ``tf.constant``).

    Raises:
        TypeError: if ``value`` cannot be represented in ``dtype``.
        ValueError: if ``shape`` does not fit the value's size.
    """
    dtype = None if dtype is None else dtypes.as_dtype(dtype)
    arr = _to_numpy(value, dtype)
    dtype = dtypes.as_dtype(arr.dtype) if dtype is None else dtype
    if shape is not None:
        shape = tuple(int(d) for d in shape)
        count = int(np.prod(shape))
        if arr.size == count:
            arr = arr.reshape(shape)
        elif arr.size == 1:
            arr = np.full(shape, arr.reshape(()), dtype=arr.dtype)
        else:
            raise ValueError(f"Const {name}: value of {arr.size} elements does not fit shape {list(shape)}")
    if not dtype.is_string and not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    arr.flags.writeable = False
    return make("Const", (), {"value": arr, "dtype": dtype}, name=name)


register_constant_builder(constant)


def _shape_tensor(shape):
    """A shape argument (list, tuple, TensorShape or int32 tensor) as an int32 tensor."""
    if hasattr(shape, "op") or hasattr(shape, "_as_tensor"):
        return as_tensor(shape)
    if isinstance(shape, (list, tuple)) and contains_tensor(shape):
        return as_tensor(shape, dtype=dtypes.int32)  # auto-packed: [batch, 3]
    if hasattr(shape, "as_list"):
        shape = shape.as_list()
    return as_tensor(np.asarray(shape, dtype=np.int32).reshape(-1), dtype=dtypes.int32)


def _shape_from_tensor(tensor):
    value = static_value(tensor)
    if value is not None:
        return TensorShape([int(d) for d in np.reshape(value, -1)])
    dims = tensor.shape.dims
    if dims is not None and len(dims) == 1 and dims[0] is not None:
        return TensorShape([None] * dims[0])
    return TensorShape(None)


def _infer_placeholder(op):
    return [(op.get_attr("dtype"), op.get_attr("shape"))]


register_op("Placeholder", infer=_infer_placeholder)


def placeholder(dtype, shape=None, name=None):
    """A tensor that must be fed (TF1 ``tf.placeholder``)."""
    dtype = dtypes.as_dtype(dtype)
    return make("Placeholder", (), {"dtype": dtype, "shape": as_shape(shape)}, name,
                "Placeholder")


def _infer_placeholder_with_default(op):
    default = op.inputs[0]
    shape = op.get_attr("shape")
    if not shape.is_compatible_with(default.shape):
        raise ValueError(f"default value of shape {default.shape} is not compatible with {shape}")
    return [(default.dtype, shape)]


register_op("PlaceholderWithDefault", infer=_infer_placeholder_with_default)


@register_gradient("PlaceholderWithDefault")
def _placeholder_with_default_grad(op, grad):
    return [grad]


def placeholder_with_default(value, shape, name=None):
    """A placeholder that yields ``value`` when not fed."""
    value = as_tensor(value)
    return make("PlaceholderWithDefault", (value,), {"shape": as_shape(shape)}, name,
                "PlaceholderWithDefault")


def _infer_fill(op):
    dims, value = op.inputs
    if value.shape.ndims not in (None, 0):
        raise ValueError(f"value must be a scalar, got shape {value.shape}")
    return [(value.dtype, _shape_from_tensor(dims))]


register_op("Fill", infer=_infer_fill)


def fill(dims, value, name=None):
    """A tensor of shape ``dims`` filled with the scalar ``value``."""
    value = as_tensor(value)
    return make("Fill", (_shape_tensor(dims), value), None, name, "Fill")


def zeros(shape, dtype=dtypes.float32, name=None):
    dtype = dtypes.as_dtype(dtype)
    return fill(shape, constant(np.zeros((), dtype.np) if not dtype.is_string else b"", dtype),
                name=name or "zeros")


def ones(shape, dtype=dtypes.float32, name=None):
    dtype = dtypes.as_dtype(dtype)
    return fill(shape, constant(np.ones((), dtype.np), dtype), name=name or "ones")


def _infer_like(op):
    x = op.inputs[0]
    return [(op.get_attr("dtype") or x.dtype, x.shape)]


register_op("ZerosLike", infer=_infer_like)
register_op("OnesLike", infer=_infer_like)


def zeros_like(tensor, dtype=None, name=None):
    tensor = as_tensor(tensor)
    return make("ZerosLike", (tensor,), {"dtype": dtypes.as_dtype(dtype) if dtype else None},
                name, "zeros_like")


def ones_like(tensor, dtype=None, name=None):
    tensor = as_tensor(tensor)
    return make("OnesLike", (tensor,), {"dtype": dtypes.as_dtype(dtype) if dtype else None},
                name, "ones_like")


def _infer_range(op):
    start, limit, delta = (static_value(t) for t in op.inputs)
    dtype = op.inputs[0].dtype
    if start is not None and limit is not None and delta is not None:
        if delta == 0:
            raise ValueError("delta must not be zero")
        if (delta > 0 and start > limit) or (delta < 0 and start < limit):  # TF1 refuses
            raise ValueError(f"requires start {'<=' if delta > 0 else '>='} limit when delta "
                             f"{'>' if delta > 0 else '<'} 0: {start}/{limit}")
        count = max(0, int(np.ceil((limit - start) / delta)))
        return [(dtype, TensorShape([count]))]
    return [(dtype, TensorShape([None]))]


register_op("Range", infer=_infer_range)


def range(start, limit=None, delta=1, dtype=None, name=None):  # noqa: A001 - TF1 spelling
    """``af.range(5)``, ``af.range(1, 10, 2)``; the dtype follows the arguments (TF1 rules)."""
    if limit is None:
        start, limit = 0, start
    values = (start, limit, delta)
    if dtype is None:
        tensor_dtypes = [v.dtype for v in values if hasattr(v, "dtype") and hasattr(v, "op")]
        if tensor_dtypes:
            dtype = tensor_dtypes[0]
        elif any(isinstance(v, float) for v in values):
            dtype = dtypes.float32
        else:
            dtype = dtypes.int32
    dtype = dtypes.as_dtype(dtype)
    inputs = tuple(as_tensor(v, dtype=dtype) for v in values)
    return make("Range", inputs, None, name, "range")


def _infer_random(op):
    return [(op.get_attr("dtype"), _shape_from_tensor(op.inputs[0]))]


def _random_cost(shapes, op):
    """The work of a random op is the tensor it makes, not its small shape input: the elements
    of its static shape (0 when unknown: the kernel runs inline). A large initializer then runs
    on a worker thread and a parameter server's event loop keeps answering (OFFLOAD_COST)."""
    return op.outputs[0].shape.num_elements() or 0


for _type in ("RandomStandardNormal", "RandomUniform", "TruncatedNormal"):
    register_op(_type, infer=_infer_random, stateful=True, cost=_random_cost)


def _infer_random_int(op):
    return [(op.inputs[1].dtype, _shape_from_tensor(op.inputs[0]))]


register_op("RandomUniformInt", infer=_infer_random_int, stateful=True, cost=_random_cost)
not_differentiable("RandomStandardNormal", "RandomUniform", "TruncatedNormal",
                   "RandomUniformInt", "ZerosLike", "OnesLike", "Range", "Placeholder", "Const")


def _random(op_type, shape, dtype, seed, name, default_name):
    dtype = dtypes.as_dtype(dtype)
    if not dtype.is_floating:
        raise TypeError(f"{default_name}: dtype must be floating, got {dtype.name}")
    seed1, seed2 = seeds(seed)
    return make(op_type, (_shape_tensor(shape),), {"dtype": dtype, "seed": seed1, "seed2": seed2},
                name, default_name)


def _scale_shift(tensor, scale, shift, name):
    if not (isinstance(scale, (int, float)) and scale == 1):
        tensor = _math.multiply(tensor, scale)
    if not (isinstance(shift, (int, float)) and shift == 0):
        tensor = _math.add(tensor, shift, name=name)
    elif name is not None:
        tensor = identity(tensor, name=name)
    return tensor


def random_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    """Normally distributed values; a new draw every run (seeded as in TF1)."""
    sample = _random("RandomStandardNormal", shape, dtype, seed, None, "random_normal")
    return _scale_shift(sample, stddev, mean, name)


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    """Normal values redrawn when more than two standard deviations from the mean."""
    sample = _random("TruncatedNormal", shape, dtype, seed, None, "truncated_normal")
    return _scale_shift(sample, stddev, mean, name)


def random_uniform(shape, minval=0, maxval=None, dtype=dtypes.float32, seed=None, name=None):
    """Uniform values in ``[minval, maxval)``; integer dtypes need ``maxval``."""
    dtype = dtypes.as_dtype(dtype)
    if dtype.is_integer:
        if maxval is None:
            raise ValueError("random_uniform: maxval must be given for integer dtypes")
        seed1, seed2 = seeds(seed)
        return make("RandomUniformInt",
                    (_shape_tensor(shape), as_tensor(minval, dtype), as_tensor(maxval, dtype)),
                    {"seed": seed1, "seed2": seed2}, name, "random_uniform")
    if maxval is None:
        maxval = 1
    sample = _random("RandomUniform", shape, dtype, seed, None, "random_uniform")
    if isinstance(minval, (int, float)) and isinstance(maxval, (int, float)):
        return _scale_shift(sample, maxval - minval, minval, name)
    return _math.add(_math.multiply(sample, _math.subtract(maxval, minval)), minval, name=name)


def _infer_multinomial(op):
    logits, num_samples = op.inputs
    if not logits.dtype.is_floating:
        raise TypeError(f"Multinomial '{op.name}': logits must be floating, got "
                        f"{logits.dtype.name}")
    if logits.shape.ndims not in (None, 2):
        raise ValueError(f"Multinomial '{op.name}': logits must be 2-D [batch_size, "
                         f"num_classes], got shape {logits.shape}")
    if num_samples.shape.ndims not in (None, 0) or not num_samples.dtype.is_integer:
        raise ValueError(f"Multinomial '{op.name}': num_samples must be an integer scalar")
    count = static_value(num_samples)
    batch = logits.shape.dims[0] if logits.shape.ndims == 2 else None
    return [(op.get_attr("output_dtype"),
             TensorShape([batch, None if count is None else int(count)]))]


register_op("Multinomial", infer=_infer_multinomial, stateful=True)
not_differentiable("Multinomial")


def multinomial(logits, num_samples, seed=None, name=None, output_dtype=None):
    """TF1's ``tf.multinomial``: ``num_samples`` class indices for each row of ``logits``
    (``[batch_size, num_classes]``, unnormalized log-probabilities), drawn with the
    probabilities ``softmax(logits)``; a ``-inf`` logit is never drawn. The result is
    ``[batch_size, num_samples]`` of ``output_dtype`` (int64 by default). Seeded as every
    random op here, not with TF's numbers.

    Raises:
        TypeError: for logits that are not floating point.
        ValueError: for logits not 2-D or a num_samples not an integer scalar.
    """
    output_dtype = dtypes.as_dtype(output_dtype or dtypes.int64)
    if output_dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"multinomial: output_dtype must be int32 or int64, got "
                        f"{output_dtype.name}")
    seed1, seed2 = seeds(seed)
    return make("Multinomial", (as_tensor(logits), as_tensor(num_samples, dtypes.int32)),
                {"seed": seed1, "seed2": seed2, "output_dtype": output_dtype}, name,
                "multinomial")


def categorical(logits, num_samples, dtype=None, seed=None, name=None):
    """TF1's ``tf.random.categorical``: ``multinomial`` with the result's dtype as ``dtype``."""
    return multinomial(logits, num_samples, seed=seed, name=name or "categorical",
                       output_dtype=dtype)


def linspace(start, stop, num, name=None):
    """TF1's ``tf.linspace`` (``tf.lin_space``): ``num`` evenly spaced values from ``start`` to
    ``stop``, as 2.21's ``tf.compat.v1``: ``start + i * (stop - start) / (num - 1)`` with the
    first value ``start`` and the last ``stop`` themselves (so an infinite step gives no NaN
    there), ``[start]`` for ``num == 1`` and empty for ``num == 0``; integer bounds give
    truediv's float: float32 for 8- and 16-bit ones, float64 for wider.

    Raises:
        TypeError: for bounds that are not numbers or a ``num`` that is not an integer.
        ValueError: for a constant ``num`` under 0 or bounds that are not scalars (a fed
            negative ``num`` fails when the step runs).
    """
    from asyncflow.ops.construct import graph_of
    from asyncflow.ops.control import control_dependencies
    from asyncflow.ops.logging_ops import Assert
    start = as_tensor(start)
    if not (start.dtype.is_floating or start.dtype.is_integer):
        raise TypeError(f"linspace: start must be a number, got {start.dtype.name}")
    stop = as_tensor(stop, dtype=start.dtype)
    count = as_tensor(num, dtype=dtypes.int32) if not hasattr(num, "op") else num
    if not count.dtype.is_integer:
        raise TypeError(f"linspace: num must be an integer, got {count.dtype.name}")
    for what, bound in (("start", start), ("stop", stop)):
        if bound.shape.ndims not in (None, 0):
            raise ValueError(f"linspace: {what} must be a scalar, got shape {bound.shape}")
    dtype = start.dtype if start.dtype.is_floating else \
        dtypes.float32 if start.dtype.size <= 2 else dtypes.float64  # TF1's truediv of them
    with graph_of((start, stop, count)).name_scope(name or "LinSpace"):
        known = static_value(count)
        checks = []
        if known is not None and int(known) < 0:
            raise ValueError(f"linspace: num must be >= 0, got {int(known)}")
        if known is None:
            checks = [Assert(_math.greater_equal(count, 0), ["Requires num >= 0: ", count])]
        with control_dependencies(checks):
            steps = range(count)
        start, stop = _math.cast(start, dtype), _math.cast(stop, dtype)
        intervals = _math.cast(_math.maximum(_math.subtract(count, 1), 1), dtype)
        step = _math.divide(_math.subtract(stop, start), intervals)
        inner = _math.add(start, _math.multiply(_math.cast(steps, dtype), step))
        last = _math.logical_and(_math.equal(steps, _math.subtract(count, 1)),
                                 _math.greater(count, 1))
        # TF1 concatenates start, the inner values and stop: 0 * an infinite step is not there
        return _math.where(_math.equal(steps, 0), start, _math.where(last, stop, inner))
