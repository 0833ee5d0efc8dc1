"""A checkpoint's bookkeeping files, and the kernels that write and read them where the data is.

A checkpoint ``<prefix>`` is its data (``<prefix>.safetensors``, or shards and an index: see
``kernels/checkpoint.py``), its meta graph ``<prefix>.meta`` and the directory's state file
``checkpoint`` (TF's text format: ``model_checkpoint_path: "..."`` then
``all_model_checkpoint_paths: "..."`` lines, paths inside the directory relative to it). The
functions here are that format; ``af.train.Saver`` uses them directly for a local session.

For a session on a cluster the Saver's data is written by the Save op on a worker, inside that
worker's data directory, so the meta graph and the state file must be written there too, or a
second client could not find them: ``CommitCheckpoint`` and ``LatestCheckpoint`` are the two
ops that do so, colocated with the Saver's Save op. Every path they take is resolved by
``ctx.resolve_path`` (relative to the worker's data directory, confined to it).

- ``CommitCheckpoint(prefix, meta_graph, kept, doomed, latest_filename, meta_graph_suffix)``
  (``prefix`` may end in ``.safetensors``, the Save op's file name, which the Saver feeds to
  both, so that one step runs Save and then this): writes ``meta_graph`` (bytes; empty: none) to
  ``<prefix>.<suffix>``; unless ``kept`` is empty, rewrites the state file to name ``prefix``
  as the latest and ``kept`` as all kept checkpoints; then deletes the files of every prefix
  in ``doomed`` and the directory's stale temporaries. Each write is atomic.
- ``LatestCheckpoint(directory, latest_filename)``: the latest checkpoint's prefix
  named by the directory's state file (joined to ``directory`` as given when relative), or
  ``""`` when there is no state file or the files it names are not all there.
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from asyncflow import errors
from asyncflow.kernels.checkpoint import (
    DATA_SUFFIX, INDEX_SUFFIX, atomic_write, index_path, read_index,
    remove_stale_temporaries_ending,
)
from asyncflow.kernels.registry import register_kernel

STATE_FILENAME = "checkpoint"


def data_path(checkpoint_path):
    """The data file of a checkpoint prefix (a path already ending in the suffix is kept)."""
    return checkpoint_path if checkpoint_path.endswith(DATA_SUFFIX) else checkpoint_path + DATA_SUFFIX


def committed_file(checkpoint_path):
    """The data file of a checkpoint, or the index of a sharded one; None if neither."""
    for path in (data_path(checkpoint_path), index_path(data_path(checkpoint_path))):
        if os.path.isfile(path):
            return path
    return None


# -- the state file -----------------------------------------------------------------------
def quote(text):
    out = []
    for byte in text.encode():
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def unquote(text):
    text = text.strip()
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise ValueError(f"expected a quoted string, got {text!r}")
    body, out, i = text[1:-1], bytearray(), 0
    escapes = {"n": 10, "t": 9, "r": 13, '"': 34, "'": 39, "\\": 92}
    while i < len(body):
        char = body[i]
        if char != "\\":
            out += char.encode()
            i += 1
        elif body[i + 1:i + 2] in escapes:
            out.append(escapes[body[i + 1]])
            i += 2
        elif body[i + 1:i + 4].isdigit():
            out.append(int(body[i + 1:i + 4], 8))
            i += 4
        else:
            raise ValueError(f"bad escape in {text!r}")
    return out.decode()


def _relative(path, directory):
    if os.path.dirname(os.path.abspath(path)) == os.path.abspath(directory):
        return os.path.basename(path)
    return path


def write_state(directory, latest, all_paths, latest_filename=None):
    lines = [f"model_checkpoint_path: {quote(_relative(latest, directory))}"]
    lines += [f"all_model_checkpoint_paths: {quote(_relative(p, directory))}" for p in all_paths]
    content = ("\n".join(lines) + "\n").encode()
    atomic_write(os.path.join(directory, latest_filename or STATE_FILENAME),
                 lambda f: f.write(content))


def parse_state(text, checkpoint_dir, where):
    """``(latest, all_paths)`` of a state file's text, relative paths joined to
    ``checkpoint_dir``; None (with a warning naming ``where``) if it is malformed."""
    latest, all_paths = None, []
    try:
        for line in text.splitlines():
            if not line.strip():
                continue
            key, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"bad line {line!r}")
            value = unquote(value)
            if not os.path.isabs(value):
                value = os.path.join(checkpoint_dir, value)
            if key.strip() == "model_checkpoint_path":
                latest = value
            elif key.strip() == "all_model_checkpoint_paths":
                all_paths.append(value)
    except (ValueError, UnicodeDecodeError) as exc:
        warnings.warn(f"{where}: checkpoint state ignored: {exc}", stacklevel=3)
        return None
    if latest is None:
        return None
    if latest not in all_paths:
        all_paths.append(latest)
    return latest, all_paths


def remove_checkpoint(prefix, meta_graph_suffix):
    """Delete a checkpoint's files (a sharded one's index first, then its shards)."""
    paths = [data_path(prefix), f"{prefix}.{meta_graph_suffix}"]
    index = index_path(data_path(prefix))
    if os.path.isfile(index):
        try:
            shards = sorted(set(read_index(index).values()))
        except errors.OpError:
            shards = []
        paths[1:1] = [index] + shards  # the index first: then the shards are no checkpoint
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def commit_state(directory, latest, kept, doomed, latest_filename, meta_graph_suffix):
    """Point the state file at ``latest``, then delete ``doomed`` and stale temporaries."""
    # The state file is written (temporary, fsync, rename, directory fsync) only after
    # every file of the checkpoint is: it is durable before anything old is deleted.
    write_state(directory, latest, kept, latest_filename)
    for prefix in doomed:
        remove_checkpoint(prefix, meta_graph_suffix)
    remove_stale_temporaries_ending(directory, (
        DATA_SUFFIX, INDEX_SUFFIX, "." + meta_graph_suffix, latest_filename or STATE_FILENAME))


# -- kernels ---------------------------------------------------------------------------------
def _text(value):
    item = np.asarray(value, dtype=object).reshape(()).item()
    return item.decode() if isinstance(item, bytes) else str(item)


def _texts(values):
    return [v.decode() if isinstance(v, bytes) else str(v)
            for v in np.asarray(values, dtype=object).reshape(-1)]


@register_kernel("CommitCheckpoint", blocking_io=True)
def _commit_checkpoint(ctx, prefix, meta_graph, kept, doomed, latest_filename, suffix):
    path = ctx.resolve_path(_text(prefix))
    path = path[:-len(DATA_SUFFIX)] if path.endswith(DATA_SUFFIX) else path  # Save's file name
    suffix = _text(suffix)
    meta = np.asarray(meta_graph, dtype=object).reshape(()).item()
    if meta:
        meta = meta if isinstance(meta, bytes) else str(meta).encode()
        atomic_write(f"{path}.{suffix}", lambda fileobj: fileobj.write(meta))
    kept = [ctx.resolve_path(p) for p in _texts(kept)]
    if kept:
        commit_state(os.path.dirname(os.path.abspath(path)), path, kept,
                     [ctx.resolve_path(p) for p in _texts(doomed)],
                     _text(latest_filename) or None, suffix)
    return ()


@register_kernel("LatestCheckpoint", blocking_io=True, abandon=True)
def _latest_checkpoint(ctx, directory, latest_filename):
    given = _text(directory)
    state_file = ctx.resolve_path(os.path.join(given, _text(latest_filename) or STATE_FILENAME))
    found = ""
    try:
        with open(state_file, encoding="utf-8") as fileobj:
            text = fileobj.read()
    except OSError:
        text = None
    parsed = None if text is None else parse_state(text, given, state_file)
    if parsed is not None and committed_file(ctx.resolve_path(parsed[0])) is not None:
        found = parsed[0]
    out = np.empty((), dtype=object)
    out[()] = found.encode()
    return (out,)
