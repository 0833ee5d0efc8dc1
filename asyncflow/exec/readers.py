"""Reader resources: files named by a queue of filenames turned into records (TF1's ReaderBase).

Theory of operation
- A reader works through *work units* (files). ``read_up_to(queue, n)`` returns up to ``n``
  records: while it needs more, it takes records from the current file; when the file is used
  up it dequeues the next filename from ``queue`` (waiting like any dequeue) and loads it.
  When the filename queue is closed and drained it returns what it has, or, with nothing,
  lets the queue's OutOfRangeError through: that is how ``num_epochs`` ends an input pipeline.
- Loading never blocks the event loop: the whole file is read and parsed on a worker thread
  (``trio.to_thread.run_sync``); records are then served from memory.
- Each reader keeps the parsed records of the files it loaded (least recently used first
  out, up to ``CACHE_BYTES`` of file size), keyed by path and checked against the file's
  ``(mtime_ns, size, inode)`` on reuse, so the next epoch over unchanged files costs a
  ``stat`` instead of a worker-thread load (whose GIL hand-offs wait out the event loop's
  switch interval, milliseconds per file). A changed file is read again.
- ``read_up_to_nowait`` serves a read that needs no load (records in memory, or the next
  filename already queued and its file cached) inline: the executor's nowait twin, so such
  a read costs no task.
- Kinds: ``TextLineReader`` (a record is one line without its line ending; the key is
  ``b"file:line"``, 1-based, as in TF1; ``skip_header_lines`` skips each file's first lines)
  and ``NumpyRecordReader`` (a record is one row, along axis 0, of a ``.npy`` array or of each
  named array of a ``.npz`` archive; the key is ``b"file:row"``, 0-based).
- One read at a time per reader (a trio Lock), as TF1 serializes a reader's ops. The current
  filename is recorded before its file loads, so a read cancelled mid-load reloads that file on
  the next read instead of skipping it.
"""
from __future__ import annotations

import collections
import dataclasses
import os

import numpy as np
import trio

from asyncflow import errors
from asyncflow.exec.resources import process_resources

TEXT_LINE, NUMPY_RECORD = "TextLineReader", "NumpyRecordReader"
CACHE_BYTES = 64 << 20  # per reader: parsed files kept for later epochs, by file size


@dataclasses.dataclass(frozen=True, slots=True)
class ReaderStatistics:
    name: str
    records_produced: int
    work_units_completed: int
    current_work: bytes | None


class ReaderResource:
    """The state of one reader.

    Args:
        kind: ``TEXT_LINE`` or ``NUMPY_RECORD``.
        name: the reader's name (error messages).
        skip_header_lines: TextLineReader: lines to skip at the top of each file.
        names: NumpyRecordReader: the ``.npz`` array names, one per component; None reads a
            ``.npy`` file as the single component.
        dtypes: NumpyRecordReader: numpy dtypes per component (a file's arrays must match).
        shapes: NumpyRecordReader: per component the row shape (tuple with None for unknown
            dims) or None.
    """

    def __init__(self, kind, name, skip_header_lines=0, names=None, dtypes=(), shapes=None,
                 resolve=None):
        self.kind = kind
        self._resolve = resolve  # path -> the path to open (a worker's data directory check)
        self.name = name
        self.skip_header_lines = skip_header_lines
        self.names = names
        self.dtypes = tuple(dtypes)
        self.shapes = shapes
        self._lock = trio.Lock()
        self._cache = collections.OrderedDict()  # path -> (signature, records), LRU order
        self._cache_bytes = 0
        self._key_lists = {}  # (filename, records) -> the file's keys, built once
        self.reset()

    def reset(self):
        """Forget the current file and the counters (ReaderReset)."""
        self._work = None
        self._records = None   # text: list of lines; numpy: tuple of arrays
        self._count = 0        # records in the loaded file
        self._position = 0
        self._produced = 0
        self._completed = 0

    def statistics(self):
        return ReaderStatistics(self.name, self._produced, self._completed, self._work)

    @property
    def records_produced(self):
        return self._produced

    @property
    def work_units_completed(self):
        return self._completed

    def read(self):
        """The handle's value when a client fetches it."""
        return self.name.encode()

    async def read_up_to(self, queue, n):
        """Up to ``n`` records as ``(keys, components)``.

        ``keys`` is a list of bytes; ``components`` holds, per component, a list of row
        values (text: bytes; numpy: arrays) for a single-record read, or stacked arrays.

        Raises:
            OutOfRangeError: the filename queue is closed and drained and nothing was read.
            NotFoundError: a file does not exist.
            InvalidArgumentError: a file's content does not match the reader's dtypes/shapes.
        """
        async with self._lock:
            keys, pieces = [], []
            while len(keys) < n:
                if self._records is None or self._position >= self._count:
                    if self._records is not None:
                        self._finish_work()
                    try:
                        if self._work is None:
                            self._work = _filename(await queue.dequeue())
                        await self._load()
                    except errors.OutOfRangeError:
                        if keys:
                            break
                        raise
                    continue
                self._take(n - len(keys), keys, pieces)
            return keys, self._join(pieces)

    def read_up_to_nowait(self, queue, n):
        """``read_up_to`` when it need not wait, else None (then await ``read_up_to``).

        It succeeds when no other read is running and the records can come from the current
        file and, past its end, from the file of the next filename ``queue`` holds, if that
        file is cached; the records are the ones ``read_up_to`` would return.
        """
        if self._lock.locked():
            return None
        if self._records is None or self._position >= self._count:
            if not self._next_cached(queue):
                return None
        short = n - (self._count - self._position)
        if short > 0 and not self._next_holds(queue, short):
            return None
        keys, pieces = [], []
        self._take(n, keys, pieces)
        if short > 0:
            self._next_cached(queue)  # the file _next_holds found: takes no wait
            self._take(short, keys, pieces)
        return keys, self._join(pieces)

    def _next_holds(self, queue, count):
        """Whether the filename ``queue`` will hand out next is cached with ``count`` records."""
        element = queue.peek_nowait()
        if element is None:
            return False
        records = self._cached(os.fsdecode(_filename(element)))
        if records is None:
            return False
        return (len(records) if self.kind == TEXT_LINE else len(records[0])) >= count

    def _next_cached(self, queue):
        """Move on to the next file without waiting; False where that would wait.

        A filename dequeued here whose file is not cached stays the current work, so the
        awaited ``read_up_to`` loads it next.
        """
        if self._records is not None:
            self._finish_work()
        if self._work is None:
            try:
                taken = queue.poll_dequeue_many(1)
            except errors.OutOfRangeError:
                return False  # read_up_to raises it, or returns what it has
            if taken is None:
                return False
            self._work = _filename(taken[0])
        records = self._cached(os.fsdecode(self._work))
        if records is None:
            return False
        self._loaded(records)
        return True

    def _take(self, want, keys, pieces):
        """Serve up to ``want`` records of the loaded file into ``keys`` and ``pieces``."""
        take = min(want, self._count - self._position)
        start = self._position
        self._position += take
        self._produced += take
        keys.extend(self._keys()[start:start + take])
        pieces.append(self._slice(start, start + take))

    def _keys(self):
        """The keys of the current file's records (built on its first read, then reused)."""
        entry = (self._work, self._count)
        keys = self._key_lists.get(entry)
        if keys is None:
            if len(self._key_lists) >= 4 * max(len(self._cache), 16):
                self._key_lists.clear()
            prefix = self._work.decode(errors="replace").encode() + b":"
            offset = self._key(0)
            keys = self._key_lists[entry] = [b"%s%d" % (prefix, i + offset)
                                             for i in range(self._count)]
        return keys

    def _finish_work(self):
        self._completed += 1
        self._work = None
        self._records = None

    def _key(self, index):
        return index + 1 + self.skip_header_lines if self.kind == TEXT_LINE else index

    def _slice(self, start, stop):
        if self.kind == TEXT_LINE:
            return (self._records[start:stop],)
        return tuple(array[start:stop] for array in self._records)

    def _join(self, pieces):
        if self.kind == TEXT_LINE:
            lines = [line for piece in pieces for line in piece[0]]
            out = np.empty(len(lines), dtype=object)
            out[:] = lines
            return (out,)
        if not pieces:
            return tuple(np.zeros((0,) + tuple(s or 0 for s in (shape or ())), dtype)
                         for dtype, shape in zip(self.dtypes, self.shapes or [None] * len(self.dtypes)))
        if len(pieces) == 1:
            return pieces[0]
        return tuple(np.concatenate(parts) for parts in zip(*pieces))

    def _cached(self, path):
        """The cached records of ``path`` if its file is unchanged since it was parsed."""
        entry = self._cache.get(path)
        if entry is None:
            return None
        try:
            stat = os.stat(path)
        except OSError:
            return None  # gone or unreadable: the load reports it
        if entry[0] != (stat.st_mtime_ns, stat.st_size, stat.st_ino):
            return None
        self._cache.move_to_end(path)
        return entry[1]

    def _remember(self, path, signature, records):
        size = signature[1]
        if size > CACHE_BYTES:
            return
        old = self._cache.pop(path, None)
        if old is not None:
            self._cache_bytes -= old[0][1]
        self._cache[path] = (signature, records)
        self._cache_bytes += size
        while self._cache_bytes > CACHE_BYTES:
            _, (evicted, _) = self._cache.popitem(last=False)
            self._cache_bytes -= evicted[1]

    def _loaded(self, records):
        self._records = records
        self._count = len(records) if self.kind == TEXT_LINE else len(records[0])
        self._position = 0

    async def _load(self):
        path = os.fsdecode(self._work)
        if self._resolve is not None:
            path = self._resolve(path)
        records = self._cached(path)
        if records is not None:
            self._loaded(records)
            return
        loader = _load_text if self.kind == TEXT_LINE else self._load_numpy
        try:
            signature, records = await trio.to_thread.run_sync(_signed, loader, path,
                                                               self.skip_header_lines)
        except FileNotFoundError:
            raise errors.NotFoundError(None, None, f"{self.kind} '{self.name}': file {path} "
                                       "does not exist") from None
        except OSError as exc:
            raise errors.UnknownError(None, None, f"{self.kind} '{self.name}': cannot read "
                                      f"{path}: {exc}") from exc
        self._remember(path, signature, records)
        self._loaded(records)

    def _load_numpy(self, path, _skip):
        """Load a .npy file or the named arrays of a .npz file, checked (worker thread)."""
        loaded = np.load(path, allow_pickle=False)
        try:
            if isinstance(loaded, np.ndarray):
                if self.names is not None:
                    raise self._bad(path, f"is a single .npy array, but the reader wants the "
                                    f"named arrays {list(self.names)} of an .npz archive")
                arrays = (loaded,)
            elif self.names is None:
                raise self._bad(path, f"is an .npz archive (arrays {sorted(loaded.files)}); "
                                "pass names= to say which arrays to read")
            else:
                missing = [n for n in self.names if n not in loaded.files]
                if missing:
                    raise self._bad(path, f"has no arrays {missing}; it holds "
                                    f"{sorted(loaded.files)}")
                arrays = tuple(loaded[n] for n in self.names)
        finally:
            if hasattr(loaded, "close"):
                loaded.close()
        return self._check(path, arrays)

    def _check(self, path, arrays):
        labels = self.names or ["array"]
        rows = {len(a) if a.ndim else None for a in arrays}
        if None in rows or len(rows) != 1:
            raise self._bad(path, "arrays must have a leading record axis of one common length; "
                            f"shapes are {[a.shape for a in arrays]}")
        out = []
        for j, array in enumerate(arrays):
            dtype = self.dtypes[j]
            if array.dtype != dtype:
                if not np.can_cast(array.dtype, dtype, "same_kind"):
                    raise self._bad(path, f"{labels[j]} has dtype {array.dtype}, but the reader "
                                    f"declares {dtype}")
                array = array.astype(dtype)
            shape = self.shapes[j] if self.shapes else None
            if shape is not None and (len(shape) != array.ndim - 1 or any(
                    s is not None and s != d for s, d in zip(shape, array.shape[1:]))):
                raise self._bad(path, f"{labels[j]} has records of shape {list(array.shape[1:])}"
                                f", but the reader declares {list(shape)}")
            array.flags.writeable = False
            out.append(array)
        return tuple(out)

    def _bad(self, path, what):
        return errors.InvalidArgumentError(None, None, f"{self.kind} '{self.name}': {path} {what}")


def _signed(loader, path, skip_header_lines):
    """``(signature, records)``: the file's identity, taken before it is read, and its records.

    Taking the signature first means a file rewritten during the load is re-read next time.
    """
    stat = os.stat(path)
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino), loader(path, skip_header_lines)


def _load_text(path, skip_header_lines):
    with open(path, "rb") as handle:
        data = handle.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    return lines[skip_header_lines:]


def _filename(element):
    value = element[0]
    value = value.item() if hasattr(value, "item") else value
    return value.encode() if isinstance(value, str) else bytes(value)


def lookup_or_create(node_ctx):
    """The reader resource a reader node names, created on first use."""
    attrs, kind = node_ctx.attrs, node_ctx.type
    shared = attrs.get("shared_name") or ""
    manager = process_resources() if shared and node_ctx.resources.local else node_ctx.resources
    name = shared or node_ctx.name

    def create():
        if kind == TEXT_LINE:
            return ReaderResource(kind, name,
                                  skip_header_lines=int(attrs.get("skip_header_lines", 0)),
                                  resolve=node_ctx.resolve_path)
        shapes = attrs.get("shapes") or None
        if shapes is not None:
            shapes = tuple(None if s.dims is None else tuple(s.dims) for s in shapes)
        names = attrs.get("names") or None
        return ReaderResource(kind, name, names=tuple(names) if names else None,
                              dtypes=tuple(d.np for d in attrs["component_types"]), shapes=shapes,
                              resolve=node_ctx.resolve_path)

    def check(existing):
        if not isinstance(existing, ReaderResource) or existing.kind != kind:
            raise errors.InvalidArgumentError(
                None, None, f"Shared resource '{name}' exists and is not a {kind}")
    return manager.lookup_or_create(attrs.get("container", ""), name, create, check)
