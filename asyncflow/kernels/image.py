"""Kernels of the image ops (see ops/image.py): decoding with Pillow, TF1's resize formulas."""
from __future__ import annotations

import io

import numpy as np

from asyncflow.kernels.arguments import host as _host, invalid as _invalid
from asyncflow.kernels.registry import register_kernel


def _pillow(ctx):
    try:
        from PIL import Image
    except ImportError:
        raise _invalid(ctx, "decoding images needs Pillow: pip install "
                            "'asyncflow-dataflow[image]' (or pip install Pillow)") from None
    return Image


def _open(ctx, contents, kind):
    image_module = _pillow(ctx)
    data = np.asarray(_host(contents), dtype=object).reshape(()).item()
    data = data if isinstance(data, bytes) else str(data).encode()
    try:
        image = image_module.open(io.BytesIO(data))
        if image.format != kind:
            raise ValueError(f"not a {kind} image (Pillow reads {image.format})")
        return image
    except Exception as exc:  # Pillow raises several kinds for undecodable data
        raise _invalid(ctx, f"Invalid {kind} data ({len(data)} bytes): {exc}") from None


@register_kernel("DecodeJpeg", offload=True)
def _decode_jpeg(ctx, contents):
    image = _open(ctx, contents, "JPEG")
    channels, ratio = ctx.attrs["channels"], ctx.attrs["ratio"]
    # libjpeg converts to gray and scales by 1/ratio while decoding, as TF's kernel asks it to.
    mode = {1: "L", 3: "RGB"}.get(channels, "L" if image.mode == "L" else "RGB")
    width, height = image.size
    image.draft(mode, (-(-width // ratio), -(-height // ratio)) if ratio > 1 else image.size)
    try:
        array = np.asarray(image.convert(mode), dtype=np.uint8)
    except Exception as exc:
        raise _invalid(ctx, f"Invalid JPEG data: {exc}") from None
    return (ctx.to_device(array.reshape(array.shape[:2] + (-1,))),)


@register_kernel("EncodeJpeg", offload=True)
def _encode_jpeg(ctx, image):
    image_module = _pillow(ctx)
    array = np.ascontiguousarray(_host(image))
    if array.ndim != 3 or array.shape[2] not in (1, 3):
        raise _invalid(ctx, f"image must be [height, width, 1 or 3], got shape "
                            f"{list(array.shape)}")
    picture = image_module.fromarray(array[:, :, 0] if array.shape[2] == 1 else array)
    buffer = io.BytesIO()
    picture.save(buffer, "JPEG", quality=ctx.attrs["quality"],
                 subsampling=2 if ctx.attrs["chroma_downsampling"] else 0)
    out = np.empty((), dtype=object)
    out[()] = buffer.getvalue()
    return (out,)


_PNG_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


@register_kernel("DecodePng", offload=True)
def _decode_png(ctx, contents):
    image = _open(ctx, contents, "PNG")
    channels, wide = ctx.attrs["channels"], ctx.attrs["dtype"].name == "uint16"
    try:
        if image.mode in ("I", "I;16", "I;16B") and channels in (0, 1):
            array = np.asarray(image, dtype=np.int64)  # 16-bit gray
            array = array if wide else (array >> 8)   # TF scales 16 bits to 8 by the high byte
        else:
            if image.mode == "P":
                image = image.convert("RGBA" if "transparency" in image.info else "RGB")
            mode = _PNG_MODES.get(channels) or (image.mode if image.mode in
                                                _PNG_MODES.values() else "RGB")
            array = np.asarray(image.convert(mode), dtype=np.int64)
            array = array * 257 if wide else array   # 8 bits to 16 as TF: v * 65535 / 255
    except Exception as exc:
        raise _invalid(ctx, f"Invalid PNG data: {exc}") from None
    array = array.astype(np.uint16 if wide else np.uint8)
    return (ctx.to_device(array.reshape(array.shape[:2] + (-1,))),)


def _size(ctx, size):
    size = [int(v) for v in np.asarray(_host(size)).reshape(-1)]
    if len(size) != 2 or min(size) <= 0:
        raise _invalid(ctx, f"size must be 2 positive ints [new_height, new_width], got {size}")
    return size


def _scale(in_size, out_size, align_corners):
    if align_corners and out_size > 1:
        return np.float32((in_size - 1) / (out_size - 1))
    return np.float32(in_size / out_size)


def _check_images(ctx, images):
    if images.ndim != 4:
        raise _invalid(ctx, f"images must be 4-D [batch, height, width, channels], got "
                            f"shape {list(images.shape)}")


def _bilinear_axis(xp, in_size, out_size, align, half):
    """One axis of TF1's bilinear resize: each output index's lower and upper source index
    and the float32 weight of the upper.

    The source coordinate is ``y * scale``, or with half-pixel centers ``(y + 0.5) * scale -
    0.5`` (float32 steps as TF1's), whose weight is its distance from its floor and whose
    lower index is that floor, at least 0 (below 0 both indices are 0: the edge pixel).
    The upper index is TF1's ``min(ceil(where), in_size - 1)``: on a source coordinate that
    is a whole number it is the lower one, so the neighbour the weight 0 falls on is never
    read. For finite pixels that changes nothing (``a + (b - a) * 0`` is ``a``); next to an
    inf or a NaN, or where ``b - a`` overflows, the pixel is the source's and not the NaN of
    ``inf * 0``. Per output index, not per pixel: the interpolation costs the same."""
    where = xp.arange(out_size, dtype=xp.float32)
    if half:
        where = (where + np.float32(0.5)) * _scale(in_size, out_size, align) - np.float32(0.5)
    else:
        where = where * _scale(in_size, out_size, align)
    floor = xp.floor(where)
    low = xp.maximum(floor.astype(np.int64), 0)
    high = xp.minimum(xp.ceil(where).astype(np.int64), in_size - 1)
    return low, high, (where - floor).astype(xp.float32)


def _bilinear_flags(ctx):
    """``align_corners`` and ``half_pixel_centers`` (False on a graph read back from before
    the attr); both at once fail, forward and gradient, as TF1's."""
    align, half = ctx.attrs["align_corners"], ctx.attrs.get("half_pixel_centers", False)
    if align and half:
        raise _invalid(ctx, "if half_pixel_centers is True, align_corners must be False")
    return align, half


@register_kernel("ResizeBilinear")
def _resize_bilinear(ctx, images, size):
    xp = ctx.xp
    _check_images(ctx, images)
    align, half = _bilinear_flags(ctx)
    out_h, out_w = _size(ctx, size)

    def axis(in_size, out_size):
        return _bilinear_axis(xp, in_size, out_size, align, half)

    top, bottom, y_lerp = axis(images.shape[1], out_h)
    left, right, x_lerp = axis(images.shape[2], out_w)
    data = images.astype(xp.float32)
    x_lerp = x_lerp[None, None, :, None]
    upper = data[:, top][:, :, left] + (data[:, top][:, :, right] - data[:, top][:, :, left]) * x_lerp
    lower = data[:, bottom][:, :, left] + \
        (data[:, bottom][:, :, right] - data[:, bottom][:, :, left]) * x_lerp
    return (upper + (lower - upper) * y_lerp[None, :, None, None],)


@register_kernel("ResizeBilinearGrad")
def _resize_bilinear_grad(ctx, grads, original):
    """TF1's: each term ``grad * y_weight * x_weight`` in float32, added in the original
    image's dtype into the cell it weighs (the upper cell ``min(ceil, size - 1)``, as TF's).
    Only a cell's own terms reach it (a NaN or inf gradient stays in its four cells), summed
    along the rows and then the columns (``_sum_into``): linear in the image's size."""
    xp = ctx.xp
    _check_images(ctx, grads)
    _check_images(ctx, original)
    if grads.shape[0] != original.shape[0] or grads.shape[3] != original.shape[3]:
        raise _invalid(ctx, f"grads {list(grads.shape)} and original_image "
                            f"{list(original.shape)} differ in batch or channels")
    dtype, (align, half) = original.dtype, _bilinear_flags(ctx)
    grads = grads.astype(xp.float32)
    out = xp.zeros(original.shape, dtype=dtype)
    if 0 in grads.shape or 0 in original.shape:
        return (out,)
    axes = []
    for in_size, out_size in ((original.shape[1], grads.shape[1]),
                              (original.shape[2], grads.shape[2])):
        low, high, lerp = _bilinear_axis(xp, in_size, out_size, align, half)
        axes.append([(low, np.float32(1) - lerp), (high, lerp)])
    for rows, y_weight in axes[0]:
        for cols, x_weight in axes[1]:
            term = grads * y_weight[None, :, None, None] * x_weight[None, None, :, None]
            by_rows = _sum_into(xp, term.astype(dtype), rows, original.shape[1], 1)
            out += _sum_into(xp, by_rows, cols, original.shape[2], 2)
    return (out,)


def _sum_into(xp, values, index, size, axis):
    """``values`` summed along ``axis`` into ``size`` cells, position i into ``index[i]``
    (non-decreasing): one pass per rank within a run of equal indices, each adding to
    distinct cells."""
    host = np.asarray(index.get() if hasattr(index, "get") else index)
    rank = _ranks(host)
    shape = list(values.shape)
    shape[axis] = size
    out = xp.zeros(shape, dtype=values.dtype)
    lead = (slice(None),) * axis
    for k in range(int(rank.max()) + 1):
        chosen = np.flatnonzero(rank == k)
        out[lead + (xp.asarray(host[chosen]),)] += values[lead + (xp.asarray(chosen),)]
    return out


def _nearest_axis(ctx, in_size, out_size):
    """TF1's nearest-neighbor rule on one axis: the input index each of ``out_size`` output
    indices copies, from the float32 coordinate ``y * scale`` (``(y + 0.5) * scale`` with
    half-pixel centers), rounded down (rounded, with align_corners), at most ``in_size - 1``.
    TF1's forward kernel refuses both flags together, its gradient takes them: so do these.
    The gradient uses the same rule with the sizes of the forward op.

    The rounding is ``roundf``'s, halves up, of the float32 coordinate itself: its fraction
    (exact in float32) compared with 0.5. ``floor(where + 0.5)`` is not it: a coordinate one
    ulp under a half, such as 41 / 82 = 0.49999997 (2 rows to 83), sums to 1.0 in float32."""
    xp, align = ctx.xp, ctx.attrs["align_corners"]
    half = ctx.attrs.get("half_pixel_centers", False)
    where = xp.arange(out_size, dtype=xp.float32)
    if half:
        where = where + np.float32(0.5)
    where = where * _scale(in_size, out_size, align)
    picked = xp.floor(where)
    if align:
        picked = picked + (where - picked >= np.float32(0.5))
    return xp.minimum(picked.astype(np.int64), in_size - 1)


@register_kernel("ResizeNearestNeighbor")
def _resize_nearest(ctx, images, size):
    _check_images(ctx, images)
    if ctx.attrs["align_corners"] and ctx.attrs.get("half_pixel_centers", False):
        raise _invalid(ctx, "if half_pixel_centers is True, align_corners must be False")
    out_h, out_w = _size(ctx, size)
    rows = _nearest_axis(ctx, images.shape[1], out_h)
    return (images[:, rows][:, :, _nearest_axis(ctx, images.shape[2], out_w)],)


@register_kernel("ResizeNearestNeighborGrad")
def _resize_nearest_grad(ctx, grads, size):
    """TF1's: each gradient cell added into the cell its forward copy read, in the gradient's
    dtype, the cells of a target in TF1's order (row by row, left to right).

    In passes of plain indexed adds, not a scatter with repeats (``np.add.at`` costs about 15
    ns a cell; CuPy's has atomics in a few dtypes only): the gradient rows that copied one
    input row get ranks 0, 1, ... in order (the columns too), and pass ``(ry, rx)``, taken in
    row-major order, adds the grid of row rank ``ry`` and column rank ``rx``, whose targets
    are distinct. So each target gets its cells in TF1's order; one pass going down, about
    ``ceil(out / in)`` per axis going up."""
    xp = ctx.xp
    _check_images(ctx, grads)
    height, width = _size(ctx, size)
    batch, grad_h, grad_w, channels = grads.shape
    out = xp.zeros((batch, height, width, channels), dtype=grads.dtype)
    if grads.size:
        rows = _host(_nearest_axis(ctx, height, grad_h))
        cols = _host(_nearest_axis(ctx, width, grad_w))
        row_rank, col_rank = _ranks(rows), _ranks(cols)
        for ry in range(int(row_rank.max()) + 1):
            ys = np.flatnonzero(row_rank == ry)
            for rx in range(int(col_rank.max()) + 1):
                xs = np.flatnonzero(col_rank == rx)
                out[_grid(xp, rows[ys], cols[xs])] += grads[_grid(xp, ys, xs)]
    return (out,)


def _grid(xp, rows, cols):
    """The index of ``[:, rows][:, :, cols]`` (host index vectors) for ``[b, h, w, c]``
    arrays: a strided slice for an evenly spaced vector (integer scale factors: views, no
    gather), else a device index array, the two broadcast into a grid when both are."""
    rows, cols = _spaced(rows), _spaced(cols)
    if isinstance(rows, slice) or isinstance(cols, slice):
        return (slice(None),) + tuple(
            v if isinstance(v, slice) else xp.asarray(v) for v in (rows, cols))
    return slice(None), xp.asarray(rows)[:, None], xp.asarray(cols)[None, :]


def _spaced(index):
    """``index`` as an equal slice when its steps are one positive constant."""
    if index.size == 1:
        return slice(int(index[0]), int(index[0]) + 1)
    step = int(index[1] - index[0])
    if step > 0 and (np.diff(index) == step).all():
        return slice(int(index[0]), int(index[-1]) + 1, step)
    return index


def _ranks(index):
    """Each position's rank among the positions of equal value in ``index`` (host,
    non-decreasing): 0 for the first, 1 for the next..."""
    return np.arange(index.size) - np.searchsorted(index, index)
