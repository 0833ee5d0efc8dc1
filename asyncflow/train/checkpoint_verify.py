"""Checking checkpoints without a graph (``asyncflow checkpoint verify PATH``).

TF1's ``inspect_checkpoint`` reads a bundle without building a model; this reads every
tensor of a checkpoint and compares its bytes with the CRC32C stored beside it (see
``kernels/checkpoint.py``), so a damaged file is found before a restore needs it.

``PATH`` may be a checkpoint prefix (``ckpt/model-7``), a data file, a sharded checkpoint's
index, or a directory: then every checkpoint its ``checkpoint`` state file lists.
"""
from __future__ import annotations

import dataclasses
import os

from asyncflow import errors
from asyncflow.kernels import checkpoint as _files
from asyncflow.train.saver import data_path, get_checkpoint_state


@dataclasses.dataclass
class FileReport:
    """The outcome of checking one file.

    Attributes:
        path: the file.
        ok: every tensor matches its checksum (or the file has none, see ``checked``).
        checked: the file has checksums (False: written before they existed).
        tensors: tensors read; ``nbytes``: their bytes.
        global_step: the step in the file's metadata (None if absent).
        problem: why it is not ok (the DataLossError's or NotFoundError's message).
    """

    path: str
    ok: bool
    checked: bool = False
    tensors: int = 0
    nbytes: int = 0
    global_step: str | None = None
    problem: str | None = None


def checkpoint_files(path):
    """The data files (and index files) that make up the checkpoint(s) ``path`` names.

    Raises:
        NotFoundError: if ``path`` names no checkpoint.
    """
    if os.path.isdir(path):
        state = get_checkpoint_state(path)
        if state is None:
            raise errors.NotFoundError(None, None, f"{path} has no readable 'checkpoint' "
                                       "state file; name a checkpoint prefix or file instead")
        return [f for prefix in state.all_model_checkpoint_paths
                for f in checkpoint_files(prefix)]
    if path.endswith(_files.INDEX_SUFFIX):
        return [path]
    if os.path.isfile(path):
        return [path]
    data = data_path(path)
    if os.path.isfile(data):
        return [data]
    if os.path.isfile(_files.index_path(data)):
        return [_files.index_path(data)]
    raise errors.NotFoundError(None, None, f"Failed to find any matching files for {path}")


def _verify_index(path):
    """Check a sharded checkpoint's index and each shard it names."""
    reports = []
    try:
        where = _files.read_index(path)
    except errors.OpError as exc:
        return [FileReport(path, ok=False, problem=exc.message)]
    reports.append(FileReport(path, ok=True, checked=True, tensors=len(where)))
    for shard in sorted(set(where.values())):
        report = _verify_data(shard)
        wanted = sorted(name for name, holder in where.items() if holder == shard)
        if report.ok:
            entries, _ = _files.read_safetensors_entries(shard)
            missing = [name for name in wanted if name not in entries]
            if missing:
                report.ok = False
                report.problem = (f"the index {path} places {', '.join(missing)} in this "
                                  "shard, which lacks them")
        reports.append(report)
    return reports


def _verify_data(path):
    try:
        got = _files.verify_file(path)
    except errors.OpError as exc:
        return FileReport(path, ok=False, problem=exc.message)
    return FileReport(path, ok=True, checked=got["checked"], tensors=got["tensors"],
                      nbytes=got["bytes"], global_step=got["global_step"])


def verify_checkpoint(path):
    """Check every file of the checkpoint(s) ``path`` names; returns a FileReport per file.

    Raises:
        NotFoundError: if ``path`` names no checkpoint.
    """
    reports = []
    for name in checkpoint_files(path):
        reports += _verify_index(name) if name.endswith(_files.INDEX_SUFFIX) else [
            _verify_data(name)]
    return reports


def describe(report):
    """One line for a FileReport, as the command prints it."""
    if not report.ok:
        return f"CORRUPT {report.path}: {report.problem}"
    if report.path.endswith(_files.INDEX_SUFFIX):
        return f"ok      {report.path}: index of {report.tensors} tensors"
    step = "" if report.global_step in (None, "-1") else f", step {report.global_step}"
    if not report.checked:
        return (f"UNCHECKED {report.path}: {report.tensors} tensors readable, but the file "
                f"has no checksums (written before asyncflow stored them){step}")
    return f"ok      {report.path}: {report.tensors} tensors, {report.nbytes} bytes{step}"


def main(paths, out):
    """The ``asyncflow checkpoint verify`` command: 0 if all files check out, 1 if one is
    corrupt or missing (``UNCHECKED`` files, without checksums, do not fail it)."""
    status = 0
    for path in paths:
        try:
            reports = verify_checkpoint(path)
        except errors.OpError as exc:
            print(f"MISSING {path}: {exc.message}", file=out)
            status = 1
            continue
        for report in reports:
            print(describe(report), file=out)
            status |= 0 if report.ok else 1
    return status
