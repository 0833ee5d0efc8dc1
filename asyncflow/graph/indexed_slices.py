"""``IndexedSlices``: a sparse gradient, some rows of a dense tensor and their indices.

Theory of operation (TF1's ``ops.IndexedSlices``): the gradient of a gather from a table of
``V`` rows is the incoming gradient's rows plus the gathered ids, never a ``[V, ...]`` tensor.
``values[i]`` is the contribution to row ``indices[i]`` of a tensor of shape ``dense_shape``;
repeated indices add up. The backward walk (``gradients.py``) keeps a contribution sparse while
only ops that accept one see it (``accepts_indexed_slices``: Identity, the variable's read);
several sparse contributions to one tensor are concatenated, not summed densely; any other op
gets the dense tensor. Optimizers apply a sparse gradient with sparse updates where the
variable lives, so only rows and indices cross the wire.

Densifying (``convert_to_tensor``, ``_as_tensor``) is an ``UnsortedSegmentSum`` of the values
into ``dense_shape[0]`` rows, warned about as in TF1 when the dense tensor would be large or
its size is unknown. The graph layer cannot import ops, so ``ops/indexing.py`` installs the
densifier (``register_densifier``), like the Const builder in ``conversion.py``.
"""
from __future__ import annotations

import warnings

import numpy as np

from asyncflow import dtypes
from asyncflow.graph.graph import Tensor

# TF1's threshold (``gradients_util._LARGE_SPARSE_NUM_ELEMENTS``) for the densify warning.
LARGE_SPARSE_NUM_ELEMENTS = 100_000_000

_DENSIFY = {"fn": None}
_ACCEPTS = set()


def register_densifier(fn):
    """ops/indexing.py installs ``fn(slices) -> Tensor`` (an UnsortedSegmentSum)."""
    _DENSIFY["fn"] = fn


def accepts_indexed_slices(*op_types):
    """Declare op types whose gradient function takes an IndexedSlices output gradient as is."""
    _ACCEPTS.update(op_types)


def takes_indexed_slices(op_type):
    return op_type in _ACCEPTS


class IndexedSlices:
    """Rows ``values`` of a tensor of shape ``dense_shape`` at rows ``indices``.

    Args:
        values: a Tensor ``[n, ...]``: the slices.
        indices: an int Tensor ``[n]``: the row of each slice (repeats add up).
        dense_shape: an int Tensor ``[rank]`` (or None when unknown): the dense tensor's shape.
    """

    __slots__ = ("_values", "_indices", "_dense_shape")

    def __init__(self, values, indices, dense_shape=None):
        for what, tensor in (("values", values), ("indices", indices)):
            if not isinstance(tensor, Tensor):
                raise TypeError(f"IndexedSlices: {what} must be a Tensor, got {tensor!r}")
        if not indices.dtype.is_integer:
            raise TypeError(f"IndexedSlices: indices must be integers, got {indices.dtype.name}")
        if dense_shape is not None and not isinstance(dense_shape, Tensor):
            raise TypeError(f"IndexedSlices: dense_shape must be a Tensor or None, got "
                            f"{dense_shape!r}")
        self._values, self._indices, self._dense_shape = values, indices, dense_shape

    values = property(lambda self: self._values, doc="The slices, a Tensor ``[n, ...]``.")
    indices = property(lambda self: self._indices, doc="Their rows, an int Tensor ``[n]``.")
    dense_shape = property(lambda self: self._dense_shape,
                           doc="The dense tensor's shape (an int Tensor), or None.")
    dtype = property(lambda self: self._values.dtype)
    name = property(lambda self: self._values.name)
    op = property(lambda self: self._values.op)
    graph = property(lambda self: self._values.graph)
    device = property(lambda self: self._values.device)

    def __repr__(self):
        shape = "None" if self._dense_shape is None else self._dense_shape.name
        return (f"IndexedSlices(indices={self._indices.name}, values={self._values.name}, "
                f"dense_shape={shape})")

    def _as_tensor(self):
        """The dense tensor (TF1's ``convert_to_tensor(IndexedSlices)``), with its warning."""
        if self._dense_shape is None:
            raise ValueError(f"Tensor conversion requested for IndexedSlices without "
                             f"dense_shape: {self!r}")
        static = _static_shape(self._dense_shape)
        if static is None:
            warnings.warn("Converting sparse IndexedSlices to a dense Tensor of unknown shape. "
                          "This may consume a large amount of memory.", stacklevel=3)
        elif int(np.prod(static)) >= LARGE_SPARSE_NUM_ELEMENTS:
            warnings.warn(f"Converting sparse IndexedSlices to a dense Tensor with "
                          f"{int(np.prod(static))} elements. This may consume a large amount "
                          "of memory.", stacklevel=3)
        if _DENSIFY["fn"] is None:
            raise RuntimeError("IndexedSlices: import asyncflow.ops.indexing to densify")
        return _DENSIFY["fn"](self)


def _static_shape(shape_tensor):
    """The dense shape as ints when it is a Const (gradients make it one when known)."""
    if shape_tensor.op.type != "Const":
        return None
    return [int(d) for d in np.asarray(shape_tensor.op.get_attr("value")).reshape(-1)]


def aggregate(graph, contributions, name):
    """The sum of gradient contributions to one tensor.

    All sparse: one IndexedSlices concatenating their values and indices (TF1). Any dense one:
    a dense ``AddN`` of everything (sparse ones densified). Built by op type strings, as the
    graph layer builds no ops through ``asyncflow.ops``.
    """
    if all(isinstance(c, IndexedSlices) for c in contributions):
        indices = [c.indices for c in contributions]
        if len({t.dtype for t in indices}) > 1:
            int64 = dtypes.int64
            indices = [graph.create_op("Cast", (t,), {"DstT": int64, "SrcT": t.dtype},
                                       name=f"{name}/cast").outputs[0]
                       if t.dtype is not int64 else t for t in indices]
        values = graph.create_op("ConcatV2", tuple(c.values for c in contributions),
                                 {"axis": 0}, name=f"{name}/values").outputs[0]
        index = graph.create_op("ConcatV2", tuple(indices), {"axis": 0},
                                name=f"{name}/indices").outputs[0]
        return IndexedSlices(values, index, contributions[0].dense_shape)
    dense = [c._as_tensor() if isinstance(c, IndexedSlices) else c for c in contributions]
    return graph.create_op("AddN", tuple(dense), None, name=name).outputs[0]

