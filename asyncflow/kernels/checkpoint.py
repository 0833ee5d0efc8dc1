"""Kernels of Save/Restore and the checkpoint file format (safetensors, written atomically).

File layout (the safetensors format, readable by the ``safetensors`` package): an 8-byte
little-endian header length N, N bytes of JSON (padded with spaces to a multiple of 8)
mapping each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` plus a
``"__metadata__"`` map of strings (``format``, ``format_version``, ``global_step``), then
the raw little-endian bytes of every tensor, back to back. bfloat16 is stored as ``BF16``.

Atomicity: a file is written to a temporary name in the same directory, flushed and
fsynced, renamed over the final name with ``os.replace`` (atomic on POSIX), and then the
directory is fsynced so the rename itself is durable. A reader therefore sees either the
old complete file or the new complete file, never a torn one; a crash leaves at most a
stray ``.*.tmp`` file.

Sharded checkpoints (``Saver(sharded=True)``, TF1's sharded saving): each task writes the
variables it holds into its own shard, ``<prefix>-0000i-of-0000n.safetensors`` (a whole
safetensors file, written atomically as above), and after every shard is on disk one
``MergeCheckpointShards`` op writes the index ``<prefix>.safetensors.index.json`` (the Hugging
Face layout: ``{"metadata": {...}, "weight_map": {tensor name: shard file name}}``), atomically
too. The index is the commit point: shards without an index are no checkpoint. ``Restore``
given ``<prefix>.safetensors`` reads that file if it exists, else the index, and then each
tensor from whichever shard holds it, so a checkpoint restores onto any cluster layout.

Reading validates the header before allocating anything: size caps, a dtype allowlist,
non-negative shapes, offsets that match ``prod(shape) * itemsize`` and stay inside the file.
A malformed file raises ``DataLossError``; a missing one ``NotFoundError``.

The kernels run on a worker thread (the ops declare an unbounded cost and the kernels are
``offload`` kernels), so the event loop never blocks on the disk.
"""
from __future__ import annotations

import contextlib
import json
import os
import struct
import tempfile
import time

import numpy as np

from asyncflow import dtypes, errors
from asyncflow.kernels.arguments import host as _host
from asyncflow.kernels.registry import register_kernel

FORMAT = "asyncflow.checkpoint"
FORMAT_VERSION = "1"
MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_INDEX_BYTES = 64 * 1024 * 1024
DATA_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".index.json"
_TO_SAFETENSORS = {
    dtypes.float64: "F64", dtypes.float32: "F32", dtypes.float16: "F16", dtypes.bfloat16: "BF16",
    dtypes.int64: "I64", dtypes.int32: "I32", dtypes.int16: "I16", dtypes.int8: "I8",
    dtypes.uint64: "U64", dtypes.uint32: "U32", dtypes.uint16: "U16", dtypes.uint8: "U8",
    dtypes.bool: "BOOL",
}
_FROM_SAFETENSORS = {code: dtype for dtype, code in _TO_SAFETENSORS.items()}


# -- atomic files ----------------------------------------------------------------------------
def fsync_directory(directory):
    """Make a rename in ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


STALE_TEMPORARY_S = 60.0  # a temporary file unchanged this long belongs to a dead writer


def remove_stale_temporaries(directory, name):
    """Delete ``.NAME.*.tmp`` files in ``directory`` that no writer touched for a minute.

    A save killed mid-write (kill -9, power loss) leaves its temporary file behind; the next
    save of the same file removes it. A live writer keeps its file's mtime fresh.
    """
    prefix, now = "." + name + ".", time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                if now - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMPORARY_S:
                    os.unlink(entry.path)


def atomic_write(path, write):
    """Write a file so that ``path`` is always absent, the old file, or the complete new one.

    Args:
        path: the final file name.
        write: ``write(fileobj)`` writing the whole content to a binary file object.
    """
    directory = os.path.dirname(os.path.abspath(path))
    remove_stale_temporaries(directory, os.path.basename(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as fileobj:
            write(fileobj)
            fileobj.flush()
            os.fsync(fileobj.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(directory)


# -- safetensors -------------------------------------------------------------------------------
def _little_endian(array):
    array = np.asarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array if array.flags.c_contiguous else array.copy(order="C")


def write_safetensors(path, tensors, metadata=None):
    """Atomically write ``{name: numpy array}`` as a safetensors file.

    Raises:
        TypeError: for an array whose dtype safetensors cannot hold (strings).
    """
    header, arrays, offset = {}, [], 0
    for name in sorted(tensors):
        array = _little_endian(tensors[name])
        try:
            code = _TO_SAFETENSORS[dtypes.as_dtype(array.dtype)]
        except (KeyError, TypeError):
            raise TypeError(f"tensor {name!r} has dtype {array.dtype}, which a checkpoint "
                            "cannot hold") from None
        header[name] = {"dtype": code, "shape": [int(d) for d in array.shape],
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
        arrays.append(array)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)

    def write(fileobj):
        fileobj.write(struct.pack("<Q", len(encoded)))
        fileobj.write(encoded)
        for array in arrays:
            if array.nbytes:
                fileobj.write(memoryview(array.reshape(-1).view(np.uint8)))
    atomic_write(path, write)


def _corrupt(path, why):
    return errors.DataLossError(None, None, f"Checkpoint file {path} is corrupt: {why}")


def read_safetensors_header(fileobj, path, size):
    """``(entries, metadata, data_start)`` of an open safetensors file, fully validated.

    Raises:
        DataLossError: naming what is wrong with the file.
    """
    raw = fileobj.read(8)
    if len(raw) != 8:
        raise _corrupt(path, "shorter than the 8-byte header length")
    length, = struct.unpack("<Q", raw)
    if length > MAX_HEADER_BYTES or length > size - 8:
        raise _corrupt(path, "its header length exceeds the file or the 100 MB cap")
    try:
        header = json.loads(fileobj.read(length))
    except (UnicodeDecodeError, ValueError):  # the reason would quote the file's bytes
        raise _corrupt(path, "header is not JSON") from None
    if not isinstance(header, dict):
        raise _corrupt(path, "header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_size = size - 8 - length
    entries = {}
    for index, (name, info) in enumerate(header.items()):
        try:
            dtype = _FROM_SAFETENSORS[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise _corrupt(path, f"header entry #{index} is not "
                           "{dtype, shape, data_offsets}") from None
        count = int(np.prod(shape, dtype=np.int64))
        if any(d < 0 for d in shape) or not 0 <= begin <= end <= data_size \
                or end - begin != count * dtype.np.itemsize:
            raise _corrupt(path, f"entry {name!r} (shape {list(shape)}, offsets "
                           f"[{begin}, {end}]) does not fit the {data_size} data bytes")
        entries[name] = (dtype, shape, begin, end)
    return entries, metadata, 8 + length


def read_safetensors(path, names=None):
    """``(tensors, metadata, entries)`` of a safetensors file (tensors: only ``names`` if given).

    Raises:
        NotFoundError: if the file does not exist.
        DataLossError: if it is malformed or truncated.
    """
    try:
        fileobj = open(path, "rb")
    except FileNotFoundError:
        raise errors.NotFoundError(None, None, f"Failed to find any matching files for "
                                   f"{path}") from None
    with fileobj:
        size = os.fstat(fileobj.fileno()).st_size
        entries, metadata, start = read_safetensors_header(fileobj, path, size)
        out = {}
        for name in (entries if names is None else [n for n in names if n in entries]):
            dtype, shape, begin, end = entries[name]
            fileobj.seek(start + begin)
            data = fileobj.read(end - begin)
            if len(data) != end - begin:
                raise _corrupt(path, f"tensor {name!r} is truncated")
            array = np.frombuffer(data, dtype=dtype.np.newbyteorder("<")).astype(dtype.np, copy=False)
            out[name] = array.reshape(shape)
    return out, dict(metadata), entries


# -- kernels -------------------------------------------------------------------------------------
def _string(value):
    value = value.reshape(()).item() if hasattr(value, "reshape") else value
    return value.decode() if isinstance(value, bytes) else str(value)


@register_kernel("Save", offload=True)
def _save(ctx, filename, global_step, *values):
    path = ctx.resolve_path(_string(filename))
    tensors = {}
    for name, value in zip(ctx.attrs["tensor_names"], values):
        # Variables may live on a GPU: their values are copied to the host to be written.
        tensors[name] = _host(value.read() if hasattr(value, "read") else value)
    metadata = {"format": FORMAT, "format_version": FORMAT_VERSION,
                "global_step": str(int(_host(global_step)))}
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise errors.NotFoundError(None, ctx.name, f"Parent directory of {path} doesn't "
                                   "exist, can't save.")
    write_safetensors(path, tensors, metadata)
    return ()


def _mismatches(entries, names, kinds, shapes):
    missing, wrong = [], []
    for name, dtype, shape in zip(names, kinds, shapes):
        if name not in entries:
            missing.append(name)
            continue
        got_dtype, got_shape = entries[name][0], entries[name][1]
        if got_dtype is not dtype:
            wrong.append(f"{name}: dtype {got_dtype.name} in the checkpoint, {dtype.name} in "
                         "the graph")
        elif not shape.is_compatible_with(got_shape):
            wrong.append(f"{name}: shape {list(got_shape)} in the checkpoint, {shape} in the graph")
    return missing, wrong


@register_kernel("Restore", offload=True)
def _restore(ctx, filename):
    path = ctx.resolve_path(_string(filename))
    names, kinds, shapes = (ctx.attrs[k] for k in ("tensor_names", "dtypes", "shapes"))
    tensors, entries = read_checkpoint(path, names)
    missing, wrong = _mismatches(entries, names, kinds, shapes)
    if missing:
        raise errors.NotFoundError(
            None, ctx.name, f"Restoring from checkpoint {path} failed: {len(missing)} key(s) "
            f"not found in the checkpoint: {', '.join(missing)}"
            + (f"; also mismatched: {'; '.join(wrong)}" if wrong else ""))
    if wrong:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Restoring from checkpoint {path} failed: {len(wrong)} "
            f"mismatch(es) between the checkpoint and the graph: {'; '.join(wrong)}")
    return tuple(ctx.to_device(tensors[name]) for name in names)


# -- sharded checkpoints -----------------------------------------------------------------------
def shard_path(data_file, shard, num_shards):
    """``P.safetensors`` -> ``P-0000<shard>-of-0000<num_shards>.safetensors``."""
    stem = data_file[:-len(DATA_SUFFIX)] if data_file.endswith(DATA_SUFFIX) else data_file
    return f"{stem}-{shard:05d}-of-{num_shards:05d}{DATA_SUFFIX}"


def index_path(data_file):
    """The index of a sharded checkpoint whose single-file name would be ``data_file``."""
    return data_file + INDEX_SUFFIX


def read_index(path):
    """``{tensor name: shard file path}`` of a sharded checkpoint's index file.

    Raises:
        NotFoundError: if the index does not exist.
        DataLossError: if it is malformed, or names a shard outside its directory.
    """
    try:
        with open(path, "rb") as fileobj:
            raw = fileobj.read(MAX_INDEX_BYTES + 1)
    except FileNotFoundError:
        raise errors.NotFoundError(None, None, f"Failed to find any matching files for "
                                   f"{path}") from None
    if len(raw) > MAX_INDEX_BYTES:
        raise _corrupt(path, f"the index is larger than {MAX_INDEX_BYTES} bytes")
    try:
        index = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _corrupt(path, f"the index is not JSON ({exc})") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise _corrupt(path, "the index has no weight_map object")
    directory = os.path.dirname(os.path.abspath(path))
    out = {}
    for name, shard in weight_map.items():
        # Shards sit beside their index: a name with a directory part is not ours.
        if not isinstance(shard, str) or not shard or shard != os.path.basename(shard) \
                or shard.startswith("."):
            raise _corrupt(path, f"tensor {name!r} names shard {shard!r}, which is not a file "
                           "name beside the index")
        out[name] = os.path.join(directory, shard)
    return out


def read_checkpoint(path, names):
    """``(tensors, entries)`` of ``names`` from a checkpoint: the file ``path`` if it exists,
    else the sharded checkpoint whose index is ``index_path(path)``.

    Raises:
        NotFoundError: if neither exists.
        DataLossError: if a file is malformed.
    """
    if os.path.exists(path) or not os.path.isfile(index_path(path)):
        tensors, _, entries = read_safetensors(path, names)
        return tensors, entries
    where = read_index(index_path(path))
    by_shard = {}
    for name in names:
        if name in where:
            by_shard.setdefault(where[name], []).append(name)
    tensors, entries = {}, {}
    for shard, wanted in by_shard.items():
        got, _, shard_entries = read_safetensors(shard, wanted)
        tensors.update(got)
        entries.update((name, shard_entries[name]) for name in wanted if name in shard_entries)
    return tensors, entries


@register_kernel("ShardedFilename")
def _sharded_filename(ctx, filename):
    path = shard_path(_string(filename), ctx.attrs["shard"], ctx.attrs["num_shards"])
    return (np.array(path.encode(), dtype=object),)


@register_kernel("MergeCheckpointShards", offload=True)
def _merge_shards(ctx, filename, global_step):
    path = _string(filename)
    shards = ctx.attrs["shard_tensor_names"]
    weight_map = {}
    for shard, names in enumerate(shards):
        shard_file = shard_path(path, shard, len(shards))
        try:
            with open(shard_file, "rb") as fileobj:
                entries, _, _ = read_safetensors_header(fileobj, shard_file,
                                                        os.fstat(fileobj.fileno()).st_size)
        except FileNotFoundError:
            raise errors.NotFoundError(None, ctx.name, f"shard {shard} of checkpoint {path} "
                                       f"({shard_file}) was not written") from None
        missing = [name for name in names if name not in entries]
        if missing:
            raise _corrupt(shard_file, f"it lacks {', '.join(missing)}")
        weight_map.update((name, os.path.basename(shard_file)) for name in names)
    index = {"metadata": {"format": FORMAT, "format_version": FORMAT_VERSION,
                          "global_step": str(int(_host(global_step))),
                          "num_shards": str(len(shards))},
             "weight_map": dict(sorted(weight_map.items()))}
    content = json.dumps(index, indent=1).encode()
    atomic_write(index_path(path), lambda fileobj: fileobj.write(content))
    return ()
