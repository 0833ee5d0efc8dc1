"""``af.linalg``: TF1's ``tf.linalg`` namespace.

Builders live in their op families (ops/linalg.py, ops/math.py, ops/numerics.py); this
module only gathers them under TF1's ``tf.linalg`` names.
"""
from asyncflow.ops.linalg import einsum, tensordot  # noqa: F401
from asyncflow.ops.math import matmul  # noqa: F401
from asyncflow.ops.numerics import norm  # noqa: F401
