"""Image patches: TF1's ``tf.extract_image_patches`` (``tf.image.extract_image_patches``,
``tf.image.extract_patches``), every ``ksizes`` window of an NHWC image flattened into the
depth, ``[b, rows, cols, kr * kc * depth]`` (the window's cells row-major, each cell's depth
innermost, as TF1's), with its gradient.

Theory of operation: one ``ExtractImagePatches`` op with TF1's attributes (``ksizes``,
``strides``, ``rates`` of the form ``[1, r, c, 1]``, ``padding`` SAME or VALID: the zero
padding and output size of a convolution whose window spans ``k + (k - 1) * (rate - 1)``
cells). Its gradient is ``ExtractImagePatchesGrad`` (asyncflow's own op: TF1 builds the
gradient from a sparse matmul of an index map), which adds each patch's gradient back into
the cells it was read from; the two are each other's adjoint, so each is the other's
gradient. The kernels (``kernels/image_patches.py``) take one strided slice of the padded
image per window cell through ``ctx.xp``.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.array import shape
from asyncflow.ops.construct import as_tensor, check_dtype, make

_PADDINGS = ("SAME", "VALID")


def window(size, k, stride, rate, padding):
    """``(out, pad_before)`` of one spatial dim (TF1's windowed output size), or
    ``(None, None)`` where ``size`` is unknown.

    Raises:
        ValueError: where the output size would be negative (a VALID window larger than
            the padded input by more than a stride).
    """
    if size is None:
        return None, None
    span = k + (k - 1) * (rate - 1)
    if padding == "VALID":
        if size - span + stride < 0:
            raise ValueError(f"Computed output size would be negative: "
                             f"{(size - span + stride) // stride} [input_size: {size}, "
                             f"effective_filter_size: {span}, stride: {stride}]")
        return (size - span + stride) // stride, 0
    out = (size + stride - 1) // stride
    return out, max((out - 1) * stride + span - size, 0) // 2


def _infer_patches(op):
    x = op.inputs[0]
    (_, kr, kc, _), (_, sr, sc, _), (_, rr, rc, _) = (
        op.get_attr(a) for a in ("ksizes", "strides", "rates"))
    if x.shape.ndims is None:
        return [(x.dtype, TensorShape([None] * 4))]
    if x.shape.ndims != 4:
        raise ValueError(f"Shape must be rank 4 but is rank {x.shape.ndims}")
    b, h, w, d = x.shape.dims
    padding = op.get_attr("padding")
    rows, cols = window(h, kr, sr, rr, padding)[0], window(w, kc, sc, rc, padding)[0]
    return [(x.dtype, TensorShape([b, rows, cols, None if d is None else kr * kc * d]))]


def _infer_patches_grad(op):
    grad, input_shape = op.inputs
    if input_shape.op.type == "Shape":  # (the forward's input: its static shape)
        return [(grad.dtype, input_shape.op.inputs[0].shape.merge_with([None] * 4))]
    return [(grad.dtype, TensorShape([None] * 4))]


register_op("ExtractImagePatches", infer=_infer_patches)
register_op("ExtractImagePatchesGrad", infer=_infer_patches_grad)


def _spatial(values, what, allow_zero=False):
    """``values`` checked to be TF1's ``[1, r, c, 1]``, as a list of four ints."""
    if values is None or len(values) != 4:
        got = "None" if values is None else f"a list of length {len(values)}"
        raise ValueError(f"ExtractImagePatches: {what} must be a list of 4 ints [1, r, c, "
                         f"1], got {got}")
    values = [int(v) for v in values]
    if values[0] != 1 or values[3] != 1:
        raise ValueError(f"ExtractImagePatches: Only support {what} across space, got "
                         f"{values} (its first and last entries must be 1)")
    if min(values[1:3]) < (0 if allow_zero else 1):
        raise ValueError(f"ExtractImagePatches: {what} must be positive, got {values}")
    return values


def extract_image_patches(images, ksizes=None, strides=None, rates=None, padding=None,
                          name=None, sizes=None):
    """TF1's ``tf.extract_image_patches``: each ``ksizes`` (``[1, kr, kc, 1]``; ``sizes`` is
    its newer name) window of the NHWC ``images``, taken every ``strides`` (``[1, sr, sc,
    1]``) with cells ``rates`` apart (``[1, rr, rc, 1]``), flattened into the depth:
    ``[b, rows, cols, kr * kc * depth]``; ``padding`` ``"SAME"`` pads with zeros as a
    convolution does.

    Raises:
        ValueError: for ksizes/strides/rates not of the form ``[1, r, c, 1]`` (TF1 refuses
            a batch or depth entry when the step runs; here while building), a stride or
            rate under 1, a padding other than SAME/VALID, an input not 4-D, or a window
            larger than a known VALID input.
        TypeError: for images not numeric.
    """
    if ksizes is not None and sizes is not None:
        raise ValueError("extract_image_patches: give ksizes or sizes, not both")
    ksizes = _spatial(sizes if ksizes is None else ksizes, "ksizes", allow_zero=True)
    strides, rates = _spatial(strides, "strides"), _spatial(rates, "rates")
    if padding not in _PADDINGS:
        raise ValueError(f"ExtractImagePatches: padding must be 'SAME' or 'VALID', got "
                         f"{padding!r}")
    x = as_tensor(images)
    check_dtype("ExtractImagePatches", x, lambda d: d.is_numeric, "images")
    return make("ExtractImagePatches", (x,), {"ksizes": ksizes, "strides": strides,
                                               "rates": rates, "padding": padding},
                name, "ExtractImagePatches")


def extract_patches(images, sizes, strides, rates, padding, name=None):
    """TF2's ``tf.image.extract_patches`` (in TF1's ``tf.compat.v1.image``): the same op as
    ``extract_image_patches`` with ``sizes`` first."""
    return extract_image_patches(images, strides=strides, rates=rates, padding=padding,
                                 name=name, sizes=sizes)


def _attrs(op):
    return {a: op.get_attr(a) for a in ("ksizes", "strides", "rates", "padding")}


@register_gradient("ExtractImagePatches")
def _extract_image_patches_grad(op, grad):
    x = op.inputs[0]
    return [make("ExtractImagePatchesGrad", (grad, shape(x, out_type=dtypes.int32)),
                 _attrs(op), None, "ExtractImagePatchesGrad")]


@register_gradient("ExtractImagePatchesGrad")
def _extract_image_patches_grad_grad(op, grad):
    return [make("ExtractImagePatches", (grad,), _attrs(op), None, "ExtractImagePatches"),
            None]
