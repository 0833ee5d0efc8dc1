"""Static shapes: possibly partial, merged as ops are built.

A ``TensorShape`` has unknown rank (``dims is None``) or a tuple of dims, each an ``int`` or
``None`` (unknown). Shapes are immutable values.

Indexing or iterating a shape gives each known dim as a ``Dimension``: an ``int`` that also
has TF1's ``.value``, so ``x.shape[1].value`` of TF1 code works; an unknown dim is ``None``
(TF1's ``Dimension(None)``; ``dimension_value`` reads either). ``dims`` and ``as_list()`` hold
plain ints.
"""
from __future__ import annotations


class Dimension(int):
    """A known dimension: an ``int`` with TF1's ``.value`` (itself, as a plain int)."""

    __slots__ = ()

    @property
    def value(self):
        return int(self)


def dimension_value(dim):
    """TF1's ``tf.compat.dimension_value``: the int (or None) of a dim of any spelling."""
    return dim.value if hasattr(dim, "value") else (None if dim is None else int(dim))


def _dimension(dim):
    return None if dim is None else Dimension(dim)


class TensorShape:
    """A possibly partial static shape."""

    __slots__ = ("_dims",)

    def __init__(self, dims):
        if dims is None:
            self._dims = None
        elif isinstance(dims, TensorShape):
            self._dims = dims._dims
        else:
            if isinstance(dims, int):
                dims = (dims,)
            out = []
            for d in dims:
                if d is None or (hasattr(d, "value") and d.value is None):
                    out.append(None)
                else:
                    value = int(d)
                    if value < 0:
                        if value == -1:
                            out.append(None)
                            continue
                        raise ValueError(f"Dimension {value} must be >= 0")
                    out.append(value)
            self._dims = tuple(out)

    @property
    def dims(self):
        return self._dims

    @property
    def ndims(self):
        return None if self._dims is None else len(self._dims)

    rank = ndims

    def as_list(self):
        """Dims as a list (``None`` for unknown dims).

        Raises:
            ValueError: if the rank is unknown.
        """
        if self._dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self._dims)

    def is_fully_defined(self):
        return self._dims is not None and all(d is not None for d in self._dims)

    def num_elements(self):
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self._dims:
            n *= d
        return n

    def is_compatible_with(self, other):
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return True
        if len(self._dims) != len(other._dims):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self._dims, other._dims))

    def merge_with(self, other):
        """The most specific shape compatible with both.

        Raises:
            ValueError: if the shapes are incompatible.
        """
        other = as_shape(other)
        if self._dims is None:
            return other
        if other._dims is None:
            return self
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {other} are not compatible")
        return TensorShape([a if a is not None else b for a, b in zip(self._dims, other._dims)])

    def with_rank(self, rank):
        if self._dims is None:
            return TensorShape([None] * rank)
        if len(self._dims) != rank:
            raise ValueError(f"Shape {self} must have rank {rank}")
        return self

    def concatenate(self, other):
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return TensorShape(None)
        return TensorShape(self._dims + other._dims)

    def __len__(self):
        if self._dims is None:
            raise ValueError("Cannot take the length of a shape with unknown rank.")
        return len(self._dims)

    def __iter__(self):
        if self._dims is None:
            raise ValueError("Cannot iterate over a shape with unknown rank.")
        return map(_dimension, self._dims)

    def __getitem__(self, key):
        if self._dims is None:
            return TensorShape(None) if isinstance(key, slice) else None
        if isinstance(key, slice):
            return TensorShape(self._dims[key])
        return _dimension(self._dims[key])

    def __eq__(self, other):
        try:
            other = as_shape(other)
        except (TypeError, ValueError):
            return NotImplemented
        return self._dims == other._dims

    def __hash__(self):
        return hash(self._dims)

    def __repr__(self):
        return f"TensorShape({None if self._dims is None else list(self._dims)})"

    def __str__(self):
        if self._dims is None:
            return "<unknown>"
        inner = ", ".join("?" if d is None else str(d) for d in self._dims)
        return f"({inner},)" if len(self._dims) == 1 else f"({inner})"


def as_shape(value):
    """Convert a list/tuple/int/None/TensorShape into a ``TensorShape``."""
    return value if isinstance(value, TensorShape) else TensorShape(value)


def broadcast_shapes(a, b):
    """numpy broadcasting on static shapes; unknown dims stay unknown when undecidable.

    Raises:
        ValueError: if the shapes cannot broadcast.
    """
    a, b = as_shape(a), as_shape(b)
    if a.dims is None or b.dims is None:
        return TensorShape(None)
    rank = max(len(a.dims), len(b.dims))
    da = (1,) * (rank - len(a.dims)) + a.dims
    db = (1,) * (rank - len(b.dims)) + b.dims
    out = []
    for x, y in zip(da, db):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        elif x == y:
            out.append(x)
        else:
            raise ValueError(f"Dimensions must be equal, but are {x} and {y} (incompatible "
                             f"shapes for broadcasting: {a} and {b})")
    return TensorShape(out)
