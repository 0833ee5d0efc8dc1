"""``af.image``: the public image namespace (TF1's ``tf.image``); the ops are in ops/image.py."""
from asyncflow.ops.image import (  # noqa: F401
    ResizeMethod, decode_jpeg, decode_png, encode_jpeg, resize_bilinear, resize_images,
    resize_nearest_neighbor,
)
from asyncflow.ops.image import (  # noqa: F401,E402  (issue 36)
    central_crop, convert_image_dtype, crop_to_bounding_box, flip_left_right, flip_up_down,
    pad_to_bounding_box, per_image_standardization, random_crop, random_flip_left_right,
    random_flip_up_down, resize_image_with_crop_or_pad, rgb_to_grayscale,
)
from asyncflow.ops.image_adjust import (  # noqa: F401,E402
    adjust_brightness, adjust_contrast, grayscale_to_rgb, random_brightness, random_contrast,
    rot90, transpose_image,
)
from asyncflow.ops.image_patches import extract_image_patches, extract_patches  # noqa: F401,E402
