"""Tensor contractions: ``einsum`` (an ``Einsum`` op) and ``tensordot`` (built from ops).

``Einsum`` takes the equation as an attr and any number of operands; its kernel is
``xp.einsum``. Its gradient for operand ``i`` is another einsum: the output gradient
contracted with the other operands down to the labels of operand ``i`` that appear anywhere
else, then broadcast over the labels that only operand ``i`` has (they were summed away).
Repeated labels inside one operand (a diagonal) and ``...`` run forward but have no gradient.

``tensordot`` is TF1's composition: transpose both operands so the contracted axes meet,
reshape to matrices, ``matmul``, reshape back; its gradient comes from those ops.
"""
from __future__ import annotations

import numpy as np

from asyncflow.graph import register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.array import reshape, shape
from asyncflow.ops.construct import as_tensor, graph_of, make, operands
from asyncflow.ops.indexing import gather
from asyncflow.ops.layout import concat, expand_dims, transpose
from asyncflow.ops.math import matmul, multiply
from asyncflow.ops.sources import ones_like


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
    tensors = op._inputs
    inputs, output = _parse(op.get_attr("equation"), len(tensors))
    dtype = tensors[0].dtype
    for tensor in tensors[1:]:
        if tensor.dtype is not dtype:
            raise TypeError(f"einsum operands must share a dtype, got {dtype.name} and "
                            f"{tensor.dtype.name}")
    if "..." in output:
        return [(dtype, TensorShape(None))]
    sizes = {}
    for subscripts, tensor in zip(inputs, tensors):
        if "..." in subscripts or tensor.shape.ndims is None:
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
    inputs, output = _parse(op.get_attr("equation"), len(op._inputs))
    if "..." in op.get_attr("equation"):
        raise LookupError(f"Einsum '{op.name}': no gradient for equations with '...'")
    grads = []
    for index, subscripts in enumerate(inputs):
        if len(set(subscripts)) != len(subscripts):
            raise LookupError(f"Einsum '{op.name}': no gradient for operand {index} with a "
                              f"repeated label ({subscripts!r})")
        others = [s for k, s in enumerate(inputs) if k != index]
        elsewhere = set(output).union(*others) if others else set(output)
        kept = "".join(c for c in subscripts if c in elsewhere)
        equation = ",".join([output] + others) + "->" + kept
        partial = make("Einsum", (grad,) + tuple(t for k, t in enumerate(op._inputs) if k != index),
                       {"equation": equation}, None, "Einsum_grad")
        if kept != subscripts:  # labels only this operand has: broadcast back over them
            for position, label in enumerate(subscripts):
                if label not in kept:
                    partial = expand_dims(partial, position)
            partial = multiply(partial, ones_like(op._inputs[index]))
        grads.append(partial)
    return grads


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
