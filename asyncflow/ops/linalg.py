"""Tensor contractions: ``einsum`` (an ``Einsum`` op) and ``tensordot`` (built from ops).

``Einsum`` takes the equation as an attr and any number of operands; its kernel is
``xp.einsum``. Its gradient for operand ``i`` is another einsum: the output gradient
contracted with the other operands down to the labels of operand ``i`` that appear anywhere
else, then broadcast over the labels that only operand ``i`` has (they were summed away),
summed back over the dimensions operand ``i`` broadcast (a size 1 against a larger one, in
``...`` or a label), and put on the diagonals of a label repeated in operand ``i`` (an
einsum with identity matrices). ``...`` is first spelled out as letters of its own, which
needs the ranks of the operands that hold it.

``tensordot`` is TF1's composition: transpose both operands so the contracted axes meet,
reshape to matrices, ``matmul``, reshape back; its gradient comes from those ops.
"""
from __future__ import annotations

import string

import numpy as np

from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.array import rank as array_rank, reshape, shape
from asyncflow.ops.construct import as_tensor, graph_of, make, operands
from asyncflow.ops.indexing import gather
from asyncflow.ops.layout import concat, expand_dims, squeeze, transpose
from asyncflow.ops.math import add, cast, equal, matmul
from asyncflow.ops.sources import ones
from asyncflow.ops.sources import range as af_range


def _parse(equation, count):
    """``(input subscripts, output subscripts)`` of an einsum equation (numpy's rules)."""
    equation = equation.replace(" ", "")
    if "->" in equation:
        left, output = equation.split("->")
    else:
        left = equation
        letters = left.replace(",", "").replace("...", "")
        output = ("..." if "..." in left else "") + \
            "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    inputs = left.split(",")
    if len(inputs) != count:
        raise ValueError(f"einsum: equation {equation!r} names {len(inputs)} operands, "
                         f"{count} given")
    for subscripts in inputs + [output]:
        letters = subscripts.replace("...", "")
        if not letters.isalpha() and letters:
            raise ValueError(f"einsum: invalid subscripts {subscripts!r} in {equation!r}")
    return inputs, output


def _infer_einsum(op):
    tensors = op.inputs
    inputs, output = _parse(op.get_attr("equation"), len(tensors))
    dtype = tensors[0].dtype
    for tensor in tensors[1:]:
        if tensor.dtype is not dtype:
            raise TypeError(f"einsum operands must share a dtype, got {dtype.name} and "
                            f"{tensor.dtype.name}")
    explicit = _explicit(op.get_attr("equation"), [t.shape for t in tensors])
    if explicit is None:
        return [(dtype, TensorShape(None if "..." in output else [None] * len(output)))]
    inputs, output = explicit
    sizes = {}
    for subscripts, tensor in zip(inputs, tensors):
        if tensor.shape.ndims is None:
            continue
        if tensor.shape.ndims != len(subscripts):
            raise ValueError(f"einsum: operand {tensor.name} has rank {tensor.shape.ndims} but "
                             f"subscripts {subscripts!r}")
        for label, dim in zip(subscripts, tensor.shape.as_list()):
            known = sizes.get(label)
            if dim is not None and known is not None and known != dim and 1 not in (dim, known):
                raise ValueError(f"einsum: label {label!r} has sizes {known} and {dim}")
            if dim is not None and (known is None or known == 1):
                sizes[label] = dim
    return [(dtype, TensorShape([sizes.get(label) for label in output]))]


register_op("Einsum", infer=_infer_einsum)


def einsum(equation, *inputs, **kwargs):
    """Einstein summation (TF1 ``tf.einsum``), e.g. ``einsum("ij,jk->ik", a, b)``.

    Args:
        equation: subscripts in numpy's notation (``"->"`` optional).
        *inputs: the operands (one dtype).
        name: op name.

    Raises:
        ValueError: an equation that does not fit the operands' ranks or sizes.
    """
    name = kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"einsum: unexpected arguments {sorted(kwargs)}")
    tensors = operands(inputs, "Einsum")
    _parse(equation, len(tensors))
    return make("Einsum", tuple(tensors), {"equation": equation.replace(" ", "")}, name,
                "Einsum")


@register_gradient("Einsum")
def _einsum_grad(op, grad):
    tensors = op.inputs
    explicit = _explicit(op.get_attr("equation"), [t.shape for t in tensors])
    if explicit is None:
        raise LookupError(f"Einsum '{op.name}': the gradient of an equation with '...' needs "
                          "the ranks of the operands that '...' stands in")
    inputs, output = explicit
    grads = []
    for index, subscripts in enumerate(inputs):
        x = tensors[index]
        unique = "".join(dict.fromkeys(subscripts))
        first = [subscripts.index(label) for label in unique]
        others = [s for k, s in enumerate(inputs) if k != index]
        elsewhere = set(output).union(*others)
        kept = "".join(label for label in unique if label in elsewhere)
        partial = make("Einsum", (grad,) + tuple(t for k, t in enumerate(tensors) if k != index),
                       {"equation": ",".join([output] + others) + "->" + kept}, None,
                       "Einsum_grad")
        dims = x.shape.dims
        unique_shape = None
        if kept != unique or _may_broadcast(partial, kept, dims, subscripts):
            unique_shape = shape(x) if unique == subscripts else gather(shape(x), first)
        if kept != unique:  # labels only this operand has were summed: broadcast back
            partial = make("Einsum", (partial, ones(unique_shape, dtype=x.dtype)),
                           {"equation": f"{kept},{unique}->{unique}"}, None, "Einsum_grad")
        if _may_broadcast(partial, unique, dims, subscripts):
            partial = make("SumToShape", (partial, unique_shape), None, None, "SumToShape")
        if unique != subscripts:  # a label repeated in this operand (a diagonal)
            partial = _to_diagonal(partial, unique, subscripts, x, set(op.get_attr("equation")))
        grads.append(partial)
    return grads


def _explicit(equation, shapes):
    """``(input subscripts, output subscripts)`` with ``...`` replaced by letters of their own
    (numpy's broadcasting: right-aligned, the output gets the longest); None when an operand
    holding ``...`` has an unknown rank."""
    inputs, output = _parse(equation, len(shapes))
    if "..." not in equation:
        return inputs, output
    ranks = []
    for subscripts, static in zip(inputs, shapes):
        if "..." not in subscripts:
            ranks.append(0)
        elif static.ndims is None:
            return None
        else:
            rank = static.ndims - len(subscripts.replace("...", ""))
            if rank < 0:
                raise ValueError(f"einsum: operand of rank {static.ndims} is too small for "
                                 f"subscripts {subscripts!r} in {equation!r}")
            ranks.append(rank)
    width = max(ranks)
    fresh = [c for c in string.ascii_letters if c not in equation][:width]
    if len(fresh) < width:
        raise ValueError(f"einsum: too many labels in {equation!r}")
    inputs = [s.replace("...", "".join(fresh[width - rank:])) for s, rank in zip(inputs, ranks)]
    return inputs, output.replace("...", "".join(fresh))


def _may_broadcast(partial, labels, dims, subscripts):
    """Whether ``partial`` (with ``labels``) may be larger than the operand (``dims`` for
    ``subscripts``) along a label the operand broadcast (a size 1 against a larger one)."""
    if dims is None or partial.shape.ndims is None:
        return True
    for label, have in zip(labels, partial.shape.dims):
        want = dims[subscripts.index(label)]
        if want is None or (want == 1 and have != 1):
            return True
    return False


def _to_diagonal(partial, unique, subscripts, x, used):
    """``partial`` (labels ``unique``) placed on the diagonals of ``x``'s ``subscripts``:
    each repeat of a label gets a letter of its own, tied to the first by an identity."""
    fresh = iter(c for c in string.ascii_letters if c not in used and c not in subscripts)
    renamed, seen, eyes, eye_subscripts = [], set(), [], []
    for position, label in enumerate(subscripts):
        if label not in seen:
            seen.add(label)
            renamed.append(label)
            continue
        letter = next(fresh)
        renamed.append(letter)
        eye_subscripts.append(label + letter)
        eyes.append(_eye(x, subscripts.index(label)))
    equation = ",".join([unique] + eye_subscripts) + "->" + "".join(renamed)
    return make("Einsum", (partial,) + tuple(eyes), {"equation": equation}, None, "Einsum_grad")


def _eye(x, axis):
    """An identity matrix of ``x``'s dtype, as large as ``x``'s dimension ``axis``."""
    size = x.shape.dims[axis] if x.shape.ndims is not None else None
    if size is not None:
        return as_tensor(np.eye(size, dtype=x.dtype.np))
    index = af_range(gather(shape(x), axis))
    return cast(equal(expand_dims(index, 1), expand_dims(index, 0)), x.dtype)


def tensordot(a, b, axes, name=None):
    """Contract ``a``'s and ``b``'s ``axes`` (TF1 ``tf.tensordot``).

    Args:
        a, b: tensors of one dtype with known ranks.
        axes: an int N (the last N axes of ``a`` with the first N of ``b``) or a pair of
            axis lists.
        name: name scope.
    """
    a, b = operands((a, b), "Tensordot")
    if a.shape.ndims is None or b.shape.ndims is None:
        raise ValueError("tensordot: both operands need a known rank")
    rank_a, rank_b = a.shape.ndims, b.shape.ndims
    if isinstance(axes, (int, np.integer)):
        if axes < 0 or axes > min(rank_a, rank_b):
            raise ValueError(f"tensordot: axes={axes} must be in [0, {min(rank_a, rank_b)}]")
        axes_a, axes_b = list(range(rank_a - axes, rank_a)), list(range(axes))
    else:
        axes_a, axes_b = axes
        axes_a = [axes_a] if isinstance(axes_a, (int, np.integer)) else list(axes_a)
        axes_b = [axes_b] if isinstance(axes_b, (int, np.integer)) else list(axes_b)
        axes_a = [x % rank_a for x in axes_a]
        axes_b = [x % rank_b for x in axes_b]
        if len(axes_a) != len(axes_b):
            raise ValueError(f"tensordot: {len(axes_a)} axes of a but {len(axes_b)} of b")
    free_a = [k for k in range(rank_a) if k not in axes_a]
    free_b = [k for k in range(rank_b) if k not in axes_b]
    dims_a, dims_b = a.shape.as_list(), b.shape.as_list()
    for x, y in zip(axes_a, axes_b):
        if dims_a[x] is not None and dims_b[y] is not None and dims_a[x] != dims_b[y]:
            raise ValueError(f"tensordot: contracted dims differ: a[{x}]={dims_a[x]}, "
                             f"b[{y}]={dims_b[y]}")
    with graph_of([a]).name_scope(name or "Tensordot"):
        out_dims = [dims_a[k] for k in free_a] + [dims_b[k] for k in free_b]
        matrix_a = _to_matrix(a, free_a, axes_a, transpose, reshape, contract_last=True)
        matrix_b = _to_matrix(b, free_b, axes_b, transpose, reshape, contract_last=False)
        product = matmul(matrix_a, matrix_b)
        if all(d is not None for d in out_dims):
            return reshape(product, out_dims)
        dyn = concat([gather(shape(a), free_a), gather(shape(b), free_b)], 0) if \
            free_a or free_b else as_tensor(np.zeros([0], np.int32))
        out = reshape(product, dyn)
        out.set_shape(out_dims)
        return out


def _to_matrix(x, free, contracted, transpose, reshape, contract_last):
    """``x`` transposed and reshaped to ``[free, contracted]`` (or its transpose)."""
    order = free + contracted if contract_last else contracted + free
    if order != list(range(len(order))):
        x = transpose(x, order)
    dims = x.shape.as_list()
    n_free = len(free)
    free_dims = dims[:n_free] if contract_last else dims[len(contracted):]
    contracted_dims = dims[n_free:] if contract_last else dims[:len(contracted)]
    if all(d is not None for d in dims):
        rows = int(np.prod(free_dims, dtype=np.int64))
        cols = int(np.prod(contracted_dims, dtype=np.int64))
        return reshape(x, [rows, cols] if contract_last else [cols, rows])
    if contract_last:
        cols = int(np.prod(contracted_dims)) if None not in contracted_dims else -1
        return reshape(x, [-1, cols] if cols != -1 else [int(np.prod(free_dims)), -1])
    rows = int(np.prod(contracted_dims)) if None not in contracted_dims else -1
    return reshape(x, [rows, -1] if rows != -1 else [-1, int(np.prod(free_dims))])


__all__ = ["einsum", "tensordot"]


def matrix_transpose(a, name="matrix_transpose", conjugate=False):
    """TF1's ``tf.matrix_transpose`` (``tf.linalg.matrix_transpose``, ``tf.linalg.transpose``):
    the last two dims swapped, for a tensor of rank 2 or more (of unknown rank too).

    Raises:
        ValueError: for a known rank under 2.
    """
    a = as_tensor(a)
    del conjugate  # real dtypes only: the conjugate is the tensor itself
    with graph_of((a,)).name_scope(name or "matrix_transpose"):
        ndims = a.shape.ndims
        if ndims is not None:
            if ndims < 2:
                raise ValueError(f"matrix_transpose: the input must have rank at least 2, got "
                                 f"shape {a.shape}")
            return transpose(a, list(range(ndims - 2)) + [ndims - 1, ndims - 2])
        last = add(array_rank(a), -1)
        perm = concat([af_range(add(last, -1)), expand_dims(last, 0),
                       expand_dims(add(last, -1), 0)], 0)
        return transpose(a, perm)


def matvec(a, b, transpose_a=False, adjoint_a=False, a_is_sparse=False, b_is_sparse=False,
           name=None):
    """TF1's ``tf.linalg.matvec``: ``matmul(a, b[..., None])[..., 0]`` (``adjoint_a`` is
    ``transpose_a`` for real tensors; the sparsity hints change nothing, as TF1's CPU)."""
    del a_is_sparse, b_is_sparse
    a, b = operands((a, b), "MatVec")
    with graph_of((a, b)).name_scope(name or "MatVec"):
        product = matmul(a, expand_dims(b, -1), transpose_a=bool(transpose_a or adjoint_a))
        return squeeze(product, [-1])
