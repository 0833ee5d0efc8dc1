"""TF1's linear solves on the last two axes, batched over the leading ones:
``tf.matrix_solve`` (``tf.linalg.solve``), ``tf.matrix_triangular_solve``
(``tf.linalg.triangular_solve``) and ``tf.cholesky_solve`` (``tf.linalg.cholesky_solve``,
TF1's two triangular solves), float32 and float64, with TF1's gradients (``MatrixSolve``'s and
``MatrixTriangularSolve``'s: ``db = solve(A^T, g)``, ``dA = -db c^T``, banded to ``A``'s
triangle for the triangular one). ``matrix`` and ``rhs`` have the same batch dimensions (TF2's
broadcasting of a triangular solve's batch is not provided). A singular matrix fails
``MatrixSolve``'s run with TF1's InvalidArgumentError naming the op.

Kernels live in ``asyncflow/kernels/matrix_solve.py``.
"""
from __future__ import annotations

from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, make


def _infer_solve(op):
    a, b = op.inputs
    for what, t in (("matrix", a), ("rhs", b)):
        if t.dtype.name not in ("float32", "float64"):
            raise TypeError(f"{op.type} '{op.name}': {what} must be float32 or float64, got "
                            f"{t.dtype.name}")
    if a.dtype != b.dtype:
        raise TypeError(f"{op.type} '{op.name}': rhs has type {b.dtype.name} that does not "
                        f"match matrix's {a.dtype.name}")
    if a.shape.ndims is not None and a.shape.ndims < 2:
        raise ValueError(f"{op.type} '{op.name}': matrix must be at least 2-D, got shape "
                         f"{a.shape}")
    if b.shape.ndims is not None and b.shape.ndims < 2:
        raise ValueError(f"{op.type} '{op.name}': rhs must be at least 2-D, got shape "
                         f"{b.shape}")
    if a.shape.ndims is None or b.shape.ndims is None:
        return [(a.dtype, TensorShape(None) if b.shape.ndims is None else b.shape)]
    m, n = a.shape.dims[-2:]
    if m is not None and n is not None and m != n:
        raise ValueError(f"{op.type} '{op.name}': matrix must be square, got shape {a.shape}")
    if a.shape.ndims != b.shape.ndims:
        raise ValueError(f"{op.type} '{op.name}': matrix and rhs must have the same rank, got "
                         f"shapes {a.shape} and {b.shape}")
    size = m if m is not None else n
    rows = b.shape.dims[-2]
    if size is not None and rows is not None and size != rows:
        raise ValueError(f"{op.type} '{op.name}': matrix of shape {a.shape} and rhs of shape "
                         f"{b.shape} have different row counts")
    batch = TensorShape(a.shape.dims[:-2]).merge_with(TensorShape(b.shape.dims[:-2]))
    return [(a.dtype, TensorShape(list(batch.dims) + [size if size is not None else rows,
                                                      b.shape.dims[-1]]))]


register_op("MatrixSolve", infer=_infer_solve)
register_op("MatrixTriangularSolve", infer=_infer_solve)


def matrix_solve(matrix, rhs, adjoint=False, name=None):
    """TF1's ``tf.matrix_solve``: ``x`` with ``matrix x = rhs`` (``matrix^T x = rhs`` for
    ``adjoint``)."""
    return make("MatrixSolve", (as_tensor(matrix), as_tensor(rhs)), {"adjoint": bool(adjoint)},
                name, "MatrixSolve")


def matrix_triangular_solve(matrix, rhs, lower=True, adjoint=False, name=None):
    """TF1's ``tf.matrix_triangular_solve``: the solve reading only ``matrix``'s lower (or
    upper) triangle, its op inside a ``triangular_solve`` (or ``name``) scope as
    ``tf.compat.v1``'s."""
    from asyncflow.graph.graph import get_default_graph
    with get_default_graph().name_scope(name or "triangular_solve"):
        return _triangular(matrix, rhs, lower, adjoint)


def _triangular(matrix, rhs, lower, adjoint):
    return make("MatrixTriangularSolve", (as_tensor(matrix), as_tensor(rhs)),
                {"lower": bool(lower), "adjoint": bool(adjoint)}, None, "MatrixTriangularSolve")


def cholesky_solve(chol, rhs, name=None):
    """TF1's ``tf.cholesky_solve``: ``x`` with ``chol chol^T x = rhs`` for ``chol`` the lower
    Cholesky factor, as TF1's two triangular solves under ``cholesky_solve``."""
    from asyncflow.graph.graph import get_default_graph
    with get_default_graph().name_scope(name or "cholesky_solve"):
        y = _triangular(chol, rhs, lower=True, adjoint=False)
        return _triangular(chol, y, lower=True, adjoint=True)


def _solve_grad(op, grad, solve_b):
    from asyncflow.ops.math import matmul, negative
    c = op.outputs[0]
    grad_b = solve_b(grad)
    if op.get_attr("adjoint"):
        return negative(matmul(c, grad_b, transpose_b=True)), grad_b
    return negative(matmul(grad_b, c, transpose_b=True)), grad_b


@register_gradient("MatrixSolve")
def _matrix_solve_grad(op, grad):
    adjoint = op.get_attr("adjoint")
    grad_a, grad_b = _solve_grad(op, grad, lambda g: matrix_solve(op.inputs[0], g,
                                                                  adjoint=not adjoint))
    return [grad_a, grad_b]


@register_gradient("MatrixTriangularSolve")
def _matrix_triangular_solve_grad(op, grad):
    from asyncflow.ops.diagonal import matrix_band_part
    lower, adjoint = op.get_attr("lower"), op.get_attr("adjoint")
    grad_a, grad_b = _solve_grad(op, grad, lambda g: matrix_triangular_solve(
        op.inputs[0], g, lower=lower, adjoint=not adjoint))
    grad_a = matrix_band_part(grad_a, -1, 0) if lower else matrix_band_part(grad_a, 0, -1)
    return [grad_a, grad_b]
