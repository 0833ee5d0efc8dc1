"""Variable initializers (TF1's ``init_ops``), published as ``af.initializers``.

An initializer is a small value object: ``init(shape, dtype=None, partition_info=None)``
builds and returns a Tensor (from ops in ops/sources.py) holding the initial value. It does
not create a variable; ``get_variable`` calls it inside the variable's ``Initializer`` name
scope. Random initializers draw a fresh value each time their tensor runs, seeded as in TF1.

Variance scaling (Glorot, He, LeCun) computes fans from the shape as TF1 does: for a kernel
``[..., in, out]`` the receptive field is the product of the leading dims.
"""
from __future__ import annotations

import math

import numpy as np

from asyncflow import dtypes
from asyncflow.ops import sources

# The standard deviation of a unit normal truncated to [-2, 2] (TF1 divides by it).
_TRUNCATED_STDDEV = 0.87962566103423978


class Initializer:
    """Base class: subclasses implement ``__call__(shape, dtype=None, partition_info=None)``."""

    dtype = dtypes.float32

    def _dtype(self, dtype):
        return dtypes.as_dtype(dtype if dtype is not None else self.dtype)

    def get_config(self):
        return {}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class Zeros(Initializer):
    """All zeros."""

    def __init__(self, dtype=dtypes.float32):
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return sources.zeros(_dims(shape), self._dtype(dtype))


class Ones(Initializer):
    """All ones."""

    def __init__(self, dtype=dtypes.float32):
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return sources.ones(_dims(shape), self._dtype(dtype))


class Constant(Initializer):
    """A scalar broadcast to the shape, or a list/array with exactly that many elements.

    Raises (when called):
        ValueError: if the value's size fits neither 1 nor the shape.
    """

    def __init__(self, value=0, dtype=dtypes.float32, verify_shape=False):
        self.value = value
        self.dtype = dtypes.as_dtype(dtype)
        self.verify_shape = verify_shape

    def __call__(self, shape, dtype=None, partition_info=None):
        dims = _dims(shape)
        value = np.asarray(self.value)
        if self.verify_shape and tuple(value.shape) != tuple(dims):
            raise ValueError(f"Constant initializer: value of shape {list(value.shape)} does "
                             f"not match the variable's shape {list(dims)}")
        return sources.constant(value, dtype=self._dtype(dtype), shape=dims)

    def get_config(self):
        return {"value": self.value}


class RandomNormal(Initializer):
    """Normal values with ``mean`` and ``stddev``."""

    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=dtypes.float32):
        self.mean, self.stddev, self.seed = mean, stddev, seed
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        return sources.random_normal(_dims(shape), self.mean, self.stddev, self._dtype(dtype),
                                     seed=self.seed)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class TruncatedNormal(RandomNormal):
    """Normal values redrawn beyond two standard deviations from the mean."""

    def __call__(self, shape, dtype=None, partition_info=None):
        return sources.truncated_normal(_dims(shape), self.mean, self.stddev,
                                        self._dtype(dtype), seed=self.seed)


class RandomUniform(Initializer):
    """Uniform values in ``[minval, maxval)`` (``maxval`` defaults to 1)."""

    def __init__(self, minval=0.0, maxval=None, seed=None, dtype=dtypes.float32):
        self.minval, self.maxval, self.seed = minval, maxval, seed
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        maxval = 1.0 if self.maxval is None else self.maxval
        return sources.random_uniform(_dims(shape), self.minval, maxval, self._dtype(dtype),
                                      seed=self.seed)

    def get_config(self):
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed}


def compute_fans(shape):
    """``(fan_in, fan_out)`` of a weight shape, as TF1 computes them."""
    dims = list(shape)
    if not dims:
        return 1, 1
    if len(dims) == 1:
        return dims[0], dims[0]
    receptive = int(np.prod(dims[:-2])) if len(dims) > 2 else 1
    return dims[-2] * receptive, dims[-1] * receptive


class VarianceScaling(Initializer):
    """Values with variance ``scale / n``, ``n`` the fan in, fan out or their average.

    Raises:
        ValueError: for a non-positive scale, an unknown mode or distribution.
    """

    _MODES = ("fan_in", "fan_out", "fan_avg")
    _DISTRIBUTIONS = ("normal", "truncated_normal", "untruncated_normal", "uniform")

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None,
                 dtype=dtypes.float32):
        if scale <= 0.0:
            raise ValueError(f"`scale` must be a positive float, got {scale}")
        if mode not in self._MODES:
            raise ValueError(f"Invalid `mode` argument {mode!r}; expected one of {self._MODES}")
        if distribution not in self._DISTRIBUTIONS:
            raise ValueError(f"Invalid `distribution` argument {distribution!r}; expected one "
                             f"of {self._DISTRIBUTIONS}")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        dims = _dims(shape)
        dtype = self._dtype(dtype)
        # A partition is scaled by the whole variable's fans (TF1's partition_info.full_shape).
        fan_in, fan_out = compute_fans(dims if partition_info is None
                                       else _dims(partition_info.full_shape))
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[self.mode]
        variance = self.scale / max(1.0, n)
        if self.distribution in ("normal", "truncated_normal"):
            stddev = math.sqrt(variance) / _TRUNCATED_STDDEV
            return sources.truncated_normal(dims, 0.0, stddev, dtype, seed=self.seed)
        if self.distribution == "untruncated_normal":
            return sources.random_normal(dims, 0.0, math.sqrt(variance), dtype, seed=self.seed)
        limit = math.sqrt(3.0 * variance)
        return sources.random_uniform(dims, -limit, limit, dtype, seed=self.seed)

    def get_config(self):
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution,
                "seed": self.seed}


class GlorotUniform(VarianceScaling):
    """Uniform in ``±sqrt(6 / (fan_in + fan_out))`` (TF1's default for get_variable)."""

    def __init__(self, seed=None, dtype=dtypes.float32):
        super().__init__(1.0, "fan_avg", "uniform", seed, dtype)


class GlorotNormal(VarianceScaling):
    """Truncated normal with stddev ``sqrt(2 / (fan_in + fan_out))``."""

    def __init__(self, seed=None, dtype=dtypes.float32):
        super().__init__(1.0, "fan_avg", "truncated_normal", seed, dtype)


class HeNormal(VarianceScaling):
    """Truncated normal with stddev ``sqrt(2 / fan_in)``."""

    def __init__(self, seed=None, dtype=dtypes.float32):
        super().__init__(2.0, "fan_in", "truncated_normal", seed, dtype)


class HeUniform(VarianceScaling):
    """Uniform in ``±sqrt(6 / fan_in)``."""

    def __init__(self, seed=None, dtype=dtypes.float32):
        super().__init__(2.0, "fan_in", "uniform", seed, dtype)


class LecunNormal(VarianceScaling):
    """Truncated normal with stddev ``sqrt(1 / fan_in)``."""

    def __init__(self, seed=None, dtype=dtypes.float32):
        super().__init__(1.0, "fan_in", "truncated_normal", seed, dtype)


class LecunUniform(VarianceScaling):
    """Uniform in ``±sqrt(3 / fan_in)``."""

    def __init__(self, seed=None, dtype=dtypes.float32):
        super().__init__(1.0, "fan_in", "uniform", seed, dtype)


class Orthogonal(Initializer):
    """TF1's ``tf.orthogonal_initializer``: an orthogonal matrix (of the shape flattened to
    ``[prod(shape[:-1]), shape[-1]]``) times ``gain``, TF1's construction: the Q of a normal
    matrix's QR, its columns' signs those of R's diagonal, transposed for a wide shape. The
    numbers drawn are asyncflow's own (seeded as TF1's seeds combine)."""

    def __init__(self, gain=1.0, seed=None, dtype=dtypes.float32):
        self.gain, self.seed = gain, seed
        self.dtype = _float_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None):
        from asyncflow.ops import array, diagonal, linalg, matrix_linalg
        from asyncflow.ops.math import sign
        dtype = self._dtype(dtype)
        if not dtype.is_floating:  # (TF1 fails here with a TypeError, from its normal draw)
            raise TypeError(f"orthogonal_initializer: expected a floating point type, got "
                            f"{dtype.name}")
        dims = _dims(shape)
        if len(dims) < 2:
            raise ValueError("The tensor to initialize must be at least two-dimensional")
        rows, cols = int(np.prod(dims[:-1])), dims[-1]
        flat = (cols, rows) if rows < cols else (rows, cols)
        q, r = matrix_linalg.qr(sources.random_normal(flat, dtype=dtype, seed=self.seed))
        q = q * sign(diagonal.matrix_diag_part(r))
        if rows < cols:
            q = linalg.matrix_transpose(q)
        return self.gain * array.reshape(q, dims)

    def get_config(self):
        return {"gain": self.gain, "seed": self.seed, "dtype": self.dtype.name}


def _float_dtype(dtype):
    dtype = dtypes.as_dtype(dtype)
    if not dtype.is_floating:
        raise ValueError(f"Expected floating point type, got {dtype.name}.")
    return dtype


def _dims(shape):
    """A fully defined shape as a list of ints.

    Raises:
        ValueError: if any dimension is unknown.
    """
    if hasattr(shape, "as_list"):
        shape = shape.as_list()
    dims = [shape] if isinstance(shape, (int, np.integer)) else list(shape)
    if any(d is None for d in dims):
        raise ValueError(f"Initializers need a fully defined shape, got {dims}")
    return [int(d) for d in dims]
