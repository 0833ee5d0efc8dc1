"""Image ops (TF1's ``tf.image``): JPEG/PNG decoding and resizing.

- ``DecodeJpeg(contents)`` (attrs ``channels`` 0/1/3, ``ratio`` 1/2/4/8) and
  ``DecodePng(contents)`` (``channels`` 0-4, ``dtype`` uint8/uint16) turn an encoded image (a
  string scalar, e.g. ``tf.read_file``'s) into a ``[height, width, channels]`` tensor;
  ``channels=0`` keeps the file's. The kernels decode with Pillow (libjpeg, as TF), an
  optional dependency (``pip install 'asyncflow-dataflow[image]'``): without it the step fails
  naming the package. Undecodable bytes fail with ``InvalidArgumentError`` naming the op.
- ``EncodeJpeg(image)`` (attrs ``quality``, ``chroma_downsampling``): a uint8 ``[height,
  width, 1 or 3]`` image as JPEG bytes (a string scalar), e.g. for ``tf.write_file``.
- ``ResizeBilinear(images, size)`` and ``ResizeNearestNeighbor(images, size)`` (attr
  ``align_corners``) resize ``[batch, height, width, channels]`` images to ``size`` (an int32
  ``[new_height, new_width]``) by TF1's formulas (no half-pixel centers): a source coordinate is
  ``y * scale`` with ``scale = in / out``, or ``(in - 1) / (out - 1)`` with align_corners;
  bilinear interpolates in float32 and returns float32, nearest rounds down (rounds, with
  align_corners) and keeps the dtype. ``resize_images`` is TF1's wrapper: 3-D or 4-D images,
  ``method`` a ``ResizeMethod``, and images already of the size returned unchanged.

Kernels live in ``asyncflow/kernels/image.py``. No op here has a gradient.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, make, static_value
from asyncflow.ops.layout import expand_dims, squeeze


class ResizeMethod:
    """TF1's ``tf.image.ResizeMethod`` (BILINEAR and NEAREST_NEIGHBOR are implemented)."""

    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


def _check_contents(op):
    contents = op._inputs[0]
    if not contents.dtype.is_string or contents.shape.ndims not in (None, 0):
        raise TypeError(f"{op.type} {op.name}: contents must be a string scalar, got "
                        f"{contents.dtype.name} {contents.shape}")


def _infer_decode(op):
    _check_contents(op)
    channels = op.get_attr("channels")
    dtype = dtypes.as_dtype(op.get_attr("dtype")) if op.type == "DecodePng" else dtypes.uint8
    return [(dtype, TensorShape([None, None, channels or None]))]


def _infer_resize(op):
    images, size = op._inputs
    if images.shape.ndims not in (None, 4):
        raise ValueError(f"{op.type} {op.name}: images must be 4-D [batch, height, width, "
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
    image = op._inputs[0]
    if image.dtype is not dtypes.uint8 or image.shape.ndims not in (None, 3):
        raise TypeError(f"EncodeJpeg {op.name}: image must be a uint8 [height, width, "
                        f"channels] tensor, got {image.dtype.name} {image.shape}")
    return [(dtypes.string, TensorShape([]))]


register_op("EncodeJpeg", infer=_infer_encode)
register_op("ResizeBilinear", infer=_infer_resize)
register_op("ResizeNearestNeighbor", infer=_infer_resize)
not_differentiable("DecodeJpeg", "DecodePng", "EncodeJpeg", "ResizeBilinear", "ResizeNearestNeighbor")


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
    """Bilinear resize of 4-D ``images`` to ``size``; float32 (TF1's ``resize_bilinear``)."""
    if half_pixel_centers:
        raise ValueError("resize_bilinear: half_pixel_centers=True is not supported")
    return make("ResizeBilinear", (as_tensor(images), as_tensor(size, dtype=dtypes.int32)),
                {"align_corners": bool(align_corners)}, name, "ResizeBilinear")


def resize_nearest_neighbor(images, size, align_corners=False, name=None,
                            half_pixel_centers=False):
    """Nearest-neighbor resize of 4-D ``images`` to ``size``, keeping their dtype."""
    if half_pixel_centers:
        raise ValueError("resize_nearest_neighbor: half_pixel_centers=True is not supported")
    return make("ResizeNearestNeighbor", (as_tensor(images), as_tensor(size, dtype=dtypes.int32)),
                {"align_corners": bool(align_corners)}, name, "ResizeNearestNeighbor")


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
