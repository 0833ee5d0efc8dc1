"""Kernels of ExtractImagePatches and its gradient (see ops/image_patches.py): one strided
slice of the zero-padded image per window cell, stacked (forward) or added back (gradient)."""
from __future__ import annotations

from asyncflow.kernels.arguments import ints, invalid
from asyncflow.kernels.registry import host_memory, register_kernel


def _geometry(ctx, h, w):
    """The rows and columns of the output, and the padding before each, of an ``h`` x ``w``
    image (TF1's windowed output size)."""
    (_, kr, kc, _), (_, sr, sc, _), (_, rr, rc, _) = (
        ctx.attrs[a] for a in ("ksizes", "strides", "rates"))
    dims = []
    for size, k, stride, rate in ((h, kr, sr, rr), (w, kc, sc, rc)):
        span = k + (k - 1) * (rate - 1)
        if ctx.attrs["padding"] == "VALID":
            if size - span + stride < 0:
                raise invalid(ctx, f"Computed output size would be negative [input_size: "
                                   f"{size}, effective_filter_size: {span}, stride: {stride}]")
            dims.append(((size - span + stride) // stride, 0))
        else:
            out = (size + stride - 1) // stride
            dims.append((out, max((out - 1) * stride + span - size, 0) // 2))
    return dims


def _cells(ctx, rows, cols):
    """Per window cell, the slices of the padded image it reads for every output position."""
    (_, kr, kc, _), (_, sr, sc, _), (_, rr, rc, _) = (
        ctx.attrs[a] for a in ("ksizes", "strides", "rates"))
    return [(slice(i * rr, i * rr + (rows - 1) * sr + 1, sr),
             slice(j * rc, j * rc + (cols - 1) * sc + 1, sc))
            for i in range(kr) for j in range(kc)]


def _padded_size(size, out, before, k, stride, rate):
    """The padded extent every cell's slice fits in (at least the input plus ``before``)."""
    return max(before + size, (out - 1) * stride + (k - 1) * rate + 1)


@register_kernel("ExtractImagePatches")
def _extract_image_patches(ctx, x):
    xp = ctx.xp
    if x.ndim != 4:
        raise invalid(ctx, f"input must be 4-dimensional, got shape {list(x.shape)}")
    b, h, w, d = x.shape
    (rows, top), (cols, left) = _geometry(ctx, h, w)
    _, kr, kc, _ = ctx.attrs["ksizes"]
    if rows == 0 or cols == 0 or kr * kc == 0:
        return (xp.zeros((b, rows, cols, kr * kc * d), x.dtype),)
    (_, _, _, _), (_, sr, sc, _), (_, rr, rc, _) = (
        ctx.attrs[a] for a in ("ksizes", "strides", "rates"))
    height = _padded_size(h, rows, top, kr, sr, rr)
    width = _padded_size(w, cols, left, kc, sc, rc)
    padded = xp.pad(x, ((0, 0), (top, height - top - h), (left, width - left - w), (0, 0)))
    taps = [padded[:, r, c, :] for r, c in _cells(ctx, rows, cols)]
    return (xp.stack(taps, axis=3).reshape(b, rows, cols, kr * kc * d),)


@register_kernel("ExtractImagePatchesGrad")
def _extract_image_patches_grad(ctx, grad, input_shape):
    xp = ctx.xp
    b, h, w, d = ints(input_shape)
    (rows, top), (cols, left) = _geometry(ctx, h, w)
    _, kr, kc, _ = ctx.attrs["ksizes"]
    if grad.shape != (b, rows, cols, kr * kc * d):
        raise invalid(ctx, f"gradient of shape {list(grad.shape)} does not match the "
                           f"patches of an input of shape {[b, h, w, d]}")
    if rows == 0 or cols == 0 or kr * kc == 0:
        return (xp.zeros((b, h, w, d), grad.dtype),)
    (_, _, _, _), (_, sr, sc, _), (_, rr, rc, _) = (
        ctx.attrs[a] for a in ("ksizes", "strides", "rates"))
    height = _padded_size(h, rows, top, kr, sr, rr)
    width = _padded_size(w, cols, left, kc, sc, rc)
    padded = xp.zeros((b, height, width, d), grad.dtype)
    per_cell = grad.reshape(b, rows, cols, kr * kc, d)
    for index, (r, c) in enumerate(_cells(ctx, rows, cols)):
        padded[:, r, c, :] += per_cell[:, :, :, index, :]
    return (xp.ascontiguousarray(padded[:, top:top + h, left:left + w, :]),)


host_memory("ExtractImagePatchesGrad", inputs=(1,))
