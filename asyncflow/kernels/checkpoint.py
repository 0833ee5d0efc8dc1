"""Kernels of Save/Restore and the checkpoint file format (safetensors, written atomically).

File layout: the safetensors format, written and read by the ``safetensors`` package (an
8-byte header length, a JSON header naming each tensor's dtype, shape and byte range plus a
``"__metadata__"`` map of strings -- ``format``, ``format_version``, ``global_step`` -- then the
raw little-endian bytes). Every dtype asyncflow has except ``string`` has a safetensors code
(bfloat16 is ``BF16``); a string tensor cannot be saved: the ``Save`` op refuses it when the
graph is built, and ``write_safetensors`` raises ``TypeError`` naming the tensor.

Writing hands the library pointers to the arrays (no copy) and it writes them to a temporary
file. Reading goes through the library's memory-mapped reader (``safe_open(...,
framework="numpy")``): each tensor is copied once, from the mapped file into its own array,
which is marked read-only so that ``Assign`` keeps it instead of copying it again. The pages
a reader touches stay mapped (and resident) until it closes, so a restore reopens the file
every ``MAPPED_WINDOW_BYTES``: a 1 GiB restore peaks near 1 GiB plus a window, not 2 GiB. It
checks that every reopen maps the same file (device, inode, size, mtime), so a save that
replaces the file mid-restore cannot mix two versions: the read starts again.

Atomicity: a file is written to a temporary name in the same directory, fsynced, renamed over
the final name with ``os.replace`` (atomic on POSIX), and then the directory is fsynced so the
rename itself is durable. A reader therefore sees either the old complete file or the new
complete file, never a torn one; a crash leaves at most a stray ``.*.tmp`` file, which the
next save of that name removes once it is ``STALE_TEMPORARY_S`` (a minute) old, and so does
the next ``Saver.save`` into the directory for every checkpoint file's temporaries.

Sharded checkpoints (``Saver(sharded=True)``, TF1's sharded saving): each task writes the
variables it holds into its own shard, ``<prefix>-0000i-of-0000n.safetensors`` (a whole
safetensors file, written atomically as above), and after every shard is on disk one
``MergeCheckpointShards`` op writes the index ``<prefix>.safetensors.index.json`` (the Hugging
Face layout: ``{"metadata": {...}, "weight_map": {tensor name: shard file name}}``, plus
``"crc32c"``, the CRC32C of the rest as canonical JSON, checked by ``read_index``), atomically
too. The index is the commit point: shards without an index are no checkpoint. ``Restore``
given ``<prefix>.safetensors`` reads that file if it exists, else the index, and then each
tensor from whichever shard holds it, so a checkpoint restores onto any cluster layout.

The library validates a file's header before it maps anything (a 100 MB header cap, offsets
that cover the data exactly); a malformed file raises ``DataLossError`` with its reason, a
missing one ``NotFoundError``.

Checksums (TF's tensor bundle keeps a CRC32C per tensor the same way): the writer stores in
``__metadata__`` a ``crc32c`` entry, a JSON map ``{tensor name: CRC32C of its bytes as 8 hex
digits}``, and a ``header_crc32c`` entry, the CRC32C of the header's meaning (every tensor's
name, dtype code and shape, the other metadata and the ``crc32c`` map, as canonical JSON), so
a flipped bit in a name, a shape, the step or a stored checksum is caught like one in the
data. A restore checks the header when it opens a file and each tensor as it copies it out of
the mapping (the copy is in cache: no second read from disk) and fails with
``DataLossError`` naming the file, the tensor and the stored and computed checksums. A file
written before checksums existed restores with one warning (``UncheckedCheckpointWarning``).
``verify_file`` checks a whole file without a graph (``asyncflow checkpoint verify``). The
checksum runs in C (``google-crc32c``, with the CPU's CRC instruction) at several GB/s.

The ``Restore`` kernel, which also reads slices of partitioned variables, is in
``checkpoint_slices.py``. The kernels run on a worker thread (the ops declare an unbounded cost and the kernels are
``offload`` kernels), so the event loop never blocks on the disk.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import tempfile
import time
import warnings

import google_crc32c
import numpy as np
import safetensors
import safetensors.numpy

from asyncflow import dtypes, errors
from asyncflow.kernels.arguments import host as _host
from asyncflow.kernels.registry import register_kernel

FORMAT = "asyncflow.checkpoint"
FORMAT_VERSION = "1"
MAX_INDEX_BYTES = 64 * 1024 * 1024
MAPPED_WINDOW_BYTES = 64 * 1024 * 1024  # of a file mapped at once while restoring
DATA_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".index.json"
CRC_KEY = "crc32c"                # __metadata__ entry: JSON {tensor name: 8 hex digits}
HEADER_CRC_KEY = "header_crc32c"  # __metadata__ entry: CRC32C of the canonical header
# safetensors' dtype codes of asyncflow's dtypes (what a header's "dtype" says).
_FROM_SAFETENSORS = {
    "F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16,
    "BF16": dtypes.bfloat16, "I64": dtypes.int64, "I32": dtypes.int32, "I16": dtypes.int16,
    "I8": dtypes.int8, "U64": dtypes.uint64, "U32": dtypes.uint32, "U16": dtypes.uint16,
    "U8": dtypes.uint8, "BOOL": dtypes.bool,
}


_TO_SAFETENSORS = {dtype: code for code, dtype in _FROM_SAFETENSORS.items()}


class UncheckedCheckpointWarning(UserWarning):
    """A checkpoint file without checksums (written before they existed) was restored."""


# -- checksums ---------------------------------------------------------------------------------
def _direct_extend():
    """``crc32c_extend(crc, address, length)`` of the C library ``google_crc32c`` wraps, via
    ctypes (no copy, the GIL released while it sums); None where it cannot be found.
    (``transports/checksum.py`` does the same for the wire; kernels cannot import it.)"""
    try:
        from google_crc32c import _crc32c
        function = ctypes.CDLL(_crc32c.__file__).crc32c_extend
    except (ImportError, OSError, AttributeError):
        return None
    function.restype = ctypes.c_uint32
    function.argtypes = (ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t)
    return function


_EXTEND = _direct_extend()


def crc32c(array, crc=0):
    """CRC32C of a C-contiguous array's bytes (extending ``crc``), without copying them.

    ``google_crc32c``'s Python functions take only ``bytes``; the C function they wrap is
    called with the array's address instead (copying to ``bytes`` only if it is missing).
    """
    array = np.asarray(array)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    if not array.nbytes:
        return crc
    if _EXTEND is None:
        return google_crc32c.extend(crc, array.tobytes())
    return _EXTEND(crc, array.ctypes.data, array.nbytes)


def _header_crc(entries, metadata):
    """CRC32C of what a header means: ``{name: (dtype code, shape)}`` and every metadata entry
    but ``header_crc32c`` itself, as canonical JSON (sorted keys, no spaces)."""
    meaning = {"tensors": {name: [code, list(shape)] for name, (code, shape) in entries.items()},
               "metadata": {k: v for k, v in metadata.items() if k != HEADER_CRC_KEY}}
    return google_crc32c.value(json.dumps(meaning, sort_keys=True,
                                          separators=(",", ":")).encode())


def _checksums(path, codes, metadata):
    """The stored ``{name: crc}`` of a file whose header checks out; None if it has none.

    Raises:
        DataLossError: if the header's checksum does not match it or the map is malformed.
    """
    if CRC_KEY not in metadata and HEADER_CRC_KEY not in metadata:
        return None
    try:
        stored_header = metadata[HEADER_CRC_KEY]
        sums = {name: int(value, 16) for name, value in json.loads(metadata[CRC_KEY]).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _corrupt(path, f"its checksum metadata is malformed ({exc!r})") from None
    found = f"{_header_crc(codes, metadata):08x}"
    if found != stored_header:  # compared as text: "C" for "c" is a flipped bit too
        raise _corrupt(path, f"the header (names, dtypes, shapes, metadata): Checksum does not "
                       f"match: stored {stored_header!r:.20}, computed {found!r}")
    if set(sums) != set(codes):
        raise _corrupt(path, "its checksums name other tensors than its header")
    return sums


def _check_tensor(path, name, array, sums):
    if sums is None:
        return
    found = crc32c(array)
    if found != sums[name]:
        raise _corrupt(path, f"tensor {name!r}: Checksum does not match: stored "
                       f"{sums[name]:08x}, computed {found:08x}")


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


def remove_stale_temporaries_ending(directory, endings):
    """Delete stale temporaries (as ``remove_stale_temporaries``) of any file in ``directory``
    whose name ends with one of ``endings``: a Saver calls it after each durable save, since
    the killed save of ``model-7`` left ``.model-7.safetensors.*.tmp``, a name no later save
    writes again. Returns the names removed."""
    now, removed = time.time(), []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if not (entry.name.startswith(".") and entry.name.endswith(".tmp")):
            continue
        target = entry.name[1:-len(".tmp")].rpartition(".")[0]  # drop mkstemp's random part
        if target and target.endswith(tuple(endings)):
            with contextlib.suppress(OSError):
                if now - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMPORARY_S:
                    os.unlink(entry.path)
                    removed.append(entry.name)
    return removed


def atomic_replace(path, fill):
    """Write a file so that ``path`` is always absent, the old file, or the complete new one.

    Args:
        path: the final file name.
        fill: ``fill(temporary_path)`` writing the whole content to that (existing, empty)
            file in the same directory; it is then fsynced and renamed to ``path``.
    """
    directory = os.path.dirname(os.path.abspath(path))
    remove_stale_temporaries(directory, os.path.basename(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    os.close(fd)
    try:
        fill(tmp)
        fd = os.open(tmp, os.O_WRONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(directory)


def atomic_write(path, write):
    """``atomic_replace`` for a writer of a binary file object: ``write(fileobj)``."""
    def fill(tmp):
        with open(tmp, "wb") as fileobj:
            write(fileobj)
    atomic_replace(path, fill)


# -- safetensors -------------------------------------------------------------------------------
def write_safetensors(path, tensors, metadata=None):
    """Atomically write ``{name: numpy array}`` as a safetensors file.

    Raises:
        TypeError: for an array whose dtype safetensors cannot hold (strings).
    """
    arrays = {}
    for name in sorted(tensors):
        array = np.asarray(tensors[name])
        try:
            dtype = dtypes.as_dtype(array.dtype)
        except TypeError:
            dtype = None
        if dtype is None or dtype.is_string:
            raise TypeError(f"tensor {name!r} has dtype {array.dtype}, which a checkpoint "
                            "cannot hold (safetensors has no string dtype)")
        if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and not np.little_endian):
            array = array.astype(array.dtype.newbyteorder("<"))  # the format is little-endian
        # The library reads the arrays through their data pointers: C order, no copy if so.
        arrays[name] = array if array.flags.c_contiguous else array.copy(order="C")
    metadata = {str(k): str(v) for k, v in (metadata or {}).items()
                if str(k) not in (CRC_KEY, HEADER_CRC_KEY)}
    metadata[CRC_KEY] = json.dumps({name: f"{crc32c(a):08x}" for name, a in arrays.items()},
                                   sort_keys=True, separators=(",", ":"))
    codes = {name: (_TO_SAFETENSORS[dtypes.as_dtype(a.dtype)], a.shape)
             for name, a in arrays.items()}
    metadata[HEADER_CRC_KEY] = f"{_header_crc(codes, metadata):08x}"
    atomic_replace(path, lambda tmp: safetensors.numpy.save_file(arrays, tmp, metadata))


def _corrupt(path, why):
    return errors.DataLossError(None, None, f"Checkpoint file {path} is corrupt: {why}")


@contextlib.contextmanager
def _open(path):
    """The library's memory-mapped reader of ``path``, with its errors mapped to ours."""
    try:
        handle = safetensors.safe_open(path, framework="numpy")
    except FileNotFoundError:
        raise errors.NotFoundError(None, None, f"Failed to find any matching files for "
                                   f"{path}") from None
    except safetensors.SafetensorError as exc:
        raise _corrupt(path, exc) from None
    with handle:
        try:
            yield handle
        except safetensors.SafetensorError as exc:
            raise _corrupt(path, exc) from None


def _codes(handle):
    """``{name: (the file's dtype code, shape)}``."""
    out = {}
    for name in handle.keys():
        view = handle.get_slice(name)
        out[name] = (view.get_dtype(), tuple(view.get_shape()))
    return out


def _entries(handle, codes=None):
    """``{name: (DType or the file's code if asyncflow has none, shape)}``."""
    codes = _codes(handle) if codes is None else codes
    return {name: (_FROM_SAFETENSORS.get(code, code), shape)
            for name, (code, shape) in codes.items()}


def read_safetensors_entries(path):
    """``(entries, metadata)`` of a safetensors file: its header (checksum checked), no
    tensor read.

    Raises:
        NotFoundError: if the file does not exist.
        DataLossError: if it is malformed or its header does not match its checksum.
    """
    with _open(path) as handle:
        codes, metadata = _codes(handle), dict(handle.metadata() or {})
        _checksums(path, codes, metadata)
        return _entries(handle, codes), metadata


def verify_file(path):
    """Check every tensor of a checkpoint file against its stored checksum, no graph needed.

    Reads the file in windows (as a restore does) and keeps no tensor.

    Returns:
        ``{"path", "tensors", "bytes", "checked" (False: the file has no checksums),
        "global_step" (None if absent), "skipped" (names of dtypes asyncflow lacks)}``.

    Raises:
        NotFoundError: if the file does not exist.
        DataLossError: naming the tensor (or the header) whose bytes do not match.
        AbortedError: if the file was replaced during each of three reads.
    """
    for _ in range(3):
        counted = [0, 0]

        def keep(name, array):
            counted[0] += 1
            counted[1] += array.nbytes

        try:
            metadata, entries, checked = _read_all(path, None, keep, warn=False)
        except _Replaced:
            continue
        skipped = sorted(n for n, (dtype, _) in entries.items()
                         if not isinstance(dtype, dtypes.DType))
        return {"path": path, "tensors": counted[0], "bytes": counted[1], "checked": checked,
                "global_step": metadata.get("global_step"), "skipped": skipped}
    raise errors.AbortedError(None, None, f"Checkpoint file {path} was replaced while it was "
                              "being verified, three times; verify it again")


def _identity(path):
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


class _Replaced(Exception):
    """The file at a path was replaced between two opens of one read."""


@contextlib.contextmanager
def _open_file(path, identity=None):
    """``(handle, identity)``: ``_open(path)`` and the identity of the file it maps (the same
    before and after opening), which must equal ``identity`` when one is given."""
    before = _identity(path)
    with _open(path) as handle:
        after = _identity(path)
        if before != after or identity is not None and after != identity:
            raise _Replaced(path)
        yield handle, after


def _read_window(handle, pending, keep):
    """Copy tensors named in ``pending`` out of the mapping, handing each to ``keep(name,
    array)``, until ``MAPPED_WINDOW_BYTES`` were read.

    The pages a handle touches stay mapped until it closes: reading in windows of one handle
    each keeps at most a window of the file mapped next to the copies being made.
    """
    mapped = 0
    while pending and mapped < MAPPED_WINDOW_BYTES:
        name = pending.pop()
        array = handle.get_tensor(name)
        keep(name, array)
        mapped += array.nbytes


def _read_all(path, names, keep, warn):
    """Read ``names`` (None: all) of one version of a file, checking each tensor's checksum
    before ``keep(name, array)`` gets it; returns ``(metadata, entries, checked)``."""
    with _open_file(path) as (handle, identity):
        codes, metadata = _codes(handle), dict(handle.metadata() or {})
        entries = _entries(handle, codes)
        sums = _checksums(path, codes, metadata)
        if sums is None and warn:
            warnings.warn(f"Checkpoint file {path} has no checksums (it was written before "
                          "asyncflow stored them): its tensors are restored unverified",
                          UncheckedCheckpointWarning, stacklevel=4)

        def check_and_keep(name, array):
            _check_tensor(path, name, array, sums)
            keep(name, array)

        # A dtype asyncflow lacks is not read: the caller reports it as a mismatch.
        pending = [name for name in (entries if names is None else names)
                   if name in entries and isinstance(entries[name][0], dtypes.DType)][::-1]
        _read_window(handle, pending, check_and_keep)
    while pending:
        with _open_file(path, identity) as (handle, _):
            _read_window(handle, pending, check_and_keep)
    return metadata, entries, sums is not None


def _read_once(path, names):
    out = {}

    def keep(name, array):
        array.flags.writeable = False  # nobody else holds it: Assign need not copy it
        out[name] = array

    metadata, entries, _ = _read_all(path, names, keep, warn=True)
    return out, metadata, entries


def read_safetensors(path, names=None):
    """``(tensors, metadata, entries)`` of a safetensors file (tensors: only ``names`` if given).

    Each tensor is one read-only array of its own, copied once out of the mapped file. All
    come from one version of the file: if a save replaces it while it is read, the read
    starts again.

    Raises:
        NotFoundError: if the file does not exist.
        DataLossError: if it is malformed or truncated.
        AbortedError: if the file was replaced during each of three reads.
    """
    for _ in range(3):
        try:
            return _read_once(path, names)
        except _Replaced:
            continue
    raise errors.AbortedError(None, None, f"Checkpoint file {path} was replaced while it was "
                              "being read, three times; restore it again")


# -- kernels -------------------------------------------------------------------------------------
def _string(value):
    value = value.reshape(()).item() if hasattr(value, "reshape") else value
    return value.decode() if isinstance(value, bytes) else str(value)


@register_kernel("Save", blocking_io=True)
def _save(ctx, filename, global_step, *values):
    path = ctx.resolve_path(_string(filename))
    tensors = {}
    for name, value in zip(ctx.attrs["tensor_names"], values):
        # Variables may live on a GPU: their values are copied to the host to be written.
        tensors[name] = _host(value.read() if hasattr(value, "read") else value)
    metadata = {"format": FORMAT, "format_version": FORMAT_VERSION,
                "global_step": str(int(_host(global_step)))}
    # The folder is made as a local Saver.save makes it (on a worker: inside its data dir).
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_safetensors(path, tensors, metadata)
    return ()


# -- sharded checkpoints -----------------------------------------------------------------------
def shard_path(data_file, shard, num_shards):
    """``P.safetensors`` -> ``P-0000<shard>-of-0000<num_shards>.safetensors``."""
    stem = data_file[:-len(DATA_SUFFIX)] if data_file.endswith(DATA_SUFFIX) else data_file
    return f"{stem}-{shard:05d}-of-{num_shards:05d}{DATA_SUFFIX}"


def index_path(data_file):
    """The index of a sharded checkpoint whose single-file name would be ``data_file``."""
    return data_file + INDEX_SUFFIX


def _index_crc(index):
    """CRC32C (8 hex digits) of an index's meaning: every key but the sum, canonical JSON."""
    meaning = {k: v for k, v in index.items() if k != CRC_KEY}
    text = json.dumps(meaning, sort_keys=True, separators=(",", ":"))
    return f"{google_crc32c.value(text.encode()):08x}"


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
    if not set(index) <= {"metadata", "weight_map", CRC_KEY}:
        raise _corrupt(path, f"the index has keys {sorted(index)!r:.200}")
    if CRC_KEY in index:  # indexes written before checksums have none
        found = _index_crc(index)
        if index[CRC_KEY] != found:
            raise _corrupt(path, f"the index: Checksum does not match: stored "
                           f"{index[CRC_KEY]!r:.20}, computed {found!r}")
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


@register_kernel("MergeCheckpointShards", blocking_io=True)
def _merge_shards(ctx, filename, global_step):
    path = ctx.resolve_path(_string(filename))
    shards = ctx.attrs["shard_tensor_names"]
    weight_map = {}
    for shard, names in enumerate(shards):
        shard_file = shard_path(path, shard, len(shards))
        if not os.path.isfile(shard_file):
            raise errors.NotFoundError(None, ctx.name, f"shard {shard} of checkpoint {path} "
                                       f"({shard_file}) was not written")
        entries, _ = read_safetensors_entries(shard_file)
        missing = [name for name in names if name not in entries]
        if missing:
            raise _corrupt(shard_file, f"it lacks {', '.join(missing)}")
        weight_map.update((name, os.path.basename(shard_file)) for name in names)
    index = {"metadata": {"format": FORMAT, "format_version": FORMAT_VERSION,
                          "global_step": str(int(_host(global_step))),
                          "num_shards": str(len(shards))},
             "weight_map": dict(sorted(weight_map.items()))}
    index[CRC_KEY] = _index_crc(index)
    content = json.dumps(index, indent=1).encode()
    atomic_write(index_path(path), lambda fileobj: fileobj.write(content))
    return ()
