"""Partitioned variables: one logical table stored as several variables (TF1's mechanism).

Theory of operation: a *partitioner* (``fn(shape=, dtype=)``) maps a variable's full shape
and dtype to a list of partition counts, one per dimension, at most one of them above 1
(TF1's three: ``fixed_size_partitioner``, ``variable_axis_size_partitioner`` and
``min_max_variable_partitioner``). ``get_variable(name, shape, partitioner=...)`` then
creates ``name/part_0 .. name/part_{k-1}``: the axis of ``n`` rows is cut into contiguous
slices, the first ``n % k`` of them one row longer (so an ``embedding_lookup`` over the
parts must say ``partition_strategy="div"``, as in TF1). Each part is an ordinary Variable:
its initializer runs where it is placed (``replica_device_setter`` spreads the parts over
the ps tasks round-robin, like any variables), is given a ``PartitionInfo`` (the full shape
and this part's offset, so variance-scaling initializers use the whole table's fans) and
carries a ``SaveSliceInfo`` (full name, full shape, offset, part shape): the Saver writes
the logical tensor under its full name and each part restores its own slice of it.

The ``PartitionedVariable`` returned behaves as the list of its parts for
``embedding_lookup`` and converts to the concatenated tensor elsewhere.
"""
from __future__ import annotations

import math

from asyncflow import dtypes
from asyncflow.ops.layout import concat


class PartitionInfo:
    """What an initializer is told about the part it fills: the full shape and its offset."""

    def __init__(self, full_shape, var_offset):
        self.full_shape = list(full_shape)
        self.var_offset = list(var_offset)

    def single_offset(self, shape):
        """The offset along the one partitioned axis."""
        axis = self.single_slice_dim(shape)
        return 0 if axis is None else self.var_offset[axis]

    def single_slice_dim(self, shape):
        """The partitioned axis (None when ``shape`` is the full shape)."""
        dims = [i for i, (part, full) in enumerate(zip(shape, self.full_shape)) if part != full]
        return dims[0] if dims else None


class SaveSliceInfo:
    """Where a part sits in its logical variable: TF1's ``Variable.SaveSliceInfo``."""

    def __init__(self, full_name, full_shape, var_offset, var_shape):
        self.full_name = full_name
        self.full_shape = list(full_shape)
        self.var_offset = list(var_offset)
        self.var_shape = list(var_shape)

    @property
    def spec(self):
        """TF1's slice spec string, e.g. ``"10 4 0,5:0,4"`` (full shape, then offset,length)."""
        full = " ".join(str(d) for d in self.full_shape)
        slices = ":".join(f"{o},{n}" for o, n in zip(self.var_offset, self.var_shape))
        return f"{full} {slices}"

    def __repr__(self):
        return f"SaveSliceInfo({self.full_name!r}, {self.spec!r})"


class PartitionedVariable:
    """A variable stored as parts; iterate it (or ``list(v)``) for the part Variables."""

    def __init__(self, name, shape, dtype, variable_list, partitions):
        self._name = name
        self._shape = list(shape)
        self._dtype = dtypes.as_dtype(dtype)
        self._variables = list(variable_list)
        self._partitions = list(partitions)
        self._concat = None

    name = property(lambda self: self._name)
    dtype = property(lambda self: self._dtype)
    graph = property(lambda self: self._variables[0].graph)

    @property
    def shape(self):
        from asyncflow.graph.shape import TensorShape
        return TensorShape(self._shape)

    def get_shape(self):
        return self.shape

    def __iter__(self):
        return iter(self._variables)

    def __len__(self):
        return len(self._variables)

    def __getitem__(self, index):
        return self._variables[index]

    def _get_variable_list(self):
        return list(self._variables)

    def _get_partitions(self):
        return list(self._partitions)

    def _partition_axis(self):
        axes = [i for i, p in enumerate(self._partitions) if p > 1]
        return axes[0] if axes else 0

    def _as_tensor(self):
        """The whole table: the parts concatenated along the partitioned axis.

        Built outside any while loop or cond and free of the enclosing control
        dependencies, as TF1's ``as_tensor``, so the one concat serves every context.
        """
        if self._concat is None:
            graph = self._variables[0].graph
            with graph.push_scopes(control_flow_context=None), \
                    graph.control_dependencies(None), \
                    graph.name_scope(self._name + "/ConcatPartitions/"):
                self._concat = concat([v._as_tensor() for v in self._variables],
                                      self._partition_axis(), name="concat")
        return self._concat

    def as_tensor(self):
        return self._as_tensor()

    def __repr__(self):
        return (f"<af.PartitionedVariable {self._name!r} shape={self._shape} "
                f"parts={len(self._variables)}>")


def part_slices(full_shape, partitions):
    """``(offset, shape)`` of each part: contiguous, the first ``n % k`` one row longer."""
    axes = [i for i, p in enumerate(partitions) if p > 1]
    if len(axes) > 1:
        raise ValueError(f"Can only slice a variable along one dimension: shape {full_shape}, "
                         f"partitions {partitions}")
    axis = axes[0] if axes else 0
    count = partitions[axis] if axes else 1
    size, extra = divmod(full_shape[axis], count)
    out, offset = [], 0
    for index in range(count):
        rows = size + (1 if index < extra else 0)
        start = [0] * len(full_shape)
        start[axis] = offset
        shape = list(full_shape)
        shape[axis] = rows
        out.append((start, shape))
        offset += rows
    return out


def check_partitions(full_name, full_shape, partitions):
    """Validate a partitioner's answer, naming the variable."""
    if len(partitions) != len(full_shape):
        raise ValueError(f"Variable {full_name}: the partitioner returned {partitions}, which "
                         f"does not have one entry per dimension of shape {full_shape}")
    if sum(p > 1 for p in partitions) > 1:
        raise ValueError(f"Variable {full_name}: can only slice a variable along one "
                         f"dimension, but partitions {partitions} cut several")
    if any(p < 1 for p in partitions):
        raise ValueError(f"Variable {full_name}: partitions {partitions} must all be >= 1")
    for p, d in zip(partitions, full_shape):
        if p > d > 0:
            raise ValueError(f"Variable {full_name}: {p} partitions of a dimension of {d}")
    return [int(p) for p in partitions]


# -- the partitioners ------------------------------------------------------------------------
def fixed_size_partitioner(num_shards, axis=0):
    """A partitioner cutting ``axis`` into ``num_shards`` parts (fewer if it is shorter)."""
    def partitioner(shape, dtype=None, **unused):
        dims = _dims(shape)
        partitions = [1] * len(dims)
        partitions[axis] = min(int(num_shards), dims[axis])
        return partitions
    return partitioner


def variable_axis_size_partitioner(max_shard_bytes, axis=0, bytes_per_string_element=16,
                                   max_shards=None):
    """A partitioner making parts of at most ``max_shard_bytes`` (at least one slice each).

    Raises:
        ValueError: if ``max_shard_bytes`` < 1 or ``max_shards`` < 1.
    """
    if max_shard_bytes < 1 or (max_shards is not None and max_shards < 1):
        raise ValueError("Both max_shard_bytes and max_shards must be positive.")

    def partitioner(shape, dtype=None, **unused):
        dims = _dims(shape)
        element = _element_size(dtype or dtypes.float32, bytes_per_string_element)
        slice_dim = dims[axis]
        bytes_per_slice = 1.0 * (math.prod(dims) / max(slice_dim, 1)) * element
        slices_per_shard = max(1, math.floor(max_shard_bytes / bytes_per_slice))
        shards = int(math.ceil(1.0 * slice_dim / slices_per_shard))
        if max_shards is not None:
            shards = min(max_shards, shards)
        partitions = [1] * len(dims)
        partitions[axis] = max(1, shards)
        return partitions
    return partitioner


def min_max_variable_partitioner(max_partitions=1, axis=0, min_slice_size=256 << 10,
                                 bytes_per_string_element=16):
    """A partitioner making as many parts of at least ``min_slice_size`` bytes as fit, at
    most ``max_partitions``."""
    def partitioner(shape, dtype=None, **unused):
        dims = _dims(shape)
        total = math.prod(dims) * _element_size(dtype or dtypes.float32,
                                                bytes_per_string_element)
        partitions = [1] * len(dims)
        partitions[axis] = max(1, min(dims[axis], max_partitions,
                                      int(math.ceil(total / min_slice_size))))
        return partitions
    return partitioner


def _dims(shape):
    return list(shape.as_list()) if hasattr(shape, "as_list") else [int(d) for d in shape]


def _element_size(dtype, bytes_per_string_element):
    dtype = dtypes.as_dtype(dtype)
    return bytes_per_string_element if dtype.is_string else dtype.size
