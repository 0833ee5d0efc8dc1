"""Kernels of readers (see ops/io.py); the reader state is ``runtime/readers.py``.

The reader op's kernel returns the reader resource (``ctx.reader_resource()``). ``ReaderRead``
and ``ReaderReadUpTo`` are async: they await the resource, which dequeues filenames from the
queue resource it is handed and loads files on a worker thread.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import register_kernel


def _reader(ctx):
    return (ctx.reader_resource(),)


for _type in ("TextLineReader", "NumpyRecordReader"):
    register_kernel(_type, "CPU")(_reader)


def _strings(values):
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@register_kernel("ReaderRead", "CPU", is_async=True)
async def _read(ctx, reader, queue):
    keys, components = await reader.read_up_to(queue, 1)
    return (np.asarray(keys[0], dtype=object),) + tuple(c[0] if c.dtype != object
                                                         else np.asarray(c[0], dtype=object)
                                                         for c in components)


@register_kernel("ReaderReadUpTo", "CPU", is_async=True)
async def _read_up_to(ctx, reader, queue, num_records):
    n = int(num_records)
    if n <= 0:
        raise errors.InvalidArgumentError(None, ctx.name, f"num_records must be > 0, got {n}")
    keys, components = await reader.read_up_to(queue, n)
    return (_strings(keys),) + tuple(components)


@register_kernel("ReaderNumRecordsProduced", "CPU")
def _records_produced(ctx, reader):
    return (np.asarray(reader.records_produced, dtype=np.int64),)


@register_kernel("ReaderNumWorkUnitsCompleted", "CPU")
def _work_units_completed(ctx, reader):
    return (np.asarray(reader.work_units_completed, dtype=np.int64),)


@register_kernel("ReaderReset", "CPU")
def _reset(ctx, reader):
    reader.reset()
    return ()
