"""Sparse tensors: ``SparseTensor``, ``sparse_placeholder`` and the ``sparse_*`` ops.

Theory of operation: a sparse value is three dense tensors, ``indices`` (int64 ``[N, rank]``,
in row-major order when an op requires it), ``values`` (``[N]``) and ``dense_shape``
(int64 ``[rank]``). ``SparseToDense`` scatters the values into a tensor of ``output_shape``
filled with ``default_value``; with ``validate_indices`` it fails, as TF1 does, on an index
out of bounds, out of row-major order or repeated (naming the position, never a wrong answer).

Most ops are compositions: a row-major *linear index* (``indices @ strides``) turns a sparse
tensor into an ``UnsortedSegmentSum`` (repeats add up, differentiable in the values);
``sparse_tensor_dense_matmul`` gathers one row of the dense operand per entry (so its gradient
is an IndexedSlices); ``embedding_lookup_sparse`` looks up every id and sums each row's
weighted embeddings with a sorted segment sum (rows out of order fail as in TF1). ``SparseReorder``, ``SparseReshape`` and ``SparseAdd``
are kernels; ``SparseToDense`` and ``SparseReorder`` have TF1's gradients for their values,
``SparseAdd`` too (``SparseAddGrad``); ``SparseReshape`` needs none (the values pass
through).

Kernels live in ``asyncflow/kernels/sparse_ops.py``.
"""
from __future__ import annotations

import collections

import numpy as np

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.graph import Tensor
from asyncflow.graph.shape import TensorShape
from asyncflow.ops import control_flow
from asyncflow.ops import math as math_ops
from asyncflow.ops import sources
from asyncflow.ops.array import reshape
from asyncflow.ops.construct import as_tensor, make, make_op, static_value
from asyncflow.ops.embedding import dynamic_partition, embedding_lookup
from asyncflow.ops.indexing import gather, segment_sum, unsorted_segment_sum
from asyncflow.ops.layout import concat, expand_dims, stack, transpose
from asyncflow.ops.shapes import shape_from_vector, shape_of
from asyncflow.ops.tiling import one_hot


def _infer_sparse_to_dense(op):
    indices, shape, values, default = op.inputs
    if not indices.dtype.is_integer or not shape.dtype.is_integer:
        raise TypeError(f"sparse_indices and output_shape must be integers, got "
                        f"{indices.dtype.name} and {shape.dtype.name}")
    if values.dtype is not default.dtype:
        raise TypeError(f"sparse_values ({values.dtype.name}) and default_value "
                        f"({default.dtype.name}) must have one dtype")
    known = static_value(shape)
    if known is not None:
        return [(values.dtype, TensorShape([int(d) for d in list(known.reshape(-1))]))]
    if shape.shape.ndims == 1:  # what is known of a computed shape, as TF1's shape function
        return [(values.dtype, shape_from_vector(shape))]
    return [(values.dtype, TensorShape(None))]


register_op("SparseToDense", infer=_infer_sparse_to_dense)


@register_gradient("SparseToDense")
def _sparse_to_dense_grad(op, grad):
    """TF1's: the values' gradient is ``grad`` at their indices (a gather of the flat grad),
    the default value's the sum of ``grad`` elsewhere; a scalar value broadcast to every index
    gets the sum of ``grad`` there."""
    indices, output_shape, values, _ = op.inputs
    flat_grad = reshape(grad, [-1])
    if indices.shape.ndims == 2 and indices.shape[1] is not None:
        shape = math_ops.cast(output_shape, indices.dtype)
        strides = stack([math_ops.reduce_prod(shape[i + 1:]) for i in range(indices.shape[1])])
        linear = math_ops.reduce_sum(math_ops.multiply(indices, strides), axis=1)
    elif indices.shape.ndims in (0, 1):
        linear = reshape(indices, [-1])
    else:
        raise LookupError(f"SparseToDense '{op.name}': the gradient needs the rank of "
                          "sparse_indices to be known")
    at_indices = gather(flat_grad, linear)
    default_grad = math_ops.subtract(math_ops.reduce_sum(grad), math_ops.reduce_sum(at_indices))
    values_grad = (math_ops.reduce_sum(at_indices) if values.shape.ndims == 0
                   else reshape(at_indices, shape_of(values)))
    return [None, None, values_grad, default_grad]


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


# -- SparseTensor --------------------------------------------------------------------------------
class SparseTensorValue(collections.namedtuple("SparseTensorValue",
                                               ["indices", "values", "dense_shape"])):
    """A fetched (or fed) sparse value: three numpy arrays."""


class SparseTensor:
    """A sparse tensor in a graph: ``indices`` int64 ``[N, rank]``, ``values`` ``[N]`` and
    ``dense_shape`` int64 ``[rank]``. Feed it a ``SparseTensorValue`` or a 3-tuple; fetching
    it gives a ``SparseTensorValue``. It does not convert to a dense tensor implicitly (as in
    TF1): use ``sparse_tensor_to_dense``."""

    def __init__(self, indices, values, dense_shape):
        self._indices = _int64(indices)
        self._values = as_tensor(values)
        self._dense_shape = _int64(dense_shape)
        if self._indices.shape.ndims not in (None, 2):
            raise ValueError(f"SparseTensor: indices must be a matrix, got shape "
                             f"{self._indices.shape}")
        if self._values.shape.ndims not in (None, 1):
            raise ValueError(f"SparseTensor: values must be a vector, got shape "
                             f"{self._values.shape}")
        if self._dense_shape.shape.ndims not in (None, 1):
            raise ValueError(f"SparseTensor: dense_shape must be a vector, got shape "
                             f"{self._dense_shape.shape}")
        for what, axis, other in (("values", 0, self._values),
                                  ("dense_shape", 1, self._dense_shape)):
            mine, theirs = self._indices.shape[axis], other.shape[0]
            if mine is not None and theirs is not None and mine != theirs:  # TF1's checks
                raise ValueError(f"SparseTensor: indices of shape {self._indices.shape} do not "
                                 f"fit {what} of shape {other.shape}")

    indices = property(lambda self: self._indices)
    values = property(lambda self: self._values)
    dense_shape = property(lambda self: self._dense_shape)
    dtype = property(lambda self: self._values.dtype)
    graph = property(lambda self: self._values.graph)
    op = property(lambda self: self._values.op)

    @property
    def shape(self):
        """What is statically known of the dense shape, as TF1 reads it
        (``constant_value_as_shape``: a constant, or ``Shape``/``Pack``/``ConcatV2``/slices)."""
        return shape_from_vector(self._dense_shape)

    def get_shape(self):
        return self.shape

    @classmethod
    def from_value(cls, value):
        return cls(*value)

    def __repr__(self):
        return (f"SparseTensor(indices={self._indices.name}, values={self._values.name}, "
                f"dense_shape={self._dense_shape.name})")


def _int64(value):
    """``value`` as an int64 tensor: integers given as numbers become an int64 constant (so
    shape inference sees a constant dense shape, as TF1's does), tensors are cast."""
    if not isinstance(value, Tensor):
        array = np.asarray(value) if isinstance(value, (list, tuple, int, np.ndarray)) else None
        if array is not None and array.dtype.kind in "iu":
            return sources.constant(array.astype(np.int64))
    return math_ops.cast(as_tensor(value), dtypes.int64)


def _static_dims(sp):
    """The dense shape of ``sp`` as a list of ints when it is a constant, else None."""
    known = static_value(sp.dense_shape)
    return None if known is None else [int(d) for d in np.asarray(known).reshape(-1)]


def sparse_placeholder(dtype, shape=None, name=None):
    """A SparseTensor of three placeholders (``shape``: the dense shape, may hold None)."""
    prefix = name or "Placeholder"
    if shape is None:
        rank = None
        dense_shape = sources.placeholder(dtypes.int64, [rank], name=f"{prefix}/shape")
    else:
        dims = shape.as_list() if hasattr(shape, "as_list") else list(shape)
        rank = len(dims)
        if any(d is None for d in dims):
            dense_shape = sources.placeholder(dtypes.int64, [rank], name=f"{prefix}/shape")
        else:
            dense_shape = sources.constant(np.asarray(dims, np.int64), name=f"{prefix}/shape")
    return SparseTensor(sources.placeholder(dtypes.int64, [None, rank], name=f"{prefix}/indices"),
                        sources.placeholder(dtype, [None], name=f"{prefix}/values"), dense_shape)


def _sparse_invariants(value, shape):
    """TF1: a SparseTensor's shape invariant is that of its ``dense_shape`` vector."""
    if shape.ndims != 1:
        raise ValueError(f"while_loop: the shape invariant of a SparseTensor is the shape of "
                         f"its dense_shape, a vector: expected a shape with 1 dimension, got "
                         f"{shape}")
    rank = shape.dims[0]
    return [TensorShape([None, rank]), TensorShape([None]), TensorShape([rank])]


control_flow.register_composite(
    SparseTensor, lambda value: [value.indices, value.values, value.dense_shape],
    lambda value, parts: SparseTensor(*parts), _sparse_invariants)


def sparse_feeds(sparse, value):
    """``[(tensor, array)]`` feeding ``sparse`` with a SparseTensorValue or 3-tuple.

    Raises:
        InvalidArgumentError: when indices, values and dense shape disagree.
    """
    from asyncflow import errors
    try:
        indices, values, dense_shape = value
    except (TypeError, ValueError):
        raise TypeError(f"A SparseTensor is fed a SparseTensorValue or an (indices, values, "
                        f"dense_shape) tuple, got {type(value).__name__}") from None
    indices = np.asarray(indices, np.int64)
    values = np.asarray(values)
    dense_shape = np.asarray(dense_shape, np.int64)
    problem = None
    if indices.ndim != 2:
        problem = f"indices must be a matrix [N, rank], got shape {list(indices.shape)}"
    elif values.ndim != 1 or values.shape[0] != indices.shape[0]:
        problem = (f"values must be a vector of the {indices.shape[0]} entries of indices, got "
                   f"shape {list(values.shape)}")
    elif dense_shape.ndim != 1 or dense_shape.shape[0] != indices.shape[1]:
        problem = (f"dense_shape must have rank {indices.shape[1]} entries (the columns of "
                   f"indices), got {dense_shape.tolist()}")
    elif indices.size and ((indices < 0).any() or (indices >= dense_shape).any()):
        row = int(np.argwhere(((indices < 0) | (indices >= dense_shape)).any(axis=1))[0][0])
        problem = (f"indices[{row}] = {indices[row].tolist()} is out of bounds of dense_shape "
                   f"{dense_shape.tolist()}")
    if problem is not None:
        raise errors.InvalidArgumentError(None, sparse.values.op,
                                          f"SparseTensor {sparse.values.op.name}: {problem}")
    return [(sparse.indices, indices), (sparse.values, values), (sparse.dense_shape, dense_shape)]


def _linear_index(sp):
    """Row-major position of each entry in the dense tensor, and the dense size."""
    shape = sp.dense_shape
    rank = sp.indices.shape[1] if sp.indices.shape.ndims == 2 else None
    if rank is None:
        raise ValueError("this sparse op needs the rank of the SparseTensor to be known")
    strides = stack([math_ops.reduce_prod(shape[i + 1:]) for i in range(int(rank))])
    linear = math_ops.reduce_sum(math_ops.multiply(sp.indices, strides), axis=1)
    return linear, math_ops.reduce_prod(shape)


def _dense_sum(sp):
    """The dense tensor with repeated indices summed (differentiable in the values)."""
    linear, size = _linear_index(sp)
    flat = unsorted_segment_sum(sp.values, linear, size)
    return reshape(flat, sp.dense_shape)


def sparse_tensor_to_dense(sp_input, default_value=0, validate_indices=True, name=None):
    """The dense tensor of ``sp_input`` (indices must be sorted and unique when validated)."""
    return sparse_to_dense(sp_input.indices, sp_input.dense_shape, sp_input.values,
                           default_value=default_value, validate_indices=validate_indices,
                           name=name or "SparseToDense")


def sparse_reduce_sum(sp_input, axis=None, keepdims=False, name=None, reduction_axes=None):
    """Sum of the entries (repeats included) over ``axis`` (all axes by default): dense."""
    axis = reduction_axes if axis is None else axis
    if axis is None and not keepdims:
        return math_ops.reduce_sum(sp_input.values, name=name)
    return math_ops.reduce_sum(_dense_sum(sp_input), axis=axis, keepdims=keepdims, name=name)


def sparse_tensor_dense_matmul(sp_a, b, adjoint_a=False, adjoint_b=False, name=None):
    """``sp_a @ b`` at the cost of the entries: each entry scales a row of ``b``.

    The gradient for ``b`` is an IndexedSlices (a gather of its rows) and for the values a
    dense vector, so a sparse input times a large weight matrix updates only touched rows.
    """
    b = as_tensor(b)
    if adjoint_b:
        b = transpose(b)
    rows, cols = sp_a.indices[:, 0], sp_a.indices[:, 1]
    out_rows = sp_a.dense_shape[0]
    if adjoint_a:
        rows, cols, out_rows = cols, rows, sp_a.dense_shape[1]
    dims = _static_dims(sp_a)
    if dims is not None and len(dims) == 2:  # TF1 checks the shapes when they are known
        if adjoint_a:
            dims = dims[::-1]
        inner = b.shape.dims[0] if b.shape.ndims == 2 else None
        if inner is not None and inner != dims[1]:
            raise ValueError(f"sparse_tensor_dense_matmul{f' {name!r}' if name else ''}: "
                             f"Dimensions must be equal, but are {dims[1]} (the sparse "
                             f"operand{', adjoint' if adjoint_a else ''}) and {inner} (b"
                             f"{', adjoint' if adjoint_b else ''})")
        out_rows = dims[0]  # a constant: the result's static shape knows its rows
    picked = gather(b, cols)
    scaled = math_ops.multiply(picked, expand_dims(math_ops.cast(sp_a.values, b.dtype), 1))
    return unsorted_segment_sum(scaled, rows, out_rows, name=name)


def sparse_reorder(sp_input, name=None):
    """The same SparseTensor with its entries in row-major order (TF1's canonical order)."""
    op = make_op("SparseReorder", (sp_input.indices, sp_input.values, sp_input.dense_shape),
                 None, name, "SparseReorder")
    return SparseTensor(op.outputs[0], op.outputs[1], sp_input.dense_shape)


def sparse_reshape(sp_input, shape, name=None):
    """The SparseTensor with dense shape ``shape`` (one entry may be -1), entries in place.

    Raises:
        ValueError: when both shapes are constants that cannot match (TF1 checks then).
    """
    shape = _int64(shape)
    dims, target = _static_dims(sp_input), static_value(shape)
    if target is not None:
        target = [int(d) for d in np.asarray(target).reshape(-1)]
        if target.count(-1) > 1:
            raise ValueError(f"sparse_reshape: at most one dimension can be inferred (-1), "
                             f"got {target}")
        if dims is not None and -1 not in target and np.prod(dims) != np.prod(target):
            raise ValueError(f"sparse_reshape: cannot reshape a SparseTensor of dense shape "
                             f"{dims} ({int(np.prod(dims))} elements) to {target}")
    op = make_op("SparseReshape", (sp_input.indices, sp_input.dense_shape, shape),
                 None, name, "SparseReshape")
    return SparseTensor(op.outputs[0], sp_input.values, op.outputs[1])


def sparse_retain(sp_input, to_retain):
    """Only the entries where the bool vector ``to_retain`` is True (order kept)."""
    keep = math_ops.cast(as_tensor(to_retain), dtypes.int32)
    indices = dynamic_partition(sp_input.indices, keep, 2)[1]
    values = dynamic_partition(sp_input.values, keep, 2)[1]
    return SparseTensor(indices, values, sp_input.dense_shape)


def sparse_concat(axis, sp_inputs, name=None, expand_nonconcat_dim=False, concat_dim=None):
    """Concatenate SparseTensors along ``axis`` (their other dims must agree), reordered."""
    axis = concat_dim if concat_dim is not None else axis
    if not sp_inputs:
        raise ValueError("sparse_concat: sp_inputs must not be empty")
    offset, indices, shape = None, [], sp_inputs[0].dense_shape
    rank = sp_inputs[0].indices.shape[1]
    if rank is None:
        rank = sp_inputs[0].dense_shape.shape[0]
    if rank is None:
        raise ValueError("sparse_concat: the rank of the SparseTensors must be known")
    if not -int(rank) <= axis < int(rank):
        raise ValueError(f"sparse_concat: axis {axis} is out of range for rank {rank}")
    axis = int(axis) % int(rank)  # TF1 takes a negative axis from the end
    _check_concat_dims(axis, sp_inputs, expand_nonconcat_dim)
    for sp in sp_inputs:
        if offset is None:
            indices.append(sp.indices)
            offset = sp.dense_shape[axis]
        else:
            shift = math_ops.multiply(one_hot(axis, int(rank), dtype=dtypes.int64), offset)
            indices.append(math_ops.add(sp.indices, shift))
            offset = math_ops.add(offset, sp.dense_shape[axis])
        if expand_nonconcat_dim:
            shape = math_ops.maximum(shape, sp.dense_shape)
    total = math_ops.multiply(one_hot(axis, int(rank), dtype=dtypes.int64),
                              math_ops.subtract(offset, shape[axis]))
    merged = SparseTensor(concat(indices, 0), concat([sp.values for sp in sp_inputs], 0),
                          math_ops.add(shape, total))
    return sparse_reorder(merged, name=name)


def _check_concat_dims(axis, sp_inputs, expand_nonconcat_dim):
    """TF1 refuses SparseTensors whose dims other than ``axis`` differ (unless expanded)."""
    shapes = [_static_dims(sp) for sp in sp_inputs]
    if expand_nonconcat_dim or any(dims is None for dims in shapes):
        return
    for dims in shapes[1:]:
        others = [d for k, d in enumerate(dims) if k != axis]
        if len(dims) != len(shapes[0]) or others != [d for k, d in enumerate(shapes[0])
                                                     if k != axis]:
            raise ValueError(f"sparse_concat: the SparseTensors' dense shapes {shapes[0]} and "
                             f"{dims} differ in a dimension other than the concatenation axis "
                             f"{axis} (pass expand_nonconcat_dim=True to take the largest)")


def sparse_add(a, b, threshold=0, thresh=None):
    """``a + b``: a SparseTensor when both are sparse (repeats summed; the sum at an index
    both hold dropped when ``|sum| < threshold``, an entry of one alone kept, as TF1's
    kernel), a dense tensor when one is dense."""
    threshold = thresh if thresh is not None else threshold
    if not isinstance(a, SparseTensor):
        a, b = b, a
    if not isinstance(b, SparseTensor):
        return math_ops.add(_dense_sum(a), as_tensor(b))
    a_dims, b_dims = _static_dims(a), _static_dims(b)
    if a_dims is not None and b_dims is not None and a_dims != b_dims:
        raise ValueError(f"sparse_add: the dense shapes {a_dims} and {b_dims} differ")
    op = make_op("SparseAdd", (a.indices, a.values, a.dense_shape, b.indices, b.values,
                               b.dense_shape, as_tensor(threshold, dtype=a.dtype)),
                 None, None, "SparseAdd")
    return SparseTensor(op.outputs[0], op.outputs[1], op.outputs[2])


def to_indicator(sp_input, vocab_size, name=None):
    """Dense bool ``[..., vocab_size]``: True where a row's sparse values name an id."""
    ids = math_ops.cast(sp_input.values, dtypes.int64)
    indices = concat([sp_input.indices[:, :-1], expand_dims(ids, 1)], 1)
    dims = _static_dims(sp_input)
    if dims is not None and isinstance(vocab_size, (int, np.integer)):
        shape = sources.constant(np.asarray(dims[:-1] + [int(vocab_size)], np.int64))
    else:
        shape = concat([sp_input.dense_shape[:-1],
                        math_ops.cast(as_tensor([vocab_size]), dtypes.int64)], 0)
    return sparse_to_dense(indices, shape, sources.ones_like(ids, dtype=dtypes.bool),
                           default_value=False, validate_indices=False, name=name)


def embedding_lookup_sparse(params, sp_ids, sp_weights, partition_strategy="mod", name=None,
                            combiner="mean", max_norm=None):
    """Per row of ``sp_ids``, combine the embeddings of its ids (TF1's wide-model lookup).

    Args:
        params: an embedding table, a list of shards or a PartitionedVariable.
        sp_ids: int SparseTensor ``[batch, max_ids]`` of ids, its rows in increasing order
            (the order within a row is free), as TF1 requires.
        sp_weights: a float SparseTensor with the same indices, or None (weights 1).
        partition_strategy: ``"mod"`` or ``"div"`` for sharded params.
        name: the name scope.
        combiner: ``"sum"``, ``"mean"`` (weighted mean) or ``"sqrtn"`` (sum over the root of
            the summed squared weights).
        max_norm: clip each looked-up embedding to this norm.

    Returns:
        A dense ``[rows, dim]`` tensor, ``rows`` the last row with an id plus one (rows
        without ids in between, or whose weights sum to zero, are zeros).

    Raises:
        ValueError: on an unknown combiner.
        InvalidArgumentError: at run time when the rows of ``sp_ids`` are not increasing
            (TF1's ``segment ids are not increasing``; ``sparse_reorder`` sorts them).
    """
    if combiner not in ("sum", "mean", "sqrtn"):
        raise ValueError(f"combiner must be one of 'mean', 'sqrtn' or 'sum', got {combiner!r}")
    graph = sp_ids.graph
    with graph.name_scope(name or "embedding_lookup_sparse"):
        # TF1 sums each row's entries with a sorted segment sum: rows out of order fail
        # with its "segment ids are not increasing", never a silently reordered answer.
        segments = sp_ids.indices[:, 0]
        embeddings = embedding_lookup(params, sp_ids.values, partition_strategy=partition_strategy,
                                      max_norm=max_norm)
        if sp_weights is None:
            weights = sources.ones_like(sp_ids.values, dtype=embeddings.dtype)
        else:
            weights = math_ops.cast(sp_weights.values, embeddings.dtype)
        summed = segment_sum(math_ops.multiply(embeddings, expand_dims(weights, 1)), segments)
        if combiner == "sum":
            return summed
        if combiner == "mean":
            total = segment_sum(weights, segments)
        else:
            total = math_ops.sqrt(segment_sum(math_ops.square(weights), segments))
        # TF1's div_no_nan: a row whose weights sum to zero (or that has no ids) is zeros.
        empty = math_ops.equal(total, sources.zeros_like(total))
        safe = math_ops.where(empty, sources.ones_like(total), total)
        quotient = math_ops.divide(summed, expand_dims(safe, 1))
        return math_ops.multiply(quotient, expand_dims(
            math_ops.cast(math_ops.logical_not(empty), quotient.dtype), 1))


# -- op registrations of the kernels above ---------------------------------------------------------
def _infer_reorder(op):
    indices, values, _ = op.inputs
    return [(dtypes.int64, indices.shape), (values.dtype, values.shape)]


def _infer_reshape(op):
    indices, _, new_shape = op.inputs
    rank = new_shape.shape[0] if new_shape.shape.ndims == 1 else None
    return [(dtypes.int64, TensorShape([indices.shape[0] if indices.shape.ndims == 2 else None,
                                        rank])), (dtypes.int64, TensorShape([rank]))]


def _infer_sparse_add(op):
    a_indices, a_values, a_shape = op.inputs[:3]
    if a_values.dtype is not op.inputs[4].dtype:
        raise TypeError(f"both SparseTensors must have one dtype, got {a_values.dtype.name} "
                        f"and {op.inputs[4].dtype.name}")
    rank = a_indices.shape[1] if a_indices.shape.ndims == 2 else None
    return [(dtypes.int64, TensorShape([None, rank])), (a_values.dtype, TensorShape([None])),
            (dtypes.int64, a_shape.shape)]


register_op("SparseReorder", infer=_infer_reorder)
register_op("SparseReshape", infer=_infer_reshape)
register_op("SparseAdd", infer=_infer_sparse_add)
not_differentiable("SparseReshape")


def _infer_sparse_add_grad(op):
    grad, a_indices, b_indices, _ = op.inputs

    def rows(indices):
        return TensorShape([indices.shape[0] if indices.shape.ndims == 2 else None])
    return [(grad.dtype, rows(a_indices)), (grad.dtype, rows(b_indices))]


register_op("SparseAddGrad", infer=_infer_sparse_add_grad)
not_differentiable("SparseAddGrad")


@register_gradient("SparseAdd")
def _sparse_add_grad(op, indices_grad, values_grad, shape_grad):
    """TF1's: each entry of ``a`` and ``b`` gets the gradient of the sum's entry at its index
    (zero when that entry fell under the threshold)."""
    a_indices, b_indices = op.inputs[0], op.inputs[3]
    grads = make_op("SparseAddGrad", (values_grad, a_indices, b_indices, op.outputs[0]), None,
                    None, "SparseAddGrad").outputs
    return [None, grads[0], None, None, grads[1], None, None]


@register_gradient("SparseReorder")
def _sparse_reorder_grad(op, indices_grad, values_grad):
    """TF1's: reorder the entry numbers too, and send each output's gradient back to its entry."""
    indices, values, dense_shape = op.inputs
    count = shape_of(values)[0]
    entries = sources.range(0, count)
    order = make_op("SparseReorder", (indices, entries, dense_shape), None, None,
                    "SparseReorder").outputs[1]
    return [None, unsorted_segment_sum(values_grad, order, count), None]
