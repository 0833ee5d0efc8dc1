"""Kernels of the space/depth and space/batch ops (see ops/space_batch.py): reshapes and
transposes through ``ctx.xp``, with TF1's checks of the run-time arguments."""
from __future__ import annotations

import numpy as np

from asyncflow.kernels.arguments import host, invalid
from asyncflow.kernels.registry import host_memory, register_kernel


def _nhwc(ctx, x):
    if x.ndim != 4:
        raise invalid(ctx, f"input must be 4-D, got shape {list(x.shape)}")
    return x if ctx.attrs["data_format"] == "NHWC" else ctx.xp.transpose(x, (0, 2, 3, 1))


def _back(ctx, y):
    out = y if ctx.attrs["data_format"] == "NHWC" else ctx.xp.transpose(y, (0, 3, 1, 2))
    return (ctx.xp.ascontiguousarray(out),)


@register_kernel("SpaceToDepth")
def _space_to_depth(ctx, x):
    size = ctx.attrs["block_size"]
    x = _nhwc(ctx, x)
    b, h, w, c = x.shape
    if h % size or w % size:
        raise invalid(ctx, f"Image height {h} and width {w} must be divisible by block_size "
                           f"{size}")
    blocks = x.reshape(b, h // size, size, w // size, size, c).transpose(0, 1, 3, 2, 4, 5)
    return _back(ctx, blocks.reshape(b, h // size, w // size, size * size * c))


@register_kernel("DepthToSpace")
def _depth_to_space(ctx, x):
    size = ctx.attrs["block_size"]
    x = _nhwc(ctx, x)
    b, h, w, c = x.shape
    if c % (size * size):
        raise invalid(ctx, f"Input depth dimension {c} should be divisible by: "
                           f"{size * size}")
    depth = c // (size * size)
    blocks = x.reshape(b, h, w, size, size, depth).transpose(0, 1, 3, 2, 4, 5)
    return _back(ctx, blocks.reshape(b, h * size, w * size, depth))


def _arguments(ctx, x, block_shape, pads, what):
    block = host(block_shape).astype(np.int64)
    pads = host(pads).astype(np.int64)
    if block.ndim != 1 or pads.shape != (block.size, 2):
        raise invalid(ctx, f"block_shape must be a vector and {what} of shape [M, 2] = "
                           f"[{block.size}, 2], got shapes {list(block.shape)} and "
                           f"{list(pads.shape)}")
    m = block.size
    if m < 1 or x.ndim < m + 1:
        raise invalid(ctx, f"input rank should be > {m} for a block_shape of {m} entries, "
                           f"got shape {list(x.shape)}")
    if (block < 1).any():
        raise invalid(ctx, f"block_shape values must be at least 1, got {block.tolist()}")
    if (pads < 0).any():
        raise invalid(ctx, f"{what} must be non-negative, got {pads.tolist()}")
    return [int(b) for b in block], pads.tolist()


@register_kernel("SpaceToBatchND")
def _space_to_batch_nd(ctx, x, block_shape, paddings):
    block, pads = _arguments(ctx, x, block_shape, paddings, "paddings")
    m, rest = len(block), x.shape[len(block) + 1:]
    padded = ctx.xp.pad(x, [(0, 0)] + pads + [(0, 0)] * len(rest)) if np.any(pads) else x
    dims = padded.shape[1:m + 1]
    for i, (d, b) in enumerate(zip(dims, block)):
        if d % b:
            raise invalid(ctx, f"padded_shape[{i}]={d} is not divisible by "
                               f"block_shape[{i}]={b}")
    split = [padded.shape[0]]
    for d, b in zip(dims, block):
        split += [d // b, b]
    moved = padded.reshape(split + list(rest)).transpose(
        [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] +
        list(range(2 * m + 1, 2 * m + 1 + len(rest))))
    out = moved.reshape([padded.shape[0] * int(np.prod(block))] +
                        [d // b for d, b in zip(dims, block)] + list(rest))
    return (ctx.xp.ascontiguousarray(out),)


@register_kernel("BatchToSpaceND")
def _batch_to_space_nd(ctx, x, block_shape, crops):
    block, crops = _arguments(ctx, x, block_shape, crops, "crops")
    m, rest = len(block), x.shape[len(block) + 1:]
    count = int(np.prod(block))
    if x.shape[0] % count:
        raise invalid(ctx, f"Input batch dimension ({x.shape[0]}) is not divisible by "
                           f"product of block sizes ({count})")
    batch, dims = x.shape[0] // count, x.shape[1:m + 1]
    for (before, after), d, b in zip(crops, dims, block):
        if before + after > d * b:
            raise invalid(ctx, f"Cropped size must be non-negative: start: {before} end: "
                               f"{after} size {d * b}")
    moved = x.reshape(block + [batch] + list(dims) + list(rest)).transpose(
        [m] + [v for i in range(m) for v in (m + 1 + i, i)] +
        list(range(2 * m + 1, 2 * m + 1 + len(rest))))
    full = moved.reshape([batch] + [d * b for d, b in zip(dims, block)] + list(rest))
    index = (slice(None),) + tuple(slice(before, d * b - after)
                                   for (before, after), d, b in zip(crops, dims, block))
    return (ctx.xp.ascontiguousarray(full[index]),)


host_memory("SpaceToBatchND", inputs=(1, 2))
host_memory("BatchToSpaceND", inputs=(1, 2))
