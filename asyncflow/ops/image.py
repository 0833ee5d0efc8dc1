"""Image ops (TF1's ``tf.image``): JPEG/PNG decoding and resizing.

- ``DecodeJpeg(contents)`` (attrs ``channels`` 0/1/3, ``ratio`` 1/2/4/8) and
  ``DecodePng(contents)`` (``channels`` 0-4, ``dtype`` uint8/uint16) turn an encoded image (a
  string scalar, e.g. ``tf.read_file``'s) into a ``[height, width, channels]`` tensor;
  ``channels=0`` keeps the file's. The kernels decode with Pillow (libjpeg, as TF), an
  optional dependency (``pip install 'asyncflow-dataflow[image]'``): without it the step fails
  naming the package. Undecodable bytes fail with ``InvalidArgumentError`` naming the op.
- ``EncodeJpeg(image)`` (attrs ``quality``, ``chroma_downsampling``): a uint8 ``[height,
  width, 1 or 3]`` image as JPEG bytes (a string scalar), e.g. for ``tf.write_file``.
- ``ResizeBilinear(images, size)`` and ``ResizeNearestNeighbor(images, size)`` (attrs
  ``align_corners``, ``half_pixel_centers``) resize ``[batch, height, width, channels]``
  images to ``size`` (an int32 ``[new_height, new_width]``) by TF1's formulas: a source
  coordinate is ``y * scale`` with ``scale = in / out``, or ``(in - 1) / (out - 1)`` with
  align_corners; with half_pixel_centers ``(y + 0.5) * scale`` (nearest) or ``(y + 0.5) *
  scale - 0.5`` (bilinear, the edge pixel below 0); bilinear interpolates in float32 and
  returns float32, nearest rounds down (rounds, with align_corners) and keeps the dtype. ``resize_images`` is TF1's wrapper: 3-D or 4-D images,
  ``method`` a ``ResizeMethod``, and images already of the size returned unchanged.

Kernels live in ``asyncflow/kernels/image.py``. ResizeBilinear has TF1's gradient,
``ResizeBilinearGrad(grads, original_image)`` (the same attrs): each output cell's
gradient times its two float32 weights goes to the four cells it read, in the original
image's dtype (float16/32/64; other dtypes get none). ResizeNearestNeighbor has TF1's,
``ResizeNearestNeighborGrad(grads, size)`` (attrs ``align_corners``, ``half_pixel_centers``):
each gradient cell added, in its dtype and TF1's order, into the input cell it was copied
from. No other op here has a gradient.
- TF1's flips, crops, pads, ``per_image_standardization``, ``rgb_to_grayscale`` and
  ``convert_image_dtype`` are composites of slicing, padding and math (differentiable through
  them); the random ones draw with ``random_uniform`` and the given op seed.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import math as math_ops
from asyncflow.ops.array import shape as shape_of
from asyncflow.ops.construct import as_tensor, make, static_value
from asyncflow.ops.slicing import slice as slice_
from asyncflow.ops.layout import expand_dims, squeeze, stack
from asyncflow.ops.linalg import tensordot
from asyncflow.ops.sources import random_uniform
from asyncflow.ops.tiling import pad


class ResizeMethod:
    """TF1's ``tf.image.ResizeMethod`` (BILINEAR and NEAREST_NEIGHBOR are implemented)."""

    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


def _check_contents(op):
    contents = op.inputs[0]
    if not contents.dtype.is_string or contents.shape.ndims not in (None, 0):
        raise TypeError(f"{op.type} {op.name}: contents must be a string scalar, got "
                        f"{contents.dtype.name} {contents.shape}")


def _infer_decode(op):
    _check_contents(op)
    channels = op.get_attr("channels")
    dtype = dtypes.as_dtype(op.get_attr("dtype")) if op.type == "DecodePng" else dtypes.uint8
    return [(dtype, TensorShape([None, None, channels or None]))]


def _infer_resize(op):
    """ResizeBilinear, ResizeNearestNeighbor and ResizeNearestNeighborGrad: a 4-D first input
    (the images, or the gradient) and an int32 ``size``, the output's height and width."""
    images, size = op.inputs
    what = "grads" if op.type == "ResizeNearestNeighborGrad" else "images"
    if images.shape.ndims not in (None, 4):
        raise ValueError(f"{op.type} {op.name}: {what} must be 4-D [batch, height, width, "
                         f"channels], got shape {images.shape}")
    if size.dtype is not dtypes.int32 or size.shape.ndims not in (None, 1):
        raise TypeError(f"{op.type} {op.name}: size must be an int32 vector [new_height, "
                        f"new_width], got {size.dtype.name} {size.shape}")
    known = static_value(size)
    height, width = (None, None) if known is None else (int(known[0]), int(known[1]))
    batch, channels = (None, None) if images.shape.ndims is None else \
        (images.shape.dims[0], images.shape.dims[3])
    dtype = dtypes.float32 if op.type == "ResizeBilinear" else images.dtype
    return [(dtype, TensorShape([batch, height, width, channels]))]


register_op("DecodeJpeg", infer=_infer_decode)
register_op("DecodePng", infer=_infer_decode)
def _infer_encode(op):
    image = op.inputs[0]
    if image.dtype is not dtypes.uint8 or image.shape.ndims not in (None, 3):
        raise TypeError(f"EncodeJpeg {op.name}: image must be a uint8 [height, width, "
                        f"channels] tensor, got {image.dtype.name} {image.shape}")
    return [(dtypes.string, TensorShape([]))]


register_op("EncodeJpeg", infer=_infer_encode)
register_op("ResizeBilinear", infer=_infer_resize)
register_op("ResizeNearestNeighbor", infer=_infer_resize)
not_differentiable("DecodeJpeg", "DecodePng", "EncodeJpeg")


register_op("ResizeNearestNeighborGrad", infer=_infer_resize)
not_differentiable("ResizeNearestNeighborGrad")


@register_gradient("ResizeNearestNeighbor")
def _resize_nearest_neighbor_grad(op, grad):
    """TF1's: every output cell's gradient added into the input cell it copied
    (``ResizeNearestNeighborGrad``, the same index rule), in the gradient's dtype."""
    images = op.inputs[0]
    dims = images.shape.dims[1:3] if images.shape.ndims == 4 else [None, None]
    size = as_tensor([int(d) for d in dims], dtype=dtypes.int32) if None not in dims else \
        slice_(shape_of(images), [1], [2])
    return [make("ResizeNearestNeighborGrad", (grad, size),
                 {"align_corners": op.get_attr("align_corners"),
                  "half_pixel_centers": _half_pixel_centers(op)},
                 None, "ResizeNearestNeighborGrad"), None]


def _half_pixel_centers(op):
    """The attr, False on an op built before it existed (a graph read back from a file)."""
    try:
        return bool(op.get_attr("half_pixel_centers"))
    except (KeyError, ValueError):
        return False


def _infer_resize_grad(op):
    grads, original = op.inputs
    if grads.shape.ndims not in (None, 4) or original.shape.ndims not in (None, 4):
        raise ValueError(f"ResizeBilinearGrad {op.name}: grads and original_image must be 4-D, "
                         f"got shapes {grads.shape} and {original.shape}")
    return [(original.dtype, original.shape)]


register_op("ResizeBilinearGrad", infer=_infer_resize_grad)
not_differentiable("ResizeBilinearGrad")
_RESIZE_GRAD_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64)


@register_gradient("ResizeBilinear")
def _resize_bilinear_grad(op, grad):
    images = op.inputs[0]
    if images.dtype not in _RESIZE_GRAD_DTYPES:  # as TF1: integer images get no gradient
        return [None, None]
    return [make("ResizeBilinearGrad", (grad, images),
                 {"align_corners": op.get_attr("align_corners"),
                  "half_pixel_centers": _half_pixel_centers(op)}, None, "ResizeBilinearGrad"),
            None]


def decode_jpeg(contents, channels=0, ratio=1, fancy_upscaling=True,
                try_recover_truncated=False, acceptable_fraction=1, dct_method="", name=None):
    """A JPEG image as a uint8 ``[height, width, channels]`` tensor (TF1's arguments).

    Pillow decodes with libjpeg's accurate integer DCT: the pixels of TF's
    ``dct_method="INTEGER_ACCURATE"``; TF's default (the fast DCT) differs by a few levels.
    ``fancy_upscaling``, ``try_recover_truncated`` and ``acceptable_fraction`` are accepted
    and libjpeg's defaults used (fancy upscaling on, as TF's default).

    Raises:
        ValueError: for ``channels`` other than 0, 1 or 3, or ``ratio`` not 1, 2, 4 or 8.
    """
    if channels not in (0, 1, 3):
        raise ValueError(f"decode_jpeg: channels must be 0, 1 or 3, got {channels}")
    if ratio not in (1, 2, 4, 8):
        raise ValueError(f"decode_jpeg: ratio must be 1, 2, 4 or 8, got {ratio}")
    return make("DecodeJpeg", (as_tensor(contents, dtype=dtypes.string),),
                {"channels": int(channels), "ratio": int(ratio)}, name, "DecodeJpeg")


def decode_png(contents, channels=0, dtype=dtypes.uint8, name=None):
    """A PNG image as a ``[height, width, channels]`` uint8 (or uint16) tensor.

    Raises:
        ValueError: for ``channels`` outside 0-4 or a dtype other than uint8/uint16.
    """
    dtype = dtypes.as_dtype(dtype)
    if channels not in (0, 1, 2, 3, 4):
        raise ValueError(f"decode_png: channels must be 0, 1, 2, 3 or 4, got {channels}")
    if dtype not in (dtypes.uint8, dtypes.uint16):
        raise ValueError(f"decode_png: dtype must be uint8 or uint16, got {dtype.name}")
    return make("DecodePng", (as_tensor(contents, dtype=dtypes.string),),
                {"channels": int(channels), "dtype": dtype}, name, "DecodePng")


def encode_jpeg(image, format="", quality=95, progressive=False, optimize_size=False,
                chroma_downsampling=True, density_unit="in", x_density=300, y_density=300,
                xmp_metadata="", name=None):  # noqa: A002 - TF1 spelling
    """JPEG bytes of a uint8 ``[height, width, 1 or 3]`` image (TF1's ``encode_jpeg``;
    ``quality`` and ``chroma_downsampling`` (4:2:0) are used, the other arguments accepted).

    Raises:
        ValueError: for a quality outside 0-100.
    """
    if not 0 <= quality <= 100:
        raise ValueError(f"encode_jpeg: quality must be in [0, 100], got {quality}")
    return make("EncodeJpeg", (as_tensor(image),), {
        "quality": int(quality), "chroma_downsampling": bool(chroma_downsampling)},
        name, "EncodeJpeg")


def resize_bilinear(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """Bilinear resize of 4-D ``images`` to ``size``; float32 (TF1's ``resize_bilinear``).
    With ``align_corners`` and ``half_pixel_centers`` together the op and its gradient fail
    when they run (InvalidArgumentError), as TF1's."""
    return make("ResizeBilinear", (as_tensor(images), as_tensor(size, dtype=dtypes.int32)),
                {"align_corners": bool(align_corners),
                 "half_pixel_centers": bool(half_pixel_centers)}, name, "ResizeBilinear")


def resize_nearest_neighbor(images, size, align_corners=False, name=None,
                            half_pixel_centers=False):
    """Nearest-neighbor resize of 4-D ``images`` to ``size``, keeping their dtype.

    With ``align_corners`` and ``half_pixel_centers`` together the op fails when it runs
    (InvalidArgumentError), as TF1's; its gradient, as TF1's, does not fail but computes with
    both (the coordinate ``(y + 0.5) (in - 1) / (out - 1)``, rounded), so a graph that only
    fetches the gradient runs as in TF1."""
    return make("ResizeNearestNeighbor", (as_tensor(images), as_tensor(size, dtype=dtypes.int32)),
                {"align_corners": bool(align_corners),
                 "half_pixel_centers": bool(half_pixel_centers)}, name, "ResizeNearestNeighbor")


def resize_images(images, size, method=ResizeMethod.BILINEAR, align_corners=False,
                  preserve_aspect_ratio=False, name=None):
    """TF1's ``tf.image.resize_images``: 3-D ``[h, w, c]`` or 4-D images to ``size``.

    Bilinear results are float32, nearest-neighbor ones keep the dtype; images whose static
    size already is ``size`` are returned unchanged, as TF1 does.

    Raises:
        ValueError: for a method other than BILINEAR or NEAREST_NEIGHBOR, for
            ``preserve_aspect_ratio``, or for images that are not 3-D or 4-D.
    """
    images = as_tensor(images)
    if preserve_aspect_ratio:
        raise ValueError("resize_images: preserve_aspect_ratio=True is not supported")
    builders = {ResizeMethod.BILINEAR: resize_bilinear,
                ResizeMethod.NEAREST_NEIGHBOR: resize_nearest_neighbor}
    if method not in builders:
        raise ValueError(f"resize_images: method {method} is not supported (use "
                         "ResizeMethod.BILINEAR or ResizeMethod.NEAREST_NEIGHBOR)")
    rank = images.shape.ndims
    if rank not in (3, 4):
        raise ValueError(f"resize_images: images must be 3-D or 4-D with a known rank, got "
                         f"shape {images.shape}")
    size = as_tensor(size, dtype=dtypes.int32)
    known = static_value(size)
    dims = images.shape.dims[-3:-1]
    if known is not None and list(dims) == [int(known[0]), int(known[1])]:
        return images
    batched = images if rank == 4 else expand_dims(images, 0)
    out = builders[method](batched, size, align_corners=align_corners, name=name)
    return out if rank == 4 else squeeze(out, [0])



# -- TF1's geometric and dtype helpers (issue 36) -------------------------------------------
def _image(what, image, ranks=(3, 4)):
    image = as_tensor(image)
    if image.shape.ndims not in ranks:
        wanted = " or ".join(f"{r}-D" for r in ranks)
        raise ValueError(f"{what}: image must be {wanted} with a known rank, got shape "
                         f"{image.shape}")
    return image


def _hw(what, image):
    height, width = image.shape.dims[-3:-1]
    if height is None or width is None:
        raise ValueError(f"{what}: image needs a known height and width, got shape "
                         f"{image.shape}")
    return int(height), int(width)


def flip_left_right(image):
    """TF1's ``tf.image.flip_left_right``: reverse the width axis of 3-D or 4-D images."""
    return _image("flip_left_right", image)[..., ::-1, :]


def flip_up_down(image):
    """TF1's ``tf.image.flip_up_down``: reverse the height axis of 3-D or 4-D images."""
    return _image("flip_up_down", image)[..., ::-1, :, :]


def _random_flip(what, image, seed, flip):
    image = _image(what, image)
    count = [] if image.shape.ndims == 3 else stack([shape_of(image)[0]])
    mirror = math_ops.less(random_uniform(count, 0, 1.0, seed=seed), 0.5)
    return math_ops.where(mirror, flip(image), image)


def random_flip_left_right(image, seed=None):
    """TF1's ``tf.image.random_flip_left_right``: each image flipped with probability 1/2
    (one draw for a 3-D image, one per image of a 4-D batch; ``seed`` is the op seed)."""
    return _random_flip("random_flip_left_right", image, seed, flip_left_right)


def random_flip_up_down(image, seed=None):
    """TF1's ``tf.image.random_flip_up_down`` (see ``random_flip_left_right``)."""
    return _random_flip("random_flip_up_down", image, seed, flip_up_down)


def per_image_standardization(image):
    """TF1's ``tf.image.per_image_standardization``: ``(x - mean) / max(stddev, 1/sqrt(N))``
    per image over its ``N = height * width * channels`` values (float32; float16 stays)."""
    image = _image("per_image_standardization", image)
    kind = dtypes.float16 if image.dtype == dtypes.float16 else dtypes.float32
    values = math_ops.cast(image, kind)
    axes = [-1, -2, -3]
    count = math_ops.cast(math_ops.reduce_prod(shape_of(values)[-3:]), kind)
    mean = math_ops.reduce_mean(values, axis=axes, keepdims=True)
    variance = math_ops.reduce_mean(math_ops.squared_difference(values, mean), axis=axes,
                                    keepdims=True)
    stddev = math_ops.maximum(math_ops.sqrt(variance), math_ops.rsqrt(count))
    return math_ops.divide(math_ops.subtract(values, mean), stddev)


def _box_ints(what, **values):
    out = []
    for key, value in values.items():
        if not isinstance(value, (int,)) and static_value(as_tensor(value)) is None:
            raise ValueError(f"{what}: {key} must be a known integer")
        number = int(value if isinstance(value, int) else static_value(as_tensor(value)))
        if number < 0:
            raise ValueError(f"{what}: {key} must be >= 0, got {number}")
        out.append(number)
    return out


def crop_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """TF1's ``tf.image.crop_to_bounding_box``: the ``target`` box at ``offset`` of each image.

    Raises:
        ValueError: a box that does not fit in the image, or a non-3-D/4-D image.
    """
    what = "crop_to_bounding_box"
    image = _image(what, image)
    top, left, height, width = _box_ints(what, offset_height=offset_height,
                                         offset_width=offset_width,
                                         target_height=target_height, target_width=target_width)
    if height == 0 or width == 0:
        raise ValueError(f"{what}: target_height and target_width must be > 0")
    image_h, image_w = _hw(what, image)
    if top + height > image_h or left + width > image_w:
        raise ValueError(f"{what}: the box [{top}:{top + height}, {left}:{left + width}] does "
                         f"not fit in a {image_h}x{image_w} image")
    return image[..., top:top + height, left:left + width, :]


def pad_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """TF1's ``tf.image.pad_to_bounding_box``: zeros around each image, which lands at
    ``offset`` of a ``target_height x target_width`` image."""
    what = "pad_to_bounding_box"
    image = _image(what, image)
    top, left, height, width = _box_ints(what, offset_height=offset_height,
                                         offset_width=offset_width,
                                         target_height=target_height, target_width=target_width)
    image_h, image_w = _hw(what, image)
    bottom, right = height - top - image_h, width - left - image_w
    if bottom < 0 or right < 0:
        raise ValueError(f"{what}: a {image_h}x{image_w} image at ({top}, {left}) does not fit "
                         f"in {height}x{width}")
    paddings = [[top, bottom], [left, right], [0, 0]]
    if image.shape.ndims == 4:
        paddings = [[0, 0]] + paddings
    return pad(image, paddings)


def resize_image_with_crop_or_pad(image, target_height, target_width):
    """TF1's ``tf.image.resize_image_with_crop_or_pad``: crop or zero-pad evenly around the
    center to ``target_height x target_width``."""
    what = "resize_image_with_crop_or_pad"
    image = _image(what, image)
    height, width = _box_ints(what, target_height=target_height, target_width=target_width)
    if height == 0 or width == 0:
        raise ValueError(f"{what}: target_height and target_width must be > 0")
    image_h, image_w = _hw(what, image)
    dh, dw = height - image_h, width - image_w
    cropped = crop_to_bounding_box(image, max(-dh // 2, 0), max(-dw // 2, 0),
                                   min(height, image_h), min(width, image_w))
    return pad_to_bounding_box(cropped, max(dh // 2, 0), max(dw // 2, 0), height, width)


def central_crop(image, central_fraction):
    """TF1's ``tf.image.central_crop``: the central ``central_fraction`` (in (0, 1]) of each
    image's height and width."""
    what = "central_crop"
    image = _image(what, image)
    fraction = float(central_fraction)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"{what}: central_fraction must be within (0, 1], got {fraction}")
    if fraction == 1.0:
        return image
    image_h, image_w = _hw(what, image)
    top = int((image_h - image_h * fraction) / 2)
    left = int((image_w - image_w * fraction) / 2)
    return image[..., top:image_h - top, left:image_w - left, :]


def random_crop(value, size, seed=None, name=None):
    """TF1's ``tf.random_crop``: a ``size`` slice of ``value`` at a uniformly random offset.

    Raises:
        ValueError: ``size`` of another rank than ``value`` or larger than it.
    """
    value = as_tensor(value)
    size = [int(s) for s in (size if not hasattr(size, "shape") else static_value(size))]
    dims = value.shape.dims if value.shape.ndims is not None else None
    if dims is None or len(dims) != len(size) or None in dims:
        raise ValueError(f"random_crop: size {size} must have the rank of value (shape "
                         f"{value.shape}, fully known)")
    if any(s > int(d) or s < 0 for s, d in zip(size, dims)):
        raise ValueError(f"random_crop: size {size} does not fit in value of shape "
                         f"{value.shape}")
    limit = [int(d) - s + 1 for s, d in zip(size, dims)]
    draw = random_uniform([len(size)], 0, dtypes.int32.max, dtype=dtypes.int32, seed=seed)
    offset = math_ops.floormod(draw, limit)
    return slice_(value, offset, size, name=name or "random_crop")


def convert_image_dtype(image, dtype, saturate=False, name=None):
    """TF1's ``tf.image.convert_image_dtype``: floats are in [0, 1), integers in [0, MAX].

    Integers rescale by powers of two (shift down, or multiply up), integer to float divides
    by the input's MAX, float to integer multiplies by ``MAX + 0.5`` and truncates
    (``saturate`` clips first).
    """
    image = as_tensor(image)
    dtype = dtypes.as_dtype(dtype)
    for what, kind in (("image", image.dtype), ("dtype", dtype)):
        if not (kind.is_floating or kind.is_integer):
            raise TypeError(f"convert_image_dtype: {what} must be a float or integer type, "
                            f"got {kind.name}")
    if image.dtype == dtype:
        return image
    if image.dtype.is_integer and dtype.is_integer:
        scale_in, scale_out = image.dtype.max + 1, dtype.max + 1
        if scale_in > scale_out:
            return math_ops.cast(math_ops.floordiv(image, scale_in // scale_out), dtype)
        return math_ops.multiply(math_ops.cast(image, dtype), scale_out // scale_in)
    if image.dtype.is_floating and dtype.is_floating:
        return math_ops.cast(image, dtype)
    if image.dtype.is_integer:
        return math_ops.multiply(math_ops.cast(image, dtype), 1.0 / image.dtype.max)
    scaled = math_ops.multiply(image, dtype.max + 0.5)
    if saturate:
        scaled = math_ops.minimum(math_ops.maximum(scaled, float(dtype.min)), float(dtype.max))
    return math_ops.cast(scaled, dtype)


def rgb_to_grayscale(images, name=None):
    """TF1's ``tf.image.rgb_to_grayscale``: ``[..., 3]`` to ``[..., 1]`` with the weights
    0.2989, 0.5870, 0.1140, computed in float32 and converted back to the images' dtype."""
    images = as_tensor(images)
    if images.shape.ndims is not None and images.shape.dims[-1] not in (None, 3):
        raise ValueError(f"rgb_to_grayscale: images must have 3 channels, got shape "
                         f"{images.shape}")
    values = convert_image_dtype(images, dtypes.float32)
    gray = expand_dims(tensordot(values, [0.2989, 0.5870, 0.1140], [[-1], [-1]]), -1)
    return convert_image_dtype(gray, images.dtype)
