"""Kernels of the sources family (see ops/sources.py)."""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import host_memory, register_kernel


@register_kernel("Const")
def _const(ctx):
    return (ctx.device_constant(ctx.attrs["value"]),)


@register_kernel("Placeholder")
def _placeholder(ctx):
    shape = ctx.attrs["shape"]
    raise errors.InvalidArgumentError(
        None, ctx.name, f"You must feed a value for placeholder tensor '{ctx.name}' with dtype "
        f"{ctx.attrs['dtype'].name} and shape {shape}")


@register_kernel("PlaceholderWithDefault")
def _placeholder_with_default(ctx, value):
    return (value,)


@register_kernel("Fill")
def _fill(ctx, dims, value):
    return (ctx.xp.full(tuple(int(d) for d in dims.reshape(-1).tolist()), value, dtype=value.dtype),)


@register_kernel("ZerosLike")
def _zeros_like(ctx, x):
    return (ctx.xp.zeros(x.shape, dtype=ctx.output_dtypes[0]),)


@register_kernel("OnesLike")
def _ones_like(ctx, x):
    return (ctx.xp.ones(x.shape, dtype=ctx.output_dtypes[0]),)


@register_kernel("Range")
def _range(ctx, start, limit, delta):
    if delta == 0:
        raise errors.InvalidArgumentError(None, ctx.name, "Range: delta must not be zero")
    if (delta > 0 and start > limit) or (delta < 0 and start < limit):  # TF1 refuses, not []
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Range: requires start {'<=' if delta > 0 else '>='} limit when "
            f"delta {'>' if delta > 0 else '<'} 0: {start}/{limit}")
    return (ctx.xp.arange(start, limit, delta, dtype=ctx.output_dtypes[0]),)


def _shape_of(dims):
    shape = tuple(int(d) for d in dims.reshape(-1).tolist())
    if any(d < 0 for d in shape):
        raise ValueError(f"shape {list(shape)} has a negative dimension")
    return shape


@register_kernel("RandomStandardNormal", offload=True)
def _random_normal(ctx, dims):
    rng = ctx.random_generator()
    return (ctx.to_device(rng.standard_normal(_shape_of(dims)).astype(ctx.output_dtypes[0])),)


@register_kernel("RandomUniform", offload=True)
def _random_uniform(ctx, dims):
    rng = ctx.random_generator()
    dtype = ctx.output_dtypes[0]
    if dtype in _GENERATED:  # drawn in the dtype itself: no float64 array and cast
        return (ctx.to_device(rng.random(_shape_of(dims), dtype=dtype)),)
    return (ctx.to_device(rng.random(_shape_of(dims)).astype(dtype)),)


# The dtypes numpy's Generator.random draws directly (float32: one 32-bit draw a value, 24
# random bits; a dropout mask of [128, 256] in 59 us against 77 for float64 and a cast).
_GENERATED = (np.dtype(np.float32), np.dtype(np.float64))


@register_kernel("RandomUniformInt", offload=True)
def _random_uniform_int(ctx, dims, minval, maxval):
    if not minval < maxval:
        raise errors.InvalidArgumentError(None, ctx.name, f"Need minval < maxval, got {minval} >= {maxval}")
    rng = ctx.random_generator()
    out = rng.integers(int(minval), int(maxval), size=_shape_of(dims), dtype=ctx.output_dtypes[0])
    return (ctx.to_device(out),)


@register_kernel("TruncatedNormal", offload=True)
def _truncated_normal(ctx, dims):
    rng = ctx.random_generator()
    shape = _shape_of(dims)
    out = rng.standard_normal(shape)
    bad = abs(out) > 2.0
    while bad.any():
        out[bad] = rng.standard_normal(int(bad.sum()))
        bad = abs(out) > 2.0
    return (ctx.to_device(out.astype(ctx.output_dtypes[0])),)


@register_kernel("Multinomial")
def _multinomial(ctx, logits, num_samples):
    count = int(num_samples)
    if count < 0:
        raise errors.InvalidArgumentError(None, ctx.name,
                                          f"num_samples should be nonnegative, got {count}")
    if logits.ndim != 2:
        raise errors.InvalidArgumentError(None, ctx.name, f"logits should be a matrix, got "
                                          f"shape {list(logits.shape)}")
    rows, classes = logits.shape
    if classes == 0 and rows and count:
        raise errors.InvalidArgumentError(None, ctx.name, "num_classes should be positive")
    logits = np.asarray(logits, np.float64)
    # TF1's kernel: the maximum and the weights over the finite logits only (a NaN or +inf
    # logit has weight 0 and leaves the others their probabilities)
    finite = np.isfinite(logits)
    largest = np.max(logits, axis=1, keepdims=True, initial=-np.inf, where=finite)
    with np.errstate(invalid="ignore", over="ignore"):
        weights = np.where(finite, np.exp(logits - np.where(np.isfinite(largest), largest, 0)),
                           0.0)
    cumulative = np.cumsum(weights, axis=1)
    totals = cumulative[:, -1:] if classes else np.zeros((rows, 1))
    draws = ctx.random_generator().random((rows, count)) * totals
    # the first class whose running total passes the draw: a class of weight 0 never does
    out = np.empty((rows, count), ctx.output_dtypes[0])
    for row in range(rows):
        out[row] = np.minimum(np.searchsorted(cumulative[row], draws[row], side="right"),
                              max(classes - 1, 0))
    return (ctx.to_device(out),)


# Arguments kept in host memory on a GPU (TF's HostMemory registrations; exec/gpu.py).
host_memory("Fill", inputs=(0,))
host_memory("Range", inputs=(0, 1, 2))
host_memory("ZerosLike", shape_only=(0,))
host_memory("OnesLike", shape_only=(0,))
host_memory("RandomStandardNormal", inputs=(0,))
host_memory("RandomUniform", inputs=(0,))
host_memory("TruncatedNormal", inputs=(0,))
host_memory("RandomUniformInt", inputs=(0, 1, 2))
host_memory("Multinomial", inputs=(0, 1))
