"""Kernels of readers (see ops/io.py); the reader state is ``exec/readers.py``.

The reader op's kernel returns the reader resource (``ctx.reader_resource()``). ``ReaderRead``
and ``ReaderReadUpTo`` are async: they await the resource, which dequeues filenames from the
queue resource it is handed and loads files on a worker thread.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import WOULD_BLOCK, register_kernel, register_nowait


def _reader(ctx):
    return (ctx.reader_resource(),)


for _type in ("TextLineReader", "NumpyRecordReader"):
    register_kernel(_type, "CPU")(_reader)


def _strings(values):
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _one(keys, components):
    return (np.asarray(keys[0], dtype=object),) + tuple(c[0] if c.dtype != object
                                                         else np.asarray(c[0], dtype=object)
                                                         for c in components)


@register_kernel("ReaderRead", "CPU", is_async=True)
async def _read(ctx, reader, queue):
    return _one(*await reader.read_up_to(queue, 1))


def _count(ctx, num_records):
    n = int(num_records)
    if n <= 0:
        raise errors.InvalidArgumentError(None, ctx.name, f"num_records must be > 0, got {n}")
    return n


@register_kernel("ReaderReadUpTo", "CPU", is_async=True)
async def _read_up_to(ctx, reader, queue, num_records):
    keys, components = await reader.read_up_to(queue, _count(ctx, num_records))
    return (_strings(keys),) + tuple(components)


# Synchronous twins: a read the loaded file can serve completes inline, without a task (the
# executor then awaits the async kernel only when a filename must be dequeued or a file loaded).
@register_nowait("ReaderRead", "CPU")
def _read_nowait(ctx, reader, queue):
    read = reader.read_up_to_nowait(queue, 1)
    return WOULD_BLOCK if read is None else _one(*read)


@register_nowait("ReaderReadUpTo", "CPU")
def _read_up_to_nowait(ctx, reader, queue, num_records):
    read = reader.read_up_to_nowait(queue, _count(ctx, num_records))
    return WOULD_BLOCK if read is None else (_strings(read[0]),) + tuple(read[1])


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


def _scalar_string(value):
    item = np.asarray(value, dtype=object).reshape(()).item()
    return item.decode() if isinstance(item, bytes) else str(item)


@register_kernel("ReadFile", blocking_io=True, abandon=True)
def _read_file(ctx, filename):
    path = ctx.resolve_path(_scalar_string(filename))
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise errors.NotFoundError(None, ctx.name, f"{path}: no such file") from None
    except IsADirectoryError:
        raise errors.FailedPreconditionError(None, ctx.name, f"{path}: is a folder") from None
    value = np.empty((), dtype=object)
    value[()] = data
    return (value,)


@register_kernel("WriteFile", blocking_io=True)
def _write_file(ctx, filename, contents):
    import os
    path = ctx.resolve_path(_scalar_string(filename))
    data = np.asarray(contents, dtype=object).reshape(()).item()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data if isinstance(data, bytes) else str(data).encode())
    return ()

