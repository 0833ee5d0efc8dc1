"""Kernels of the trigonometric family (see ops/trigonometric.py): the array module's own
functions, through the math family's elementwise kernels (split when large, TF1's wording
for shapes that do not broadcast)."""
from __future__ import annotations

from asyncflow.kernels import intra_op
from asyncflow.kernels.math import _binary_kernel, _unary_kernel
from asyncflow.kernels.registry import register_kernel, register_prepare

# op type -> name of the array-module function computing it
_UNARY = {"Tan": "tan", "Asin": "arcsin", "Acos": "arccos", "Atan": "arctan", "Sinh": "sinh",
          "Cosh": "cosh", "Asinh": "arcsinh", "Acosh": "arccosh", "Atanh": "arctanh",
          "Expm1": "expm1", "Rint": "rint", "IsInf": "isinf"}

for _type, _fn in _UNARY.items():
    register_kernel(_type)(_unary_kernel(_fn))
    register_prepare(_type)(intra_op.may_be_large)
register_kernel("Atan2")(_binary_kernel("arctan2"))
