"""Dense linear algebra on the last two axes, batched over the leading ones: TF1's
``tf.matrix_inverse`` (``tf.linalg.inv``), ``tf.matrix_determinant`` (``tf.linalg.det``),
``tf.cholesky``, ``tf.qr`` and ``tf.svd`` for float32 and float64.

Gradients are TF1's for the inverse (``-A^-T g A^-T``), the determinant (``g det(A) A^-T``)
and the Cholesky factor (TF1's ``_CholeskyGrad``, symmetric: the input is taken as a
symmetric matrix); QR and SVD have no gradient here. A singular
matrix (inverse) or one that is not positive definite (Cholesky) fails the run with an
``InvalidArgumentError`` naming the op, as in TF1. The kernels run on the host (numpy's
LAPACK).

Kernels live in ``asyncflow/kernels/matrix_linalg.py``.
"""
from __future__ import annotations

from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import FLOATING, as_tensor, check_dtype, make, make_op


def _matrices(op, square):
    x = op.inputs[0]
    check_dtype(op.type, x, FLOATING, "input")
    if x.dtype.name not in ("float32", "float64"):
        raise TypeError(f"{op.type} '{op.name}': input must be float32 or float64, got "
                        f"{x.dtype.name}")
    if x.shape.ndims is None:
        return x, None, None, None
    if x.shape.ndims < 2:
        raise ValueError(f"{op.type} '{op.name}': input must be at least 2-D, got shape "
                         f"{x.shape}")
    m, n = x.shape.dims[-2:]
    if square and m is not None and n is not None and m != n:
        raise ValueError(f"{op.type} '{op.name}': input must be square matrices, got shape "
                         f"{x.shape}")
    return x, list(x.shape.dims[:-2]), m, n


def _infer_same_square(op):
    x, _, _, _ = _matrices(op, square=True)
    return [(x.dtype, x.shape)]


def _infer_determinant(op):
    x, batch, _, _ = _matrices(op, square=True)
    return [(x.dtype, TensorShape(batch))]


def _small(m, n):
    return None if m is None or n is None else min(m, n)


def _infer_qr(op):
    x, batch, m, n = _matrices(op, square=False)
    if batch is None:
        return [(x.dtype, TensorShape(None))] * 2
    k = m if op.get_attr("full_matrices") else _small(m, n)
    return [(x.dtype, TensorShape(batch + [m, k])), (x.dtype, TensorShape(batch + [k, n]))]


def _infer_svd(op):
    x, batch, m, n = _matrices(op, square=False)
    if batch is None:
        return [(x.dtype, TensorShape(None))] * 3
    k, full = _small(m, n), op.get_attr("full_matrices")
    if not op.get_attr("compute_uv"):
        return [(x.dtype, TensorShape(batch + [k])), (x.dtype, TensorShape([0])),
                (x.dtype, TensorShape([0]))]
    return [(x.dtype, TensorShape(batch + [k])),
            (x.dtype, TensorShape(batch + [m, m if full else k])),
            (x.dtype, TensorShape(batch + [n, n if full else k]))]


register_op("MatrixInverse", infer=_infer_same_square)
register_op("MatrixDeterminant", infer=_infer_determinant)
register_op("Cholesky", infer=_infer_same_square)
register_op("Qr", infer=_infer_qr)
register_op("Svd", infer=_infer_svd)
not_differentiable("Qr", "Svd")


def matrix_inverse(input, adjoint=False, name=None):  # noqa: A002 - TF1's argument name
    """The inverses of square matrices (of their transposes with ``adjoint=True``).

    Raises:
        ValueError, TypeError: for non-square, rank < 2 or non-float input (named
            ``MatrixInverse``).
    """
    return make("MatrixInverse", (as_tensor(input),), {"adjoint": bool(adjoint)}, name,
                "MatrixInverse")


def matrix_determinant(input, name=None):  # noqa: A002
    """The determinants of square matrices, shape ``input.shape[:-2]``."""
    return make("MatrixDeterminant", (as_tensor(input),), None, name, "MatrixDeterminant")


def cholesky(input, name=None):  # noqa: A002
    """The lower-triangular Cholesky factors ``L`` (``L L^T = input``) of symmetric positive
    definite matrices (only the lower triangle of ``input`` is read, as in TF1)."""
    return make("Cholesky", (as_tensor(input),), None, name, "Cholesky")


def qr(input, full_matrices=False, name=None):  # noqa: A002
    """``(q, r)``: orthonormal ``q`` and upper-triangular ``r`` with ``q r = input``."""
    op = make_op("Qr", (as_tensor(input),), {"full_matrices": bool(full_matrices)}, name, "Qr")
    return op.outputs[0], op.outputs[1]


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """TF1's ``tf.svd``: ``(s, u, v)`` with ``tensor = u diag(s) v^T`` (``s`` descending), or
    ``s`` alone when ``compute_uv=False``."""
    op = make_op("Svd", (as_tensor(tensor),), {"full_matrices": bool(full_matrices),
                                              "compute_uv": bool(compute_uv)}, name, "Svd")
    if not compute_uv:
        return op.outputs[0]
    return op.outputs[0], op.outputs[1], op.outputs[2]


@register_gradient("MatrixInverse")
def _matrix_inverse_grad(op, grad):
    from asyncflow.ops.math import matmul, negative
    inverse = op.outputs[0]
    if op.get_attr("adjoint"):  # B = (A^T)^-1: dA = -B g^T B
        return [negative(matmul(inverse, matmul(grad, inverse, transpose_a=True)))]
    return [negative(matmul(inverse, matmul(grad, inverse, transpose_b=True),
                            transpose_a=True))]


@register_gradient("MatrixDeterminant")
def _matrix_determinant_grad(op, grad):
    from asyncflow.ops.layout import expand_dims
    from asyncflow.ops.math import multiply
    scale = expand_dims(expand_dims(multiply(grad, op.outputs[0]), -1), -1)
    return [multiply(scale, matrix_inverse(op.inputs[0], adjoint=True))]


@register_gradient("Cholesky")
def _cholesky_grad(op, grad):
    """TF1's: with ``P = Phi(L^T g)`` (the lower triangle, half the diagonal),
    ``dA = sym(L^-T P L^-1) / 2``, ``sym(X) = X + X^T``."""
    from asyncflow.ops.diagonal import matrix_band_part, matrix_diag_part, matrix_set_diag
    from asyncflow.ops.layout import transpose
    from asyncflow.ops.math import add, matmul, multiply
    lower = op.outputs[0]
    l_inverse = matrix_inverse(lower)
    middle = matmul(lower, grad, transpose_a=True)
    middle = matrix_set_diag(middle, multiply(matrix_diag_part(middle), 0.5))
    middle = matrix_band_part(middle, -1, 0)
    grad_a = matmul(matmul(l_inverse, middle, transpose_a=True), l_inverse)
    rank = grad_a.shape.ndims
    if rank is None:
        raise ValueError(f"the gradient of Cholesky {op.name} needs a known rank")
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return [multiply(add(grad_a, transpose(grad_a, perm)), 0.5)]
