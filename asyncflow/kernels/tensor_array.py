"""Kernels of TensorArray ops (see ops/tensor_array.py).

``TensorArrayV3`` makes a fresh ``_TensorArray`` per run of the op (per step, or per
iteration when created in a loop body) that flows as the handle value, like a stack: no two
steps share one and nothing outlives the step. Its elements are a Python list of arrays:
a write stores one reference (O(element)); gather/stack copy once, at the end. The flow
outputs are float32 zeros: only their edges matter.

A gradient array (``TensorArrayGradV3``, one per forward array and gradient source) adds up
writes to one index, and reads of an index nobody wrote give zeros shaped like the forward
element written there.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import host_memory, register_kernel

_FLOW = np.float32(0.0)


class _TensorArray:
    __slots__ = ("name", "dtype", "elements", "shapes", "cleared", "dynamic_size",
                 "clear_after_read", "element_shape", "grads", "forward")

    def __init__(self, name, dtype, size, dynamic_size, clear_after_read, element_shape,
                 forward=None):
        self.name = name
        self.dtype = dtype
        self.elements = [None] * size
        self.shapes = [None] * size
        self.cleared = [False] * size
        self.dynamic_size = dynamic_size
        self.clear_after_read = clear_after_read
        self.element_shape = element_shape  # list with None for unknown dims, or None
        self.grads = {}
        self.forward = forward  # the forward array of a gradient array

    def __repr__(self):
        return f"<TensorArray {self.name} size={len(self.elements)}>"

    # -- checks ---------------------------------------------------------------------------
    def _fail(self, ctx, message):
        raise errors.InvalidArgumentError(None, ctx.name, f"TensorArray {self.name}: {message}")

    def _index(self, ctx, index, writing):
        index = int(index)
        if index < 0:
            self._fail(ctx, f"index {index} is negative")
        if index >= len(self.elements):
            if not writing:
                self._fail(ctx, f"Tried to read from index {index} but array size is: "
                                f"{len(self.elements)}")
            if not (self.dynamic_size or self.forward is not None):
                self._fail(ctx, f"Tried to write to index {index} but array is not resizeable "
                                f"and size is: {len(self.elements)}")
            grow = index + 1 - len(self.elements)
            self.elements += [None] * grow
            self.shapes += [None] * grow
            self.cleared += [False] * grow
        return index

    def _check_shape(self, ctx, index, shape):
        expected = self.element_shape
        if expected is not None and (len(expected) != len(shape) or any(
                e is not None and e != d for e, d in zip(expected, shape))):
            self._fail(ctx, f"Could not write to TensorArray index {index}: the value's shape "
                            f"{list(shape)} is not compatible with the element shape "
                            f"{expected}")

    # -- element access -----------------------------------------------------------------------
    def write(self, ctx, index, value):
        index = self._index(ctx, index, writing=True)
        if value.dtype != self.dtype:
            value = value.astype(self.dtype)
        self._check_shape(ctx, index, value.shape)
        old = self.elements[index]
        if old is not None or self.cleared[index]:
            if self.forward is None:
                self._fail(ctx, f"Could not write to TensorArray index {index} because it has "
                                "already been written to.")
            if old is not None:
                if old.shape != value.shape:
                    self._fail(ctx, f"Could not aggregate to TensorArray index {index}: shapes "
                                    f"{list(old.shape)} and {list(value.shape)} differ")
                value = old + value
        self.elements[index] = value
        self.shapes[index] = tuple(value.shape)

    def read(self, ctx, index):
        index = self._index(ctx, index, writing=False)
        value = self.elements[index]
        if value is None:
            if self.cleared[index]:
                self._fail(ctx, f"Could not read index {index} twice because it was cleared "
                                "after a previous read (perhaps try setting clear_after_read = "
                                "false?)")
            shape = self._zeros_shape(index)
            if shape is None:
                self._fail(ctx, f"Could not read from TensorArray index {index} because it has "
                                "not yet been written to.")
            return ctx.xp.zeros(shape, dtype=self.dtype)
        if self.clear_after_read and self.forward is None:
            self.elements[index] = None
            self.cleared[index] = True
        return value

    def _zeros_shape(self, index):
        if self.forward is not None and index < len(self.forward.shapes) and \
                self.forward.shapes[index] is not None:
            return self.forward.shapes[index]
        if self.shapes[index] is not None:
            return self.shapes[index]
        if self.element_shape is not None and None not in self.element_shape:
            return tuple(self.element_shape)
        return None


@register_kernel("TensorArrayV3")
def _create(ctx, size):
    size = int(size)
    if size < 0:
        raise errors.InvalidArgumentError(None, ctx.name, f"TensorArray size must be >= 0, got "
                                                          f"{size}")
    shape = ctx.attrs["element_shape"]
    dims = None if shape.dims is None else list(shape.as_list())
    array = _TensorArray(ctx.attrs["tensor_array_name"], np.dtype(ctx.attrs["dtype"].np), size,
                         ctx.attrs["dynamic_size"], ctx.attrs["clear_after_read"], dims)
    return (array, _FLOW)


@register_kernel("TensorArrayGradV3")
def _grad(ctx, handle, flow):
    source = ctx.attrs["source"]
    found = handle.grads.get(source)
    if found is None:
        found = handle.grads[source] = _TensorArray(
            f"{handle.name}@{source}", handle.dtype, len(handle.elements), True, False,
            handle.element_shape, forward=handle)
    return (found, _FLOW)


@register_kernel("TensorArrayWriteV3")
def _write(ctx, handle, index, value, flow):
    handle.write(ctx, index, ctx.xp.asarray(value))
    return (_FLOW,)


@register_kernel("TensorArrayReadV3")
def _read(ctx, handle, index, flow):
    return (handle.read(ctx, index),)


def _stacked(ctx, handle, values):
    if not values:
        shape = handle.element_shape
        if shape is None or None in shape:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"TensorArray {handle.name}: gathering no elements needs a "
                                "fully defined element_shape")
        return ctx.xp.zeros([0] + list(shape), dtype=handle.dtype)
    first = values[0].shape
    for k, value in enumerate(values):
        if value.shape != first:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"TensorArray {handle.name} has inconsistent shapes: element 0 "
                                f"is {list(first)} but element {k} is {list(value.shape)}")
    return ctx.xp.stack(values)


@register_kernel("TensorArrayGatherV3")
def _gather(ctx, handle, indices, flow):
    values = [handle.read(ctx, index) for index in np.asarray(indices).reshape(-1)]
    return (_stacked(ctx, handle, values),)


@register_kernel("TensorArrayScatterV3")
def _scatter(ctx, handle, indices, value, flow):
    indices = np.asarray(indices).reshape(-1)
    if value.ndim == 0 or value.shape[0] != len(indices):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"TensorArray {handle.name}: scatter of {len(indices)} indices needs "
                            f"a value with that many rows, got shape {list(value.shape)}")
    value = ctx.xp.asarray(value)
    for row, index in enumerate(indices):
        handle.write(ctx, index, value[row])
    return (_FLOW,)


@register_kernel("TensorArrayConcatV3")
def _concat(ctx, handle, flow):
    values = [handle.read(ctx, index) for index in range(len(handle.elements))]
    lengths = np.array([v.shape[0] if v.ndim else 0 for v in values], dtype=np.int64)
    if not values:
        shape = handle.element_shape
        tail = [] if shape is None else [d or 0 for d in shape[1:]]
        return (ctx.xp.zeros([0] + tail, dtype=handle.dtype), lengths)
    for value in values:
        if value.ndim == 0:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"TensorArray {handle.name}: concat needs elements of rank >= 1")
    return (ctx.xp.concatenate(values, axis=0), lengths)


@register_kernel("TensorArraySplitV3")
def _split(ctx, handle, value, lengths, flow):
    lengths = np.asarray(lengths).reshape(-1).astype(np.int64)
    if value.ndim == 0 or int(lengths.sum()) != value.shape[0]:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"TensorArray {handle.name}: split lengths {lengths.tolist()} must add "
                            f"up to the value's first dimension, got shape {list(value.shape)}")
    value = ctx.xp.asarray(value)
    start = 0
    for index, length in enumerate(lengths):
        handle.write(ctx, index, value[start:start + int(length)])
        start += int(length)
    return (_FLOW,)


@register_kernel("TensorArraySizeV3")
def _size(ctx, handle, flow):
    return (np.int32(len(handle.elements)),)


# Arguments kept in host memory on a GPU (TF's HostMemory registrations; exec/gpu.py).
host_memory("TensorArrayV3", inputs=(0,), outputs=(0,))
host_memory("TensorArrayReadV3", inputs=(0, 1))
host_memory("TensorArrayWriteV3", inputs=(0, 1))
host_memory("TensorArrayGatherV3", inputs=(0, 1))
host_memory("TensorArrayScatterV3", inputs=(0, 1))
host_memory("TensorArraySplitV3", inputs=(0, 2))
host_memory("TensorArraySizeV3", inputs=(0,), outputs=(0,))
host_memory("TensorArrayConcatV3", inputs=(0,))
host_memory("TensorArrayGradV3", inputs=(0,), outputs=(0,))
