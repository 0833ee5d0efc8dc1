"""Sparse tensors: ``SparseToDense`` (the op the sampled losses and SparseTensor ops share).

Theory of operation: a sparse value is three dense tensors, ``indices`` (int64 ``[N, rank]``,
in row-major order when an op requires it), ``values`` (``[N]``) and ``dense_shape``
(int64 ``[rank]``). ``SparseToDense`` scatters the values into a tensor of ``output_shape``
filled with ``default_value``; with ``validate_indices`` it fails, as TF1 does, on an index
out of bounds, out of row-major order or repeated (naming the position, never a wrong answer).

Kernels live in ``asyncflow/kernels/sparse_ops.py``.
"""
from __future__ import annotations

from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, make, static_value


def _infer_sparse_to_dense(op):
    indices, shape, values, default = op._inputs
    if not indices.dtype.is_integer or not shape.dtype.is_integer:
        raise TypeError(f"sparse_indices and output_shape must be integers, got "
                        f"{indices.dtype.name} and {shape.dtype.name}")
    if values.dtype is not default.dtype:
        raise TypeError(f"sparse_values ({values.dtype.name}) and default_value "
                        f"({default.dtype.name}) must have one dtype")
    known = static_value(shape)
    if known is not None:
        return [(values.dtype, TensorShape([int(d) for d in list(known.reshape(-1))]))]
    rank = shape.shape[0] if shape.shape.ndims == 1 else None
    return [(values.dtype, TensorShape(None if rank is None else [None] * rank))]


register_op("SparseToDense", infer=_infer_sparse_to_dense)
not_differentiable("SparseToDense")


def sparse_to_dense(sparse_indices, output_shape, sparse_values, default_value=0,
                    validate_indices=True, name=None):
    """A dense tensor of ``output_shape`` holding ``sparse_values`` at ``sparse_indices``.

    Raises:
        InvalidArgumentError: at run time, with ``validate_indices``, on an index out of
            bounds, out of row-major order or repeated.
    """
    sparse_values = as_tensor(sparse_values)
    default_value = as_tensor(default_value, dtype=sparse_values.dtype)
    return make("SparseToDense", (as_tensor(sparse_indices), as_tensor(output_shape),
                                  sparse_values, default_value),
                {"validate_indices": bool(validate_indices)}, name, "SparseToDense")
