"""``af.linalg``: TF1's ``tf.linalg`` namespace.

Builders live in their op families (ops/linalg.py, ops/diagonal.py, ops/math.py, ops/cross.py,
ops/matrix_linalg.py, ops/numerics.py); this module only gathers them under TF1's
``tf.linalg`` names.
"""
from asyncflow.ops.diagonal import (  # noqa: F401
    eye, matrix_band_part as band_part, matrix_diag as diag, matrix_diag_part as diag_part,
    matrix_set_diag as set_diag, trace,
)
from asyncflow.ops.linalg import einsum, tensordot  # noqa: F401
from asyncflow.ops.math import matmul  # noqa: F401
from asyncflow.ops.matrix_linalg import (  # noqa: F401
    cholesky, matrix_determinant as det, matrix_inverse as inv, qr, svd,
)
from asyncflow.ops.numerics import norm  # noqa: F401
from asyncflow.ops.linalg import matrix_transpose, matvec  # noqa: F401
from asyncflow.ops.linalg import matrix_transpose as adjoint  # noqa: F401  (real: the same)
from asyncflow.ops.linalg import matrix_transpose as transpose  # noqa: F401
from asyncflow.ops.numerics import global_norm  # noqa: F401
from asyncflow.ops.nn import l2_normalize  # noqa: F401
from asyncflow.ops.cross import cross  # noqa: F401
from asyncflow.ops.matrix_solve import (  # noqa: F401,E402  (TF1's tf.linalg spellings)
    cholesky_solve, matrix_solve as solve, matrix_triangular_solve as triangular_solve,
)
