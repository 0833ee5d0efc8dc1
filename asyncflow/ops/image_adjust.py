"""TF1's image adjustments and orientations, composed of existing ops as TF1 writes them:
``adjust_brightness``/``random_brightness``, ``adjust_contrast``/``random_contrast``,
``grayscale_to_rgb``, ``rot90`` (a constant ``k``) and ``transpose_image``.

Theory of operation: an integer image is converted to float32 (``convert_image_dtype``'s
scaling), adjusted, and converted back with saturation, as TF1; a float image is adjusted in
its own dtype and not clipped. Contrast moves each channel of each image away from its mean
over height and width (TF1's ``AdjustContrastv2``). The random forms draw one number per call
(``random_uniform``: other numbers than TF's for the same seed). Their gradients are those of
the ops used.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.ops import math as math_ops
from asyncflow.ops.construct import as_tensor, graph_of, static_value
from asyncflow.ops.image import _image, convert_image_dtype
from asyncflow.ops.layout import reverse, transpose
from asyncflow.ops.sources import random_uniform
from asyncflow.ops.tiling import tile


def _adjusted(image, name, adjust):
    """``adjust`` applied to ``image`` in float (float32 for an integer image, converted back
    with saturation)."""
    image = as_tensor(image)
    with graph_of((image,)).name_scope(name):
        if image.dtype.is_floating:
            return adjust(image)
        if not image.dtype.is_integer:
            raise TypeError(f"{name}: image must be integer or floating, got {image.dtype.name}")
        values = convert_image_dtype(image, dtypes.float32)
        return convert_image_dtype(adjust(values), image.dtype, saturate=True)


def adjust_brightness(image, delta):
    """TF1's ``tf.image.adjust_brightness``: ``delta`` added to every value (in float: see the
    module's docstring)."""
    return _adjusted(image, "adjust_brightness",
                     lambda values: math_ops.add(values, math_ops.cast(delta, values.dtype)))


def adjust_contrast(images, contrast_factor):
    """TF1's ``tf.image.adjust_contrast``: ``(x - mean) * contrast_factor + mean`` with the mean
    of each channel over each image's height and width (images ``[..., height, width,
    channels]``, at least 3-D)."""
    images = as_tensor(images)
    if images.shape.ndims is not None and images.shape.ndims < 3:
        raise ValueError(f"adjust_contrast: images must be at least 3-D, got shape "
                         f"{images.shape}")

    def adjust(values):
        mean = math_ops.reduce_mean(values, axis=[-3, -2], keepdims=True)
        factor = math_ops.cast(contrast_factor, values.dtype)
        return math_ops.add(math_ops.multiply(math_ops.subtract(values, mean), factor), mean)
    return _adjusted(images, "adjust_contrast", adjust)


def random_brightness(image, max_delta, seed=None):
    """TF1's ``tf.image.random_brightness``: ``adjust_brightness`` by a delta drawn uniformly
    from ``[-max_delta, max_delta)``.

    Raises:
        ValueError: if ``max_delta`` is negative.
    """
    if max_delta < 0:
        raise ValueError("random_brightness: max_delta must be non-negative, got "
                         f"{max_delta}")
    delta = random_uniform([], -max_delta, max_delta, seed=seed)
    return adjust_brightness(image, delta)


def random_contrast(image, lower, upper, seed=None):
    """TF1's ``tf.image.random_contrast``: ``adjust_contrast`` by a factor drawn uniformly
    from ``[lower, upper)``.

    Raises:
        ValueError: unless ``0 <= lower < upper``.
    """
    if upper <= lower:
        raise ValueError(f"random_contrast: upper must be > lower, got {lower} and {upper}")
    if lower < 0:
        raise ValueError(f"random_contrast: lower must be non-negative, got {lower}")
    factor = random_uniform([], lower, upper, seed=seed)
    return adjust_contrast(image, factor)


def grayscale_to_rgb(images, name=None):
    """TF1's ``tf.image.grayscale_to_rgb``: the one channel ``[..., 1]`` repeated three times.

    Raises:
        ValueError: for images of unknown rank, under 2-D, or whose last dim is not 1.
    """
    images = as_tensor(images)
    ndims = images.shape.ndims
    if ndims is None or ndims < 2 or images.shape.dims[-1] not in (None, 1):
        raise ValueError(f"grayscale_to_rgb: images must be [..., 1] of a known rank of 2 or "
                         f"more, got shape {images.shape}")
    with graph_of((images,)).name_scope(name or "grayscale_to_rgb"):
        return tile(images, [1] * (ndims - 1) + [3])


def transpose_image(image):
    """TF1's ``tf.image.transpose_image``: height and width swapped (3-D or 4-D images)."""
    image = _image("transpose_image", image)
    return transpose(image, [1, 0, 2] if image.shape.ndims == 3 else [0, 2, 1, 3])


def rot90(image, k=1, name=None):
    """TF1's ``tf.image.rot90``: 3-D or 4-D images rotated counter-clockwise by ``k`` quarter
    turns (``k`` a constant here; TF1 also takes a tensor).

    Raises:
        ValueError: for a ``k`` that is not a constant integer, or images not 3-D or 4-D.
    """
    image = _image("rot90", image)
    value = static_value(k) if hasattr(k, "op") else k
    try:
        turns = int(value) % 4
    except TypeError as exc:
        raise ValueError(f"rot90: k must be a constant integer here, got {k!r}") from exc
    height = image.shape.ndims - 3
    swap = [1, 0, 2] if height == 0 else [0, 2, 1, 3]
    with graph_of((image,)).name_scope(name or "rot90"):
        if turns == 1:
            return transpose(reverse(image, [height + 1]), swap)
        if turns == 2:
            return reverse(image, [height, height + 1])
        if turns == 3:
            return reverse(transpose(image, swap), [height + 1])
        return image
