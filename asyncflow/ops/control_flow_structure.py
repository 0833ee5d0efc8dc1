"""Nested structures of control flow: the loop variables of ``while_loop`` and the results
of ``cond`` are lists, tuples, namedtuples, dicts and composite values (IndexedSlices,
SparseTensor) of tensors; ``flatten`` gives their tensors in order, ``pack_as`` rebuilds the
structure around new tensors (``ops/control_flow.py`` re-exports both).
"""
from __future__ import annotations

import collections.abc

from asyncflow.graph.indexed_slices import IndexedSlices
from asyncflow.graph.shape import TensorShape


def is_namedtuple(value):
    return isinstance(value, tuple) and hasattr(value, "_fields")


# Composite values (IndexedSlices, SparseTensor) ride through a cond or a loop as their
# component tensors: {type: (parts(value), rebuild(value, parts), invariant_parts(value,
# shape))}, the last turning a loop variable's shape invariant into its parts' invariants.
_COMPOSITES = {}


def register_composite(kind, parts, rebuild, invariant_parts):
    """Let values of ``kind`` be loop variables and cond results (TF1's composite tensors)."""
    _COMPOSITES[kind] = (parts, rebuild, invariant_parts)


def composite_invariants(value):
    """``invariant_parts`` of a composite ``value``, or None for any other value."""
    found = _COMPOSITES.get(type(value))
    return None if found is None else found[2]


def find_composite(structure):
    """The first composite value (IndexedSlices, SparseTensor) in a nested structure, or
    None."""
    if type(structure) in _COMPOSITES:
        return structure
    items = structure.values() if isinstance(structure, collections.abc.Mapping) else \
        structure if isinstance(structure, (list, tuple)) else ()
    for item in items:
        found = find_composite(item)
        if found is not None:
            return found
    return None


def _indexed_slices_parts(value):
    dense_shape = [] if value.dense_shape is None else [value.dense_shape]
    return [value.values, value.indices] + dense_shape


def _indexed_slices_invariants(value, shape):
    """TF1: the invariant is the values' shape; indices follow its first dimension."""
    first = shape.dims[0] if shape.ndims else None
    dense_shape = [] if value.dense_shape is None else [value.dense_shape.shape]
    return [shape, TensorShape([first])] + dense_shape


register_composite(IndexedSlices, _indexed_slices_parts,
                   lambda value, parts: IndexedSlices(*parts), _indexed_slices_invariants)


def flatten(structure):
    """Leaves of nested lists, tuples, namedtuples and dicts (dicts by sorted key); a
    composite value (IndexedSlices, SparseTensor) gives its component tensors."""
    composite = _COMPOSITES.get(type(structure))
    if composite is not None:
        return list(composite[0](structure))
    if isinstance(structure, collections.abc.Mapping):
        return [leaf for key in sorted(structure) for leaf in flatten(structure[key])]
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in flatten(item)]
    return [structure]


def pack_as(structure, leaves):
    """``leaves`` arranged like ``structure`` (the inverse of ``flatten``)."""
    iterator = iter(leaves)

    def build(node):
        composite = _COMPOSITES.get(type(node))
        if composite is not None:
            return composite[1](node, [next(iterator) for _ in composite[0](node)])
        if isinstance(node, collections.abc.Mapping):
            built = {key: build(node[key]) for key in sorted(node)}
            return type(node)((key, built[key]) for key in node) \
                if type(node) is not dict else {key: built[key] for key in node}
        if is_namedtuple(node):
            return type(node)(*[build(item) for item in node])
        if isinstance(node, (list, tuple)):
            return type(node)(build(item) for item in node)
        return next(iterator)
    return build(structure)


def same_structure(a, b):
    if type(a) in _COMPOSITES or type(b) in _COMPOSITES:
        return type(a) is type(b) and len(flatten(a)) == len(flatten(b))
    if isinstance(a, collections.abc.Mapping) or isinstance(b, collections.abc.Mapping):
        return (isinstance(a, collections.abc.Mapping) and isinstance(b, collections.abc.Mapping)
                and sorted(a) == sorted(b) and all(same_structure(a[k], b[k]) for k in a))
    a_seq = isinstance(a, (list, tuple))
    b_seq = isinstance(b, (list, tuple))
    if a_seq or b_seq:
        return a_seq and b_seq and len(a) == len(b) and all(map(same_structure, a, b))
    return True
