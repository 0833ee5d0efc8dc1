"""Kernel of HistogramFixedWidth (see ops/histogram.py): each value's bin in TF1's
arithmetic, then ``bincount`` through ``ctx.xp``."""
from __future__ import annotations

from asyncflow.kernels.arguments import host, invalid, is_floating
from asyncflow.kernels.registry import host_memory, register_kernel


@register_kernel("HistogramFixedWidth")
def _histogram_fixed_width(ctx, values, value_range, nbins):
    xp = ctx.xp
    if value_range.shape != (2,):
        raise invalid(ctx, f"value_range should be a vector of 2 elements, got shape "
                           f"{list(value_range.shape)}")
    if nbins.ndim != 0:
        raise invalid(ctx, f"nbins should be a scalar, got shape {list(nbins.shape)}")
    count = int(host(nbins))
    if count <= 0:
        raise invalid(ctx, f"nbins should be a positive number, but got '{count}'")
    bounds = host(value_range)
    low, high = bounds[0].item(), bounds[1].item()
    if not low < high:
        raise invalid(ctx, f"value_range should satisfy value_range[0] < value_range[1], "
                           f"but got '[{low}, {high}]'")
    if is_floating(values.dtype) and bool(xp.isnan(values).any()):
        raise invalid(ctx, "Histogram values must not contain NaN")
    flat = values.reshape(-1)
    lowest = xp.asarray(low, dtype=values.dtype)
    # TF1's functor: (max(v, lo) - lo) in the values' dtype, over the width (hi - lo in the
    # values' dtype) / nbins in float64, capped at nbins - 1 and truncated
    step = float(bounds[1] - bounds[0]) / count
    offsets = (xp.maximum(flat, lowest) - lowest).astype(xp.float64)
    bins = xp.minimum(offsets / step, count - 1).astype(xp.int32)
    return (xp.bincount(bins, minlength=count).astype(ctx.output_dtypes[0]),)


host_memory("HistogramFixedWidth", inputs=(1, 2))
