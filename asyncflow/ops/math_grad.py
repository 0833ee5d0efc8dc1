"""Gradients of the math family in one table (TF1's ``math_grad.py``).

Broadcasting binary ops sum each input's gradient back to that input's shape. When static
shapes decide along which axes an input was broadcast, plain ``Sum`` ops do it; when an
unknown dim might have been 1, the ``SumToShape`` helper op finds the axes at run time from
the input's dynamic shape. Reductions reshape the incoming gradient to the input's rank (1 at
the reduced axes; statically when possible, else through the ``ReducedShape`` helper op) and
broadcast it back. Sum and Mean do both steps in one ``BroadcastToLike`` op (reshape, divide by
the reduced count for Mean, broadcast), whose own gradient is the reduction again, so the
backward pass of a loss ``reduce_mean`` is one node instead of a chain of shape ops. Every
gradient is built from ordinary differentiable ops, so gradients of gradients work.

It builds on ``ops/math.py`` and ``ops/array.py`` and registers gradients only; nothing imports
it but ``asyncflow/ops/__init__.py``, so the forward ops never import their gradients back.
"""
from __future__ import annotations

import builtins

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import array as _array
from asyncflow.ops.construct import as_tensor, make, static_value
from asyncflow.ops.math import (
    _select_cond_shape, add, cast, cos, divide, equal, greater, greater_equal, less_equal, log,
    matmul, multiply, negative, pow, sign, sin, square, subtract, where,
)


# -- gradient helpers ---------------------------------------------------------------------------
# Broadcasting gradients are summed back to each input's shape. When the static shapes decide
# which axes were broadcast, plain Sum ops do it; otherwise (an unknown dim that might have been
# 1) ``SumToShape`` finds the axes at run time from the input's dynamic shape.
def _infer_sum_to_shape(op):
    grad, target = op.inputs
    if target.op.type == "Shape":
        return [(grad.dtype, target.op.inputs[0].shape)]
    value = static_value(target)
    if value is not None:
        return [(grad.dtype, TensorShape([int(d) for d in value.reshape(-1)]))]
    n = target.shape[0] if target.shape.ndims == 1 else None
    return [(grad.dtype, TensorShape(None if n is None else [None] * n))]


register_op("SumToShape", infer=_infer_sum_to_shape)


def _infer_reduced_shape(op):
    return [(op.inputs[0].dtype, op.inputs[0].shape)]


register_op("ReducedShape", infer=_infer_reduced_shape)
not_differentiable("ReducedShape")


def _infer_broadcast_to_like(op):
    """``BroadcastToLike(grad, like)``: the shape of ``like``, the dtype shared by both."""
    grad, like = op.inputs
    if grad.dtype is not like.dtype:
        raise TypeError(f"grad ({grad.dtype.name}) and like ({like.dtype.name}) must have the "
                        f"same dtype")
    return [(grad.dtype, like.shape)]


# The gradient of Sum/Mean(like, axis, keepdims) in one op: ``grad`` (the reduction's output
# gradient) reshaped with 1s at the reduced axes, divided by the number of reduced elements
# when ``mean``, and broadcast to ``like``'s shape. ``like`` only supplies the shape.
register_op("BroadcastToLike", infer=_infer_broadcast_to_like)


def _shape_of(x):
    """``x``'s shape as an int32 tensor: a constant when static, else a Shape op."""
    if x.shape.is_fully_defined():
        return as_tensor(np.asarray(x.shape.as_list(), dtype=np.int32).reshape(-1),
                         dtype=dtypes.int32)
    return _array.shape(x)


def _static_sum_axes(x_shape, out_shape, other_shapes, core=0):
    """(kept_axes, leading_axes) of ``out_shape`` to sum over to get ``x_shape``, or None.

    None means only the run time knows: a dim of ``x`` is unknown while another operand's dim
    at that place may be larger than 1, so ``x`` may have been broadcast there. The last
    ``core`` dims are never reduced (MatMul's matrix dims).
    """
    if x_shape.ndims is None or out_shape.ndims is None or any(
            s.ndims is None for s in other_shapes):
        return None
    rank = out_shape.ndims
    lead = rank - x_shape.ndims
    if lead < 0:
        return None
    kept = []
    for i, x_dim in enumerate(x_shape.dims[:x_shape.ndims - core]):
        j = lead + i
        out_dim = out_shape.dims[j]
        if x_dim == 1 and out_dim != 1:
            kept.append(j)
        elif x_dim is None and out_dim != 1:
            for other in other_shapes:
                k = j - (rank - other.ndims)
                if k >= 0 and other.dims[k] != 1 and k < other.ndims - core:
                    return None
    return tuple(kept), tuple(builtins.range(lead))


def _sum_to(grad, x, other_shapes, out_shape, core=0):
    """Sum ``grad`` (shaped like the broadcast output) back to the shape of input ``x``."""
    axes = _static_sum_axes(x.shape, out_shape, other_shapes, core)
    if axes is None:
        return make("SumToShape", (grad, _shape_of(x)), None, None, "SumToShape")
    kept, leading = axes
    if kept:
        grad = make("Sum", (grad,), {"axis": kept, "keepdims": True}, None, "Sum")
    if leading:
        grad = make("Sum", (grad,), {"axis": leading, "keepdims": False}, None, "Sum")
    return grad


def _zeros_like(x):
    return make("ZerosLike", (x,), {"dtype": None}, None, "zeros_like")


def _ones_like(x):
    return make("OnesLike", (x,), {"dtype": None}, None, "ones_like")


def binary_grads(op, grad_x, grad_y):
    """Each input's gradient summed over the axes along which that input was broadcast."""
    x, y = op.inputs
    out_shape = op.outputs[0].shape
    return [None if grad_x is None else _sum_to(grad_x, x, [y.shape], out_shape),
            None if grad_y is None else _sum_to(grad_y, y, [x.shape], out_shape)]


@register_gradient("SumToShape")
def _sum_to_shape_grad(op, grad):
    return [add(grad, _zeros_like(op.inputs[0])), None]


# -- unary gradients ------------------------------------------------------------------------
@register_gradient("Neg")
def _neg_grad(op, grad):
    return [negative(grad)]


@register_gradient("Abs")
def _abs_grad(op, grad):
    return [multiply(grad, sign(op.inputs[0]))]


@register_gradient("Square")
def _square_grad(op, grad):
    return [multiply(grad, multiply(op.inputs[0], 2))]


@register_gradient("Sqrt")
def _sqrt_grad(op, grad):
    return [divide(multiply(grad, 0.5), op.outputs[0])]


@register_gradient("Rsqrt")
def _rsqrt_grad(op, grad):
    y = op.outputs[0]
    return [multiply(grad, multiply(multiply(square(y), y), -0.5))]


@register_gradient("Exp")
def _exp_grad(op, grad):
    return [multiply(grad, op.outputs[0])]


@register_gradient("Log")
def _log_grad(op, grad):
    return [divide(grad, op.inputs[0])]


@register_gradient("Log1p")
def _log1p_grad(op, grad):
    return [divide(grad, add(op.inputs[0], 1))]


# ``SigmoidGrad(y, dy) = dy * y * (1 - y)`` and ``TanhGrad(y, dy) = dy * (1 - y^2)`` (TF's
# names): one kernel with one output array instead of three ops and three temporaries.
def _infer_activation_grad(op):
    y, dy = op.inputs
    if y.dtype is not dy.dtype:
        raise TypeError(f"{op.type}: y ({y.dtype.name}) and dy ({dy.dtype.name}) must have the "
                        f"same dtype")
    if y.shape.is_fully_defined() and dy.shape.is_fully_defined() and y.shape != dy.shape:
        raise ValueError(f"{op.type}: y has shape {y.shape} but dy has shape {dy.shape}")
    return [(y.dtype, y.shape if y.shape.is_fully_defined() else dy.shape)]


register_op("SigmoidGrad", infer=_infer_activation_grad)
register_op("TanhGrad", infer=_infer_activation_grad)


def sigmoid_grad(y, dy, name=None):
    """``dy * y * (1 - y)``: the gradient of Sigmoid from its output ``y``."""
    return make("SigmoidGrad", (as_tensor(y), as_tensor(dy)), None, name, "SigmoidGrad")


def tanh_grad(y, dy, name=None):
    """``dy * (1 - y^2)``: the gradient of Tanh from its output ``y``."""
    return make("TanhGrad", (as_tensor(y), as_tensor(dy)), None, name, "TanhGrad")


@register_gradient("Tanh")
def _tanh_grad(op, grad):
    return [tanh_grad(op.outputs[0], grad)]


@register_gradient("Sigmoid")
def _sigmoid_grad(op, grad):
    return [sigmoid_grad(op.outputs[0], grad)]


@register_gradient("SigmoidGrad")
def _sigmoid_grad_grad(op, grad):
    y, dy = op.inputs
    # d/dy: dy * (1 - 2y); d/ddy: y * (1 - y), itself a SigmoidGrad of the incoming grad.
    return [multiply(grad, multiply(dy, subtract(1, multiply(2, y)))), sigmoid_grad(y, grad)]


@register_gradient("TanhGrad")
def _tanh_grad_grad(op, grad):
    y, dy = op.inputs
    return [multiply(grad, multiply(-2, multiply(dy, y))), tanh_grad(y, grad)]


@register_gradient("Reciprocal")
def _reciprocal_grad(op, grad):
    return [negative(multiply(grad, square(op.outputs[0])))]


@register_gradient("Sin")
def _sin_grad(op, grad):
    return [multiply(grad, cos(op.inputs[0]))]


@register_gradient("Cos")
def _cos_grad(op, grad):
    return [negative(multiply(grad, sin(op.inputs[0])))]


# -- binary gradients -----------------------------------------------------------------------
@register_gradient("Add")
def _add_grad(op, grad):
    return binary_grads(op, grad, grad)


@register_gradient("Sub")
def _sub_grad(op, grad):
    return binary_grads(op, grad, negative(grad))


@register_gradient("Mul")
def _mul_grad(op, grad):
    x, y = op.inputs
    return binary_grads(op, multiply(grad, y), multiply(x, grad))


@register_gradient("RealDiv")
def _real_div_grad(op, grad):
    x, y = op.inputs
    grad_y = negative(multiply(grad, divide(divide(x, y), y)))
    return binary_grads(op, divide(grad, y), grad_y)


@register_gradient("Pow")
def _pow_grad(op, grad):
    x, y = op.inputs
    z = op.outputs[0]
    grad_x = multiply(grad, multiply(y, pow(x, subtract(y, 1))))
    positive = greater(x, 0)
    # log(x) only where x > 0; elsewhere 0 (and no NaN for gradients of this gradient).
    safe_log = where(positive, log(where(positive, x, _ones_like(x))), _zeros_like(x))
    grad_y = multiply(grad, multiply(z, safe_log))
    return binary_grads(op, grad_x, grad_y)


def _select_by(mask, grad):
    zeros = _zeros_like(grad)
    return where(mask, grad, zeros), where(mask, zeros, grad)


@register_gradient("Maximum")
def _maximum_grad(op, grad):
    return binary_grads(op, *_select_by(greater_equal(*op.inputs), grad))


@register_gradient("Minimum")
def _minimum_grad(op, grad):
    return binary_grads(op, *_select_by(less_equal(*op.inputs), grad))


@register_gradient("SquaredDifference")
def _squared_difference_grad(op, grad):
    x, y = op.inputs
    scaled = multiply(grad, multiply(subtract(x, y), 2))
    return binary_grads(op, scaled, negative(scaled))


# -- matmul, add_n, cast, select ------------------------------------------------------------
@register_gradient("MatMul")
def _matmul_grad(op, grad):
    a, b = op.inputs
    ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    if not ta and not tb:
        grad_a, grad_b = matmul(grad, b, transpose_b=True), matmul(a, grad, transpose_a=True)
    elif not ta and tb:
        grad_a, grad_b = matmul(grad, b), matmul(grad, a, transpose_a=True)
    elif ta and not tb:
        grad_a, grad_b = matmul(b, grad, transpose_b=True), matmul(a, grad)
    else:
        grad_a = matmul(b, grad, transpose_a=True, transpose_b=True)
        grad_b = matmul(grad, a, transpose_a=True, transpose_b=True)
    if a.shape.ndims == 2 and b.shape.ndims == 2:
        return [grad_a, grad_b]
    # Batched: sum over the batch dims along which an operand was broadcast.
    return [_sum_to(grad_a, a, [b.shape], grad_a.shape, core=2),
            _sum_to(grad_b, b, [a.shape], grad_b.shape, core=2)]


@register_gradient("AddN")
def _add_n_grad(op, grad):
    return [grad] * len(op.inputs)


@register_gradient("Cast")
def _cast_grad(op, grad):
    source = op.get_attr("SrcT")
    if source.is_floating and op.get_attr("DstT").is_floating:
        return [cast(grad, source)]
    return [None]


@register_gradient("Select")
def _select_grad(op, grad):
    cond, x, y = op.inputs
    out_shape = op.outputs[0].shape
    cond_shape = _select_cond_shape(cond, x)
    grad_x, grad_y = _select_by(cond, grad)
    return [None, _sum_to(grad_x, x, [y.shape, cond_shape], out_shape),
            _sum_to(grad_y, y, [x.shape, cond_shape], out_shape)]


@register_gradient("SelectV2")
def _select_v2_grad(op, grad):
    cond, x, y = op.inputs
    out_shape = op.outputs[0].shape
    zeros = _zeros_like(grad)
    grad_x = make("SelectV2", (cond, grad, zeros), None, None, "SelectV2")
    grad_y = make("SelectV2", (cond, zeros, grad), None, None, "SelectV2")
    return [None, _sum_to(grad_x, x, [y.shape, cond.shape], out_shape),
            _sum_to(grad_y, y, [x.shape, cond.shape], out_shape)]


# -- reduction gradients --------------------------------------------------------------------
def _kept(op, tensor):
    """The reduction's output (or its gradient) reshaped with 1s at the reduced axes."""
    if op.get_attr("keepdims"):
        return tensor
    x = op.inputs[0]
    axes = op.get_attr("axis")
    if x.shape.ndims:  # (axes built on an unknown rank, known since, may be negative)
        reduced = None if axes is None else {axis % x.shape.ndims for axis in axes}
        dims = [1 if reduced is None or i in reduced else d for i, d in enumerate(x.shape.dims)]
        if dims.count(None) == 0 or (dims.count(None) == 1 and 0 not in dims):
            return _array.reshape(tensor, [-1 if d is None else d for d in dims])
    target = make("ReducedShape", (_array.shape(x),), {"axis": axes}, None, "ReducedShape")
    return make("Reshape", (tensor, target), None, None, "Reshape")


def _unreduce(op, grad, mean):
    attrs = {"axis": op.get_attr("axis"), "keepdims": op.get_attr("keepdims"), "mean": mean}
    return make("BroadcastToLike", (grad, op.inputs[0]), attrs, None, "BroadcastToLike")


@register_gradient("Sum")
def _sum_grad(op, grad):
    return [_unreduce(op, grad, mean=False)]


@register_gradient("Mean")
def _mean_grad(op, grad):
    return [_unreduce(op, grad, mean=True)]


@register_gradient("BroadcastToLike")
def _broadcast_to_like_grad(op, grad):
    """The adjoint of broadcasting (and dividing by the count) is the reduction itself."""
    reduction = "Mean" if op.get_attr("mean") else "Sum"
    attrs = {"axis": op.get_attr("axis"), "keepdims": op.get_attr("keepdims")}
    return [make(reduction, (grad,), attrs, None, reduction), None]


def _extreme_grad(op, grad):
    """Max/Min: the gradient goes to the positions equal to the result, split among ties."""
    x = op.inputs[0]
    indicators = cast(equal(x, _kept(op, op.outputs[0])), x.dtype)
    count = make("Sum", (indicators,), {"axis": op.get_attr("axis"), "keepdims": True},
                 None, "Sum")
    return [multiply(divide(indicators, count), _kept(op, grad))]


register_gradient("Max")(_extreme_grad)
register_gradient("Min")(_extreme_grad)


@register_gradient("Prod")
def _prod_grad(op, grad):
    """d prod / d x_i is the product of the others; zeros are counted, never divided by."""
    x = op.inputs[0]
    axes = op.get_attr("axis")
    is_zero = equal(x, 0)
    zero_flags = cast(is_zero, x.dtype)
    zeros_in_slice = make("Sum", (zero_flags,), {"axis": axes, "keepdims": True}, None, "Sum")
    nonzero_x = where(is_zero, _ones_like(x), x)
    nonzero_prod = make("Prod", (nonzero_x,), {"axis": axes, "keepdims": True}, None, "Prod")
    others = where(is_zero, add(_zeros_like(x), nonzero_prod),
                   divide(nonzero_prod, nonzero_x))
    no_zero_among_others = equal(subtract(zeros_in_slice, zero_flags), 0)
    return [multiply(_kept(op, grad), where(no_zero_among_others, others, _zeros_like(x)))]
