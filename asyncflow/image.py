"""``af.image``: the public image namespace (TF1's ``tf.image``); the ops are in ops/image.py."""
from asyncflow.ops.image import (  # noqa: F401
    ResizeMethod, decode_jpeg, decode_png, encode_jpeg, resize_bilinear, resize_images,
    resize_nearest_neighbor,
)
