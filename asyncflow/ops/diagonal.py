"""Diagonals and bands of matrices: TF1's ``tf.matrix_diag``, ``tf.matrix_diag_part``,
``tf.matrix_set_diag``, ``tf.matrix_band_part`` (primitives), and ``tf.eye``, ``tf.diag``,
``tf.diag_part``, ``tf.trace`` (compositions of them, as TF1 writes them).

The primitives work on the last two axes, batched over the leading ones; a non-square matrix
has ``min(M, N)`` diagonal entries. Their gradients are TF1's: a diagonal's gradient is the
incoming gradient's diagonal and back; a band's is the same band of the incoming gradient.
``matrix_band_part``'s ``num_lower``/``num_upper`` (negative: keep that whole triangle) are
attributes: TF1 takes tensors, and a constant one is accepted.

Kernels live in ``asyncflow/kernels/diagonal.py``.
"""
from __future__ import annotations

import numbers

from asyncflow import dtypes
from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.array import reshape
from asyncflow.ops.construct import ANY, NUMERIC, as_tensor, check_dtype, graph_of, make
from asyncflow.ops.construct import static_value


def _check_rank(op, tensor, least, what):
    if tensor.shape.ndims is not None and tensor.shape.ndims < least:
        raise ValueError(f"{op.type} '{op.name}': {what} must be at least {least}-D, got shape "
                         f"{tensor.shape}")


def _infer_matrix_diag(op):
    d = op.inputs[0]
    check_dtype(op.type, d, ANY, "diagonal")
    _check_rank(op, d, 1, "diagonal")
    if d.shape.ndims is None:
        return [(d.dtype, TensorShape(None))]
    return [(d.dtype, TensorShape(list(d.shape.dims) + [d.shape.dims[-1]]))]


def _infer_matrix_diag_part(op):
    x = op.inputs[0]
    _check_rank(op, x, 2, "input")
    if x.shape.ndims is None:
        return [(x.dtype, TensorShape(None))]
    m, n = x.shape.dims[-2:]
    k = None if m is None or n is None else min(m, n)
    return [(x.dtype, TensorShape(list(x.shape.dims[:-2]) + [k]))]


def _infer_matrix_set_diag(op):
    x, d = op.inputs
    _check_rank(op, x, 2, "input")
    _check_rank(op, d, 1, "diagonal")
    if x.dtype != d.dtype:
        raise TypeError(f"{op.type} '{op.name}': input and diagonal must have the same dtype, "
                        f"got {x.dtype.name} and {d.dtype.name}")
    if x.shape.ndims is not None and d.shape.ndims is not None:
        expected = _infer_matrix_diag_part(op)[0][1]
        if not expected.is_compatible_with(d.shape):
            raise ValueError(f"{op.type} '{op.name}': diagonal must have shape {expected}, got "
                             f"{d.shape}")
    return [(x.dtype, x.shape)]


def _infer_band(op):
    x = op.inputs[0]
    _check_rank(op, x, 2, "input")
    if x.shape.ndims is not None:  # TF1 refuses a band wider than the matrix
        for what, count, dim in (("num_lower", op.get_attr("num_lower"), x.shape.dims[-2]),
                                 ("num_upper", op.get_attr("num_upper"), x.shape.dims[-1])):
            if dim is not None and count > dim:
                raise ValueError(f"{op.type} '{op.name}': {what} must be negative or at most "
                                 f"{dim}, got {count}")
    return [(x.dtype, x.shape)]


register_op("MatrixDiag", infer=_infer_matrix_diag)
register_op("MatrixDiagPart", infer=_infer_matrix_diag_part)
register_op("MatrixSetDiag", infer=_infer_matrix_set_diag)
register_op("MatrixBandPart", infer=_infer_band)


def matrix_diag(diagonal, name=None):
    """Batched diagonal matrices ``[..., N, N]`` from ``diagonal`` ``[..., N]``.

    Raises:
        ValueError: for a scalar ``diagonal``.
    """
    return make("MatrixDiag", (as_tensor(diagonal),), None, name, "MatrixDiag")


def matrix_diag_part(input, name=None):  # noqa: A002 - TF1's argument name
    """The diagonals ``[..., min(M, N)]`` of ``input`` ``[..., M, N]``.

    Raises:
        ValueError: for an input of rank below 2.
    """
    return make("MatrixDiagPart", (as_tensor(input),), None, name, "MatrixDiagPart")


def matrix_set_diag(input, diagonal, name=None):  # noqa: A002
    """``input`` with its diagonals replaced by ``diagonal``.

    Raises:
        ValueError, TypeError: for mismatched ranks, shapes or dtypes.
    """
    return make("MatrixSetDiag", (as_tensor(input), as_tensor(diagonal)), None, name,
                "MatrixSetDiag")


def _band_count(value, what):
    if hasattr(value, "op"):
        constant = static_value(value)
        if constant is None:
            raise ValueError(f"matrix_band_part: {what} must be a constant")
        value = constant
    if hasattr(value, "ndim") and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"matrix_band_part: {what} must be a scalar integer, got {value!r}")
    return int(value)


def matrix_band_part(input, num_lower, num_upper, name=None):  # noqa: A002
    """Zero everything outside the band of ``num_lower`` subdiagonals and ``num_upper``
    superdiagonals (a negative count keeps that whole triangle).

    Raises:
        ValueError: for an input of rank below 2 or counts that are not constant.
    """
    attrs = {"num_lower": _band_count(num_lower, "num_lower"),
             "num_upper": _band_count(num_upper, "num_upper")}
    return make("MatrixBandPart", (as_tensor(input),), attrs, name, "MatrixBandPart")


@register_gradient("MatrixDiag")
def _matrix_diag_grad(op, grad):
    return [matrix_diag_part(grad)]


@register_gradient("MatrixDiagPart")
def _matrix_diag_part_grad(op, grad):
    from asyncflow.ops.sources import zeros_like
    return [matrix_set_diag(zeros_like(op.inputs[0]), grad)]


@register_gradient("MatrixSetDiag")
def _matrix_set_diag_grad(op, grad):
    from asyncflow.ops.sources import zeros_like
    return [matrix_set_diag(grad, zeros_like(op.inputs[1])), matrix_diag_part(grad)]


@register_gradient("MatrixBandPart")
def _matrix_band_part_grad(op, grad):
    return [matrix_band_part(grad, op.get_attr("num_lower"), op.get_attr("num_upper"))]


# -- compositions -----------------------------------------------------------------------------
def eye(num_rows, num_columns=None, batch_shape=None, dtype=dtypes.float32, name=None):
    """TF1's ``tf.eye``: identity matrices ``batch_shape + [num_rows, num_columns]``.

    Raises:
        ValueError: for a negative size.
    """
    from asyncflow.ops.sources import ones, zeros
    sizes = [num_rows, num_rows if num_columns is None else num_columns]
    if any(isinstance(s, numbers.Integral) and s < 0 for s in sizes):
        raise ValueError(f"eye: sizes must be non-negative, got {sizes}")
    batch = [] if batch_shape is None else list(batch_shape)
    dtype = dtypes.as_dtype(dtype)
    with graph_of([s for s in sizes + batch if hasattr(s, "op")]).name_scope(name or "eye"):
        if num_columns is None or sizes[0] is sizes[1]:
            return matrix_diag(ones(batch + [sizes[0]], dtype))
        if all(isinstance(s, numbers.Integral) for s in sizes):
            diagonal = min(sizes)
        else:
            from asyncflow.ops.math import minimum
            diagonal = minimum(sizes[0], sizes[1])
        return matrix_set_diag(zeros(batch + sizes, dtype), ones(batch + [diagonal], dtype))


def _flat_size(tensor, op_name):
    if tensor.shape.ndims is None:
        raise ValueError(f"{op_name}: the input's rank must be known")
    from asyncflow.ops.shapes import dims_of, dims_product
    dims = dims_of(tensor)
    return dims, dims_product(dims)


def diag(diagonal, name=None):
    """TF1's ``tf.diag``: ``output[i1..ik, i1..ik] = diagonal[i1..ik]``, rank ``2k``.

    Raises:
        ValueError: for a scalar or unknown-rank ``diagonal``.
    """
    d = as_tensor(diagonal)
    check_dtype("diag", d, NUMERIC, "diagonal")
    if d.shape.ndims == 0:
        raise ValueError("diag: diagonal must be at least 1-D, got a scalar")
    with graph_of((d,)).name_scope(name or "Diag"):
        dims, count = _flat_size(d, "diag")
        from asyncflow.ops.shapes import dims_vector
        return reshape(matrix_diag(reshape(d, [count])), dims_vector(dims + dims))


def diag_part(input, name=None):  # noqa: A002
    """TF1's ``tf.diag_part``: the inverse of ``diag`` (input shape ``s + s``).

    Raises:
        ValueError: for an odd rank or halves that differ.
    """
    x = as_tensor(input)
    check_dtype("diag_part", x, NUMERIC, "input")
    rank = x.shape.ndims
    if rank is not None and (rank == 0 or rank % 2):
        raise ValueError(f"diag_part: input must have an even, nonzero rank, got shape {x.shape}")
    if rank is not None and not TensorShape(x.shape.dims[:rank // 2]).is_compatible_with(
            TensorShape(x.shape.dims[rank // 2:])):
        raise ValueError(f"diag_part: input's two halves must have the same shape, got {x.shape}")
    with graph_of((x,)).name_scope(name or "DiagPart"):
        dims, _ = _flat_size(x, "diag_part")
        from asyncflow.ops.shapes import dims_product, dims_vector
        half = dims[:rank // 2]
        count = dims_product(half)
        return reshape(matrix_diag_part(reshape(x, dims_vector([count, count]))),
                       dims_vector(half))


def trace(x, name=None):
    """TF1's ``tf.trace``: the sum of each matrix's diagonal (the last two axes).

    Raises:
        ValueError: for an input of rank below 2.
    """
    from asyncflow.ops.math import reduce_sum
    x = as_tensor(x)
    check_dtype("trace", x, NUMERIC, "x")
    if x.shape.ndims is not None and x.shape.ndims < 2:
        raise ValueError(f"trace: x must be at least 2-D, got shape {x.shape}")
    with graph_of((x,)).name_scope(name or "Trace"):
        return reduce_sum(matrix_diag_part(x), axis=-1)
