"""Math: elementwise unary and binary ops, comparisons, logic, matmul, reductions, casts.

Dtypes follow TF1: both operands of a binary op must share a dtype (a Python scalar takes
the other operand's); broadcasting follows numpy. ``divide`` and ``/`` on integers cast to
floating first (TF1's truediv); ``//`` and ``%`` floor like Python.

This module also installs Tensor's arithmetic and comparison operators.
"""
from __future__ import annotations

import builtins
from math import prod as _prod


from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_op, register_tensor_operators
from asyncflow.graph.shape import TensorShape, broadcast_shapes
from asyncflow.ops.construct import (
    ANY, BOOL, FLOATING, NUMERIC, SIGNED_NUMERIC, as_tensor, check_dtype, make, operands,
    static_value,
)

# -- elementwise unary ----------------------------------------------------------------------
# op type -> (builder name, allowed dtypes)
UNARY = {
    "Neg": ("negative", SIGNED_NUMERIC),
    "Abs": ("abs", SIGNED_NUMERIC),
    "Square": ("square", NUMERIC),
    "Sqrt": ("sqrt", FLOATING),
    "Rsqrt": ("rsqrt", FLOATING),
    "Exp": ("exp", FLOATING),
    "Log": ("log", FLOATING),
    "Log1p": ("log1p", FLOATING),
    "Tanh": ("tanh", FLOATING),
    "Sigmoid": ("sigmoid", FLOATING),
    "Reciprocal": ("reciprocal", FLOATING),
    "Sign": ("sign", SIGNED_NUMERIC),
    "Floor": ("floor", FLOATING),
    "Ceil": ("ceil", FLOATING),
    "Round": ("round", SIGNED_NUMERIC),  # (TF1 rounds integers too: to themselves)
    "Sin": ("sin", FLOATING),
    "Cos": ("cos", FLOATING),
    "LogicalNot": ("logical_not", BOOL),
    "IsNan": ("is_nan", FLOATING),
    "IsFinite": ("is_finite", FLOATING),
}
_BOOL_RESULT = {"IsNan", "IsFinite"}


def _infer_unary(op):
    x = op.inputs[0]
    check_dtype(op.type, x, UNARY[op.type][1])
    return [(dtypes.bool if op.type in _BOOL_RESULT else x.dtype, x.shape)]


def unary_builder(op_type, builder_name):
    def build(x, name=None):
        return make(op_type, (as_tensor(x),), None, name, op_type)
    build.__name__ = builder_name
    build.__doc__ = f"Elementwise {builder_name} (op type ``{op_type}``)."
    return build


for _type, (_name, _allowed) in UNARY.items():
    register_op(_type, infer=_infer_unary)
    globals()[_name] = unary_builder(_type, _name)
not_differentiable("LogicalNot", "IsNan", "IsFinite", "Sign", "Floor", "Ceil", "Round")

# -- elementwise binary ---------------------------------------------------------------------
# op type -> (builder name, allowed dtypes, result is bool)
BINARY = {
    "Add": ("add", ANY, False),
    "Sub": ("subtract", NUMERIC, False),
    "Mul": ("multiply", NUMERIC, False),
    "RealDiv": ("real_div", NUMERIC, False),
    "FloorDiv": ("floordiv", NUMERIC, False),
    "FloorMod": ("floormod", NUMERIC, False),
    "TruncateDiv": ("truncatediv", NUMERIC, False),
    "TruncateMod": ("truncatemod", NUMERIC, False),
    "Pow": ("pow", SIGNED_NUMERIC, False),  # (TF1 has no unsigned Pow)
    "Maximum": ("maximum", NUMERIC, False),
    "Minimum": ("minimum", NUMERIC, False),
    "SquaredDifference": ("squared_difference", NUMERIC, False),
    "Equal": ("equal", ANY, True),
    "NotEqual": ("not_equal", ANY, True),
    "Less": ("less", NUMERIC, True),
    "LessEqual": ("less_equal", NUMERIC, True),
    "Greater": ("greater", NUMERIC, True),
    "GreaterEqual": ("greater_equal", NUMERIC, True),
    "LogicalAnd": ("logical_and", BOOL, True),
    "LogicalOr": ("logical_or", BOOL, True),
    "LogicalXor": ("logical_xor", BOOL, True),
}
_TF_DEFAULT_NAMES = {"Sub": "sub", "Mul": "mul", "Add": "add", "RealDiv": "truediv",
                     "FloorDiv": "floordiv", "FloorMod": "mod", "Pow": "pow"}


def _infer_binary(op):
    x, y = op.inputs
    _, allowed, to_bool = BINARY[op.type]
    if x.dtype is not y.dtype:
        raise TypeError(f"operands have different dtypes {x.dtype.name} and {y.dtype.name}; "
                        "use af.cast to convert one of them")
    check_dtype(op.type, x, allowed)
    if op.type == "Add" and x.dtype.is_bool:
        raise TypeError("Add is not defined for bool; use af.logical_or")
    return [(dtypes.bool if to_bool else x.dtype, broadcast_shapes(x.shape, y.shape))]


def _binary_builder(op_type, builder_name):
    default = _TF_DEFAULT_NAMES.get(op_type, op_type)

    def build(x, y, name=None):
        x, y = operands((x, y), op_type)
        return make(op_type, (x, y), None, name, default)
    build.__name__ = builder_name
    build.__doc__ = f"Elementwise {builder_name} with numpy broadcasting (op type ``{op_type}``)."
    return build


for _type, (_name, _allowed, _bool) in BINARY.items():
    register_op(_type, infer=_infer_binary)
    globals()[_name] = _binary_builder(_type, _name)
not_differentiable("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
                   "LogicalAnd", "LogicalOr", "LogicalXor", "FloorDiv", "FloorMod",
                   "TruncateDiv")  # (TF1 has no gradient of TruncateMod: asking for it fails)

_INT_TRUEDIV = {dtypes.int8: dtypes.float32, dtypes.uint8: dtypes.float32,
                dtypes.int16: dtypes.float32, dtypes.uint16: dtypes.float32,
                dtypes.int32: dtypes.float64, dtypes.int64: dtypes.float64}


def divide(x, y, name=None):
    """``x / y``: integers are cast to floating first (TF1 truediv)."""
    x, y = operands((x, y), "truediv")
    target = _INT_TRUEDIV.get(x.dtype)
    if target is not None:
        x, y = cast(x, target), cast(y, target)
    return make("RealDiv", (x, y), None, name, "truediv")


truediv = divide


def div(x, y, name=None):
    """TF1's ``tf.div``: Python 2's ``/``, which floors integers (``FloorDiv``) and divides
    floats (``RealDiv``)."""
    x, y = operands((x, y), "div")
    op_type = "RealDiv" if x.dtype.is_floating else "FloorDiv"
    return make(op_type, (x, y), None, name, "div")


def realdiv(x, y, name=None):
    """TF1's ``tf.realdiv``: ``x / y`` of floats, one ``RealDiv`` op (no cast).

    Raises:
        TypeError: for integers (TF1 builds them but has no kernel to run them).
    """
    x, y = operands((x, y), "RealDiv")
    if x.dtype.is_integer:
        raise TypeError(f"RealDiv: value passed to x has dtype {x.dtype.name}: TF1 has no "
                        "RealDiv kernel for integers; use truediv or floordiv")
    return make("RealDiv", (x, y), None, name, "RealDiv")


def floor_div(x, y, name=None):
    """TF1's ``tf.floor_div``: one ``FloorDiv`` op (``floordiv`` without its name)."""
    x, y = operands((x, y), "FloorDiv")
    return make("FloorDiv", (x, y), None, name, "FloorDiv")


def mod(x, y, name=None):
    return floormod(x, y, name)  # noqa: F821


# -- casts, selection, add_n ----------------------------------------------------------------
def _infer_cast(op):
    return [(op.get_attr("DstT"), op.inputs[0].shape)]


register_op("Cast", infer=_infer_cast)


def cast(x, dtype, name=None):
    """Convert ``x`` to ``dtype`` (floats to ints truncate toward zero, as in TF1)."""
    x = as_tensor(x)
    dtype = dtypes.as_dtype(dtype)
    if x.dtype is dtype:
        return x
    if x.dtype.is_string or dtype.is_string:
        raise TypeError(f"Cast: cannot cast between {x.dtype.name} and {dtype.name}")
    return make("Cast", (x,), {"DstT": dtype, "SrcT": x.dtype}, name, "Cast")


def to_float(x, name=None):
    return cast(x, dtypes.float32, name)


def _infer_select(op):
    cond, x, y = op.inputs
    if not cond.dtype.is_bool:
        raise TypeError(f"condition must be bool, got {cond.dtype.name}")
    if x.dtype is not y.dtype:
        raise TypeError(f"x and y have different dtypes {x.dtype.name} and {y.dtype.name}")
    shape = broadcast_shapes(broadcast_shapes(x.shape, y.shape), _select_cond_shape(cond, x))
    return [(x.dtype, shape)]


def _select_cond_shape(cond, x):
    # TF1: a vector condition selects whole rows of x.
    if cond.shape.ndims == 1 and x.shape.ndims not in (None, 1):
        return TensorShape([cond.shape[0]] + [1] * (x.shape.ndims - 1))
    return cond.shape


register_op("Select", infer=_infer_select)


def _infer_select_v2(op):
    cond, x, y = op.inputs
    if not cond.dtype.is_bool:
        raise TypeError(f"condition must be bool, got {cond.dtype.name}")
    if x.dtype is not y.dtype:
        raise TypeError(f"x and y have different dtypes "
                        f"{x.dtype.name} and {y.dtype.name}")
    shape = broadcast_shapes(broadcast_shapes(x.shape, y.shape), cond.shape)
    return [(x.dtype, shape)]


register_op("SelectV2", infer=_infer_select_v2)


def _infer_where_indices(op):
    cond = op.inputs[0]
    rank = cond.shape.ndims
    return [(dtypes.int64, TensorShape([None, rank]))]


register_op("Where", infer=_infer_where_indices)
not_differentiable("Where")


def where(condition, x=None, y=None, name=None):
    """``where(cond, x, y)`` selects elementwise; ``where(cond)`` gives the true coordinates."""
    return _where("Select", "where", condition, x, y, name)


def where_v2(condition, x=None, y=None, name=None):
    """TF1's ``tf.where_v2``: ``where`` with ``condition``, ``x`` and ``y`` broadcast
    together (numpy's ``where``); ``where_v2(cond)`` gives the true coordinates."""
    return _where("SelectV2", "where_v2", condition, x, y, name)


def _where(op_type, api, condition, x, y, name):
    condition = as_tensor(condition)
    if x is None and y is None:
        return make("Where", (condition,), None, name, "Where")
    if x is None or y is None:
        raise ValueError(f"{api}: x and y must both be given or both be None")
    x, y = operands((x, y), op_type)
    return make(op_type, (condition, x, y), None, name, op_type)


def _infer_add_n(op):
    inputs = op.inputs
    if not inputs:
        raise ValueError("needs at least one input")
    dtype = inputs[0].dtype
    shape = inputs[0].shape
    for tensor in inputs[1:]:
        if tensor.dtype is not dtype:
            raise TypeError(f"all inputs must have dtype {dtype.name}, got {tensor.dtype.name}")
        shape = shape.merge_with(tensor.shape)
    return [(dtype, shape)]


register_op("AddN", infer=_infer_add_n)


def add_n(inputs, name=None):
    """Sum a list of same-shape, same-dtype tensors."""
    if not inputs:
        raise ValueError("add_n: inputs must be a non-empty list")
    tensors = operands(list(inputs), "AddN")
    if len(tensors) == 1 and name is None:
        return tensors[0]
    return make("AddN", tuple(tensors), None, name, "AddN")


def accumulate_n(inputs, shape=None, tensor_dtype=None, name=None):
    """TF1's ``tf.accumulate_n`` (``tf.math.accumulate_n``): ``add_n`` of tensors of one
    dtype and shape, checked against ``shape`` and ``tensor_dtype`` when given.

    Raises:
        ValueError: for an empty list, tensors of different dtypes or shapes, or a ``shape``
            or ``tensor_dtype`` they do not have (TF1's words).
    """
    message = "inputs must be a list of at least one Tensor with the same dtype and shape"
    if not inputs or not isinstance(inputs, (list, tuple)):
        raise ValueError(message)
    tensors = [as_tensor(t) for t in inputs]
    if any(t.dtype is not tensors[0].dtype for t in tensors):
        raise ValueError(message)
    merged = TensorShape(shape) if shape is not None else TensorShape(None)
    for t in tensors:
        if not t.shape.is_compatible_with(merged):
            raise ValueError(message)
        merged = merged.merge_with(t.shape)
    if tensor_dtype is not None and dtypes.as_dtype(tensor_dtype) is not tensors[0].dtype:
        raise TypeError(f"tensor_dtype is {dtypes.as_dtype(tensor_dtype).name}, but the "
                        f"inputs are {tensors[0].dtype.name}")
    return make("AddN", tuple(tensors), None, name, "AddN") if len(tensors) > 1 or name \
        else tensors[0]


# -- matmul -----------------------------------------------------------------------------------
def _infer_matmul(op):
    a, b = op.inputs
    ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    if a.dtype is not b.dtype:
        raise TypeError(f"operands have different dtypes {a.dtype.name} and {b.dtype.name}")
    check_dtype(op.type, a, NUMERIC, "a")
    if a.shape.ndims is None or b.shape.ndims is None:
        return [(a.dtype, TensorShape(None))]
    if a.shape.ndims < 2 or b.shape.ndims < 2:
        raise ValueError(f"inputs must be at least rank 2, got shapes {a.shape} and {b.shape}")
    a_rows, a_inner = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
    b_inner, b_cols = (b.shape[-1], b.shape[-2]) if tb else (b.shape[-2], b.shape[-1])
    if a_inner is not None and b_inner is not None and a_inner != b_inner:
        raise ValueError(f"inner dimensions {a_inner} and {b_inner} differ "
                         f"(shapes {a.shape} and {b.shape}, transpose_a={ta}, transpose_b={tb})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return [(a.dtype, batch.concatenate([a_rows, b_cols]))]


def _matmul_cost(shapes, op):
    """Multiply-adds (batch * m * k * n): placement's cost model and the offload threshold.

    Called on the hot path for every MatMul of unknown static shape, so it stays cheap.
    """
    a, b = shapes
    if len(a) < 2 or len(b) < 2:
        return _prod(a) + _prod(b)
    attrs = op.attrs
    m, k = (a[-1], a[-2]) if attrs["transpose_a"] else (a[-2], a[-1])
    n = b[-2] if attrs["transpose_b"] else b[-1]
    return _prod(a[:-2]) * m * k * n


register_op("MatMul", infer=_infer_matmul, cost=_matmul_cost)


class _FirstTwoInputs:
    """An op seen with only its first two inputs (the fused MatMul's a and b)."""

    def __init__(self, op):
        self._op = op
        self._inputs = op.inputs[:2]
        self._attrs = op.attrs
        self.type = op.type

    def get_attr(self, name):
        return self._op.get_attr(name)


def _infer_fused_matmul(op):
    """``_FusedMatMul(a, b, bias)``: MatMul, then ``fused_ops`` (BiasAdd [, an activation]);
    made only by the fusion pass (compile/optimize.py), never by users."""
    return _infer_matmul(_FirstTwoInputs(op))


def _fused_matmul_cost(shapes, op):
    return _matmul_cost(shapes[:2], op)


register_op("_FusedMatMul", infer=_infer_fused_matmul, cost=_fused_matmul_cost)


def _infer_matmul_chain(op):
    """``_FusedMatMulChain(a, b0, bias0, b1, bias1, ...)``: consecutive ``_FusedMatMul``
    layers, each reading the one before (``fused_ops`` and ``transpose_b`` per layer), an
    output a layer; made only by compile/fuse_matmul_chain.py, never by users (kernel:
    kernels/matmul_chain.py)."""
    a = op.inputs[0]
    rows = TensorShape(None) if a.shape.ndims is None else \
        TensorShape([a.shape[-1] if op.get_attr("transpose_a") else a.shape[-2]])
    outs = []
    for i, tb in enumerate(op.get_attr("transpose_b")):
        b = op.inputs[1 + 2 * i]
        cols = None if b.shape.ndims is None else (b.shape[-2] if tb else b.shape[-1])
        outs.append((a.dtype, TensorShape(None) if rows.ndims is None
                     else rows.concatenate([cols])))
    return outs


def _matmul_chain_cost(shapes, op):
    """The layers' multiply-adds (the offload threshold's, as ``MatMul``'s)."""
    a = shapes[0]
    if len(a) != 2:
        return sum(_prod(s) for s in shapes)
    rows = a[1] if op.attrs["transpose_a"] else a[0]
    return sum(rows * _prod(b) for b in shapes[1::2])


register_op("_FusedMatMulChain", infer=_infer_matmul_chain, cost=_matmul_chain_cost,
            differentiable=False)


# The mean squared error's chain in two nodes, made only by the fusion pass
# (compile/fuse_squared_error.py), never by users: ``Mean(Square(Sub(a, b)))`` over every
# axis, and its gradient ``BroadcastToLike(grad) * (diff * 2)``.
def _infer_fused_mean_squared_error(op):
    """``_FusedMeanSquaredError(a, b) -> (loss, diff)``: the scalar mean of ``(a - b)**2``
    and ``a - b`` itself (which the gradient reads)."""
    a, b = op.inputs
    return [(a.dtype, TensorShape([])), (a.dtype, broadcast_shapes(a.shape, b.shape))]


def _infer_fused_mean_squared_error_grad(op):
    """``_FusedMeanSquaredErrorGrad(grad, diff[, loss]) -> grad * 2 * diff / diff.size``
    (``loss``, the forward's, only tells the kernel that ``diff * 2`` cannot overflow)."""
    return [(op.inputs[1].dtype, op.inputs[1].shape)]


register_op("_FusedMeanSquaredError", infer=_infer_fused_mean_squared_error,
            differentiable=False)
register_op("_FusedMeanSquaredErrorGrad", infer=_infer_fused_mean_squared_error_grad,
            differentiable=False)


def _infer_fused_mean_squared_error_sigmoid_grad(op):
    """``_FusedMeanSquaredErrorSigmoidGrad(y, x, grad) -> (loss, dy)``: the loss of
    ``Mean(Square(y - x))`` and, ``y`` a sigmoid's output, the gradient of the sigmoid's input
    for ``grad`` of the loss (the fusion pass's node, kernels/squared_error_sigmoid.py)."""
    y = op.inputs[0]
    return [(y.dtype, TensorShape([])), (y.dtype, y.shape)]


register_op("_FusedMeanSquaredErrorSigmoidGrad",
            infer=_infer_fused_mean_squared_error_sigmoid_grad, differentiable=False)


def matmul(a, b, transpose_a=False, transpose_b=False, name=None):
    """Matrix product of the last two dims (batched over leading dims)."""
    a, b = operands((a, b), "MatMul")
    return make("MatMul", (a, b), {"transpose_a": bool(transpose_a),
                                   "transpose_b": bool(transpose_b)}, name, "MatMul")


# -- reductions -----------------------------------------------------------------------------
REDUCTIONS = {"Sum": ("reduce_sum", NUMERIC), "Mean": ("reduce_mean", NUMERIC),
              "Max": ("reduce_max", NUMERIC), "Min": ("reduce_min", NUMERIC),
              "Prod": ("reduce_prod", NUMERIC), "All": ("reduce_all", BOOL),
              "Any": ("reduce_any", BOOL)}


def normalize_axes(axis, ndims, op_name):
    """Axes as a sorted tuple of non-negative ints (None: all axes; needs a known rank).
    Of an unknown rank, axes some of which are negative are returned sorted as given
    (negatives first), for the kernel to resolve when the op runs, as TF1 does."""
    if axis is None:
        return None if ndims is None else tuple(builtins.range(ndims))
    axes = [axis] if isinstance(axis, int) else [int(a) for a in axis]
    if ndims is None:
        # (sorted and unique as below: kernels take ``(0, ..., k-1)`` for the leading axes)
        if len(set(axes)) != len(axes):
            raise ValueError(f"{op_name}: axis {axes} names an axis twice")
        return tuple(sorted(axes))
    out = []
    for a in axes:
        if not -ndims <= a < ndims:  # (a scalar has no axis: TF1 refuses 0 and -1 there)
            raise ValueError(f"{op_name}: axis {a} is out of range for a tensor of rank {ndims}")
        out.append(a % ndims)
    if len(set(out)) != len(out):  # TF1: "Axes contains duplicate dimension"
        raise ValueError(f"{op_name}: axis {axes} names an axis twice (rank {ndims})")
    return tuple(sorted(out))


def _infer_reduction(op):
    x = op.inputs[0]
    check_dtype(op.type, x, REDUCTIONS[op.type][1])
    axes = op.get_attr("axis")
    keepdims = op.get_attr("keepdims")
    if x.shape.ndims is None or axes is None:
        return [(x.dtype, TensorShape(None))]
    dims = [(1 if keepdims else None) if i in axes else d for i, d in enumerate(x.shape.dims)]
    if not keepdims:
        dims = [d for i, d in enumerate(x.shape.dims) if i not in axes]
    return [(x.dtype, TensorShape(dims))]


def _reduction_builder(op_type, builder_name):
    def build(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
              reduction_indices=None):
        x = as_tensor(input_tensor)
        if keep_dims is not None:
            keepdims = keep_dims
        if reduction_indices is not None:  # TF1's older spelling of axis
            if axis is not None:
                raise ValueError(f"{builder_name}: give axis or reduction_indices, not both")
            axis = reduction_indices
        if hasattr(axis, "op"):
            value = static_value(axis)
            if value is None:
                raise ValueError(f"{builder_name}: axis must be a constant")
            axis = value.tolist()
        axes = normalize_axes(axis, x.shape.ndims, builder_name)
        return make(op_type, (x,), {"axis": axes, "keepdims": bool(keepdims)}, name, op_type)
    build.__name__ = builder_name
    build.__doc__ = f"Reduce with {op_type} over ``axis`` (None: all axes)."
    return build


for _type, (_name, _allowed) in REDUCTIONS.items():
    register_op(_type, infer=_infer_reduction)
    globals()[_name] = _reduction_builder(_type, _name)
not_differentiable("All", "Any")


def _infer_arg(op):
    x = op.inputs[0]
    check_dtype(op.type, x, NUMERIC)
    axis = op.get_attr("axis")
    if x.shape.ndims is None:
        return [(op.get_attr("output_type"), TensorShape(None))]
    return [(op.get_attr("output_type"),
             TensorShape([d for i, d in enumerate(x.shape.dims) if i != axis]))]


register_op("ArgMax", infer=_infer_arg)
register_op("ArgMin", infer=_infer_arg)
not_differentiable("ArgMax", "ArgMin")


def _arg_builder(op_type, default):
    def build(input, axis=None, name=None, output_type=dtypes.int64):  # noqa: A002
        x = as_tensor(input)
        axis = 0 if axis is None else int(axis)
        ndims = x.shape.ndims
        if ndims is not None:
            if not -ndims <= axis < ndims:  # (TF1 refuses a scalar: it has no axis)
                raise ValueError(f"{default}: axis {axis} out of range for rank {ndims}")
            axis %= ndims
        return make(op_type, (x,), {"axis": axis, "output_type": dtypes.as_dtype(output_type)},
                    name, default)
    build.__name__ = default.lower()
    return build


argmax = _arg_builder("ArgMax", "ArgMax")
argmin = _arg_builder("ArgMin", "ArgMin")


# -- operators on Tensor --------------------------------------------------------------------
register_tensor_operators({
    "__add__": lambda x, y: add(x, y),  # noqa: F821
    "__radd__": lambda x, y: add(y, x),  # noqa: F821
    "__sub__": lambda x, y: subtract(x, y),  # noqa: F821
    "__rsub__": lambda x, y: subtract(y, x),  # noqa: F821
    "__mul__": lambda x, y: multiply(x, y),  # noqa: F821
    "__rmul__": lambda x, y: multiply(y, x),  # noqa: F821
    "__truediv__": lambda x, y: divide(x, y),
    "__rtruediv__": lambda x, y: divide(y, x),
    "__floordiv__": lambda x, y: floordiv(x, y),  # noqa: F821
    "__rfloordiv__": lambda x, y: floordiv(y, x),  # noqa: F821
    "__mod__": lambda x, y: floormod(x, y),  # noqa: F821
    "__rmod__": lambda x, y: floormod(y, x),  # noqa: F821
    "__pow__": lambda x, y: pow(x, y),  # noqa: F821
    "__rpow__": lambda x, y: pow(y, x),  # noqa: F821
    "__matmul__": lambda x, y: matmul(x, y),
    "__rmatmul__": lambda x, y: matmul(y, x),
    "__neg__": lambda x: negative(x),  # noqa: F821
    "__abs__": lambda x: abs(x),  # noqa: F821
    "__lt__": lambda x, y: less(x, y),  # noqa: F821
    "__le__": lambda x, y: less_equal(x, y),  # noqa: F821
    "__gt__": lambda x, y: greater(x, y),  # noqa: F821
    "__ge__": lambda x, y: greater_equal(x, y),  # noqa: F821
    "__and__": lambda x, y: logical_and(x, y),  # noqa: F821
    "__rand__": lambda x, y: logical_and(y, x),  # noqa: F821
    "__or__": lambda x, y: logical_or(x, y),  # noqa: F821
    "__ror__": lambda x, y: logical_or(y, x),  # noqa: F821
    "__xor__": lambda x, y: logical_xor(x, y),  # noqa: F821
    "__rxor__": lambda x, y: logical_xor(y, x),  # noqa: F821
    "__invert__": lambda x: logical_not(x),  # noqa: F821
})
