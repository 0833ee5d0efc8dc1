"""Training: fused update ops that apply one optimizer step to a variable in one kernel.

Each ``Apply*`` op takes the variable's reference as input 0 (and its slot variables, such as
Momentum's accumulator, as further reference inputs), then the hyperparameters as scalar
tensors and the gradient last. Its kernel reads the current values, computes the new ones
with the update rule and assigns them; the op's output is the variable's new value. One op
per variable and step (instead of a chain of elementwise ops and Assigns) is what makes a
training step cheap. The update rules are those of TF1's ``training_ops``.

These ops are stateful and not differentiable.
"""
from __future__ import annotations

from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, make

# op type -> (reference input names, value input names after them)
TRAINING_OPS = {
    "ApplyGradientDescent": (("var",), ("alpha", "delta")),
    "ApplyMomentum": (("var", "accum"), ("lr", "grad", "momentum")),
    "ApplyAdam": (("var", "m", "v"), ("beta1_power", "beta2_power", "lr", "beta1", "beta2",
                                      "epsilon", "grad")),
    "ApplyAdagrad": (("var", "accum"), ("lr", "grad")),
    "ApplyRMSProp": (("var", "ms", "mom"), ("lr", "rho", "momentum", "epsilon", "grad")),
    "ApplyCenteredRMSProp": (("var", "mg", "ms", "mom"), ("lr", "rho", "momentum", "epsilon",
                                                          "grad")),
    "ApplyFtrlV2": (("var", "accum", "linear"), ("grad", "lr", "l1", "l2", "l2_shrinkage",
                                                 "lr_power")),
    "ApplyAdadelta": (("var", "accum", "accum_update"), ("lr", "rho", "epsilon", "grad")),
    "ApplyProximalGradientDescent": (("var",), ("alpha", "l1", "l2", "delta")),
    "ApplyProximalAdagrad": (("var", "accum"), ("lr", "l1", "l2", "grad")),
    "ApplyAdagradDA": (("var", "gradient_accumulator", "gradient_squared_accumulator"),
                       ("grad", "lr", "l1", "l2", "global_step")),
}

# Sparse forms: the same rule applied to the rows ``indices`` only, ``grad`` holding one row
# per index. Duplicate indices are summed first, as TF1's optimizers do (``unique`` and
# ``unsorted_segment_sum`` before each ``SparseApply*``). Adam is not lazy, as in TF1's core
# optimizer: ``m`` and ``v`` decay everywhere, only the touched rows get the new gradient.
SPARSE_TRAINING_OPS = {
    "SparseApplyMomentum": (("var", "accum"), ("lr", "grad", "indices", "momentum")),
    "SparseApplyAdagrad": (("var", "accum"), ("lr", "grad", "indices")),
    "SparseApplyRMSProp": (("var", "ms", "mom"), ("lr", "rho", "momentum", "epsilon", "grad",
                                                  "indices")),
    "SparseApplyCenteredRMSProp": (("var", "mg", "ms", "mom"), ("lr", "rho", "momentum",
                                                                "epsilon", "grad", "indices")),
    "SparseApplyAdam": (("var", "m", "v"), ("beta1_power", "beta2_power", "lr", "beta1",
                                            "beta2", "epsilon", "grad", "indices")),
    "SparseApplyFtrlV2": (("var", "accum", "linear"), ("grad", "indices", "lr", "l1", "l2",
                                                       "l2_shrinkage", "lr_power")),
    "SparseApplyAdadelta": (("var", "accum", "accum_update"), ("lr", "rho", "epsilon", "grad",
                                                               "indices")),
    "SparseApplyProximalGradientDescent": (("var",), ("alpha", "l1", "l2", "grad", "indices")),
    "SparseApplyProximalAdagrad": (("var", "accum"), ("lr", "l1", "l2", "grad", "indices")),
    "SparseApplyAdagradDA": (("var", "gradient_accumulator", "gradient_squared_accumulator"),
                             ("grad", "indices", "lr", "l1", "l2", "global_step")),
}

# Value inputs that keep their own dtype: row indices (any integer) and AdagradDA's step (an
# int64 scalar, as TF1's ``global_step``).
_OWN_DTYPE = ("indices", "global_step")
# TF1 registers these kernels for float32 and float64 only.
_FLOAT32_64_ONLY = ("ApplyAdagradDA", "SparseApplyAdagradDA")


def _infer_apply(op):
    refs, values = TRAINING_OPS[op.type]
    var = op.inputs[0]
    _check_dtype_support(op, var)
    for name, tensor in zip(refs + values, op.inputs):
        if name in refs and not tensor.is_ref:
            raise TypeError(f"input {name!r} must be a variable reference, got {tensor.name}")
        if name == "global_step":
            _check_global_step(op, tensor)
            continue
        if tensor.dtype is not var.dtype:
            raise TypeError(f"input {name!r} has dtype {tensor.dtype.name}, but the variable "
                            f"{var.op.name} has {var.dtype.name}")
        if name in refs[1:] + ("grad", "delta") and not tensor.shape.is_compatible_with(var.shape):
            raise ValueError(f"input {name!r} has shape {tensor.shape}, but the variable "
                             f"{var.op.name} has shape {var.shape}")
        if name not in refs and name not in ("grad", "delta") and tensor.shape.ndims not in (None, 0):
            raise ValueError(f"hyperparameter {name!r} must be a scalar, got shape {tensor.shape}")
    if not var.dtype.is_floating:
        raise TypeError(f"variable {var.op.name} must be floating, got {var.dtype.name}")
    return [(var.dtype, var.shape)]


def _infer_sparse_apply(op):
    refs, values = SPARSE_TRAINING_OPS[op.type]
    var = op.inputs[0]
    if not var.dtype.is_floating:
        raise TypeError(f"variable {var.op.name} must be floating, got {var.dtype.name}")
    _check_dtype_support(op, var)
    for name, tensor in zip(refs + values, op.inputs):
        if name in refs and not tensor.is_ref:
            raise TypeError(f"input {name!r} must be a variable reference, got {tensor.name}")
        if name == "indices":
            if not tensor.dtype.is_integer or tensor.shape.ndims not in (None, 1):
                raise TypeError(f"indices must be an int vector, got {tensor.dtype.name} of "
                                f"shape {tensor.shape}")
            continue
        if name == "global_step":
            _check_global_step(op, tensor)
            continue
        if tensor.dtype is not var.dtype:
            raise TypeError(f"input {name!r} has dtype {tensor.dtype.name}, but the variable "
                            f"{var.op.name} has {var.dtype.name}")
        if name in refs[1:] and not tensor.shape.is_compatible_with(var.shape):
            raise ValueError(f"slot {name!r} has shape {tensor.shape}, but the variable "
                             f"{var.op.name} has shape {var.shape}")
        if name == "grad" and var.shape.ndims is not None and not tensor.shape.is_compatible_with(
                TensorShape([None] + list(var.shape.dims[1:]))):
            raise ValueError(f"grad has shape {tensor.shape}, but rows of the variable "
                             f"{var.op.name} have shape {var.shape[1:]}")
        if name not in refs and name != "grad" and tensor.shape.ndims not in (None, 0):
            raise ValueError(f"hyperparameter {name!r} must be a scalar, got shape {tensor.shape}")
    return [(var.dtype, var.shape)]


def _check_global_step(op, tensor):
    if tensor.dtype.name != "int64" or tensor.shape.ndims not in (None, 0):
        raise TypeError(f"global_step must be an int64 scalar, got "
                        f"{tensor.dtype.name} of shape {tensor.shape}")


def _check_dtype_support(op, var):
    if op.type in _FLOAT32_64_ONLY and var.dtype.name not in ("float32", "float64"):
        raise TypeError(f"no kernel for {var.dtype.name} variables "
                        f"({var.op.name}); as TF1's, it takes float32 and float64")


for _type, (_refs, _values) in TRAINING_OPS.items():
    register_op(_type, infer=_infer_apply, stateful=True, ref_inputs=range(len(_refs)))
for _type, (_refs, _values) in SPARSE_TRAINING_OPS.items():
    register_op(_type, infer=_infer_sparse_apply, stateful=True, ref_inputs=range(len(_refs)))
not_differentiable(*TRAINING_OPS, *SPARSE_TRAINING_OPS)


def apply_update(op_type, refs, values, name=None, **attrs):
    """Add one fused update op, colocated with the variable.

    Args:
        op_type: a key of ``TRAINING_OPS`` or ``SPARSE_TRAINING_OPS``.
        refs: the variable's reference tensor, then its slots' reference tensors.
        values: hyperparameters (Python numbers or scalar tensors), the gradient (and for a
            sparse op its row indices), in the order of ``TRAINING_OPS[op_type][1]``.
        name: the op name.
        **attrs: op attrs (``use_locking``, ``use_nesterov``).

    Returns:
        The variable's new value (a Tensor).
    """
    var = refs[0]
    names = (TRAINING_OPS.get(op_type) or SPARSE_TRAINING_OPS[op_type])[1]
    inputs = tuple(refs) + tuple(as_tensor(v) if n in _OWN_DTYPE else as_tensor(v, dtype=var.dtype)
                                 for n, v in zip(names, values))
    with var.graph.colocate_with(var.op):
        return make(op_type, inputs, {"use_locking": False, "use_nesterov": False, **attrs},
                    name, op_type)


# -- a dense weight gradient and its RMSProp apply in one node --------------------------------
# Made only by the fusion pass (compile/fuse_matmul_apply.py), never by users: ``ApplyRMSProp(var,
# ms, mom, lr, rho, momentum, epsilon, MatMul(a, b))`` where the apply is the product's one
# reader. Kernel: kernels/matmul_apply.py (each row chunk of a split product applied while in
# cache, on the thread that computed it).
def _infer_matmul_apply(op):
    """``(var, ms, mom, lr, rho, momentum, epsilon, a, b) -> var``'s new value."""
    var = op.inputs[0]
    return [(var.dtype, var.shape)]


def _matmul_apply_cost(shapes, op):
    """The product's multiply-adds and the apply's elements (the product's, which the kernel
    checks against the variable's), an element counted as 16 of them (the kernel's
    ``offload_scale``, ``intra_op.MACS_PER_WORK``: a GEMM's multiply-adds per
    element-operation): the offload test's and exec/lanes.py's estimate. Not the variable's
    shape: at run time the first input is its resource, whose shape may be unknown (None, or
    None dims). The two kernels count the apply as its inputs' sizes, about 4 elements a
    variable's element in these units; this counts one (the compiled loop's single pass)."""
    a, b = shapes[7], shapes[8]
    m, k = (a[-1], a[-2]) if op.attrs["transpose_a"] else (a[-2], a[-1])
    n = b[-2] if op.attrs["transpose_b"] else b[-1]
    return m * k * n + 16 * m * n


register_op("_FusedMatMulApplyRMSProp", infer=_infer_matmul_apply, stateful=True,
            ref_inputs=range(3), differentiable=False, cost=_matmul_apply_cost)


# -- an optimizer's group of small RMSProp applies in one node ----------------------------------
# Made only by compile/group_applies.py, never by users: ``ApplyRMSProp`` nodes sharing their
# hyperparameter inputs become ``_FusedApplyRMSPropGroup(lr, rho, momentum, epsilon, var_0,
# ms_0, mom_0, grad_0, var_1, ...)``, one output a member (that apply's output). Kernel:
# kernels/apply_group.py (each member's compiled loop in one kernel call).
APPLY_GROUP_MAX = 64  # members a group node (the ref inputs below cover this many)


def _infer_apply_group(op):
    """One output a member: its variable's new value."""
    return [(op.inputs[i].dtype, op.inputs[i].shape) for i in range(4, len(op.inputs), 4)]


def _apply_group_cost(shapes, op):
    """The members' elements (the separate applies' default cost: their inputs' elements)."""
    total = 0
    for shape in shapes[4::4]:
        elements = 1
        for dim in shape:
            elements *= dim
        total += elements
    return total


register_op("_FusedApplyRMSPropGroup", infer=_infer_apply_group, stateful=True,
            ref_inputs=[4 + 4 * k + j for k in range(APPLY_GROUP_MAX) for j in range(3)],
            differentiable=False, cost=_apply_group_cost)
